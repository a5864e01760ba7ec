"""Cost of reading an energy meter at a window edge (`meter.mark()`), per Linux-usable backend.

    python benchmarks/energy_overhead.py [--reads 5000]

Backends: rapl on the shared fixture tree (copied to a temporary directory: a tmpfs read, not a
sysfs one), the real /sys rapl and nvml when this machine can read them, replay (a recorded
IOReport trace) and none. Each mark is timed alone; the table gives median and 99th percentile
µs, the median as a multiple of the none meter's, and as a share of a 1 ms budget. Writes
benchmarks/out/energy_overhead.json.
"""
import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from olifant_mlx.energy import EnergyUnavailable, open_meter
from olifant_mlx.energy.rapl import materialise

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared")) / "fixtures" / "energy"


def time_marks(meter, reads: int) -> list[float]:
    """µs per `mark()`, each timed alone, after a short warm-up."""
    for _ in range(min(100, reads)):
        meter.mark()
    out = []
    for _ in range(reads):
        t = time.perf_counter_ns()
        meter.mark()
        out.append((time.perf_counter_ns() - t) / 1e3)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=5000)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="olifant-energy-")
    tree = materialise(FIXTURES / "rapl" / "tree_intel_laptop", Path(tmp) / "tree")
    cases = [("none", "none", {}),
             ("replay (synthetic trace)",
              f"replay:{FIXTURES / 'ioreport' / 'replay_synthetic_burst_and_cpu_stall.json'}", {}),
             ("rapl (fixture tree, 3 zones)", "rapl", {"rapl_root": str(tree)}),
             ("rapl (/sys)", "rapl", {}),
             ("nvml", "nvml", {})]
    rows = []
    for label, spec, options in cases:
        try:
            meter = open_meter(spec, **options)
        except EnergyUnavailable as e:
            rows.append({"backend": label, "unavailable": str(e)})
            continue
        with meter:
            us = sorted(time_marks(meter, args.reads))
        rows.append({"backend": label, "reads": len(us), "median_us": statistics.median(us),
                     "p99_us": us[int(0.99 * (len(us) - 1))], "mean_us": statistics.fmean(us)})
    base = next(r["median_us"] for r in rows if r["backend"] == "none")
    for r in rows:
        if "median_us" in r:
            r["x_none"] = r["median_us"] / base
            r["share_of_1ms"] = r["median_us"] / 1000

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"energy meter: cost of one window-edge read (mark), {args.reads} reads")
    for col in ("backend", "median µs", "p99 µs", "× none", "share of 1 ms"):
        t.add_column(col, justify="left" if col == "backend" else "right")
    for r in rows:
        if "median_us" in r:
            t.add_row(r["backend"], f"{r['median_us']:.1f}", f"{r['p99_us']:.1f}",
                      f"{r['x_none']:.1f}", f"{r['share_of_1ms']:.1%}")
    console = Console()
    console.print(t)
    for r in rows:
        if "unavailable" in r:
            console.print(f"{r['backend']}: unavailable: {r['unavailable']}", markup=False)
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "energy_overhead.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

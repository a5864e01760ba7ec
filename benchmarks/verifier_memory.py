"""Peak memory of converting an offline verifier's GGUF for mlx-lm, and of loading it.

    python benchmarks/verifier_memory.py [--alias qwen2.5-coder-1.5b] [--weights fp32] \
        [--tree DIR] [--label NAME] [--json docs/results/verifier-memory.json]

Each step runs in a fresh process (olifant_mlx.measure.processes: the child's own peak RSS, not
its parent's) on a cache of its own, which holds only the alias's GGUF (hard-linked from the
cache, fetched there first if needed): `convert` resolves the alias, which converts the GGUF
into the cache (what a first `generate --model ALIAS` does before loading), then `load` loads the
converted verifier as every command does (`load_verifier`: the weights evaluated), and
`first_run` does both in one process from the GGUF alone (a first `generate`). The rows give
each step's peak RSS, wall and CPU seconds, the load average before and after it (the machine
may be shared; RSS does not depend on it, the seconds do) and the memory the machine had
available before it; beside them the GGUF's size and the converted weights' (model.safetensors).
`--tree DIR` imports olifant_mlx from another checkout (the code before a change), `--label`
names the run; the runs accumulate in --json, one per label.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from olifant_mlx.files import cache_dir, write_atomic
from olifant_mlx.measure.processes import load1, run_measured

ROOT = Path(__file__).resolve().parent.parent
CONVERT = "import sys; from olifant_mlx.verifier.aliases import resolve_model; print(resolve_model(sys.argv[1]))"
LOAD = ("import sys; from olifant_mlx.verifier import load_verifier; v = load_verifier(sys.argv[1]); "
        "print(v.name, sum(p.nbytes for _, p in __import__('mlx.utils', fromlist=['x']).tree_flatten("
        "v.model.parameters())))")


def available_mb() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), in MB."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def step(code: str, alias: str, env: dict, cwd) -> dict:
    before, memory = load1(), available_mb()
    m = run_measured([sys.executable, "-c", code, alias], env=env, cwd=cwd)
    if m["code"]:
        raise SystemExit(f"{code[:60]}... failed: {m['stderr'].decode()[-2000:]}")
    return {"peak_rss_mb": round(m["peak_rss_mb"]), "wall_s": round(m["wall_s"], 1), "cpu_s": round(m["cpu_s"], 1),
            "load_average": [before, load1()], "available_mb_before": memory,
            "stdout": m["stdout"].decode().strip()[-200:]}


def code_of(tree: Path) -> str:
    r = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %cs %s"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alias", default="qwen2.5-coder-1.5b")
    ap.add_argument("--weights", default="fp32", choices=["fp32", "fp16", "bf16", "q4"])
    ap.add_argument("--tree", help="import olifant_mlx from this checkout (default: the installed one)")
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--json", help="add the run to this file (e.g. docs/results/verifier-memory.json)")
    args = ap.parse_args()
    from olifant_mlx.verifier.aliases import alias_gguf

    gguf = alias_gguf(args.alias)
    cache = Path(tempfile.mkdtemp(prefix=".verifier-memory.", dir=cache_dir()))   # the cache's file system
    try:
        (cache / "gguf").mkdir()
        os.link(gguf, cache / "gguf" / gguf.name)
        env = {**os.environ, "OLIFANT_CACHE": str(cache), "OLIFANT_GGUF_WEIGHTS": args.weights}
        cwd = None
        if args.tree:
            env["PYTHONPATH"] = str(Path(args.tree).resolve())
            cwd = tempfile.gettempdir()          # not a checkout: -c would import it first
        convert = step(CONVERT, args.alias, env, cwd)
        folder = Path(convert["stdout"].splitlines()[-1])
        weights_bytes = (folder / "model.safetensors").stat().st_size
        load = step(LOAD, args.alias, env, cwd)
        shutil.rmtree(folder)                 # a first run: both in one process, from the GGUF alone
        first = step(LOAD, args.alias, env, cwd)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    for measured in (convert, load, first):
        measured.pop("stdout")            # the temporary cache's path: not a result
    run = {"label": args.label, "alias": args.alias, "weights": args.weights,
           "code": code_of(Path(args.tree) if args.tree else ROOT), "python": sys.version.split()[0],
           "machine": {"cpus": os.cpu_count(), "platform": sys.platform},
           "when": time.strftime("%Y-%m-%d %H:%M"), "gguf_bytes": gguf.stat().st_size,
           "weights_bytes": weights_bytes, "convert": convert, "load": load, "first_run": first}
    print(f"{args.label}: {args.alias} {args.weights}: weights {weights_bytes / 1e9:.2f} GB; convert peak RSS "
          f"{convert['peak_rss_mb']:,} MB ({convert['wall_s']} s, load {convert['load_average']}); load peak RSS "
          f"{load['peak_rss_mb']:,} MB ({load['wall_s']} s, load {load['load_average']}); both in one process (a "
          f"first run) {first['peak_rss_mb']:,} MB")
    if args.json:
        path = Path(args.json)
        runs = json.loads(path.read_text())["runs"] if path.is_file() else []
        runs = [r for r in runs if r["label"] != args.label] + [run]
        write_atomic(path, json.dumps({"what": __doc__.splitlines()[0], "runs": runs}, indent=1) + "\n", 0o644)
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()

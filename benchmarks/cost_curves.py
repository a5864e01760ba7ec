"""The stored cost curves of several verifiers as one table's rows: pass time by tokens fed.

    python benchmarks/cost_curves.py CURVE.json [CURVE.json ...] --out docs/results/cost-curves.json

Each CURVE is a file `bench --calibrate` stored (under ~/.cache/olifant_mlx/curves/, or a copy:
docs/results/curves/). One row per verifier, regime and context length: the best-of-3 seconds of a
pass feeding 1 … 9 new tokens (KV: after `context` cached tokens; uncached: the whole context plus
those tokens), the least-squares fit a + b n the modelled speedups use, and b / a (what one more
token costs, in one-token passes). Nothing is measured here.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from olifant_mlx.files import write_atomic
from olifant_mlx.measure.curves import fit, load_curve


def rows_of(curve: dict) -> list:
    out = []
    for regime in ("kv", "uncached"):
        for context, points in sorted(curve[regime].items()):
            a, b = fit(curve, regime, context)
            out.append({"verifier": curve["verifier"], "regime": regime, "context": context,
                        **{str(n): round(s, 5) for n, s in sorted(points.items())},
                        "a": round(a, 5), "b": round(b, 6), "b_over_a": round(b / a, 4),
                        "load_average": round(curve["load_average"], 2)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curves", nargs="+", help="cost curve files (bench --calibrate)")
    ap.add_argument("--out", required=True, help="the rows as JSON (e.g. docs/results/cost-curves.json)")
    args = ap.parse_args()
    rows = []
    for path in args.curves:
        try:
            curve = load_curve(path)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        rows += rows_of(curve)
    write_atomic(Path(args.out), json.dumps({"rows": rows}, indent=1) + "\n", 0o644)
    print(f"wrote {args.out}: {len(rows)} rows", file=sys.stderr)


if __name__ == "__main__":
    main()

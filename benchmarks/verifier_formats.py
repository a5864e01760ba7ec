"""Tokens/s of one converted verifier in each --weights format (fp32, fp16, bf16, q4) on this machine.

    nice -n 10 python benchmarks/verifier_formats.py [--alias qwen2.5-coder-1.5b] [--tokens 8] [--limit 150]

The alias's fp32 folder is loaded in a fresh process per format and cast (fp16, bf16) or
quantized to MLX 4-bit (q4: group 64 from fp16, as the q4 conversion writes it) in memory, so
one conversion serves all four. Each process prefills a short prompt and generates --tokens
greedily with the KV cache; one that does not finish within --limit seconds is reported as
such. Prints a table (with the load average) and writes JSON to benchmarks/out/.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROMPT = "Write a Python function that returns the sum of two numbers."
CHILD = """
import json, sys, time
from olifant_mlx.mlx_setup import mx
import mlx.nn as nn, mlx_lm
from olifant_mlx.engine import generate
folder, fmt = sys.argv[1], sys.argv[2]
model, tok = mlx_lm.load(folder)
if fmt in ("fp16", "bf16", "q4"):
    model.set_dtype(mx.bfloat16 if fmt == "bf16" else mx.float16)
if fmt == "q4":
    nn.quantize(model, group_size=64, bits=4)
mx.eval(model.parameters())
ids = tok.encode(PROMPT)
t = time.perf_counter()
out, _ = generate(model, ids, max_tokens=int(sys.argv[3]))
dt = time.perf_counter() - t
print(json.dumps({"tokens": len(out), "seconds": dt, "ids": out}))
""".replace("PROMPT", repr(PROMPT))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alias", default="qwen2.5-coder-1.5b")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--limit", type=float, default=150.0, help="seconds a format may take, load included")
    ap.add_argument("--formats", nargs="+", default=["fp32", "fp16", "bf16", "q4"])
    args = ap.parse_args()
    from olifant_mlx.verifier.aliases import resolve_model

    folder = resolve_model(args.alias, "fp32")
    rows = []
    for fmt in args.formats:          # one at a time: a 1.5B model in fp32 is about 6 GB
        load = os.getloadavg()[0]
        t = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, "-c", CHILD, folder, fmt, str(args.tokens)],
                               capture_output=True, text=True, timeout=args.limit)
            res = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {"error": r.stderr[-300:]}
        except subprocess.TimeoutExpired:
            res = {"error": f"did not finish in {args.limit:.0f} s"}
        res.update(format=fmt, wall=time.perf_counter() - t, load_before=load)
        if "seconds" in res:
            res["tok_s"] = res["tokens"] / res["seconds"]
        rows.append(res)
        print(f"{fmt:5} {res.get('tok_s', 0):6.2f} tok/s  " if "tok_s" in res else f"{fmt:5} {res['error']}  ",
              f"(load average {load:.2f})", flush=True)
    same = {r["format"]: r["ids"] == rows[0].get("ids") for r in rows if "ids" in r}
    print("greedy ids identical to fp32:", same)
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / f"verifier_formats_{args.alias}.json").write_text(json.dumps(
        {"alias": args.alias, "tokens": args.tokens, "rows": rows, "uname": os.uname().machine}, indent=2))


if __name__ == "__main__":
    main()

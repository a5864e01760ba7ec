"""Run under mlx.launch by tests/test_distributed.py (and benchmarks/sharded.py): one sharded
verifier, plain and speculative generations through the same entry point the commands use
(olifant_mlx.cli.sharding.run_sharded), the results as one JSON line from rank 0:

    mlx.launch --backend ring -n 2 -- python tests/sharded_run.py --model FOLDER \\
        --draft olifant:M.olif adaptive:hybrid:M.olif --regimes kv uncached -p "Once upon a time"
"""
from __future__ import annotations

import argparse
import json
import sys

import olifant_mlx.mlx_setup  # noqa: F401  (OpenBLAS before MLX)
from olifant_mlx.cli.sharding import add_sharding_args, run_sharded


def top2(verifier, ids):
    """(top id, top logit, second id, second logit) at every position of one uncached pass
    over `ids`: what decides each greedy choice, and by how much."""
    from olifant_mlx.mlx_setup import mx

    logits = verifier.model(mx.array(ids)[None])[0].astype(mx.float32)
    order = mx.argsort(-logits, axis=-1)[:, :2]
    vals = mx.take_along_axis(logits, order, axis=-1)
    return [[int(a), float(x), int(b), float(y)] for (a, b), (x, y) in zip(order.tolist(), vals.tolist())]


def margins_job(verifier, ids):
    """A job every rank runs (the pass needs all of them); rank 0 keeps the answer."""
    return top2(verifier, ids)


def command(args) -> int:
    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.verifier import load_verifier

    v = load_verifier(args.model, shard=args.shard)
    out = {"mode": v.shard.mode if v.shard else None, "ranks": v.shard.size if v.shard else 1,
           "runs": []}
    for text in args.prompt:
        ids = v.encode(text)
        for regime in args.regimes:
            for spec in ["none"] + list(args.draft):
                opts = GenerationOptions(k=0 if spec == "none" else args.k,
                                         max_tokens=args.max_tokens, kv_cache=regime == "kv",
                                         temperature=args.temp, seed=args.seed)
                r = Session(v, spec, opts).generate(ids)
                st = r.stats
                out["runs"].append({"prompt": text, "regime": regime, "drafter": spec,
                                    "tokens": r.tokens, "steps": st.steps, "drafted": st.drafted,
                                    "accepted": st.accepted, "fast_path": st.fast_path_steps,
                                    "seconds": st.seconds, "tokens_per_s": st.tokens_per_s})
        if args.margins:
            plain = next(x["tokens"] for x in out["runs"] if x["prompt"] == text and x["drafter"] == "none")
            if v.shard is not None:
                v.shard.everywhere("margins", ids=ids + plain)
            out.setdefault("top2", {})[text] = top2(v, ids + plain)
        if v.shard is not None:
            out["traffic"] = v.shard.describe()
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--draft", nargs="*", default=[])
    p.add_argument("--regimes", nargs="+", default=["kv", "uncached"])
    p.add_argument("-k", type=int, default=4)
    p.add_argument("-m", "--max-tokens", type=int, default=24)
    p.add_argument("-p", "--prompt", nargs="+", default=["Once upon a time"])
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--margins", action="store_true")
    add_sharding_args(p)
    args = p.parse_args(argv)
    return run_sharded(args, command, handlers={"margins": margins_job})


if __name__ == "__main__":
    sys.exit(main())

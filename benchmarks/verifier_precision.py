"""Kept-quantized (the GGUF's own Q4_1/Q8_0 blocks, MLX quantized matmuls) versus dequantized
fp32 weights for an offline alias, on this machine: which one each platform should load.

    python benchmarks/verifier_precision.py [--alias smollm2-135m] [--rounds 5]

Both folders are converted from the same GGUF in the cache; greedy outputs are compared, then
plain generation and single forward passes (1 and 8 new tokens after a 150-token context)
are timed in the same process, alternating which precision runs first. Prints ratios
(quantized time / fp32 time: < 1 means quantized is faster) and writes JSON to benchmarks/out/.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from olifant_mlx.engine import generate
from olifant_mlx.engine.cache import make_cache, prefill
from olifant_mlx.mlx_setup import mx
from olifant_mlx.verifier.aliases import alias_gguf
from olifant_mlx.verifier.gguf_import import convert_gguf

ROOT = Path(__file__).resolve().parent.parent

TEXT = ("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, "
        "INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR "
        "PURPOSE AND NONINFRINGEMENT. ") * 4


def forward_ms(model, ids, n, repeats=5):
    """Best-of-`repeats` time of one pass over n new tokens after `ids` in the KV cache."""
    from mlx_lm.models.cache import trim_prompt_cache

    cache = make_cache(model)
    mx.eval(prefill(model, cache, ids))
    best = None
    for _ in range(repeats):
        t = time.perf_counter()
        mx.eval(model(mx.array(ids[-n:])[None], cache=cache))
        dt = time.perf_counter() - t
        trim_prompt_cache(cache, n)
        best = dt if best is None else min(best, dt)
    return 1e3 * best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alias", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=60)
    args = ap.parse_args()
    import mlx_lm

    gguf = alias_gguf(args.alias)
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for name, fmt in (("fp32", "fp32"), ("quantized", "q4")):
            folder = Path(tmp) / name
            convert_gguf(gguf, folder, weights=fmt)
            models[name] = mlx_lm.load(str(folder))
            size = sum(f.stat().st_size for f in folder.iterdir())
            models[name] = (*models[name], size)
        tok = models["fp32"][1]
        ids = tok.encode(TEXT)[:150]
        outs = {n: generate(m, ids, max_tokens=args.tokens)[0] for n, (m, _, _) in models.items()}
        same = outs["fp32"] == outs["quantized"]
        gen = {n: [] for n in models}
        passes = {(n, k): [] for n in models for k in (1, 8)}
        for r in range(args.rounds):
            order = list(models) if r % 2 == 0 else list(models)[::-1]
            for n in order:
                m = models[n][0]
                _, st = generate(m, ids, max_tokens=args.tokens)
                gen[n].append(st.decode_s)
                for k in (1, 8):
                    passes[(n, k)].append(forward_ms(m, ids, k))
    ratio = lambda a, b: statistics.median(x / y for x, y in zip(a, b))  # noqa: E731
    result = {
        "alias": args.alias, "rounds": args.rounds, "identical_greedy_output": same,
        "bytes": {n: models[n][2] for n in models},
        "generation_time_ratio_quantized_over_fp32": round(ratio(gen["quantized"], gen["fp32"]), 3),
        "pass_1_ratio": round(ratio(passes[("quantized", 1)], passes[("fp32", 1)]), 3),
        "pass_8_ratio": round(ratio(passes[("quantized", 8)], passes[("fp32", 8)]), 3),
        "fp32_tokens_per_s_median": round(args.tokens / statistics.median(gen["fp32"]), 2),
        "quantized_tokens_per_s_median": round(args.tokens / statistics.median(gen["quantized"]), 2),
        "platform": sys.platform,
    }
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"verifier_precision_{args.alias}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

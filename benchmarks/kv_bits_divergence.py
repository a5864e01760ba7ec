"""How often drafting over a quantized KV cache (--kv-bits) leaves plain decoding on the same
cache (issue 37, item 18), and plain's logit gap between the two tokens where they first differ.

    python benchmarks/kv_bits_divergence.py --per-set 4 --draft ../shared/fixtures/drafts/smollm2-135m-2e6be56f1309.olif

SmolLM2-135M, the olifant drafter, k 8, 48 tokens, --quantized-kv-start 0, the lead rule live (as
users run it), the first PER-SET prompts of each dev set; one JSON line per --kv-bits value.
"""
import argparse
import glob
import json
import os
import time

from olifant_mlx.engine import GenerationOptions, Session
from olifant_mlx.engine import cache as kv
from olifant_mlx.mlx_setup import mx
from olifant_mlx.verifier import load_verifier

SHARED = os.environ.get("OLIFANT_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))


def plain_gap(model, ids, plain, d, bits, other) -> float:
    """Plain decoding's logit of plain[d] minus that of `other`, one-token steps as plain takes."""
    layers = kv.make_cache(model)
    logits = kv.prefill(model, layers, ids)
    kv.quantize(layers, bits, 64, 0)
    for t in plain[:d]:
        logits = model(mx.array([[t]]), cache=layers)[0, -1]
        kv.quantize(layers, bits, 64, 0)
    return float(logits[plain[d]] - logits[other])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-set", type=int, default=4)
    p.add_argument("--draft", required=True, help="an IGTree draft model for SmolLM2")
    args = p.parse_args()
    smol = load_verifier("smollm2-135m")
    prompts = []
    for path in sorted(glob.glob(os.path.join(SHARED, "corpora", "*", "prompts.dev.jsonl"))):
        with open(path, encoding="utf-8") as f:
            prompts += [json.loads(line)["prompt"] for line in list(f)[:args.per_set]]
    for bits in (4, 8):
        opts = GenerationOptions(k=8, max_tokens=48, kv_bits=bits, quantized_kv_start=0)
        diverged, gaps, t0 = 0, [], time.time()
        for text in prompts:
            session = Session(smol, "none", opts)
            plain = session.generate(text).tokens
            got = Session(smol, f"olifant:{args.draft}", opts).generate(text).tokens
            d = next((i for i, (a, b) in enumerate(zip(got, plain)) if a != b), None)
            if d is not None:
                diverged += 1
                gaps.append(round(plain_gap(smol.model, session.encode(text), plain, d, bits, got[d]), 4))
        print(json.dumps({"kv_bits": bits, "prompts": len(prompts), "diverged": diverged,
                          "plain_gaps_at_first_difference": gaps, "seconds": round(time.time() - t0)}), flush=True)


if __name__ == "__main__":
    main()

"""Plain olifant_mlx decoding against mlx-lm's own `stream_generate`, side by side.

    python benchmarks/plain_vs_mlx_lm.py [--verifier smollm2-135m] [--task legal] [--prompts 6]
        [--max-tokens 80] [--rounds 5] [--out FILE.json]

Both generate plainly (greedy, KV cache) from the same dev prompts on the same loaded verifier,
in the same process, alternating which goes first (`bench.alternating_rounds`; outputs must be
identical). Reported: mlx-lm seconds / ours per round (above 1: ours faster), with min, median
and max over the rounds (`measure.experiments.mlx_lm_ratios`, which `bench --experiment
plain_vs_mlx_lm` runs too). Time is from the call to the last token, prefill included.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from olifant_mlx.measure.bench import MlxLm, ModelRunner, read_prompts
from olifant_mlx.measure.experiments import mlx_lm_ratios
from olifant_mlx.verifier import load_verifier

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifier", default="smollm2-135m")
    ap.add_argument("--task", default="legal")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    v = load_verifier(args.verifier)
    runner = ModelRunner(v)
    prompts = read_prompts(str(SHARED / "corpora" / args.task / "prompts.dev.jsonl"))[: args.prompts]
    runner.run("Warm-up text.", None, 0, True, 4)
    runner.run("Warm-up text.", MlxLm(), 0, True, 4)
    result = {"verifier": v.name, "task": args.task, "prompts": len(prompts),
              "max_tokens": args.max_tokens, **mlx_lm_ratios(runner, prompts, args.rounds, args.max_tokens)}
    print(json.dumps(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Re-measure one drafter against plain decoding head to head, in alternating order.

    python benchmarks/recheck_vs_plain.py --task medical --draft adaptive:olifant:MODEL -k 16
        [--verifier smollm2-135m] [--prompts 6] [--max-tokens 80] [--rounds 3] [--no-kv-cache]
        [--out FILE.json]

A single sweep cell near 1.0x cannot tell "slower than plain" from noise on a shared machine;
this runs plain and the drafter on each dev prompt of the task, alternating which goes first,
for several rounds, checks the outputs are identical, and reports plain seconds / drafter
seconds per round. `auto` is resolved first (the spec it chose is in the result, with the load
average and, for an adaptive drafter, how often its guard paused drafting).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from olifant_mlx.drafters import build_drafter, parse_spec, resolve_auto
from olifant_mlx.measure.bench import ModelRunner, alternating_rounds, read_prompts
from olifant_mlx.verifier import load_verifier

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True, help="a corpus in ../shared/corpora with prompts.dev.jsonl")
    ap.add_argument("--draft", required=True, help="drafter spec, as for generate --draft")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--verifier", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-kv-cache", action="store_true")
    ap.add_argument("--out", help="write the result as JSON here")
    args = ap.parse_args()
    verifier = load_verifier(args.verifier)
    name = verifier.name
    spec = parse_spec(args.draft)
    spec = resolve_auto(verifier.identity) if spec.kind == "auto" else spec    # what auto chose here
    drafter = build_drafter(spec, verifier.identity)
    runner = ModelRunner(verifier)
    prompts = read_prompts(str(SHARED / "corpora" / args.task / "prompts.dev.jsonl"))[: args.prompts]
    runner.run("Warm-up text.", None, 0, True, 4)
    runners = [("plain", None, 0), ("draft", drafter, args.k)]
    ratios = []
    for r, secs in enumerate(alternating_rounds(runner, prompts, runners, args.rounds,
                                                args.max_tokens, not args.no_kv_cache)):
        ratios.append(secs["plain"] / secs["draft"])
        print(f"round {r + 1}: {args.draft} k={args.k} speedup over plain {ratios[-1]:.3f}x", flush=True)
    result = {"verifier": name, "task": args.task, "draft": args.draft, "k": args.k,
              "regime": "uncached" if args.no_kv_cache else "kv", "prompts": len(prompts),
              "max_tokens": args.max_tokens, "rounds": [round(x, 3) for x in ratios],
              "mean": round(sum(ratios) / len(ratios), 3), "spec": spec.text,
              "load_average": os.getloadavg()[0]}
    guard = getattr(drafter, "guard", None)
    if guard is not None:       # the adaptive drafter's never-below-plain guard
        result["guard"] = {"pauses": guard.pauses, "probes": guard.probes, "plain_passes": guard.off_passes}
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

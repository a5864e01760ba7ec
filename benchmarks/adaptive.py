"""Adaptive draft length and hybrid drafting against fixed k, olifant and the peer drafters.

    python benchmarks/adaptive.py [--verifier smollm2-135m] [--tasks legal medical]
        [--regimes kv uncached] [--fixed-ks 3 5 8 16] [--adaptive-ks 8 16]

For each task and regime, one `olifant_mlx.measure.bench` sweep on the dev prompts (plain first, then
every drafter and k on the same prompt in the same process; every output checked token for
token against plain): fixed-k olifant, hybrid, prompt lookup and the in-session 4-gram at
--fixed-ks, and the adaptive (confidence-gated, cost-aware) olifant and hybrid with k at most
--adaptive-ks. Legal uses the legal draft model; medical the legal + medical one (as in
benchmarks/scaling.py). The KV regime runs --kv-prompts x --kv-tokens, the uncached regime (which
re-reads the whole sequence every step) --uncached-prompts x --uncached-tokens.

Rows go to OUT/TASK-REGIME.jsonl (resumable); tables to OUT/TASK-REGIME/; the summary (best k
of each drafter, and the adaptive hybrid's ratio to each) is printed and written to
OUT/summary.json and OUT/summary.md. Then, since one run per cell is noisy and the best fixed k
is picked after the fact, a head to head: the adaptive olifant and hybrid against the same
drafter at that best k, --rounds times over the prompts in alternating order
(OUT/head_to_head.json). OUT defaults to benchmarks/out/adaptive.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from olifant_mlx.drafters import build_drafter
from olifant_mlx.draftmodel.train import train
from olifant_mlx.measure.bench import (
    ModelRunner,
    aggregate,
    alternating_rounds,
    read_prompts,
    row_key,
    sweep,
    write_tables,
)
from olifant_mlx.verifier import load_verifier

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))
C = SHARED / "corpora"
TRAIN = {"legal": ["legal/eurlexsum.train.txt.xz"],
         "medical": ["legal/eurlexsum.train.txt.xz", "medical/sumpubmed.train.txt.xz"]}
MODEL_FILE = {"legal": "models/legal.{v}.olif", "medical": "scaling/legal+medical.olif"}
FIXED = ("olifant", "hybrid", "lookup", "ngram")
ADAPTIVE = ("adaptive-olifant", "adaptive-hybrid")


def draft_model(task, tokenizer, verifier):
    """The task's olifant model, trained once (shared with speculative.py and scaling.py)."""
    path = ROOT / "benchmarks" / "out" / MODEL_FILE[task].format(v=verifier)
    if not path.is_file():
        print(f"training the {task} draft model for {verifier} ...", file=sys.stderr)
        path.parent.mkdir(parents=True, exist_ok=True)
        train([str(C / f) for f in TRAIN[task]], tokenizer, path)
    return path


def summarise(cells):
    """Per task and regime: each drafter's best k, and the adaptive hybrid's ratio to each."""
    best = {}
    for c in cells:
        key = (c["task"], c["regime"], c["strategy"])
        if c["strategy"] != "plain" and (key not in best or c["speedup"] > best[key]["speedup"]):
            best[key] = c
    out = []
    for (task, regime, strategy), c in sorted(best.items()):
        ours = best.get((task, regime, "adaptive-hybrid"))
        fixed = best.get((task, regime, strategy.removeprefix("adaptive-")))
        out.append({"task": task, "regime": regime, "strategy": strategy, "best_k": c["k"],
                    "prompts": c["prompts"], "speedup": round(c["speedup"], 3),
                    "acceptance": round(c["acceptance"], 4),
                    "verifier_tokens_per_token": round(c["verifier_tokens_per_token"], 3),
                    "adaptive_hybrid_vs_this": round(ours["speedup"] / c["speedup"], 3) if ours else None,
                    "adaptive_vs_fixed_k": (round(c["speedup"] / fixed["speedup"], 3)
                                            if strategy.startswith("adaptive-") and fixed else None)})
    return out


def head_to_head(runner, drafters, cells, task, regime, prompts, max_tokens, rounds, kmax):
    """Adaptive (k <= kmax) against the same drafter at its best fixed k, `rounds` times over the
    prompts, alternating which runs first: the ratio of fixed to adaptive seconds per round."""
    out = []
    for base in ("olifant", "hybrid"):
        fixed = max((c for c in cells if c["strategy"] == base), key=lambda c: c["speedup"])
        runners = [("fixed", drafters[base], fixed["k"]), ("adaptive", drafters["adaptive-" + base], kmax)]
        ratios = [s["fixed"] / s["adaptive"] for s in
                  alternating_rounds(runner, prompts, runners, rounds, max_tokens, regime == "kv")]
        out.append({"task": task, "regime": regime, "drafter": base, "fixed_k": fixed["k"],
                    "adaptive_k_max": kmax, "rounds": rounds, "prompts": len(prompts),
                    "adaptive_speedup_mean": round(sum(ratios) / len(ratios), 3),
                    "min": round(min(ratios), 3), "max": round(max(ratios), 3)})
    return out


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifier", default="smollm2-135m")
    ap.add_argument("--tasks", nargs="+", default=["legal", "medical"], choices=sorted(TRAIN))
    ap.add_argument("--regimes", nargs="+", default=["kv", "uncached"], choices=["kv", "uncached"])
    ap.add_argument("--fixed-ks", type=int, nargs="+", default=[3, 5, 8, 16])
    ap.add_argument("--adaptive-ks", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--kv-prompts", type=int, default=6)
    ap.add_argument("--kv-tokens", type=int, default=80)
    ap.add_argument("--uncached-prompts", type=int, default=2)
    ap.add_argument("--uncached-tokens", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3,
                    help="head-to-head rounds of adaptive vs the best fixed k (0: none)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "adaptive"))
    return ap.parse_args()


def task_drafters(task, ours, name) -> dict:
    path = draft_model(task, ours, name)
    specs = {"olifant": f"olifant:{path}", "hybrid": f"hybrid:{path}", "lookup": "lookup",
             "ngram": "ngram", "adaptive-olifant": f"adaptive:olifant:{path}",
             "adaptive-hybrid": f"adaptive:hybrid:{path}"}
    return {s: build_drafter(spec, ours) for s, spec in specs.items()}


def sweep_cell(args, runner, drafters, task, regime, prompts, out) -> list:
    """The fixed-k and the adaptive drafters on one task and regime: the aggregated cells."""
    n, max_tokens = ((args.kv_prompts, args.kv_tokens) if regime == "kv"
                     else (args.uncached_prompts, args.uncached_tokens))
    results = out / f"{task}-{regime}.jsonl"
    swept = {}                 # this run's rows (the plain ones are shared by both groups)
    for group, ks in ((FIXED, args.fixed_ks), (ADAPTIVE, args.adaptive_ks)):
        for r in sweep(runner, {task: prompts}, {s: drafters[s] for s in group}, ks,
                       [regime], max_tokens, results, n_prompts=n,
                       on_progress=lambda done, total, task=task, regime=regime: print(
                           f"{task} {regime} {done}/{total}", file=sys.stderr)):
            swept[row_key(r)] = r
    rows = list(swept.values())
    bad = [r for r in rows if not r["exact_match"]]
    if bad:
        raise SystemExit(f"{len(bad)} output(s) differ from plain decoding: a bug")
    return aggregate(rows)


def summary_lines(summary, duels, name, adaptive_k) -> list:
    """summary.md: the best k per drafter, then the head-to-head rounds."""
    lines = [f"Verifier {name}; speedup over plain in the same run; best k per drafter.", "",
             "| task | regime | drafter | best k | prompts | speedup | acceptance | verifier tokens per token "
             "| adaptive hybrid vs this | adaptive vs best fixed k |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary:
        vs = f"{r['adaptive_hybrid_vs_this']:.2f}x" if r["adaptive_hybrid_vs_this"] else "—"
        vf = f"{r['adaptive_vs_fixed_k']:.2f}x" if r["adaptive_vs_fixed_k"] else "—"
        lines.append(f"| {r['task']} | {r['regime']} | {r['strategy']} | {r['best_k']} | {r['prompts']} | "
                     f"{r['speedup']:.2f}x | {r['acceptance']:.1%} | "
                     f"{r['verifier_tokens_per_token']:.2f} | {vs} | {vf} |")
    if duels:
        lines += ["", f"Head to head: adaptive (k <= {adaptive_k}) vs the same drafter at its "
                  "best fixed k above; fixed seconds / adaptive seconds per round, order alternating.", "",
                  "| task | regime | drafter | fixed k | rounds x prompts | adaptive speedup (mean) | min | max |",
                  "|---|---|---|---|---|---|---|---|"]
        for d in duels:
            lines.append(f"| {d['task']} | {d['regime']} | {d['drafter']} | {d['fixed_k']} | "
                         f"{d['rounds']} x {d['prompts']} | {d['adaptive_speedup_mean']:.3f}x | "
                         f"{d['min']:.3f}x | {d['max']:.3f}x |")
    return lines


def main():
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    verifier = load_verifier(args.verifier)
    ours, name = verifier.identity, verifier.name
    runner = ModelRunner(verifier)
    runner.run("Warm-up text.", None, 0, True, 4)
    cells, duels = [], []
    for task in args.tasks:
        drafters = task_drafters(task, ours, name)
        prompts = read_prompts(str(C / task / "prompts.dev.jsonl"))
        for regime in args.regimes:
            task_cells = sweep_cell(args, runner, drafters, task, regime, prompts, out)
            write_tables(task_cells, out / f"{task}-{regime}")
            cells += task_cells
            if args.rounds:
                n, max_tokens = ((args.kv_prompts, args.kv_tokens) if regime == "kv"
                                 else (args.uncached_prompts, args.uncached_tokens))
                print(f"{task} {regime}: head to head ...", file=sys.stderr)
                duels += head_to_head(runner, drafters, task_cells, task, regime,
                                      prompts[:n], max_tokens, args.rounds, max(args.adaptive_ks))
    summary = summarise(cells)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if duels:
        (out / "head_to_head.json").write_text(json.dumps(duels, indent=2))
    lines = summary_lines(summary, duels, name, max(args.adaptive_ks))
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

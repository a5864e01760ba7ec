"""Per domain, every drafter on each verifier's transcripts and on reference text, side by side.

    python benchmarks/verifier_tables.py [--verifiers smollm2-135m gemma3-270m qwen2.5-coder-1.5b]
        [--tasks legal medical general] [--ks 3 5 8] [--train-tokens 1000000]
        [--out benchmarks/out/verifier-tables] [--json docs/results/drafters-by-verifier.json]
        [--curve VERIFIER=FILE ...]

No verifier runs and nothing is timed: each verifier's greedy output is its committed transcript
(docs/transcripts/VERIFIER.json, `bench --verifier transcript --transcripts-out`), and the
reference text is each prompt's real continuation (the held-out document it begins), both
replayed through the engine's loop (measure.transcripts, measure.bench.ReferenceRunner) in the
KV regime. Drafters per task and tokenizer: olifant (an IGTree trained on the task's train
split), REST (a suffix index of it), llama.cpp's static n-gram cache of it, prompt lookup, the
in-session 4-gram, the hybrid, the adaptive hybrid, and `auto` as it resolves once the task's
precedent library is built (drafters.auto.library_spec: the adaptive hybrid over the IGTree, the
suffix index and the session). The corpus files are built once into OUT/models/ (resumable,
one at a time); the rows go to OUT/*.jsonl (resumable); the summary (cells, how well each proxy
ranks the drafters as the 1.5B verifier does, the best drafter per verifier and task) to --json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from olifant_mlx.drafters import build_drafter
from olifant_mlx.files import write_atomic
from olifant_mlx.measure.bench import ReferenceRunner, aggregate, continuations_of, sweep
from olifant_mlx.measure.corpora import TRAIN, VALID, shared_dir, task_corpus_files
from olifant_mlx.measure.curves import add_modelled, load_curve
from olifant_mlx.measure.transcripts import TranscriptRunner, read_transcript_set

ROOT = Path(__file__).resolve().parent.parent
C = shared_dir() / "corpora"            # the tasks' corpora, as the peers benchmark reads them

VERIFIERS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-1.5b")
TARGET = "qwen2.5-coder-1.5b"          # the real instruct verifier the proxies stand in for
SPECS = {"olifant": "olifant:{model}", "rest": "rest:{sfx}", "ngram-cache": "ngram-cache:{ngc}",
         "lookup": "lookup", "ngram-4": "ngram:4", "hybrid": "hybrid:{model}",
         "adaptive-hybrid": "adaptive:hybrid:{model}", "auto": "adaptive:hybrid:{model}+rest:{sfx}"}
MEASURES = ("acceptance", "mean_accepted_length", "tokens_per_pass", "modelled_speedup")


def cells_of(runner, task, prompts, files, tokenizer, ks, max_tokens, results, curve=None) -> list:
    """One sweep (KV regime) of every drafter, fresh for this runner; its aggregated cells, their
    modelled speedups under `curve` (the verifier's own, measured) when one is given."""
    drafters = {name: build_drafter(spec.format(**files), tokenizer) for name, spec in SPECS.items()}
    rows = sweep(runner, {task: prompts}, drafters, ks, ["kv"], max_tokens, results, n_prompts=len(prompts),
                 on_progress=lambda done, total: done == total and print(f"{results.name}: {total} runs",
                                                                          file=sys.stderr))
    cells = aggregate(rows)
    if curve is not None:
        add_modelled(cells, rows, curve)
    return [c for c in cells if c["strategy"] != "plain"]


def ranks(xs):
    """Ranks 1..n, ties sharing their mean rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for m in range(i, j + 1):
            out[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs, ys):
    """Spearman's rank correlation (None when either side is constant)."""
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx and syy else None


def proxies(rows, tasks, ks, verifiers) -> list:
    """Per task and k: how each proxy (a small verifier's transcripts, the reference text) ranks
    the drafters by tokens per pass against the target's transcripts, and their ratio."""
    target = [v for v in verifiers if v == TARGET]
    if not target:
        return []
    by = {(r["task"], r["k"], r["verifier"], r["drafter"]): r for r in rows}
    out = []
    for task in tasks:
        for k in ks:
            truth = [by[(task, k, TARGET, d)]["transcript"]["tokens_per_pass"] for d in SPECS]
            best = max(SPECS, key=lambda d: by[(task, k, TARGET, d)]["transcript"]["tokens_per_pass"])
            cands = [(f"{v} transcript", v, "transcript") for v in verifiers if v != TARGET]
            cands += [(f"reference text ({v} tokens)", v, "reference") for v in verifiers]
            for label, v, mode in cands:
                xs = [by[(task, k, v, d)][mode]["tokens_per_pass"] for d in SPECS]
                pick = max(SPECS, key=lambda d: by[(task, k, v, d)][mode]["tokens_per_pass"])
                out.append({"task": task, "k": k, "proxy": label, "spearman": spearman(xs, truth),
                            "mean_ratio": sum(x / t for x, t in zip(xs, truth)) / len(xs),
                            "proxy_best": pick, "target_best": best,
                            "target_tokens_per_pass_of_proxy_best":
                                by[(task, k, TARGET, pick)]["transcript"]["tokens_per_pass"],
                            "target_best_tokens_per_pass": max(truth)})
    return out


def best(rows, tasks, verifiers) -> list:
    """Per verifier, task and mode: the drafter and k with the most tokens per pass, and the one
    with the highest modelled speedup (passes costed a + b n under the verifier's own curve where
    --curve gives one, else the fixed reference curve)."""
    out = []
    for v in verifiers:
        for task in tasks:
            for mode in ("transcript", "reference"):
                mine = [r for r in rows if r["verifier"] == v and r["task"] == task]
                top = max(mine, key=lambda r: r[mode]["tokens_per_pass"])
                fast = max(mine, key=lambda r: r[mode]["modelled_speedup"] or 0)
                out.append({"verifier": v, "task": task, "mode": mode,
                            "most_tokens_per_pass": f"{top['drafter']} k {top['k']}",
                            "tokens_per_pass": top[mode]["tokens_per_pass"],
                            "fastest_modelled": f"{fast['drafter']} k {fast['k']}",
                            "modelled_speedup": fast[mode]["modelled_speedup"]})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifiers", nargs="+", default=list(VERIFIERS))
    ap.add_argument("--tasks", nargs="+", default=["legal", "medical", "general"], choices=sorted(TRAIN))
    ap.add_argument("--ks", type=int, nargs="+", default=[3, 5, 8])
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--train-tokens", type=int, default=1_000_000,
                    help="corpus tokens per task for the IGTree, suffix index and n-gram cache")
    ap.add_argument("--transcripts", default=str(ROOT / "docs" / "transcripts"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "verifier-tables"))
    ap.add_argument("--json", help="write the summary here (e.g. docs/results/drafters-by-verifier.json)")
    ap.add_argument("--build-only", action="store_true", help="build the corpus files and stop")
    ap.add_argument("--curve", nargs="+", default=[], metavar="VERIFIER=FILE",
                    help="model that verifier's speedups under its own measured cost curve (bench "
                         "--calibrate) instead of the fixed reference curve")
    args = ap.parse_args()
    curves, curve_files = {}, {}
    for item in args.curve:
        name, sep, path = item.partition("=")
        if not sep or name not in args.verifiers:
            raise SystemExit(f"--curve {item}: want VERIFIER=FILE for one of {', '.join(args.verifiers)}")
        curves[name], curve_files[name] = load_curve(path), path
    from olifant_mlx.verifier import load_tokenizer

    out = Path(args.out)
    sets = {v: read_transcript_set(Path(args.transcripts) / f"{v}.json") for v in args.verifiers}
    rows = []
    for v in args.verifiers:
        tok = load_tokenizer(v)
        for task in args.tasks:
            files = task_corpus_files(task, tok, v, out / "models", args.train_tokens)
            if args.build_only:
                continue
            ts = {t["prompt"]: t for t in sets[v] if t.get("task") == task}
            if not ts:
                raise SystemExit(f"{args.transcripts}/{v}.json holds no {task} transcript")
            prompts = list(ts)
            modes = {"transcript": TranscriptRunner(tok, ts),
                     "reference": ReferenceRunner(tok, continuations_of(prompts, str(C / VALID[task])))}
            got = {mode: {(c["strategy"], c["k"]): c for c in
                          cells_of(runner, task, prompts, files, tok, args.ks, args.max_tokens,
                                   out / f"{mode}-{v}-{task}.jsonl", curves.get(v))}
                   for mode, runner in modes.items()}
            for d in SPECS:
                for k in args.ks:
                    rows.append({"task": task, "verifier": v, "drafter": d, "k": k, "prompts": len(prompts),
                                 **{mode: {m: got[mode][(d, k)][m] for m in MEASURES} for mode in modes}})
    if args.build_only:
        return
    summary = {"max_tokens": args.max_tokens, "train_tokens": args.train_tokens, "regime": "kv",
               "curves": curve_files,
               "specs": SPECS, "rows": rows, "proxies": proxies(rows, args.tasks, args.ks, args.verifiers),
               "best": best(rows, args.tasks, args.verifiers)}
    if args.json:
        write_atomic(Path(args.json), json.dumps(summary, indent=1) + "\n", 0o644)
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Speculative decoding on the offline verifiers: plain vs olifant vs ngram vs lookup.

    python benchmarks/speculative.py [--verifiers smollm2-135m gemma3-270m] [--prompts 20]
        [--max-tokens 100] [--ks 3 5 8] [--regimes kv uncached] [--drafters olifant ngram lookup]

For each verifier: an olifant draft model is trained on the shared EUR-Lex-Sum train split
with the verifier's own tokenizer (cached in benchmarks/out/models/); then `olifant_mlx.measure.bench`
sweeps the legal dev prompts (plain first, then every drafter x k on the same prompt in the
same process, so speedups are ratios measured under the same conditions, and every output is
checked token for token against the plain one). Rows go to benchmarks/out/speculative.jsonl
(resumable); tables to benchmarks/out/speculative/ (bench.md, bench.csv).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from olifant_mlx.drafters import LookupDrafter, NgramDrafter, OlifantDrafter
from olifant_mlx.draftmodel.igtree import IGTree
from olifant_mlx.draftmodel.train import train
from olifant_mlx.measure.bench import ModelRunner, _fmt, aggregate, sweep, write_tables
from olifant_mlx.verifier import load_verifier

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))
OUT = ROOT / "benchmarks" / "out"


def legal_draft_model(tokenizer, verifier):
    path = OUT / "models" / f"legal.{verifier}.olif"
    if not path.is_file():
        print(f"training the legal draft model for {verifier} ...", file=sys.stderr)
        train([str(SHARED / "corpora/legal/eurlexsum.train.txt.xz")], tokenizer, path)
    return IGTree.load(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifiers", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--prompt-file", default=str(SHARED / "corpora/legal/prompts.dev.jsonl"))
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--ks", type=int, nargs="+", default=[3, 5, 8])
    ap.add_argument("--regimes", nargs="+", default=["kv", "uncached"], choices=["kv", "uncached"])
    ap.add_argument("--drafters", nargs="+", default=["olifant", "ngram", "lookup"])
    ap.add_argument("--results", default=str(OUT / "speculative.jsonl"))
    args = ap.parse_args()
    prompts = [json.loads(line)["prompt"] for line in open(args.prompt_file)][: args.prompts]
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for verifier in args.verifiers:
        v = load_verifier(verifier)
        ours, name = v.identity, v.name
        runner = ModelRunner(v)
        makers = {"olifant": lambda ours=ours, name=name: OlifantDrafter(legal_draft_model(ours, name)),
                  "ngram": NgramDrafter, "lookup": LookupDrafter}
        drafters = {d: makers[d]() for d in args.drafters}
        runner.run("Warm-up text.", None, 0, True, 4)
        rows += sweep(runner, {"legal": prompts}, drafters, args.ks, args.regimes,
                      args.max_tokens, args.results, n_prompts=args.prompts,
                      on_progress=lambda done, total: print(f"{done}/{total}", file=sys.stderr))
    cells = aggregate(rows)           # this run's rows: the file may hold other settings' too
    write_tables(cells, OUT / "speculative")
    print_table(cells)


def print_table(cells):
    from rich.console import Console
    from rich.table import Table

    t = Table(title="Speculative decoding on offline verifiers (legal dev prompts; speedup vs plain "
                    "in the same run)")
    cols = ("verifier", "regime", "strategy", "k", "prompts", "tokens_per_s", "speedup",
            "acceptance", "mean_accepted_length", "overhead_ms_per_step", "exact_match")
    for c in cols:
        t.add_column(c.replace("_", " "), justify="left" if c in cols[:3] else "right")
    for c in cells:
        t.add_row(*[_fmt(k, c.get(k)) for k in cols])
    Console(width=200).print(t)


if __name__ == "__main__":
    main()

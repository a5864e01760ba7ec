"""Speculative decoding on the offline verifiers: plain vs olifant vs ngram vs lookup.

    python benchmarks/speculative.py [--verifiers smollm2-135m gemma3-270m] [--prompts 20]
        [--max-tokens 100] [--ks 3 5 8] [--regimes kv uncached] [--drafters olifant ngram lookup]

For each verifier: an olifant draft model is trained on the shared EUR-Lex-Sum train split
with the verifier's own tokenizer (cached in benchmarks/out/models/); each prompt of
shared/corpora/legal/prompts.dev.jsonl is generated plain (greedy) and then with every
drafter x k, in the same process, one prompt at a time, so speedups are ratios measured
under the same conditions. Every speculative output is checked token for token against
the plain one. Results: one JSON line per generation in benchmarks/out/speculative.jsonl,
then a table (tokens/s, speedup over plain, acceptance, mean accepted length, per-step
engine overhead, identical outputs).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from olifant_mlx.decode_cli import open_session  # noqa: E402
from olifant_mlx.drafters import LookupDrafter, NgramDrafter, NoDrafter, OlifantDrafter  # noqa: E402
from olifant_mlx.engine import generate  # noqa: E402
from olifant_mlx.igtree import IGTree  # noqa: E402
from olifant_mlx.train import train  # noqa: E402

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
    ap.add_argument("--tag", default="", help="label stored with each result")
    ap.add_argument("--results", default=str(OUT / "speculative.jsonl"))
    args = ap.parse_args()
    prompts = [json.loads(line)["prompt"] for line in open(args.prompt_file)][: args.prompts]
    run_id = f"{args.tag}-{int(time.time())}"
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(args.results, "a") as log:
        for verifier in args.verifiers:
            model, tok, ours, _, name = open_session(verifier)
            olifant = legal_draft_model(ours, name)
            makers = {"olifant": lambda: OlifantDrafter(olifant), "ngram": NgramDrafter,
                      "lookup": LookupDrafter}
            generate(model, tok.encode("Warm-up text."), max_tokens=4)
            for regime in args.regimes:
                kv = regime == "kv"
                for pi, text in enumerate(prompts):
                    prompt = tok.encode(text)
                    common = dict(max_tokens=args.max_tokens, kv_cache=kv, eos_ids=tok.eos_token_ids,
                                  bos_id=tok.bos_token_id)
                    ref, plain = generate(model, prompt, NoDrafter(), k=0, **common)
                    runs = [("plain", 0, plain, True)]
                    for dname in args.drafters:
                        for k in args.ks:
                            out, st = generate(model, prompt, makers[dname](), k=k, **common)
                            runs.append((dname, k, st, out == ref))
                    for dname, k, st, same in runs:
                        row = {"verifier": name, "regime": regime, "prompt": pi, "drafter": dname,
                               "k": k, "identical": same, "tag": args.tag, "run": run_id,
                               "time": time.time(),
                               **st.as_dict(), "plain_tokens_per_s": plain.tokens_per_s}
                        rows.append(row)
                        log.write(json.dumps(row) + "\n")
                        log.flush()
                    print(f"{name} {regime} prompt {pi + 1}/{len(prompts)} done", file=sys.stderr)
    all_rows = [json.loads(line) for line in open(args.results)]
    print_table(all_rows)
    (OUT / "speculative.md").write_text(markdown(aggregate(all_rows)) + "\n")


def aggregate(rows):
    """Per (verifier, regime, drafter, k): the latest run of each prompt, with speedup taken
    against the plain generation of the same prompt in the same run."""
    latest = {}
    for r in rows:
        latest[(r["verifier"], r["regime"], r["drafter"], r["k"], r["prompt"])] = r
    run = lambda r: r.get("run") or r["tag"]  # noqa: E731  (rows of early runs had no id)
    plain = {(run(r), r["verifier"], r["regime"], r["prompt"]): r
             for r in rows if r["drafter"] == "plain"}
    cells = defaultdict(list)
    for (v, reg, d, k, _), r in latest.items():
        cells[(v, reg, d, k)].append(r)
    table = {}
    for key, rs in cells.items():
        base = [plain[(run(r), r["verifier"], r["regime"], r["prompt"])] for r in rs]
        tps = sum(r["tokens"] for r in rs) / sum(r["seconds"] for r in rs)
        ptps = sum(p["tokens"] for p in base) / sum(p["seconds"] for p in base)
        table[key] = {
            "prompts": len(rs), "tokens": sum(r["tokens"] for r in rs) // len(rs),
            "tokens_per_s": tps, "speedup": tps / ptps,
            "acceptance": sum(r["acceptance"] for r in rs) / len(rs),
            "mal": sum(r["mean_accepted_length"] for r in rs) / len(rs),
            "overhead_ms": sum(r["overhead_ms_per_step"] for r in rs) / len(rs),
            "identical": sum(r["identical"] for r in rs)}
    return table


def markdown(table) -> str:
    lines = ["| verifier | regime | drafter | k | prompts x tokens | tok/s | speedup | acceptance | "
             "MAL | overhead ms/step | identical |", "|---" * 11 + "|"]
    for (v, reg, d, k), c in sorted(table.items()):
        lines.append(f"| {v} | {reg} | {d} | {k} | {c['prompts']} x {c['tokens']} | "
                     f"{c['tokens_per_s']:.2f} | {c['speedup']:.2f}x | {c['acceptance']:.1%} | "
                     f"{c['mal']:.2f} | {c['overhead_ms']:.3f} | {c['identical']}/{c['prompts']} |")
    return "\n".join(lines)


def print_table(rows):
    from rich.console import Console
    from rich.table import Table

    t = Table(title="Speculative decoding on offline verifiers (legal dev prompts; speedup vs plain "
                    "in the same run)")
    for c in ("verifier", "regime", "drafter", "k", "prompts", "tok/s", "speedup", "acceptance",
              "MAL", "overhead ms/step", "identical"):
        t.add_column(c, justify="left" if c in ("verifier", "regime", "drafter") else "right")
    for (v, reg, d, k), c in sorted(aggregate(rows).items()):
        t.add_row(v, reg, d, str(k), str(c["prompts"]), f"{c['tokens_per_s']:.2f}",
                  f"{c['speedup']:.2f}x", f"{c['acceptance']:.1%}", f"{c['mal']:.2f}",
                  f"{c['overhead_ms']:.3f}", f"{c['identical']}/{c['prompts']}")
    Console(width=200).print(t)


if __name__ == "__main__":
    main()

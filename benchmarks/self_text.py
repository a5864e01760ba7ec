"""Training on the verifier's own text (the paper's section 5.3): generate the verifier's
continuations of domain prompts, add them to the draft models' corpus, and measure what that
does to acceptance on held-out prompts of the same domain.

    python benchmarks/self_text.py generate    # the verifier's continuations, resumable
    python benchmarks/self_text.py evaluate    # base vs + self-text, olifant / rest / ngram-cache
    python benchmarks/self_text.py all         # both

Prompts: the legal dev prompts (prompts.dev.jsonl, 100). Every `--every`-th one (default 4:
25 prompts) is held out for evaluation; the verifier continues the others (75), plus
`--train-prompts N` prompts made the same way (first 50 words) from training-split documents.
Generation appends one JSON line per prompt to OUT/self_text.jsonl ({"id", "prompt",
"text", "tokens", "engine"}) and skips prompts already there, so an interrupted run resumes;
it uses mlx-lm's batched generation (`mlx_lm.batch_generate`, greedy) when it runs here, else
our Session (plain greedy decoding).

Evaluation builds each draft model twice from the same corpus ids (the training split, cached
by benchmarks/retrieval_peers.py in its OUT_DIR/train.npz, else tokenised here): base, and base
plus the self-text documents (repeated `--weight` times). It then runs `bench`'s sweep on the
held-out prompts: the offline verifier (both regimes) and reference mode (the held-out
documents' real continuations), and writes OUT/summary-evaluate.json and a table: on the
offline verifier k = 5 in the KV regime by default (its passes cost 0.1 s on this CPU), in
reference mode k = 3, 5, 8 in both regimes. Every output must equal plain decoding.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "corpora"


def split_prompts(path, every):
    from olifant_mlx.measure.bench import read_prompts

    prompts = read_prompts(str(path))
    held = [p for i, p in enumerate(prompts) if i % every == every - 1]
    gen = [p for i, p in enumerate(prompts) if i % every != every - 1]
    return gen, held


def train_prompts(corpus, n, words=50, min_words=150):
    """The dev-prompt protocol on training documents: the first `words` words of documents
    with at least `min_words` words."""
    from olifant_mlx.draftmodel.corpus import iter_documents

    out = []
    if n <= 0:
        return out
    for doc in iter_documents(str(corpus)):
        w = doc.split()
        if len(w) >= min_words:
            out.append(" ".join(w[:words]))
        if len(out) >= n:
            break
    return out


def done_ids(path: Path) -> set:
    if not path.exists():
        return set()
    ids = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            ids.add(json.loads(line)["id"])
        except (ValueError, KeyError):
            continue        # a torn last line: that prompt runs again
    return ids


def generate(verifier, prompts: dict, out: Path, max_tokens: int, batch: int, engine: str) -> dict:
    """Append the verifier's greedy continuation of every prompt not yet in `out`."""
    todo = [(i, p) for i, p in prompts.items() if i not in done_ids(out)]
    stats = {"prompts": len(prompts), "already_done": len(prompts) - len(todo), "engine": engine}
    t0, made = time.perf_counter(), 0
    use_batch = engine in ("auto", "batch")
    for start in range(0, len(todo), batch):
        chunk = todo[start:start + batch]
        ids = [verifier.encode(p) for _, p in chunk]
        texts = tokens = None
        if use_batch:
            try:
                from mlx_lm import batch_generate

                r = batch_generate(verifier.model, verifier.tokenizer, ids, max_tokens=max_tokens,
                                   return_token_ids=True)
                tokens, texts, used = r.token_ids, r.texts, "mlx_lm.batch_generate"
            except Exception as e:          # noqa: BLE001 - any failure: fall back to the Session
                if engine == "batch":
                    raise
                print(f"batch_generate failed ({type(e).__name__}: {e}); using the Session",
                      file=sys.stderr)
                use_batch = False
        if not use_batch:
            from olifant_mlx.engine import GenerationOptions, Session

            s = Session(verifier, "none", GenerationOptions(k=0, max_tokens=max_tokens))
            results = [s.generate(x) for x in ids]
            tokens, texts, used = [r.tokens for r in results], [r.text for r in results], "session"
        with open(out, "a", encoding="utf-8") as f:
            for (i, p), toks, text in zip(chunk, tokens, texts):
                f.write(json.dumps({"id": i, "prompt": p, "text": text, "tokens": len(toks),
                                    "engine": used}) + "\n")
                made += len(toks)
        print(f"generated {start + len(chunk)}/{len(todo)} ({made / (time.perf_counter() - t0):.1f} "
              f"tokens/s, {used})", file=sys.stderr)
    stats.update(tokens_generated=made, seconds=round(time.perf_counter() - t0, 1))
    return stats


def self_documents(path: Path) -> list:
    """Prompt + continuation of each line: the text the verifier would read and write."""
    docs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        docs.append(d["prompt"] + d["text"])
    return docs


def tokenized(docs, tok):
    from olifant_mlx.draftmodel.corpus import tokenized_batches

    parts, starts, n = [], [], 0
    for t, s in tokenized_batches(iter(docs), tok):
        parts.append(t)
        starts.append(s + n)
        n += t.size
    return np.concatenate(parts), np.concatenate(starts).astype(np.uint64)


def build_variants(base, extra, weight, tok, out: Path) -> dict:
    """olifant / rest / ngram-cache files on base, and on base + extra x weight."""
    from olifant_mlx.draftmodel.igtree import Builder
    from olifant_mlx.draftmodel.suffix import Corpus

    files = {}
    for variant, parts in (("base", [base]), ("self", [base] + [extra] * weight)):
        stem = out / (variant if variant == "base" else f"self-w{weight}")
        olif, sfx, ngc = (stem.with_suffix(".olif"), stem.with_suffix(".sfx"), stem.with_suffix(".ngc"))
        if not olif.exists():
            b = Builder(tok.vocab_size, window=4, tokenizer_name=tok.name, tokenizer_digest=tok.digest)
            for tokens, starts in parts:
                b.add_documents(tokens, starts)
            b.build().save(olif)
            del b
        if not sfx.exists() or not ngc.exists():
            c = Corpus(tok.vocab_size, tok.name, tok.digest)
            for tokens, starts in parts:
                c.add_documents(tokens, starts)
            c.build_index().save(sfx)
            c.build_ngram(2).save(ngc)
            del c
        files[variant] = {"olifant": olif, "rest": sfx, "ngram-cache": ngc}
    return files


def evaluate(args, tok, out: Path) -> dict:
    from olifant_mlx.drafters import build_drafter
    from olifant_mlx.measure.bench import ModelRunner, ReferenceRunner, aggregate, continuations_of, sweep
    from olifant_mlx.verifier import load_verifier
    from olifant_mlx.measure.corpora import tokens_of

    _, held = split_prompts(args.prompts, args.every)
    held = held[:args.n_held_out]
    cache = Path(args.train_cache)
    base = tokens_of(args.corpus, tok, cache if cache.exists() else out / "train.npz")
    extra = tokenized(self_documents(out / "self_text.jsonl"), tok)
    files = build_variants(base, extra, args.weight, tok, out)
    strategies = {}
    for kind in ("olifant", "rest", "ngram-cache"):
        for variant, paths in files.items():
            strategies[kind if variant == "base" else f"{kind}+self"] = build_drafter(f"{kind}:{paths[kind]}", tok)
    tasks = {"legal": held}
    rows = []
    if "model" in args.verifiers:
        v = load_verifier(args.model)
        rows += sweep(ModelRunner(v), tasks, strategies, args.model_k, args.model_regimes,
                      args.max_tokens, out / "results-model.jsonl")
    if "reference" in args.verifiers:
        ref = ReferenceRunner(tok, continuations_of(held, args.valid))
        rows += sweep(ref, tasks, strategies, args.k, args.regimes, args.reference_tokens,
                      out / "results-reference.jsonl")
    assert all(r["exact_match"] for r in rows), "an output differs from plain decoding: a bug"
    cells = [c for c in aggregate(rows) if c["strategy"] != "plain"]
    summary = {"self_text_documents": int(extra[1].size), "self_text_tokens": int(extra[0].size),
               "base_tokens": int(base[0].size), "weight": args.weight,
               "held_out_prompts": len(held), "max_tokens": args.max_tokens,
               "reference_tokens": args.reference_tokens, "cells": []}
    by = defaultdict(dict)
    for c in cells:
        by[(c["verifier"], c["regime"], c["k"])][c["strategy"]] = c
    for (verifier, regime, k), cs in sorted(by.items()):
        for kind in ("olifant", "rest", "ngram-cache"):
            b, s = cs.get(kind), cs.get(f"{kind}+self")
            if not b or not s:
                continue
            summary["cells"].append({
                "verifier": verifier, "regime": regime, "k": k, "drafter": kind,
                "acceptance": b["acceptance"], "acceptance_self": s["acceptance"],
                "mal": b["mean_accepted_length"], "mal_self": s["mean_accepted_length"],
                "tokens_per_step": b.get("tokens_per_step"), "tokens_per_step_self": s.get("tokens_per_step"),
                "speedup": b.get("speedup"), "speedup_self": s.get("speedup")})
    return summary


def main(argv=None) -> int:
    from olifant_mlx.verifier import load_tokenizer, load_verifier

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("stage", choices=["generate", "evaluate", "all"])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--prompts", default=str(SHARED / "legal" / "prompts.dev.jsonl"))
    p.add_argument("--corpus", default=str(SHARED / "legal" / "eurlexsum.train.txt.xz"))
    p.add_argument("--valid", default=str(SHARED / "legal" / "eurlexsum.valid.txt.xz"))
    p.add_argument("--train-cache", default=str(ROOT / "benchmarks" / "out" / "retrieval-legal" / "train.npz"))
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "self-text"))
    p.add_argument("--every", type=int, default=4, help="hold out every N-th dev prompt")
    p.add_argument("--train-prompts", type=int, default=0,
                   help="also continue this many prompts made from training documents")
    p.add_argument("--gen-tokens", type=int, default=256, help="tokens generated per prompt")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--engine", choices=["auto", "batch", "session"], default="auto")
    p.add_argument("--weight", type=int, default=1, help="self-text documents repeated this often")
    p.add_argument("--n-held-out", type=int, default=25)
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per generation, offline verifier")
    p.add_argument("--model-k", type=int, nargs="+", default=[5], help="k on the offline verifier")
    p.add_argument("--model-regimes", nargs="+", default=["kv"], help="regimes on the offline verifier")
    p.add_argument("--reference-tokens", type=int, default=100, help="tokens per generation, reference mode")
    p.add_argument("-k", type=int, nargs="+", default=[3, 5, 8], help="k in reference mode")
    p.add_argument("--regimes", nargs="+", default=["kv", "uncached"], help="regimes in reference mode")
    p.add_argument("--verifiers", nargs="+", default=["model", "reference"])
    args = p.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(args.model)
    report = {}
    if args.stage in ("generate", "all"):
        gen, _ = split_prompts(args.prompts, args.every)
        prompts = {f"dev{i}": p for i, p in enumerate(gen)}
        prompts.update({f"train{i}": p for i, p in enumerate(train_prompts(args.corpus, args.train_prompts))})
        report["generate"] = generate(load_verifier(args.model), prompts, out / "self_text.jsonl",
                                      args.gen_tokens, args.batch, args.engine)
        print(json.dumps(report["generate"]))
    if args.stage in ("evaluate", "all"):
        report["evaluate"] = evaluate(args, tok, out)
        print(f"{'verifier':<10} {'regime':<9} {'k':>2} {'drafter':<12} {'acc':>6} {'+self':>6} "
              f"{'MAL':>6} {'+self':>6}")
        for c in report["evaluate"]["cells"]:
            print(f"{c['verifier']:<10} {c['regime']:<9} {c['k']:>2} {c['drafter']:<12} "
                  f"{c['acceptance']:6.3f} {c['acceptance_self']:6.3f} {c['mal']:6.3f} {c['mal_self']:6.3f}")
    (out / f"summary-{args.stage}.json").write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

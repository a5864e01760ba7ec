"""The corpus retrieval peers against the IGTree on one corpus: file bytes per corpus token,
microseconds per draft (in C, and per call through Python as the engine pays it), and how
many drafted tokens match held-out text (teacher-forced, k tokens from each position).

    python benchmarks/retrieval_peers.py                  # legal train split, SmolLM2 tokens
    python benchmarks/retrieval_peers.py --max-tokens 2000000 --out-dir benchmarks/out/small

The corpus is tokenised once (cached in OUT_DIR/train.npz) and all three files are built
from the same ids: the IGTree (window 4, gain ratio, as `train`), the suffix index and the
order-2 n-gram cache (as `build-rest`). Drafters run with the registry's settings: olifant
without thresholds, rest with REST's spans (16 down to 2), ngram-cache with llama.cpp's
static thresholds (2 samples, 50 %). Writes OUT_DIR/summary.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from olifant_mlx.measure.corpora import tokens_of

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "corpora"


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def build_all(tokens, starts, tok, out: Path) -> dict:
    from olifant_mlx.draftmodel.igtree import Builder, IGTree
    from olifant_mlx.draftmodel.suffix import Corpus

    facts = {}
    olif, sfx, ngc = out / "model.olif", out / "index.sfx", out / "cache.ngc"
    if not olif.exists():
        b = Builder(tok.vocab_size, window=4, tokenizer_name=tok.name, tokenizer_digest=tok.digest)
        b.add_documents(tokens, starts)
        model, facts["olifant_build_s"] = timed(b.build)
        model.save(olif)
        del model, b
    m = IGTree.load(olif)
    facts["olifant"] = {"file_bytes": m.file_size, "nodes": m.n_nodes}
    if not sfx.exists() or not ngc.exists():
        c = Corpus(tok.vocab_size, tok.name, tok.digest)
        c.add_documents(tokens, starts)
        index, facts["rest_build_s"] = timed(c.build_index)
        index.save(sfx)
        del index
        cache, facts["ngram_cache_build_s"] = timed(lambda: c.build_ngram(2))
        cache.save(ngc)
        del cache, c
    for name, path in (("rest", sfx), ("ngram-cache", ngc)):
        facts[name] = {"file_bytes": path.stat().st_size}
    for name in ("olifant", "rest", "ngram-cache"):
        facts[name]["bytes_per_corpus_token"] = round(facts[name]["file_bytes"] / tokens.size, 3)
    return facts


def held_out_positions(tokens, starts, L, k, n, seed=0):
    """n (context of L ids, next k ids) pairs inside held-out documents."""
    bounds = list(starts.astype(np.int64)) + [tokens.size]
    spans = [(s, e) for s, e in zip(bounds[:-1], bounds[1:]) if e - s > L + k]
    rng = np.random.default_rng(seed)
    ctx = np.empty((n, L), np.uint32)
    truth = np.empty((n, k), np.uint32)
    for i in range(n):
        s, e = spans[rng.integers(len(spans))]
        p = int(rng.integers(s + L, e - k))
        ctx[i], truth[i] = tokens[p - L:p], tokens[p:p + k]
    return ctx, truth


def c_timing(out: Path, ctx, k, repeats=9) -> dict:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    exe = out / "draft_timing"
    subprocess.run([cc, "-O2", "-std=c11", "-I", str(ROOT / "csrc"), str(ROOT / "benchmarks" / "draft_timing.c"),
                    str(ROOT / "csrc" / "igtree.c"), str(ROOT / "csrc" / "suffix.c"),
                    str(ROOT / "csrc" / "olif_file.c"), "-lm", "-o", str(exe)],
                   check=True)
    ctx_file = out / "contexts.u32"
    np.ascontiguousarray(ctx, np.uint32).tofile(ctx_file)
    r = subprocess.run([str(exe), str(out / "model.olif"), str(out / "index.sfx"), str(out / "cache.ngc"),
                        str(ctx_file), str(ctx.shape[1]), str(k), str(repeats)],
                       capture_output=True, text=True, check=True)
    res = {}
    for line in r.stdout.split("\n"):
        if line.strip():
            name, us, us_min, drafted = line.split()
            res[name] = {"c_us_per_draft": float(us), "c_us_per_draft_min": float(us_min),
                         "mean_drafted": float(drafted)}
    return res


def drafters(out: Path, tok):
    from olifant_mlx.drafters import build_drafter

    return {"olifant": build_drafter(f"olifant:{out / 'model.olif'}", tok),
            "rest": build_drafter(f"rest:{out / 'index.sfx'}", tok),
            "ngram-cache": build_drafter(f"ngram-cache:{out / 'cache.ngc'}", tok)}


def python_timing_and_matches(ds, ctx, truth, k) -> dict:
    res = {}
    contexts = [c.tolist() for c in ctx]
    for name, d in ds.items():
        t = time.perf_counter()
        drafts = [d.draft(c, k) for c in contexts]
        us = (time.perf_counter() - t) / len(contexts) * 1e6
        matched = []
        for dr, tr in zip(drafts, truth):
            m = 0
            while m < len(dr) and dr[m] == tr[m]:
                m += 1
            matched.append(m)
        matched = np.array(matched)
        res[name] = {"python_us_per_draft": round(us, 2),
                     "mean_matched_prefix": round(float(matched.mean()), 3),
                     "first_token_right": round(float((matched > 0).mean()), 4),
                     "drafted_any": round(float(np.mean([len(x) > 0 for x in drafts])), 4)}
    return res


def main(argv=None) -> int:
    from olifant_mlx.verifier import load_tokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=str(SHARED / "legal" / "eurlexsum.train.txt.xz"))
    p.add_argument("--valid", default=str(SHARED / "legal" / "eurlexsum.valid.txt.xz"))
    p.add_argument("--tokenizer", default="smollm2-135m")
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "retrieval-legal"))
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--valid-docs", type=int, default=20)
    p.add_argument("--positions", type=int, default=3000)
    p.add_argument("--context", type=int, default=32)
    p.add_argument("-k", type=int, default=8)
    args = p.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(args.tokenizer)
    (tokens, starts), t_read = timed(lambda: tokens_of(args.corpus, tok, out / "train.npz", args.max_tokens))
    summary = {"corpus": args.corpus, "tokenizer": tok.identity(), "corpus_tokens": int(tokens.size),
               "documents": int(starts.size), "k": args.k, "context": args.context}
    summary.update(build_all(tokens, starts, tok, out))
    vt, vs = tokens_of(args.valid, tok, out / "valid.npz", max_docs=args.valid_docs)
    ctx, truth = held_out_positions(vt, vs, args.context, args.k, args.positions)
    summary["held_out"] = {"corpus": args.valid, "documents": args.valid_docs, "positions": args.positions}
    timing = c_timing(out, ctx, args.k)
    quality = python_timing_and_matches(drafters(out, tok), ctx, truth, args.k)
    for name in ("olifant", "rest", "ngram-cache"):
        summary[name].update(timing.get(name, {}), **quality[name])
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"{summary['corpus_tokens']:,} corpus tokens ({tok.name}), k = {args.k}, "
          f"{args.positions} held-out positions")
    print(f"{'drafter':<12} {'file MB':>9} {'B/token':>8} {'C us/draft':>11} {'py us/draft':>12} "
          f"{'drafted':>8} {'matched':>8} {'1st right':>9}")
    for name in ("olifant", "rest", "ngram-cache"):
        s = summary[name]
        print(f"{name:<12} {s['file_bytes'] / 1e6:9.1f} {s['bytes_per_corpus_token']:8.2f} "
              f"{s.get('c_us_per_draft', float('nan')):11.2f} {s['python_us_per_draft']:12.2f} "
              f"{s.get('mean_drafted', float('nan')):8.2f} {s['mean_matched_prefix']:8.3f} "
              f"{s['first_token_right']:9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

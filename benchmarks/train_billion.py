"""`train --memory-limit` end to end at 10M, 100M and (on request) a billion tokens.

    python benchmarks/train_billion.py [--sizes 1e7 1e8] [--memory-limit 1G] [--order 2]
        [--scratch /tmp/olifant-billion] [--tokenizer mistral] [--threads N] [--workers N]

The corpus is not a repetition of a smaller one: a word-level n-gram sampler (`--order` words
of context, maximum-likelihood, no smoothing) is fitted on every shared training split (legal,
medical, general; about 41M words) and samples fresh text, written to disk as plain .txt
(`--scratch`, created if needed, reused when a file of the same seed, order and size is there).
Words keep the line breaks between them; each sampled stretch of `--doc-words` words ends a
document, and so does every document boundary the sampler draws. The corpus is generated once,
big enough for the largest size (tokens per word measured on a sample with the tokenizer, plus
10 %), and each size trains on its first N tokens (`--max-tokens N`): a 10M run reads the first
tenth of the 100M corpus.

Each size is `python -m olifant_mlx train --corpus FILE --tokenizer T --max-tokens N
--memory-limit SIZE --out SCRATCH/model-N.olif --json --quiet` in a fresh process: wall, CPU
(user + sys, from the child's rusage by os.wait4) and peak RSS (ditto), the model file size, and
the phases from its JSON summary. The 1-minute load average before and after each run is
recorded beside it (the machine may be shared). Models are deleted after measuring unless
--keep. Writes benchmarks/out/train_billion.json. A billion tokens take about 4.5 GB of text in
--scratch and, with the model, about 10 GB of disk at the peak.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from olifant_mlx.draftmodel.corpus import iter_documents
from olifant_mlx.files import write_atomic
from olifant_mlx.measure.processes import load1, run_child

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))
WORD = re.compile(r"[^\S\n]*(\S+|\n)")       # words and line breaks; other whitespace is dropped
DOC = "\x00"                                 # the document boundary, as a word of its own
CHAINS = 16384                               # sampled at once: stretches (documents) per block
RENDER_ROWS = 1024                           # stretches turned into text at once


class NgramSampler:
    """Maximum-likelihood word n-grams, sampled by corpus position: the state is a position p
    in the fitted word stream, whose next word is words[p]; the next state is a uniformly drawn
    position with the same `order` preceding words as p + 1, which is exactly drawing the next
    word in proportion to its count after that context. Many independent chains step at once."""

    def __init__(self, words: np.ndarray, vocab: list, order: int):
        self.words, self.vocab, self.order = words, vocab, order
        n, v = words.size, len(vocab)
        key = np.zeros(n, dtype=np.int64)
        for k in range(1, order + 1):         # the `order` words before each position
            prev = np.concatenate([np.zeros(k, dtype=np.int64), words[:-k].astype(np.int64)])
            key = key * v + prev
        _, ctx = np.unique(key, return_inverse=True)
        self.ctx = ctx.astype(np.int64)
        self.by_ctx = np.argsort(self.ctx, kind="stable")
        counts = np.bincount(self.ctx)
        self.start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.count = counts
        self.n_contexts = counts.size

    def sample(self, rng, chains: int, steps: int) -> np.ndarray:
        """(chains, steps) word ids, each row a fresh stretch starting at a random position."""
        n = self.words.size
        pos = rng.integers(self.order, n - 1, size=chains)
        out = np.empty((chains, steps), dtype=self.words.dtype)
        for t in range(steps):
            out[:, t] = self.words[pos]
            nxt = np.minimum(pos + 1, n - 1)
            c = self.ctx[nxt]
            pos = self.by_ctx[self.start[c] + (rng.random(chains) * self.count[c]).astype(np.int64)]
        return out


def fit(files, order: int) -> NgramSampler:
    ids, chunks = {DOC: 0}, []
    for f in files:
        for doc in iter_documents(str(f)):
            toks = WORD.findall(doc)
            chunks.append(np.fromiter((ids.setdefault(w, len(ids)) for w in toks), np.int32, len(toks)))
            chunks.append(np.zeros(1, np.int32))
    return NgramSampler(np.concatenate(chunks), list(ids), order)


NEWLINE = "\n"


class Speller:
    """Word ids -> UTF-8 text, vectorised: words joined by single spaces, none after a line
    break or at a document's start; DOC is a blank line (a document boundary)."""

    def __init__(self, vocab):
        spelled = []
        for w in vocab:
            bare = "\n\n" if w == DOC else w
            spelled += [(bare if w in (NEWLINE, DOC) else " " + w).encode(), bare.encode()]
        self.blob = np.frombuffer(b"".join(spelled), dtype=np.uint8)
        self.length = np.array([len(x) for x in spelled], dtype=np.int64)
        self.offset = np.concatenate([[0], np.cumsum(self.length)[:-1]])
        self.breaks = np.array([vocab.index(DOC)] + ([vocab.index(NEWLINE)] if NEWLINE in vocab else []))

    def text(self, rows: np.ndarray) -> bytes:
        """One document per row at least (more where the sampler drew DOC)."""
        ids = np.concatenate([rows, np.zeros((rows.shape[0], 1), rows.dtype)], axis=1).ravel()
        prev = np.concatenate([[0], ids[:-1]])           # word 0 is DOC
        pick = ids.astype(np.int64) * 2 + np.isin(prev, self.breaks)
        n = self.length[pick]
        ends = np.cumsum(n)
        src = np.repeat(self.offset[pick] - (ends - n), n) + np.arange(int(ends[-1]))
        return self.blob[src].tobytes()


def generate(path: Path, sampler: NgramSampler, words: int, seed: int, doc_words: int) -> dict:
    """Sample `words` words into path (written to a temporary name, renamed when complete)."""
    rng = np.random.default_rng(seed)
    speller = Speller(sampler.vocab)
    tmp = path.with_name(path.name + ".partial")
    done, t = 0, time.perf_counter()
    with open(tmp, "wb") as f:
        while done < words:
            rows = sampler.sample(rng, CHAINS, doc_words)
            for i in range(0, CHAINS, RENDER_ROWS):
                f.write(speller.text(rows[i:i + RENDER_ROWS]))
            done += rows.size
    os.replace(tmp, path)
    return {"words": done, "bytes": path.stat().st_size, "generate_s": round(time.perf_counter() - t, 1)}


def tokens_per_word(sampler, tokenizer, seed, doc_words) -> float:
    from olifant_mlx.verifier import load_tokenizer

    tok = load_tokenizer(tokenizer)
    rows = sampler.sample(np.random.default_rng(seed + 1), 64, doc_words)
    text = Speller(sampler.vocab).text(rows).decode()
    docs = [d for d in text.split("\n\n") if d.strip()]
    return sum(len(tok.encode(d)) for d in docs) / rows.size


def find_corpus(scratch: Path, order: int, seed: int, tokens: int) -> Path | None:
    """A corpus generated before with this order and seed, big enough for `tokens`."""
    for meta in sorted(scratch.glob(f"ngram{order}-seed{seed}-*.json")):
        corpus = meta.with_suffix(".txt")
        if corpus.exists() and json.loads(meta.read_text())["corpus"]["target_tokens"] >= tokens:
            return corpus
    return None


def make_corpus(scratch: Path, files, args, tokens: int) -> Path:
    """Fit the sampler, generate `tokens` (+10 %) into scratch, and describe it beside it."""
    t = time.perf_counter()
    sampler = fit(files, args.order)
    meta = {"sampler": {"words": int(sampler.words.size), "vocab": len(sampler.vocab),
                        "contexts": int(sampler.n_contexts), "fit_s": round(time.perf_counter() - t, 1)}}
    tpw = tokens_per_word(sampler, args.tokenizer, args.seed, args.doc_words)
    corpus = scratch / f"ngram{args.order}-seed{args.seed}-{tokens}.txt"
    meta["corpus"] = {"target_tokens": tokens, "tokens_per_word": round(tpw, 4),
                      **generate(corpus, sampler, int(tokens / tpw * 1.1), args.seed, args.doc_words)}
    write_atomic(corpus.with_suffix(".json"), json.dumps(meta, indent=2) + "\n", mode=0o644)
    return corpus


def train_size(corpus: Path, tokens: int, args) -> dict:
    out = Path(args.scratch) / f"model-{tokens}.olif"
    argv = [sys.executable, "-m", "olifant_mlx", "train", "--corpus", str(corpus), "--tokenizer",
            args.tokenizer, "--max-tokens", str(tokens), "--memory-limit", args.memory_limit,
            "--out", str(out), "--json", "--quiet"]
    if args.threads is not None:
        argv += ["--threads", str(args.threads)]
    if args.workers is not None:
        argv += ["--workers", str(args.workers)]
    before = load1()
    stdout, usage = run_child(argv)
    s = json.loads(stdout)
    size = out.stat().st_size
    if not args.keep:
        out.unlink()
    keep = ("tokens", "instances", "nodes", "classes", "workers", "threads", "memory_limit",
            "read_tokenize_s", "read_s", "tokenize_s", "feed_s", "build_s", "load_s")
    return {**{k: s[k] for k in keep}, **usage, "model_bytes": size,
            "tokens_per_s": round(s["tokens"] / usage["wall_s"]), "load1_before": before,
            "load1_after": load1()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1e7, 1e8],
                    help="training tokens per run, e.g. 1e7 1e8 1e9")
    ap.add_argument("--memory-limit", default="1G", help="train --memory-limit for every run")
    ap.add_argument("--threads", type=int, help="train --threads (default: train's)")
    ap.add_argument("--workers", type=int, help="train --workers (default: train's)")
    ap.add_argument("--tokenizer", default="mistral")
    ap.add_argument("--order", type=int, choices=[1, 2, 3], default=2, help="words of context of the sampler")
    ap.add_argument("--doc-words", type=int, default=1000, help="words per sampled stretch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scratch", default="/tmp/olifant-billion")
    ap.add_argument("--keep", action="store_true", help="keep the models in --scratch")
    ap.add_argument("--generate-only", action="store_true", help="write the corpus, train nothing")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/out/train_billion.json"))
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes)
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    files = sorted((SHARED / "corpora").glob("*/*.train.txt.xz"))
    result = {"tokenizer": args.tokenizer, "memory_limit": args.memory_limit, "order": args.order,
              "seed": args.seed, "fitted_on": [str(f.relative_to(SHARED)) for f in files], "runs": []}
    corpus = find_corpus(scratch, args.order, args.seed, sizes[-1])
    if corpus is None:
        corpus = make_corpus(scratch, files, args, sizes[-1])
    result.update(json.loads(corpus.with_suffix(".json").read_text()))
    result["corpus"]["path"] = str(corpus)
    print(json.dumps({k: result[k] for k in ("sampler", "corpus")}), flush=True)
    if args.generate_only:
        return
    for n in sizes:
        result["runs"].append(train_size(corpus, n, args))
        print(json.dumps(result["runs"][-1]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

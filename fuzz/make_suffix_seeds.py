"""Write a few small, valid suffix-index and n-gram-cache files as a seed corpus for
fuzz_suffix.

    python fuzz/make_suffix_seeds.py [out_dir]        (default: fuzz/seeds-suffix)

The files are deterministic and tiny (a few KB each) and cover the variants: 2- and 4-byte
text, one and many documents, repeated phrases (long matches, large ranges), n-gram orders
1..4.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from olifant_mlx.draftmodel.suffix import Corpus


def _documents(rng, n_docs, vocab, max_len=80, phrase_every=4):
    docs = []
    phrase = rng.integers(0, vocab, 6).tolist()
    for _ in range(n_docs):
        doc = []
        while len(doc) < rng.integers(1, max_len):
            doc += phrase if rng.integers(0, phrase_every) == 0 else [int(rng.integers(0, vocab))]
        docs.append(doc)
    return docs


def _corpus(docs, vocab, name):
    c = Corpus(vocab, f"seed-{name}", bytes(range(32)))
    tokens = [t for d in docs for t in d]
    starts = np.cumsum([0] + [len(d) for d in docs[:-1]])
    c.add_documents(tokens, starts)
    return c


def make_seeds(out_dir) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240601)
    written = []
    # (a 70,000-id index stores its text in 4 bytes a token, but its bucket index alone is
    # 280 KB: too slow a seed; csrc/test_suffix.c covers it)
    specs = [("v24_docs8", 24, 8), ("v7_docs1", 7, 1), ("v300_docs5", 300, 5),
             ("v70000_docs3", 70000, 3)]
    for name, vocab, n_docs in specs:
        c = _corpus(_documents(rng, n_docs, min(vocab, 40)), vocab, name)
        if vocab < 65536:
            path = out / f"{name}.sfx"
            c.build_index().save(path)
            written.append(path)
        for order in ((1, 2, 3, 4) if vocab == 24 else (2,)):
            path = out / f"{name}_order{order}.ngc"
            c.build_ngram(order).save(path)
            written.append(path)
    return written


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent / "seeds-suffix"
    for p in make_seeds(target):
        print(f"{p}  {p.stat().st_size} bytes")

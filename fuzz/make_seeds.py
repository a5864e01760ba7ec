"""Write a few small, valid IGTree model files as a seed corpus for fuzz_load.

    python fuzz/make_seeds.py [out_dir]        (default: fuzz/seeds)

The models are deterministic and tiny (a few KB each) and together cover the
format's variants: windows 1..16, top_k none / some / all, gain-ratio,
info-gain and explicit level orders, instances and documents, 2- and 3-byte
ids; each is written in format 2 and, as *_v1.olif, in format 1 (still read).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from olifant_mlx.draftmodel.igtree import TOPK_ALL, Builder


def _instances(rng, n, window, vocab):
    """Contexts from small per-position ranges (shared prefixes, repeats,
    some padding); the class mostly a function of the two newest ids."""
    ranges = np.minimum(3 + 3 * np.minimum(np.arange(window), 6), vocab)
    ctx = (rng.random((n, window)) * ranges).astype(np.uint32)
    ctx[rng.random((n, window)) < 0.04] = vocab            # padding id
    newest = ctx[:, -1] % vocab
    second = ctx[:, -2] % vocab if window > 1 else 0
    cls = (newest * 7 + second * 3) % vocab
    noise = rng.random(n) < 0.2
    cls[noise] = rng.integers(0, vocab, noise.sum())
    return np.column_stack([ctx, cls]).astype(np.uint32)


def _documents(rng, n_docs, vocab):
    lengths = rng.integers(0, 60, n_docs)
    tokens = [rng.integers(0, vocab, n) for n in lengths]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.uint64)
    return np.concatenate(tokens).astype(np.uint32), starts


def make_seeds(out_dir) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240501)
    specs = [  # name, window, vocab, n, top_k, order
        ("w4_gr_top0", 4, 24, 300, 0, "gain_ratio"),
        ("w4_ig_top3", 4, 24, 300, 3, "info_gain"),
        ("w3_explicit_all", 3, 16, 200, TOPK_ALL, [2, 0, 1]),
        ("w1_top2", 1, 12, 100, 2, "gain_ratio"),
        ("w16_top1", 16, 8, 150, 1, "gain_ratio"),
        ("w3_vocab70k_top2", 3, 70000, 200, 2, "gain_ratio"),
    ]
    written = []
    for name, window, vocab, n, top_k, order in specs:
        b = Builder(vocab_size=vocab, window=window, order=order, top_k=top_k,
                    tokenizer_name=f"seed-{name}", tokenizer_digest=bytes(range(32)))
        b.add_instances(_instances(rng, n, window, vocab))
        written += _save_both(b.build(), out / name)
    b = Builder(vocab_size=20, window=5, top_k=4, tokenizer_name="seed-docs")
    b.add_documents(*_documents(rng, 8, 20))
    written += _save_both(b.build(), out / "w5_documents_top4")
    return written


def _save_both(model, stem):
    v2, v1 = stem.with_name(stem.name + ".olif"), stem.with_name(stem.name + "_v1.olif")
    model.save(v2)
    model.save(v1, format_version=1)
    return [v2, v1]


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent / "seeds"
    for p in make_seeds(target):
        print(f"{p}  {p.stat().st_size} bytes")

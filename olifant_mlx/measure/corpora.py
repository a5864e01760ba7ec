"""A corpus as one token array with its document starts, cached as .npz: the input of the
retrieval benchmarks (the suffix index, the IGTree and C timings all read the same ids); the
benchmark tasks' corpora (paths under the shared `corpora/` folder) and their draft models."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from olifant_mlx.files import atomic_writer

def shared_dir() -> Path:
    """The shared material (corpora, prompts): $OLIFANT_SHARED, else `shared/` beside the checkout
    (where the tests and the benchmark scripts look)."""
    env = os.environ.get("OLIFANT_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared"


TRAIN = {"legal": "legal/eurlexsum.train.txt.xz", "medical": "medical/sumpubmed.train.txt.xz",
         "general": "general/general.train.txt.xz"}
VALID = {"legal": "legal/eurlexsum.valid.txt.xz", "medical": "medical/sumpubmed.valid.txt.xz",
         "general": "general/wikitext103.valid.txt.xz"}


def task_draft_model(task, tokenizer, verifier: str, corpora: Path, models: Path) -> Path:
    """`models`/TASK.VERIFIER.olif, trained on the task's train split the first time it is asked for."""
    from olifant_mlx.draftmodel.train import train

    path = Path(models) / f"{task}.{verifier}.olif"
    if not path.is_file():
        print(f"training the {task} draft model for {verifier} ...", file=sys.stderr)
        path.parent.mkdir(parents=True, exist_ok=True)
        train([str(Path(corpora) / TRAIN[task])], tokenizer, path)
    return path


def task_corpus_files(task, tokenizer, verifier: str, models: Path, train_tokens: int) -> dict:
    """The task's IGTree, suffix index and n-gram cache for this tokenizer ({"model", "sfx",
    "ngc"}: `models`/TASK.VERIFIER.TOKENS.olif/.sfx/.ngc), built from the first `train_tokens`
    tokens of its train split the first time they are asked for."""
    from olifant_mlx.draftmodel.retrieval import build_retrieval
    from olifant_mlx.draftmodel.train import train

    corpus = str(shared_dir() / "corpora" / TRAIN[task])
    files = {kind: Path(models) / f"{task}.{verifier}.{train_tokens}.{kind}" for kind in ("olif", "sfx", "ngc")}
    files["model"] = files.pop("olif")
    Path(models).mkdir(parents=True, exist_ok=True)
    if not files["model"].is_file():
        print(f"training the {task} draft model for {verifier} ({train_tokens:,} tokens) ...", file=sys.stderr)
        train([corpus], tokenizer, files["model"], max_tokens=train_tokens, show_progress=False)
    if not (files["sfx"].is_file() and files["ngc"].is_file()):
        print(f"building the {task} suffix index and n-gram cache for {verifier} ...", file=sys.stderr)
        build_retrieval([corpus], tokenizer, index_out=files["sfx"], ngram_out=files["ngc"], max_tokens=train_tokens)
    return files


def tokens_of(spec, tok, cache: Path, max_tokens=None, max_docs=None):
    """(tokens uint32, doc_starts uint64) of a corpus, read from `cache` if it exists, else
    tokenized (the first max_docs documents, at most max_tokens tokens) and written there."""
    from olifant_mlx.draftmodel.corpus import iter_documents, tokenized_batches

    if Path(cache).exists():
        z = np.load(cache)
        return z["tokens"], z["starts"]
    parts, starts, n = [], [], 0
    docs = iter_documents(str(spec))
    if max_docs:
        docs = (d for i, d in zip(range(max_docs), docs))
    for t, s in tokenized_batches(docs, tok):
        if max_tokens is not None and n + t.size > max_tokens:
            room = max_tokens - n
            t, s = t[:room], s[s < room]
        parts.append(t)
        starts.append(s + n)
        n += t.size
        if max_tokens is not None and n >= max_tokens:
            break
    tokens, doc_starts = np.concatenate(parts), np.concatenate(starts).astype(np.uint64)
    with atomic_writer(cache) as f:
        np.savez(f, tokens=tokens, starts=doc_starts)
    return tokens, doc_starts

"""Build the corpus retrieval drafters' files: corpus -> verifier tokens -> a suffix index
(`rest:PATH`) and/or llama.cpp's static n-gram cache (`ngram-cache:PATH`).

The corpus is read and tokenised exactly as for the IGTree (draftmodel.corpus: documents,
no BOS/EOS, whitespace kept), so the three drafters see the same training text. Memory while
building: the corpus ids (4 bytes a token) plus SA-IS's text copy and suffix array (8 bytes a
token) plus the file image (6 bytes a token for a vocabulary below 65,536).
"""
from __future__ import annotations

import os
import time

from olifant_mlx.draftmodel.corpus import CorpusError, iter_documents, tokenized_batches
from olifant_mlx.draftmodel.suffix import Corpus, NgramCache, SuffixIndex


def read_corpus(corpora, tokenizer, max_tokens: int | None = None, text_field: str = "text",
                on_batch=None, force: bool = False) -> Corpus:
    """The documents of every corpus spec, tokenised, as one Corpus (at most max_tokens ids;
    the document that crosses the limit is cut)."""
    if not corpora:
        raise CorpusError("no corpus given")
    corpus = Corpus(tokenizer.vocab_size, tokenizer.name, tokenizer.digest)
    docs = (d for spec in corpora for d in iter_documents(str(spec), text_field, force=force))
    for tokens, starts in tokenized_batches(docs, tokenizer):
        if max_tokens is not None and corpus.tokens + tokens.size > max_tokens:
            room = max_tokens - corpus.tokens
            tokens, starts = tokens[:room], starts[starts < room]
        if tokens.size:
            corpus.add_documents(tokens, starts)
        if on_batch is not None:
            on_batch(corpus.documents, corpus.tokens)
        if max_tokens is not None and corpus.tokens >= max_tokens:
            break
    if corpus.tokens == 0:
        raise CorpusError(f"corpus {', '.join(map(str, corpora))} holds no text")
    return corpus


def build_retrieval(corpora, tokenizer, index_out=None, ngram_out=None, order: int = 2,
                    max_tokens: int | None = None, text_field: str = "text",
                    on_progress=None, force: bool = False) -> dict:
    """Read the corpora once, build and save the suffix index (index_out) and/or the n-gram
    cache (ngram_out), reload each memory-mapped; return a summary (sizes, bytes per token,
    times). on_progress(phase, done, total) is told the phases."""
    if not index_out and not ngram_out:
        raise ValueError("nothing to build: give a suffix-index path and/or an n-gram cache path")

    def report(phase, done=0, total=0):
        if on_progress is not None:
            on_progress(phase, done, total)
        return False

    t0 = time.perf_counter()
    corpus = read_corpus(corpora, tokenizer, max_tokens, text_field,
                         on_batch=lambda docs, toks: report("reading", toks, 0), force=force)
    summary = {"corpora": [str(c) for c in corpora], "tokenizer": tokenizer.identity(),
               "documents": corpus.documents, "tokens": corpus.tokens,
               "read_tokenize_s": round(time.perf_counter() - t0, 3)}
    for kind, out, build, cls in (
            ("index", index_out, lambda: corpus.build_index(report), SuffixIndex),
            ("ngram_cache", ngram_out, lambda: corpus.build_ngram(order, report), NgramCache)):
        if not out:
            continue
        t1 = time.perf_counter()
        obj = build()
        t_build = time.perf_counter() - t1
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        obj.save(out)
        del obj
        t2 = time.perf_counter()
        obj = cls.load(out)
        d = obj.describe()
        d.update(out=str(out), build_s=round(t_build, 3),
                 load_s=round(time.perf_counter() - t2, 4),
                 bytes_per_corpus_token=round(obj.file_size / corpus.tokens, 3))
        summary[kind] = d
    summary["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    return summary


def _peak_rss_mb() -> float:
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024

"""Text metrics of the paper: ROUGE-L against the plain reference, and the redundancy
measures of its Table 5 (within-text and cross-document 4-gram repetition, gzip ratio).

Acceptance and mean accepted length live with the engine (`engine.Stats`), where they are
counted step by step.
"""
from __future__ import annotations

import gzip
from collections import Counter


def lcs_length(a, b) -> int:
    """Length of the longest common subsequence (O(len(a) * len(b)) time, O(len(b)) memory)."""
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(reference, candidate) -> float:
    """ROUGE-L F1 of candidate against reference (token sequences); 1.0 for two empty ones."""
    if not reference and not candidate:
        return 1.0
    if not reference or not candidate:
        return 0.0
    lcs = lcs_length(reference, candidate)
    if lcs == 0:
        return 0.0
    p, r = lcs / len(candidate), lcs / len(reference)
    return 2 * p * r / (p + r)


def ngrams(tokens, n: int = 4):
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def within_text_repetition(tokens, n: int = 4) -> float | None:
    """Fraction of a text's n-grams (by position) that already occurred earlier in it."""
    grams = ngrams(tokens, n)
    if not grams:
        return None
    seen, repeated = set(), 0
    for g in grams:
        repeated += g in seen
        seen.add(g)
    return repeated / len(grams)


def cross_document_overlap(texts, n: int = 4) -> list:
    """Per text: fraction of its distinct n-grams that also occur in another text of the set."""
    distinct = [set(ngrams(t, n)) for t in texts]
    df = Counter(g for d in distinct for g in d)          # texts containing each n-gram
    return [sum(df[g] > 1 for g in d) / len(d) if d else None for d in distinct]


def gzip_ratio(texts) -> float | None:
    """Compressed / raw size of the texts concatenated (lower = more redundant)."""
    raw = "\n".join(texts).encode("utf-8")
    if not raw:
        return None
    return len(gzip.compress(raw, compresslevel=9, mtime=0)) / len(raw)


def redundancy(texts, token_lists, n: int = 4) -> dict:
    """The paper's Table 5 row for one set of texts (token_lists in the verifier's tokens)."""
    within = [w for w in (within_text_repetition(t, n) for t in token_lists) if w is not None]
    cross = [c for c in cross_document_overlap(token_lists, n) if c is not None]
    return {
        "texts": len(texts),
        "tokens": sum(len(t) for t in token_lists),
        "within_text": sum(within) / len(within) if within else None,
        "cross_document": sum(cross) / len(cross) if cross else None,
        "gzip_ratio": gzip_ratio(texts),
    }

"""Corpus retrieval peers as drafters: REST-style suffix-array drafting (`rest:PATH`) and
llama.cpp's static n-gram cache (`ngram-cache:PATH`), both over the training corpus in the
verifier's token ids (olifant_mlx.draftmodel.suffix; docs/retrieval.md).

Each draft is one C call. Signals for the adaptive drafter:
- rest: level = the corpus match the token continues, in ids (bucketed 1, 2, 3, 4, 8, 16, 32),
  share = the token's share of the match's continuations, in quarters (0..3);
- ngram-cache: level = the sample size after the context (same buckets), share as above.
"""
from __future__ import annotations

from functools import cache

from olifant_mlx.drafters.base import Draft, DrafterBase, Signal
from olifant_mlx.draftmodel.suffix import (LLAMA_STATIC_MIN_PERCENT, LLAMA_STATIC_MIN_SAMPLES, NgramCache,
                                           SuffixIndex)

# REST (Retrieval-Based Speculative Decoding): token spans tried from 16 down to 2
REST_MAX_MATCH = 16
REST_MIN_MATCH = 2


def bucket(n: int, cap: int = 32) -> int:
    """1, 2, 3, then powers of two up to cap: the levels copy signals use."""
    n = min(max(n, 0), cap)
    return n if n < 4 else 1 << (n.bit_length() - 1)


def quarters(count, total) -> int:
    return min(4 * count // total, 3) if total else 0


@cache
def signal(source: str, level: int, share: int) -> Signal:
    """Signals are values from a small set: made once each (a frozen dataclass costs
    microseconds to build, more than the draft itself)."""
    return Signal(source, level, share)


class _CorpusDrafter(DrafterBase):
    """One C call per draft; subclasses give the answers (tokens, then the columns their
    signals are made of, as lists) and the signals."""

    def _answers(self, context, k) -> tuple:
        raise NotImplementedError

    def _signals(self, *columns) -> list:
        raise NotImplementedError

    def draft(self, context, k):
        return self._answers(context, k)[0] if k > 0 else []

    def draft_scored(self, context, k):
        if k <= 0:
            return Draft([], [])
        tokens, *columns = self._answers(context, k)
        return Draft(tokens, self._signals(*columns))


class RestDrafter(_CorpusDrafter):
    """The most frequent continuation of the longest suffix of the context (at most
    `max_match` ids, at least `min_match`) found in the corpus, extended token by token.
    Drafts stop before a token seen fewer than `min_count` times after the match or with a
    share below `min_share` (defaults: never)."""

    def __init__(self, index: SuffixIndex, max_match: int = REST_MAX_MATCH,
                 min_match: int = REST_MIN_MATCH, min_count: int = 1, min_share: float = 0.0,
                 name: str = "rest"):
        if max_match < 1 or min_match < 1 or min_match > max_match:
            raise ValueError(f"need 1 <= min_match <= max_match, got {min_match}, {max_match}")
        self.index = index
        self.max_match = max_match
        self.min_match = min_match
        self.min_count = min_count
        self.min_share = min_share
        self.name = name

    def _answers(self, context, k):
        return self.index.draft_lists(context[-self.max_match:], k, self.max_match,
                                      self.min_match, self.min_count, self.min_share)

    def _signals(self, match, count, total):
        return [signal("rest", bucket(m), quarters(c, t)) for m, c, t in zip(match, count, total)]


class NgramCacheDrafter(_CorpusDrafter):
    """llama.cpp's llama-lookup with only its static cache: the winner after the last `order`
    ids, again and again, while the sample size is at least `min_samples` and the winner's
    share at least `min_percent` % (llama.cpp's static thresholds: 2 and 50)."""

    def __init__(self, cache: NgramCache, min_samples: int = LLAMA_STATIC_MIN_SAMPLES,
                 min_percent: int = LLAMA_STATIC_MIN_PERCENT, name: str = "ngram-cache"):
        self.cache = cache
        self.min_samples = min_samples
        self.min_percent = min_percent
        self.name = name

    def _answers(self, context, k):
        return self.cache.draft_lists(context[-self.cache.order:], k, self.min_samples,
                                      self.min_percent)

    def _signals(self, count, total):
        return [signal("ngram-cache", bucket(t), quarters(c, t)) for c, t in zip(count, total)]


def _open(cls, path, tokenizer):
    from olifant_mlx.draftmodel.open import open_model_file

    return open_model_file(path, want=cls, tokenizer=tokenizer)


def rest_from_spec(spec, tokenizer, history):
    """`rest:PATH` (the registry's builder): a suffix index built for the verifier's tokenizer."""
    return RestDrafter(_open(SuffixIndex, spec.arg, tokenizer))


def ngram_cache_from_spec(spec, tokenizer, history):
    """`ngram-cache:PATH` (the registry's builder): an n-gram cache built for its tokenizer."""
    return NgramCacheDrafter(_open(NgramCache, spec.arg, tokenizer))

"""Prompt lookup decoding: copy what followed an earlier occurrence of the context's tail."""
from __future__ import annotations

from olifant_mlx.drafters.base import EMPTY, Draft, DrafterBase, Signal


def agreement(source, end, context, cap=32) -> int:
    """How many tokens of source before `end` agree with the context's tail (at most cap)."""
    m, limit = 0, min(end, len(context), cap)
    while m < limit and source[end - 1 - m] == context[len(context) - 1 - m]:
        m += 1
    return m


def copy_signals(source: str, agreement: int, n: int, cap: int = 32) -> list:
    """Signals of n copied tokens: once the first i are accepted, the i-th agrees with
    agreement + i tokens of the context, in buckets 1, 2, 3, 4, 8, 16, 32. A long agreement
    (a repeated passage, a loop) predicts a long accepted run."""
    out = []
    for i in range(n):
        m = min(agreement + i, cap)
        out.append(Signal(source, m if m < 4 else 1 << (m.bit_length() - 1)))
    return out


class LookupDrafter(DrafterBase):
    """Find the latest earlier occurrence of the context's last n tokens (n = max_ngram ..
    min_ngram) and propose what followed it. With `repeat`, a continuation that runs into the
    end of the context goes on copying (a loop keeps looping) instead of stopping there."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, repeat: bool = False, name="lookup"):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.repeat = repeat
        self.name = name

    def draft_scored(self, context, k):
        """Drafts with their signals (see copy_signals)."""
        L = len(context)
        for n in range(min(self.max_ngram, L - 1), self.min_ngram - 1, -1):
            tail = context[L - n:]
            for start in range(L - n - 1, -1, -1):
                if context[start:start + n] == tail:
                    follow = list(context[start + n:start + n + k])
                    if self.repeat:
                        while len(follow) < k:   # position start+n+i of context + follow
                            follow.append(follow[start + n + len(follow) - L])
                    if follow:
                        m = agreement(context, start + n, context)
                        return Draft(follow, copy_signals("lookup", m, len(follow)))
        return EMPTY


def from_spec(spec, tokenizer, history):
    """`lookup[:N]` (the registry's builder)."""
    return LookupDrafter(spec.number)

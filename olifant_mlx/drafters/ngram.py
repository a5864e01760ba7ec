"""The paper's in-session n-gram drafters, over token ids and over words."""
from __future__ import annotations

import re
from collections import defaultdict

from olifant_mlx.drafters.base import DrafterBase


class NgramDrafter(DrafterBase):
    """Next-token counts of every context seen in this session (prompt and output), updated as
    tokens arrive; the most frequent continuation wins, ties to the most recent. An unseen
    (n-1)-token context backs off to shorter ones (down to one token), so drafts stop only
    where nothing in the session ever followed."""

    def __init__(self, n: int = 4, backoff: bool = True):
        self.n = n
        self.orders = range(n - 1, 0, -1) if backoff else (n - 1,)
        self.name = f"ngram{n}"

    def start(self, prompt):
        self.counts = {m: defaultdict(dict) for m in self.orders}  # ctx -> {token: (count, pos)}
        self.tokens = []
        self.accept(prompt)

    def accept(self, tokens):
        for t in tokens:
            self.tokens.append(t)
            pos = len(self.tokens)
            for m in self.orders:
                if pos > m:
                    table = self.counts[m][tuple(self.tokens[-m - 1:-1])]
                    c, _ = table.get(t, (0, 0))
                    table[t] = (c + 1, pos)

    def _next(self, window):
        for m in self.orders:
            if len(window) >= m:
                nxt = self.counts[m].get(tuple(window[-m:]))
                if nxt:
                    return max(nxt.items(), key=lambda kv: kv[1])[0]
        return None

    def draft(self, context, k):
        window = list(context[-(self.n - 1):])
        out = []
        while len(out) < k:
            t = self._next(window)
            if t is None:
                break
            out.append(t)
            window = window[1:] + [t] if len(window) >= self.n - 1 else window + [t]
        return out


class WordNgramDrafter(DrafterBase):
    """The paper's word-level 4-gram baseline: counts over whitespace-separated words of the
    session's text; predicted words are tokenised (with their leading space) into drafts."""

    def __init__(self, tokenizer, n: int = 4):
        self.tokenizer = tokenizer
        self.n = n
        self.name = f"ngram{n}-words"

    def start(self, prompt):
        self.ids = list(prompt)

    def accept(self, tokens):
        self.ids.extend(tokens)

    def draft(self, context, k):
        words = re.findall(r"\S+", self.tokenizer.decode(self.ids))
        m = self.n - 1
        if len(words) < m + 1:
            return []
        counts = defaultdict(dict)
        for i in range(m, len(words)):
            ctx = tuple(words[i - m:i])
            c, _ = counts[ctx].get(words[i], (0, 0))
            counts[ctx][words[i]] = (c + 1, i)
        window, out = words[-m:], []
        while len(out) < k:
            nxt = counts.get(tuple(window))
            if not nxt:
                break
            w = max(nxt.items(), key=lambda kv: kv[1])[0]
            out.extend(self.tokenizer.encode(" " + w))
            window = window[1:] + [w]
        return out[:k]


def from_spec(spec, tokenizer, history):
    """`ngram[:N]` (the registry's builder)."""
    return NgramDrafter(spec.number)


def words_from_spec(spec, tokenizer, history):
    """`ngram-words[:N]` (the registry's builder; its entry says it needs the tokenizer)."""
    return WordNgramDrafter(tokenizer, spec.number)

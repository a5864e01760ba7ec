"""Drafters: cheap guesses of the verifier's next k tokens.

One small interface: `start(prompt)` at the beginning of a generation,
`draft(context, k)` -> up to k token ids following `context` (the prompt
without BOS plus everything generated so far), and `accept(tokens)` with the
tokens appended to the context after each step.
"""
from __future__ import annotations

import re
from collections import defaultdict

from olifant_mlx.igtree import IGTree


class NoDrafter:
    """Plain decoding: never drafts."""
    name = "none"

    def start(self, prompt):
        pass

    def draft(self, context, k):
        return []

    def accept(self, tokens):
        pass


class OlifantDrafter(NoDrafter):
    """The trained IGTree: k predictions in one C call, each fed back as context."""

    def __init__(self, model: IGTree, min_depth: int = 0, min_share: float = 0.0, name="olifant"):
        self.model = model
        self.min_depth = min_depth
        self.min_share = min_share
        self.name = name

    def draft(self, context, k):
        return self.model.draft(context[-self.model.window:], k, self.min_depth, self.min_share)

    def draft_scored(self, context, k):
        """Drafts with their signals: ("igtree", match depth, winner share in quarters)."""
        answers = self.model.draft_answers(context, k, self.min_depth, self.min_share)
        share = answers["winner_count"] / answers["total"].clip(min=1)
        return (answers["token"].tolist(),
                [("igtree", int(d), min(int(s * 4), 3)) for d, s in zip(answers["depth"], share)])


class NgramDrafter(NoDrafter):
    """The paper's in-session n-gram: next-token counts of every context seen in this session
    (prompt and output), updated as tokens arrive; the most frequent continuation wins, ties to
    the most recent. An unseen (n-1)-token context backs off to shorter ones (down to one
    token), so drafts stop only where nothing in the session ever followed."""

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


class WordNgramDrafter(NoDrafter):
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


class LookupDrafter(NoDrafter):
    """Prompt lookup decoding: find the latest earlier occurrence of the context's last
    n tokens (n = max_ngram .. 1) and propose what followed it. With `repeat`, a
    continuation that runs into the end of the context goes on copying (a loop keeps
    looping) instead of stopping there."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, repeat: bool = False):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.repeat = repeat
        self.name = "lookup"

    def draft(self, context, k):
        return self.draft_scored(context, k)[0]

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
                        return follow, copy_signals("lookup", m, len(follow))
        return [], []


def agreement(source, end, context, cap=32):
    """How many tokens of source before `end` agree with the context's tail (at most cap)."""
    m, limit = 0, min(end, len(context), cap)
    while m < limit and source[end - 1 - m] == context[len(context) - 1 - m]:
        m += 1
    return m


def copy_signals(source, agreement: int, n: int, cap: int = 32) -> list:
    """Signals of n copied tokens: once the first i are accepted, the i-th agrees with
    agreement + i tokens of the context, in buckets 1, 2, 3, 4, 8, 16, 32. A long agreement
    (a repeated passage, a loop) predicts a long accepted run."""
    out = []
    for i in range(n):
        m = min(agreement + i, cap)
        out.append((source, m if m < 4 else 1 << (m.bit_length() - 1)))
    return out


class NeuralDrafter(NoDrafter):
    """A small mlx-lm model sharing the verifier's tokenizer, drafting greedily with its
    own KV cache (kept in step with the context by trimming to the common prefix)."""
    wants_bos = True  # it reads the sequence exactly as the verifier does

    def __init__(self, model, name="neural"):
        self.model = model
        self.name = name

    def start(self, prompt):
        from mlx_lm.models.cache import make_prompt_cache

        self.cache = make_prompt_cache(self.model)
        self.cached = []

    def draft(self, context, k):
        import mlx.core as mx
        from mlx_lm.models.cache import trim_prompt_cache

        if k <= 0 or not context:
            return []
        common = 0
        limit = min(len(self.cached), len(context) - 1)  # always feed at least one token
        while common < limit and self.cached[common] == context[common]:
            common += 1
        if len(self.cached) > common:
            trimmed = trim_prompt_cache(self.cache, len(self.cached) - common)
            if trimmed != len(self.cached) - common:
                raise RuntimeError("neural drafter cache could not be rolled back")
        feed = list(context[common:])
        self.cached = list(context)
        out = []
        for _ in range(k):
            logits = self.model(mx.array(feed)[None], cache=self.cache)
            t = int(mx.argmax(logits[0, -1]).item())
            out.append(t)
            feed = [t]
            self.cached.append(t)
        # the last draft was never fed: the cache holds everything but it
        self.cached.pop()
        return out


def make_drafter(spec: str, verifier_tok=None, window_check=True):
    """Parse --draft: none | olifant:PATH | ngram | ngram-words | lookup | neural:MODEL |
    hybrid:PATH | adaptive:SPEC."""
    kind, _, arg = spec.partition(":")
    if kind in ("none", "plain", ""):
        return NoDrafter()
    if kind == "olifant":
        if not arg:
            raise ValueError("olifant needs a model file: --draft olifant:PATH")
        model = IGTree.load(arg)
        if verifier_tok is not None:
            model.check_tokenizer(verifier_tok.name, verifier_tok.vocab_size, verifier_tok.digest)
        return OlifantDrafter(model)
    if kind in ("hybrid", "adaptive"):
        # hybrid:PATH (lookup then IGTree) | adaptive:SPEC (any drafter, cost-aware length)
        if kind == "adaptive":
            from olifant_mlx.adaptive import AdaptiveDrafter

            return AdaptiveDrafter(make_drafter(arg or "none", verifier_tok))
        inner = make_drafter(f"olifant:{arg}", verifier_tok)
        inner.min_depth, inner.min_share = 2, 0.2   # weak IGTree answers are not worth verifying
        return HybridDrafter(inner)
    if kind == "ngram":
        return NgramDrafter(int(arg) if arg else 4)
    if kind == "ngram-words":
        if verifier_tok is None:
            raise ValueError("ngram-words needs the verifier's tokenizer")
        return WordNgramDrafter(verifier_tok, int(arg) if arg else 4)
    if kind == "lookup":
        return LookupDrafter(int(arg) if arg else 3)
    if kind == "neural":
        if not arg:
            raise ValueError("neural needs a model: --draft neural:MODEL")
        from olifant_mlx.verifier import load_verifier, verifier_tokenizer

        model, tok, name = load_verifier(arg)
        if verifier_tok is not None:
            own = verifier_tokenizer(tok, name)
            if own.digest != verifier_tok.digest:
                from olifant_mlx.igtree import TokenizerMismatch

                raise TokenizerMismatch(f"neural draft model {name!r} does not share the verifier's "
                                        f"tokenizer {verifier_tok.name!r}")
        return NeuralDrafter(model, name=f"neural:{name}")
    raise ValueError(f"unknown drafter {spec!r}: use none, olifant:PATH, ngram, ngram-words, "
                     f"lookup, neural:MODEL, hybrid:PATH or adaptive:SPEC")


class HybridDrafter(NoDrafter):
    """In-session first, then the trained IGTree. In order of preference: the continuation of
    the session's own text after a match of at least `min_match` tokens (prompt lookup; a
    continuation that reaches the end of the session repeats itself); with a `history`, what
    followed the same three tokens in an earlier session (extended by the IGTree when short);
    the IGTree, each answer gated by match depth and winner share; the continuation after a
    one-token match. `draft` takes the first of these `candidates`; the adaptive drafter
    weighs them all."""

    def __init__(self, olifant: OlifantDrafter, min_match: int = 2, max_match: int = 4,
                 name="hybrid", history=None):
        self.olifant = olifant
        self.history = history    # an opt-in SessionHistory: earlier sessions, after this one
        self.lookup = LookupDrafter(max_ngram=max_match, min_ngram=min_match, repeat=True)
        self.short_lookup = LookupDrafter(max_ngram=min_match - 1, min_ngram=1, repeat=True)
        self.name = name

    def _candidates(self, context, k):
        """(drafts, signals) in order of preference, each computed only when asked for."""
        yield self.lookup.draft_scored(context, k)
        if self.history is not None:
            tokens, signals = self.history.continuation(context, k)
            if tokens and len(tokens) < k:
                more, more_signals = self.olifant.draft_scored(list(context) + tokens, k - len(tokens))
                tokens, signals = tokens + more, signals + more_signals
            yield tokens, signals
        yield self.olifant.draft_scored(context, k)
        if self.short_lookup.max_ngram >= 1:
            yield self.short_lookup.draft_scored(context, k)

    def candidates(self, context, k):
        """Every non-empty (drafts, signals) the hybrid could propose, in order of preference."""
        return [c for c in self._candidates(context, k) if c[0]]

    def draft(self, context, k):
        return self.draft_scored(context, k)[0]

    def draft_scored(self, context, k):
        return next((c for c in self._candidates(context, k) if c[0]), ([], []))


def find_hybrid(drafter):
    """The HybridDrafter in a drafter (itself or wrapped, as by adaptive:), or None."""
    while drafter is not None and not isinstance(drafter, HybridDrafter):
        drafter = getattr(drafter, "inner", None)
    return drafter


def scored_draft(drafter, context, k):
    """A draft and a confidence signal per token: the drafter's own (draft_scored), else
    (its name, position in the draft)."""
    if hasattr(drafter, "draft_scored"):
        return drafter.draft_scored(context, k)
    out = list(drafter.draft(context, k))
    return out, [(drafter.name, min(i, 7)) for i in range(len(out))]

"""The hybrid drafter: a choice among candidate drafts, made per step by expected accepted tokens.

Candidates: the session's own text (the continuation after the latest earlier occurrence of the
context's last 4..2 tokens), earlier sessions (an opt-in history), any extra sources given to
it (a drafter that offers `candidates` or `draft_scored` with Signals, e.g. a corpus index),
the IGTree's chain, and the continuation after a one-token match. Each drafted token carries a
Signal (how it was found); per signal, a recency-weighted acceptance estimate is learnt from
every candidate, scored against the verifier's tokens after each pass (CandidateLearner), and
kept from one generation to the next (see drafters.adaptive). The hybrid proposes the candidate
with the most expected accepted tokens; `adaptive:hybrid` chooses among the same candidates by
expected tokens per verifier second, and its length too.
"""
from __future__ import annotations

import copy

from olifant_mlx.drafters.adaptive import CandidateLearner
from olifant_mlx.drafters.base import EMPTY, Draft, DrafterBase, as_drafter
from olifant_mlx.drafters.learning import Learning, LearntKey
from olifant_mlx.drafters.lookup import LookupDrafter
from olifant_mlx.drafters.olifant import OlifantDrafter, open_igtree
from olifant_mlx.drafters.registry import build_drafter


class HybridDrafter(DrafterBase):
    """Candidates (see the module docstring): the session's own continuation after a match of
    `min_match`..`max_match` tokens (a continuation that reaches the end of the session repeats
    itself); with a `history`, what followed the same three tokens in an earlier session
    (extended by the IGTree when short); every extra source's candidates; the IGTree chain; the
    continuation after a one-token match. `draft` takes the one with the most expected accepted
    tokens under the learnt estimates (ties: the earlier in that order). Without a draft model
    (`olifant` None) it drafts from the session, history and sources alone."""

    def __init__(self, olifant: OlifantDrafter | None, min_match: int = 2, max_match: int = 4,
                 name="hybrid", history=None, sources=(), prior: float = 0.5,
                 half_life: float = 48.0):
        self.olifant = olifant
        self.history = history    # an opt-in SessionHistory: earlier sessions, after this one
        self.sources = list(sources)
        self.lookup = LookupDrafter(max_ngram=max_match, min_ngram=min_match, repeat=True)
        self.short_lookup = LookupDrafter(max_ngram=min_match - 1, min_ngram=1, repeat=True)
        self.name = name
        self.learner = CandidateLearner(prior, half_life)
        # the estimates outlive the generation (drafters.learning), its last offer not
        self.keys, self.own = (LearntKey(name),), Learning()

    def with_source(self, source):
        """This hybrid with `source` among its sources (in place of one of the same name), for
        one request: the draft model, history and other sources shared; it starts from this
        one's estimates and keeps its own (see AdaptiveDrafter.around)."""
        other = copy.copy(self)
        other.sources = [s for s in self.sources if s.name != source.name] + [source]
        other.keys = (LearntKey(self.name),) + self.keys
        return other

    def open(self, prompt, learning=None, cost=None):
        """This drafter's state for one generation (drafters.base): its sources' states and
        the estimates `learning` (None: its own) kept from the last generation to finish."""
        state = copy.copy(self)
        state.sources = [s.open(prompt, learning) for s in self.sources]
        state.store = learning if learning is not None else self.own
        state.learner = state.store.take(self.keys, self.learner)
        state.learner.offered = []
        return state

    def finish(self):
        store = getattr(self, "store", None)
        if store is not None:
            store.keep(self.keys[0], self.learner)
        for s in self.sources:
            s.finish()

    def start(self, prompt):
        for s in self.sources:
            s.start(prompt)
        self.learner.offered = []

    def accept(self, tokens):
        for s in self.sources:
            s.accept(tokens)

    def _candidates(self, context, k):
        yield self.lookup.draft_scored(context, k)
        if self.history is not None:
            tokens, signals = self.history.continuation(context, k)
            if tokens and len(tokens) < k and self.olifant is not None:
                more = self.olifant.draft_scored(list(context) + tokens, k - len(tokens))
                tokens, signals = tokens + more.tokens, signals + more.signals
            yield Draft(tokens, signals)
        for s in self.sources:
            yield from s.candidates(context, k)
        if self.olifant is not None:
            yield self.olifant.draft_scored(context, k)
        if self.short_lookup.max_ngram >= 1:
            yield self.short_lookup.draft_scored(context, k)

    def candidates(self, context, k):
        """Every non-empty draft the hybrid could propose, in the order above."""
        return [Draft(list(c.tokens[:k]), list(c.signals[:k])) for c in self._candidates(context, k)
                if c.tokens]

    def draft_scored(self, context, k):
        offered = self.candidates(context, k)
        self.learner.offered = offered
        best, choice = -1.0, EMPTY
        for c in offered:
            e = self.learner.expected(c.signals)
            if e > best:
                best, choice = e, c
        return choice

    def observe(self, step, kv_cache: bool):
        self.learner.learn(step)
        for s in self.sources:
            s.observe(step, kv_cache)


def from_spec(spec, tokenizer, history):
    """`hybrid[:PATH][+SPEC...]` (the registry's builder): the whole IGTree chain, if given, and
    every source built by the registry; the learnt per-signal estimates, not a fixed gate, weigh
    them."""
    olifant = OlifantDrafter(open_igtree(spec.arg, tokenizer)) if spec.arg else None
    sources = [as_drafter(build_drafter(s, tokenizer)) for s in spec.sources]
    return HybridDrafter(olifant, history=history, sources=sources)

"""The hybrid drafter: the session's own text first, then earlier sessions, then the IGTree."""
from __future__ import annotations

from olifant_mlx.drafters.base import EMPTY, Draft, DrafterBase
from olifant_mlx.drafters.lookup import LookupDrafter
from olifant_mlx.drafters.olifant import OlifantDrafter


class HybridDrafter(DrafterBase):
    """In order of preference: the continuation of the session's own text after a match of at
    least `min_match` tokens (prompt lookup; a continuation that reaches the end of the
    session repeats itself); with a `history`, what followed the same three tokens in an
    earlier session (extended by the IGTree when short); the IGTree, each answer gated by
    match depth and winner share; the continuation after a one-token match. `draft` takes the
    first of these `candidates`; the adaptive drafter weighs them all. Without a draft model
    (`olifant` None) it drafts from the session (and history) alone."""

    def __init__(self, olifant: OlifantDrafter | None, min_match: int = 2, max_match: int = 4,
                 name="hybrid", history=None):
        self.olifant = olifant
        self.history = history    # an opt-in SessionHistory: earlier sessions, after this one
        self.lookup = LookupDrafter(max_ngram=max_match, min_ngram=min_match, repeat=True)
        self.short_lookup = LookupDrafter(max_ngram=min_match - 1, min_ngram=1, repeat=True)
        self.name = name

    def _candidates(self, context, k):
        """Drafts in order of preference, each computed only when asked for."""
        yield self.lookup.draft_scored(context, k)
        if self.history is not None:
            tokens, signals = self.history.continuation(context, k)
            if tokens and len(tokens) < k and self.olifant is not None:
                more = self.olifant.draft_scored(list(context) + tokens, k - len(tokens))
                tokens, signals = tokens + more.tokens, signals + more.signals
            yield Draft(tokens, signals)
        if self.olifant is not None:
            yield self.olifant.draft_scored(context, k)
        if self.short_lookup.max_ngram >= 1:
            yield self.short_lookup.draft_scored(context, k)

    def candidates(self, context, k):
        """Every non-empty draft the hybrid could propose, in order of preference."""
        return [c for c in self._candidates(context, k) if c.tokens]

    def draft_scored(self, context, k):
        return next((c for c in self._candidates(context, k) if c.tokens), EMPTY)

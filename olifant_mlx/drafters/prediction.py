"""Drafting from a prediction: the text the answer is expected to mostly repeat (the clause being
revised, OpenAI's predicted outputs).

`PredictionSource` keeps its place in the prediction as the answer grows: while the answer
copies it, it proposes the prediction's next tokens; where the answer departs from it (a word
changed, a proviso added), it finds where the answer rejoins it — the answer's last tokens matched
against the prediction, nearest the place it was lost, a match in the few tokens ahead of that
place taken on one token of agreement, one further away on two or more (a deleted sentence). Its
drafts carry copy signals (`Signal("prediction", agreement)`), so the adaptive drafter learns how
often a copy that agrees with 1, 2, 3, 4, 8, 16 or 32 tokens of the answer is right and sizes each
pass by the verifier's pass cost: unchanged runs go out at the widest draft the cost pays for.

A prediction belongs to one request: `predicting(drafter, ids)` gives that request's drafter, the
given one with the prediction as one more candidate source of its hybrid (sharing its read-only
sources, starting from its estimates and cost fit, writing neither back); a drafter that is not
built on the hybrid is returned as it is. `prediction_counts` is OpenAI's accepted / rejected
prediction tokens of an answer.
"""
from __future__ import annotations

import difflib
from collections.abc import Sequence

from olifant_mlx.drafters.base import EMPTY, Draft, DrafterBase
from olifant_mlx.drafters.lookup import agreement, copy_signals

PREDICTION_K = 32  # the most drafts a pass with a prediction takes by default (revise, the server); the
#                    adaptive drafter's cost-aware planner chooses each pass's length below it
NEAR = 32          # a rejoin this many tokens ahead of the lost place needs one token of agreement
FAR_AGREEMENT = 2  # anywhere else, this many
EXPECTED = 0.8     # how often a prediction's draft is taken to be right before any pass says


class PredictionSource(DrafterBase):
    """The prediction's next tokens from the answer's place in it (see the module docstring).
    `start(prompt)` begins an answer at the prediction's first token; `accept(tokens)` follows
    the answer. A source of the hybrid drafter, not a drafter on its own."""

    name = "prediction"

    def __init__(self, prediction: Sequence[int] = ()):
        self.prediction = [int(t) for t in prediction]
        self.after = {}                 # token -> positions just after it in the prediction
        for i, t in enumerate(self.prediction):
            self.after.setdefault(t, []).append(i + 1)
        self.start(())

    def start(self, prompt) -> None:
        self.answer = []
        self.place = 0 if self.prediction else None   # where the answer's next token is expected
        self.lost = 0                   # where the answer last left the prediction

    def accept(self, tokens) -> None:
        pred = self.prediction
        for t in tokens:
            self.answer.append(int(t))
            if self.place is not None and self.place < len(pred) and pred[self.place] == t:
                self.place += 1
            elif self.place is not None:
                self.lost, self.place = self.place, None
        if self.place is None and tokens:
            self.place = self.rejoin()

    def rejoin(self) -> int | None:
        """The place after the answer's tail in the prediction: in the NEAR tokens from where it
        was lost, the position whose run of agreement with the answer is longest (nearest on a
        tie); else anywhere, one agreeing with at least FAR_AGREEMENT tokens (nearest); else None."""
        near, far = None, None
        for p in self.after.get(self.answer[-1], ()):
            m = agreement(self.prediction, p, self.answer)
            distance = p - self.lost if p >= self.lost else 2 * (self.lost - p)
            if self.lost <= p <= self.lost + NEAR and (near is None or (m, -distance) > near[:2]):
                near = (m, -distance, p)
            if m >= FAR_AGREEMENT and (far is None or (m, -distance) > far[:2]):
                far = (m, -distance, p)
        best = near or far
        return best[2] if best is not None else None

    def draft_scored(self, context, k) -> Draft:
        if self.place is None or self.place >= len(self.prediction) or k <= 0:
            return EMPTY
        tokens = self.prediction[self.place:self.place + k]
        m = agreement(self.prediction, self.place, self.answer)
        return Draft(tokens, copy_signals("prediction", m, len(tokens)))


def predicting(drafter, prediction: Sequence[int]):
    """`drafter` for one request that carries `prediction` (ids): a hybrid, or an adaptive
    drafter over one, with a PredictionSource among its sources (replacing any it had); any other
    drafter as it is. The given drafter is left unchanged."""
    from olifant_mlx.drafters.adaptive import AdaptiveDrafter
    from olifant_mlx.drafters.hybrid import HybridDrafter

    if isinstance(drafter, AdaptiveDrafter):
        inner = predicting(drafter.inner, prediction)
        if inner is drafter.inner:
            return drafter
        out = drafter.around(inner)
        out.expect(PredictionSource.name, EXPECTED)
        return out
    if isinstance(drafter, HybridDrafter):
        return drafter.with_source(PredictionSource(prediction))
    return drafter


def prediction_counts(prediction: Sequence[int], output: Sequence[int]) -> tuple:
    """(accepted, rejected) prediction tokens as OpenAI counts them: the prediction's tokens that
    appear in the output (in order: the longest common subsequence difflib finds) and the rest."""
    matcher = difflib.SequenceMatcher(None, list(prediction), list(output), autojunk=False)
    accepted = sum(block.size for block in matcher.get_matching_blocks())
    return accepted, len(prediction) - accepted


def from_spec(spec, tokenizer, history):
    """`prediction` (the registry's builder): the adaptive hybrid over the session's own text and
    the request's prediction (none until a request gives one)."""
    from olifant_mlx.drafters.adaptive import AdaptiveDrafter
    from olifant_mlx.drafters.hybrid import HybridDrafter

    return AdaptiveDrafter(HybridDrafter(None, history=history, sources=[PredictionSource()]))

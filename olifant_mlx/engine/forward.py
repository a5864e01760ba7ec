"""A generation's verifier passes as values: what it asks for, not how it is run.

The engine loop never calls the model itself: it yields a `Forward` (these tokens through this
cache; whoever runs it puts the logits on it before the generation goes on) and, before a pass
with drafts, a `Proposal` (these drafts; whoever plans the pass says how many of them it takes).
`alone` runs a generation's passes one by one on the model, every draft taken, as a generation
on its own has always run; engine.batch runs several generations' passes as one.
"""
from __future__ import annotations

from dataclasses import dataclass

from olifant_mlx.mlx_setup import mx

PRIOR_ACCEPTED = 4          # Proposal.acceptance's prior: 4 accepted drafts to 1 rejection (0.8)


@dataclass(eq=False)
class Forward:
    """One forward pass a generation needs: `tokens` (a list of ids, or a lazy mx array of
    them) fed through `cache` (the generation's KV cache; None: uncached, from the start).
    Its runner sets `logits` (rows x vocab, may be lazy) and `batch` (how many generations'
    rows the pass held) before the generation resumes."""
    tokens: object
    cache: object
    logits: object = None
    batch: int = 1

    @property
    def rows(self) -> int:
        return len(self.tokens) if isinstance(self.tokens, list) else int(self.tokens.size)

    def inputs(self):
        """The tokens as a 1-D mx array."""
        return mx.array(self.tokens) if isinstance(self.tokens, list) else self.tokens.reshape(-1)


@dataclass(eq=False)
class Proposal:
    """The drafts a generation would verify in its next pass, with what it has seen of its
    drafts so far (accepted, and passes that rejected one); its planner sets `allowed`, how
    many of them the pass takes (a prefix: all, by default)."""
    drafts: list
    accepted: int = 0
    rejections: int = 0
    allowed: int | None = None

    @property
    def acceptance(self) -> float:
        """The chance that a draft is accepted when the one before it was, from this
        generation's passes (a run of drafts ends at its first rejection), starting from
        PRIOR_ACCEPTED accepted drafts and one rejection: the drafter proposed these drafts, and
        one that sizes them has already planned their length, so a few passes must say
        otherwise before the batch cuts them."""
        return (self.accepted + PRIOR_ACCEPTED) / (self.accepted + self.rejections + PRIOR_ACCEPTED + 1)


def run(model, forward: Forward):
    """Run one Forward alone on `model`: its logits, lazily."""
    forward.logits = model(forward.inputs()[None], cache=forward.cache)[0]
    return forward.logits


def alone(model, events):
    """Drive a generation's events on `model` one by one: each Forward run as it comes, each
    Proposal taken whole; everything else (its Steps) is yielded. Closing this closes it."""
    try:
        for event in events:
            if isinstance(event, Forward):
                run(model, event)
            elif isinstance(event, Proposal):
                event.allowed = len(event.drafts)
            else:
                yield event
    finally:
        events.close()

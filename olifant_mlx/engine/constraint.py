"""What the loop asks of a grammar that constrains a generation (structured output), and the
drafts it makes free: one small interface, no grammar library.

A `Constraint` answers for the tokens generated so far (the sequence after the prompt): which
tokens may come next (`bias`: 0 where allowed, -inf where not, added to the logits before the
verifier chooses), how many of a run of drafts it allows (`allowed`) and which tokens it forces
(`forced`). It is asked about any sequence, in any order: the verifier's picker asks for every
position of a multi-token pass with the drafts before it, the drafter's step asks for the
accepted sequence, so an implementation keeps its state in step by advancing over new tokens
and rolling back the ones no longer there (the verifier's rollback is its rollback).
olifant_mlx.structured implements it over llguidance.

`ForcedDrafts` is a drafter around the generation's drafter: the tokens the grammar forces come
first (free to propose: no drafter is asked), the drafter's after them, and the run is cut at
the first token the grammar forbids, before the verifier sees it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from olifant_mlx.drafters.base import DrafterBase, as_drafter


@runtime_checkable
class Constraint(Protocol):
    """A grammar over one generation's tokens, `start`ed with its prompt; every other method
    takes the whole sequence (prompt and generated tokens) it is asked about."""

    def start(self, prompt: Sequence[int]) -> None: ...

    def bias(self, tokens: Sequence[int], width: int): ...   # an additive row of `width` logits

    def allowed(self, tokens: Sequence[int], drafts: Sequence[int]) -> int: ...

    def forced(self, tokens: Sequence[int], limit: int) -> list: ...


class ForcedDrafts(DrafterBase):
    """A generation's drafter under a constraint: each draft is the grammar's forced tokens (at
    most k), then the drafter's own from after them, cut at the first token the grammar
    forbids. The drafter learns from its own part of each pass alone (`observe` is given the
    pass as it would have seen it: its drafts, and the verifier's tokens from where they begin,
    when the forced ones were all accepted)."""

    def __init__(self, inner, constraint: Constraint, head: Sequence[int] = ()):
        self.inner, self.constraint = as_drafter(inner), constraint
        self.name = self.inner.name
        self.wants_bos = self.inner.wants_bos
        self.plans_led_passes = self.inner.plans_led_passes
        self.prompt_head = list(head)   # the tokens the drafter does not see (a BOS), for the grammar
        self.last_forced = 0            # forced tokens at the head of the last draft
        self.forced_total = 0           # forced tokens proposed in this generation

    def start(self, prompt) -> None:
        self.inner.start(prompt)
        self.last_forced = self.forced_total = 0

    def draft(self, context, k) -> list:
        whole = self.prompt_head + list(context)      # the verifier's sequence
        forced = [int(t) for t in self.constraint.forced(whole, k)][:k]
        own = [int(t) for t in self.inner.draft(list(context) + forced, k - len(forced))] if len(forced) < k else []
        drafts = forced + own[:k - len(forced)]
        drafts = drafts[:self.constraint.allowed(whole, drafts)]
        self.last_forced = min(len(forced), len(drafts))
        self.forced_total += self.last_forced
        return drafts

    def accept(self, tokens) -> None:
        self.inner.accept(tokens)

    def observe(self, step, kv_cache: bool) -> None:
        f = self.last_forced
        if f:
            if step.accepted >= f:
                step = dataclasses.replace(step, drafted=step.drafted[f:], accepted=step.accepted - f,
                                           emitted=step.emitted[f:])
            else:       # the drafter's drafts were never checked
                step = dataclasses.replace(step, drafted=[], accepted=0, emitted=[])
        self.last_forced = 0
        self.inner.observe(step, kv_cache)

"""What the engine plans with: a model of the verifier's pass time, behind a small interface.

The loop fixes no cost model of its own: it is given them (GenerationOptions' `pass_cost` for
its `LeadRule`, `draft_cost` for a drafter that plans with one, the adaptive drafter, through
`Drafter.open`), or it takes the lead rule's fit from what a Session's generations learnt
(drafters.learning, under `LEAD_COST`), and asks them only what `PassCostModel` declares.
The fitted model is drafters.costs.PassCost, a fixed one for simulated verifiers
measure.bench.FixedCost; the engine imports neither the adaptive drafter nor the measuring code.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from olifant_mlx.drafters.costs import PassCost, PassTimes
from olifant_mlx.drafters.learning import LearntKey

LEAD_COST = LearntKey("the lead rule's pass cost")   # the verifier's speed outlives one generation


@runtime_checkable
class PassCostModel(Protocol):
    """A verifier pass's time as a + b * tokens fed, learnt from the passes or fixed."""

    def coefficients(self) -> tuple:
        """(a, b): the fixed and the per-token seconds (or units) of one pass."""

    def observe(self, tokens: int, seconds: float) -> None:
        """One pass that fed `tokens` and took `seconds` (a fixed model ignores it)."""

    def __call__(self, tokens: int) -> float:
        """a + b * tokens."""


class LeadRule:
    """After a pass that ended with the verifier's correction (KV cache), whether the next pass
    leads with it and the j drafts that follow it (one pass of 1 + j tokens) or feeds it alone,
    so that the next step checks its first draft for free (a 1-token pass, then the drafts'
    pass only if that draft is right). Both emit the same tokens. Leading saves a pass, the
    fixed cost a, when the first draft is right, and feeds j tokens for nothing when it is
    wrong, so it leads iff p (a + b j) >= b j: p the recency-weighted rate at which first
    drafts are right (counts halve every `half_life` passes, `prior` with weight 2), and
    a + b * tokens the verifier's pass time (`cost`: a PassCostModel that may outlive the
    generation; None: a fresh fitted PassCost). Where tokens fed cost little beside a pass (a
    large verifier on a GPU) it nearly always leads; on a CPU with weak drafts it feeds the
    correction alone. A drafter that sizes led passes itself (`plans_led_passes`, the
    adaptive drafter) is left to do so."""

    def __init__(self, cost: PassCostModel | None = None, prior: float = 0.5, half_life: float = 48.0):
        self.cost = cost if cost is not None else PassCost()
        self.pass_times = PassTimes()
        self.prior = prior
        self.decay = 0.5 ** (1.0 / half_life)
        self.right = self.tested = 0.0

    def p(self) -> float:
        return (self.right + 2.0 * self.prior) / (self.tested + 2.0)

    def leads(self, j: int) -> bool:
        a, b = self.cost.coefficients()
        return self.p() * (a + b * j) >= b * j

    def observe(self, step) -> None:
        self.pass_times.observe(self.cost, step)
        self.right *= self.decay
        self.tested *= self.decay
        if step.drafted:
            self.tested += 1.0
            self.right += step.accepted > 0

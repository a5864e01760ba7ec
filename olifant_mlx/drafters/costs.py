"""Models of a verifier's pass time, fitted from the passes themselves (beyond the paper).

A pass-cost model says what one verifier pass costs as a + b * tokens fed
(`coefficients()`, `__call__(tokens)`) and learns from the passes (`observe(tokens,
seconds)`): engine.costs.PassCostModel is that interface, the one the engine plans with.
`PassCost` is the fitted one (the lead rule's and the adaptive drafter's default); a fixed
one for simulated verifiers is measure.bench.FixedCost. `PassTimes` turns the engine's Steps
into the pass times a model observes.
"""
from __future__ import annotations


class PassCost:
    """Verifier time per pass as a + b * tokens fed, by recency-weighted least squares.
    Until passes of different lengths have been seen, two pseudo-passes from the first
    observation hold the slope at `rel_slope` (b relative to a 1-token pass); once the real
    passes' lengths spread (variance at least MIN_SPREAD, tokens squared) the fit is theirs
    alone: a pseudo-pass of 9 tokens beside real ones of 1 and 4 would flatten the slope (it
    halved it on Gemma-3-270M, where a 4-token pass costs 1.7 one-token passes)."""

    MIN_SPREAD = 0.25

    def __init__(self, rel_slope: float = 0.1, half_life: float = 64.0):
        self.rel_slope = rel_slope
        self.decay = 0.5 ** (1.0 / half_life)
        self.sums = None          # decayed [w, x, t, xx, xt] of real passes
        self.pseudo = None        # fixed [w, x, t, xx, xt] of the pseudo-passes

    @staticmethod
    def _point(x, t, w=1.0):
        return [w, w * x, w * t, w * x * x, w * x * t]

    def observe(self, tokens: int, seconds: float):
        if tokens <= 0 or seconds <= 0:
            return
        if self.pseudo is None:
            one = seconds / (1.0 + self.rel_slope * (tokens - 1))   # implied 1-token pass
            b = self.rel_slope * one
            self.pseudo = [u + v for u, v in zip(self._point(1, one), self._point(9, one + 8 * b))]
            self.sums = [0.0] * 5
        self.sums = [s * self.decay + p for s, p in zip(self.sums, self._point(tokens, seconds))]

    def coefficients(self):
        """(a, b): fixed and per-token seconds; (1, rel_slope) before any observation."""
        if self.pseudo is None:
            return 1.0, self.rel_slope
        w, x, _, xx, _ = self.sums
        spread = w >= 2.0 and xx / w - (x / w) ** 2 >= self.MIN_SPREAD
        w, x, t, xx, xt = self.sums if spread else [s + p for s, p in zip(self.sums, self.pseudo)]
        mx, mt = x / w, t / w
        var, cov = xx / w - mx * mx, xt / w - mx * mt
        b = max(cov / var, 0.0) if var > 1e-12 else 0.0
        a = max(mt - b * mx, 1e-9)
        return a, b

    def __call__(self, tokens: int) -> float:
        a, b = self.coefficients()
        return a + b * tokens


class PassTimes:
    """Each verifier pass's time from the Steps, for a cost model. A queued 1-token pass (the KV
    engine's overlap, mx.async_eval) is timed in two parts: what queueing it took in the step
    that queued it, and the wait for its token at the start of the next step, which is no part
    of that step's own pass. Fitting each step's verify_s whole would charge a multi-token pass
    with the tail of the 1-token pass before it (on a GPU, most of that pass)."""

    def __init__(self):
        self.queued_s = None          # the queued pass's part so far

    def observe(self, cost, step) -> None:
        own = step.verify_s - step.waited_s
        if self.queued_s is not None:
            cost.observe(1, self.queued_s + step.waited_s)
        self.queued_s = own if step.queued else None
        if not step.queued:
            cost.observe(step.forward_tokens, own)

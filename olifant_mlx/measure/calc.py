"""The speculative-decoding speedup calculator (Leviathan, Kalman & Matias, ICML 2023).

Every quantity is in units of one verifier forward pass. Inputs: acceptance
rate alpha (probability a draft token is accepted), draft length gamma, cost
ratio c (one draft step / one verifier step). Beyond the seed: a measured
acceptance *ratio* converts to alpha; a measured verify-cost curve replaces
"a k-token pass costs one step"; and the KV regime's rejection fast-path
(a rejected first draft costs one plain step, no k-token pass) is modelled.
"""
from __future__ import annotations

import math


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens per step, closed form: (1 - alpha^(gamma+1)) / (1 - alpha)."""
    _check(alpha, gamma)
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_tokens_series(alpha: float, gamma: int) -> float:
    """The same as a series: 1 + alpha + ... + alpha^gamma (a self-check)."""
    _check(alpha, gamma)
    return sum(alpha ** i for i in range(gamma + 1))


def cost_per_step(gamma: int, c: float, verify_cost: float = 1.0) -> float:
    """gamma drafts at c each plus one verification pass (1 step unless measured)."""
    if c < 0:
        raise ValueError(f"cost ratio c must be >= 0, got {c}")
    return gamma * c + verify_cost


def speedup(alpha: float, gamma: int, c: float, verify_cost: float = 1.0) -> float:
    """Improvement factor E / (gamma*c + verify_cost) (Theorem 3.8)."""
    return expected_tokens(alpha, gamma) / cost_per_step(gamma, c, verify_cost)


def best_gamma(alpha: float, c: float, max_gamma: int = 12, verify_costs=None):
    """(gamma, speedup) maximising speedup over 1..max_gamma; verify_costs[g] overrides the
    cost of verifying g draft tokens (in plain steps) when measured."""
    best = None
    for g in range(1, max_gamma + 1):
        v = verify_costs[g] if verify_costs and g in verify_costs else 1.0
        s = speedup(alpha, g, c, v)
        if best is None or s > best[1]:
            best = (g, s)
    return best


def alpha_from_acceptance(acceptance: float, gamma: int, tol: float = 1e-12) -> float:
    """The per-token alpha whose expected accepted fraction of gamma drafts equals a measured
    acceptance ratio (accepted / drafted): (E(alpha, gamma) - 1) / gamma = acceptance."""
    if not 0.0 <= acceptance <= 1.0:
        raise ValueError(f"acceptance must be in [0, 1], got {acceptance}")
    if gamma < 1:
        raise ValueError(f"gamma must be >= 1, got {gamma}")
    lo, hi = 0.0, 1.0
    for _ in range(200):                 # monotone in alpha: bisection
        mid = (lo + hi) / 2
        if (expected_tokens(mid, gamma) - 1.0) / gamma < acceptance:
            lo = mid
        else:
            hi = mid
        if hi - lo < tol:
            break
    return (lo + hi) / 2


def speedup_fast_path(alpha: float, gamma: int, c: float, verify_cost: float) -> float:
    """KV regime with the rejection fast-path: the first draft is checked for free against
    logits already computed. With probability 1 - alpha the step costs one plain pass and
    yields 1 token; otherwise the gamma-token pass (verify_cost steps) yields the accepted
    run (at least the first draft) and the next token comes from its logits."""
    _check(alpha, gamma)
    drafts = gamma * c
    # tokens when the first draft is accepted: 1 + alpha + ... + alpha^(gamma-1)
    accepted_run = expected_tokens(alpha, gamma - 1) if gamma >= 1 else 0.0
    tokens = (1 - alpha) * 1.0 + alpha * accepted_run
    cost = drafts + (1 - alpha) * 1.0 + alpha * verify_cost
    return tokens / cost


def _check(alpha, gamma):
    if not (0.0 <= alpha <= 1.0) or math.isnan(alpha):
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if gamma < 0 or int(gamma) != gamma:
        raise ValueError(f"gamma must be a non-negative integer, got {gamma}")


def report(alpha: float | None = None, gamma: int = 4, c: float = 0.0, verify_costs=1.0,
           acceptance: float | None = None, max_gamma: int = 12) -> dict:
    """Every number the calculator shows (the `calc` command and the TUI's panel alike).

    alpha, or a measured acceptance ratio converted to alpha; verify_costs: the cost of
    verifying g drafts in plain steps, one number for every g or {g: cost} (missing g: 1.0).
    Both models are given: Leviathan's (every step verifies gamma drafts) and the KV cache's
    rejection fast path (a rejected first draft costs one plain step, no gamma-token pass),
    each with its curve over 1..max_gamma and its best gamma."""
    if not isinstance(gamma, int) or not 1 <= gamma <= 64:
        raise ValueError(f"gamma must be a whole number from 1 to 64, got {gamma}")
    if acceptance is not None:
        alpha = alpha_from_acceptance(acceptance, gamma)
    if alpha is None:
        raise ValueError("give alpha or a measured acceptance")
    _check(alpha, gamma)
    if c < 0:
        raise ValueError(f"cost ratio c must be >= 0, got {c}")

    def v(g):
        cost = verify_costs.get(g, 1.0) if isinstance(verify_costs, dict) else float(verify_costs)
        if not cost > 0:
            raise ValueError(f"verify cost must be > 0, got {cost}")
        return cost

    span = range(1, max(max_gamma, gamma) + 1)
    curve = {g: speedup(alpha, g, c, v(g)) for g in span}
    fast = {g: speedup_fast_path(alpha, g, c, v(g)) for g in span}
    best = max(((g, s) for g, s in curve.items() if g <= max_gamma), key=lambda gs: gs[1])
    best_fast = max(((g, s) for g, s in fast.items() if g <= max_gamma), key=lambda gs: gs[1])
    return {
        "alpha": alpha, "gamma": gamma, "c": c, "verify_cost": v(gamma), "acceptance_in": acceptance,
        "expected_tokens": expected_tokens(alpha, gamma),
        "expected_tokens_series": expected_tokens_series(alpha, gamma),
        "cost_per_step": cost_per_step(gamma, c, v(gamma)),
        "speedup": curve[gamma], "best_gamma": best[0], "best_speedup": best[1],
        "fast_path_speedup": fast[gamma], "fast_path_best_gamma": best_fast[0],
        "fast_path_best_speedup": best_fast[1],
        "curve": {g: s for g, s in curve.items() if g <= max_gamma},
        "fast_path_curve": {g: s for g, s in fast.items() if g <= max_gamma},
    }


FAST_PATH_NOTE = ("with a KV cache a rejected first draft costs one plain step instead of a "
                  "gamma-token pass, but an accepted run then ends without the bonus token, "
                  "so the two figures differ")

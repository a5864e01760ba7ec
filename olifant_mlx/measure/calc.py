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


# -- a sharded verifier (mlx.distributed): what one pass costs in communication -------------

def ring_all_reduce_ms(nbytes: float, ranks: int, latency_ms: float, bytes_per_ms: float) -> float:
    """A ring all-reduce of nbytes (reduce-scatter, then all-gather): 2(N-1) hops, each one
    message latency plus nbytes/N bytes on the link."""
    _check_link(ranks, latency_ms, bytes_per_ms)
    if ranks < 2:
        return 0.0
    return 2 * (ranks - 1) * (latency_ms + nbytes / ranks / bytes_per_ms)


def pass_traffic(tokens: int, hidden: int, layers: int, ranks: int, mode: str = "tensor",
                 dtype_bytes: int = 4) -> dict:
    """The collectives one verifier pass over `tokens` new tokens makes (mlx-lm's sharding):
    tensor parallel, 2 all-reduces per layer (after attention's output projection and the
    MLP's down projection) of the tokens' hidden states; pipeline, one send per stage boundary
    and one all-gather of the last stage's hidden states. `bytes` is what one rank sends."""
    if mode not in ("tensor", "pipeline"):
        raise ValueError(f"mode must be tensor or pipeline, got {mode!r}")
    if min(tokens, hidden, layers, ranks, dtype_bytes) < 1:
        raise ValueError("tokens, hidden, layers, ranks and dtype_bytes must be >= 1")
    size = tokens * hidden * dtype_bytes
    if ranks < 2:
        return {"collectives": 0, "bytes_each": size, "bytes": 0, "hops": 0}
    if mode == "tensor":
        n = 2 * layers
        return {"collectives": n, "bytes_each": size, "hops": n * 2 * (ranks - 1),
                "bytes": n * 2 * (ranks - 1) * size / ranks}
    # a send from every stage but the first, then a ring all-gather of N - 1 hops
    return {"collectives": ranks, "bytes_each": size, "hops": 2 * (ranks - 1), "bytes": ranks * size}


def pass_comm_ms(tokens: int, hidden: int, layers: int, ranks: int, latency_ms: float,
                 bytes_per_ms: float, mode: str = "tensor", dtype_bytes: int = 4,
                 shared_values: int = 1) -> float:
    """Communication time of one pass: the model's collectives (pass_traffic) on a link of
    `latency_ms` per message and `bytes_per_ms`, plus `shared_values` small collectives of
    olifant_mlx's own (rank 0's drafts and choices: 264 bytes each)."""
    _check_link(ranks, latency_ms, bytes_per_ms)
    t = pass_traffic(tokens, hidden, layers, ranks, mode, dtype_bytes)
    size = t["bytes_each"]
    if ranks < 2:
        return 0.0
    if mode == "tensor":
        model = t["collectives"] * ring_all_reduce_ms(size, ranks, latency_ms, bytes_per_ms)
    else:   # the stages' sends one after another, then an all-gather ring
        model = 2 * (ranks - 1) * (latency_ms + size / bytes_per_ms)
    return model + shared_values * ring_all_reduce_ms(264, ranks, latency_ms, bytes_per_ms)


def sharded_verify_costs(compute_ms: dict, comm_ms: dict) -> dict:
    """The verify-cost curve (a g-token pass in 1-token passes) of a sharded verifier whose
    ranks compute for compute_ms[g] and communicate for comm_ms[g]: what `report` and
    `speedup_fast_path` take as verify costs. Communication that does not grow with g (latency)
    flattens the curve, which is why speculation pays more on a sharded verifier."""
    if 1 not in compute_ms or 1 not in comm_ms:
        raise ValueError("the curve needs the 1-token pass (g = 1)")
    base = compute_ms[1] + comm_ms[1]
    if not base > 0:
        raise ValueError("a 1-token pass must cost more than 0 ms")
    return {g: (compute_ms[g] + comm_ms[g]) / base for g in sorted(set(compute_ms) & set(comm_ms))}


def fit_link(samples) -> tuple:
    """(latency_ms, bytes_per_ms) of a ring of `ranks` from measured all-reduces
    [(nbytes, ranks, ms), ...], by least squares on ms = 2(N-1)(latency + nbytes/N/bandwidth)."""
    rows = [(2 * (n - 1), 2 * (n - 1) * b / n, ms) for b, n, ms in samples if n >= 2]
    if len(rows) < 2:
        raise ValueError("need two or more all-reduce timings of different sizes")
    saa = sum(a * a for a, _, _ in rows)
    sab = sum(a * b for a, b, _ in rows)
    sbb = sum(b * b for _, b, _ in rows)
    say = sum(a * y for a, _, y in rows)
    sby = sum(b * y for _, b, y in rows)
    det = saa * sbb - sab * sab
    if det == 0:
        raise ValueError("the all-reduce sizes must differ")
    latency = (say * sbb - sby * sab) / det
    per_byte = (saa * sby - sab * say) / det
    latency = max(latency, 0.0)
    return latency, (1.0 / per_byte if per_byte > 0 else math.inf)


def _check_link(ranks, latency_ms, bytes_per_ms):
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a whole number >= 1, got {ranks!r}")
    if latency_ms < 0 or not bytes_per_ms > 0:
        raise ValueError("latency must be >= 0 and bandwidth > 0")

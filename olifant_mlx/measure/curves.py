"""Cost curves: a verifier's pass time against the pass's length, per machine, and the modelled
speedups they give transcript (or reference) results.

`bench --calibrate` measures, at several context lengths, a KV pass of 1 … k+1 new tokens and an
uncached pass over the whole context plus those tokens, and stores the curve with the machine
and the verifier under `<cache>/curves/` (JSON). A transcript run's drafted / accepted / passes
are exact without the verifier; under a stored curve they become a speedup that is *modelled*,
never a measured one: its own column, `modelled_speedup`, with the curve's file beside it.
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from olifant_mlx.drafters.costs import PassCost
from olifant_mlx.files import cache_dir, read_regular, write_atomic
from olifant_mlx.measure.bench import digest, verifier_identity

FORMAT = 1
CONTEXTS = (64, 256, 1024)


def machine() -> dict:
    """What the curve was measured on: enough to tell one machine's curve from another's."""
    from olifant_mlx.machine import cpus
    from olifant_mlx.mlx_setup import mx

    return {"system": platform.system(), "arch": platform.machine(), "processor": platform.processor(),
            "cpus": cpus(), "mlx_device": str(mx.default_device()), "node": digest(platform.node())}


def measure_curve(verifier, text: str, max_new: int = 9, contexts=CONTEXTS, repeats: int = 3,
                  uncached: bool = True) -> dict:
    """Best-of-`repeats` seconds of a KV pass of n = 1 … max_new new tokens after `context`
    cached tokens, and (unless `uncached` is False: a long KV curve, e.g. for k 32) of an
    uncached pass over context + n tokens, for each context length (the text's ids repeated to
    length). Each repeat sweeps every n in turn, so that a stretch of seconds in which the
    machine is busy with something else spoils one repeat of several lengths, not every repeat
    of one length. The load average is kept beside it, at the start and at the end."""
    from mlx_lm.models.cache import trim_prompt_cache

    from olifant_mlx.engine.cache import make_cache, prefill
    from olifant_mlx.mlx_setup import mx

    model = verifier.model
    base = verifier.encode(text) or [0]
    kv, whole = {}, {}
    lengths = range(1, max_new + 1)
    load_start = os.getloadavg()[0]
    for context in contexts:
        ids = (base * (context // len(base) + 2))[:context + max_new]
        cache = make_cache(model)
        mx.eval(prefill(model, cache, ids[:context]))
        kv[context] = {n: float("inf") for n in lengths}
        if uncached:
            whole[context] = {n: float("inf") for n in lengths}
        for _ in range(repeats):
            for n in lengths:
                new = mx.array(ids[context:context + n])[None]
                t = time.perf_counter()
                mx.eval(model(new, cache=cache))
                kv[context][n] = min(kv[context][n], time.perf_counter() - t)
                trim_prompt_cache(cache, n)
            for n in lengths if uncached else ():
                fed = mx.array(ids[:context + n])[None]
                whole[context][n] = min(whole[context][n], _timed(lambda w=fed: mx.eval(model(w))))
    return {"format": FORMAT, "verifier": verifier.name, "verifier_id": verifier_identity(verifier),
            "machine": machine(), "load_average": os.getloadavg()[0], "load_average_start": load_start,
            "time": time.time(), "max_new": max_new, "kv": kv, "uncached": whole}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def curve_file(curve: dict) -> Path:
    m = curve["machine"]
    return cache_dir() / "curves" / f"{curve['verifier']}-{digest(curve['verifier_id'], *sorted(m.items()))}.json"


def save_curve(curve: dict, path=None) -> Path:
    return write_atomic(Path(path) if path else curve_file(curve), json.dumps(curve, indent=1), 0o644)


def load_curve(path) -> dict:
    """A stored curve (a clear error naming the file otherwise); keys back to ints."""
    try:
        c = json.loads(read_regular(path))
        assert c.get("format") == FORMAT
        for regime in ("kv", "uncached"):
            c[regime] = {int(ctx): {int(n): float(s) for n, s in row.items()} for ctx, row in c[regime].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, AssertionError):
        raise ValueError(f"{path}: not a cost curve (bench --calibrate writes them under "
                         f"{cache_dir() / 'curves'})") from None
    return c


def stored_curves() -> list:
    folder = cache_dir() / "curves"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _points(curve: dict, regime: str, context: int | None) -> dict:
    """The regime's points (tokens fed -> seconds) at the context nearest `context` (default:
    the shortest)."""
    rows = curve[regime]
    return rows[min(rows, key=lambda c: abs(c - context)) if context is not None else min(rows)]


def fit(curve: dict, regime: str = "kv", context: int | None = None) -> tuple:
    """(a, b): a pass of n tokens costs a + b * n seconds, least squares over the curve's points
    at the context length nearest `context` (default: the shortest)."""
    pts = sorted(_points(curve, regime, context).items())
    mx_, mt = sum(n for n, _ in pts) / len(pts), sum(t for _, t in pts) / len(pts)
    var = sum((n - mx_) ** 2 for n, _ in pts)
    b = max(sum((n - mx_) * (t - mt) for n, t in pts) / var, 0.0) if var else 0.0
    return max(mt - b * mx_, 1e-9), b


def seeded_pass_cost(curve: dict, context: int | None = None) -> PassCost:
    """A PassCost that starts from the curve's fit (its pseudo-passes are the curve's 1- and
    9-token passes) instead of the prior, and learns from real passes as before."""
    a, b = fit(curve, "kv", context)
    cost = PassCost()
    cost.pseudo = [u + v for u, v in zip(cost._point(1, a + b), cost._point(9, a + 9 * b))]
    cost.sums = [0.0] * 5
    return cost


def modelled_speedup(row: dict, curve: dict, context: int | None = None):
    """Plain time over speculative time for one result row under the curve (the regime's fit
    at the context nearest `context`): a pass feeding n new tokens costs a + b n (uncached: over
    the whole context, which a holds), plain decoding is one 1-token pass a token, drafting time
    is the row's own. KV passes feed the row's forward tokens; uncached ones the correction and
    the drafts. None for a plain row or one without passes."""
    if row.get("strategy") == "plain" or not row.get("steps") or not row.get("n_tokens"):
        return None
    plain, ours = modelled_seconds(row, curve, context)
    return plain / ours


def pass_seconds(curve: dict, n: int, regime: str = "kv", context: int | None = None) -> float:
    """What the curve says a pass feeding n new tokens costs: its own measured point at the
    context nearest `context` (default: the shortest) where it has one, the fit beyond them,
    nothing for n = 0. The points, not the line, because a curve need not be straight: Gemma-3's
    1-token pass is 15 % under its line's (docs/benchmarks.md, "Live against modelled")."""
    if n <= 0:
        return 0.0
    points = _points(curve, regime, context)
    if n in points:
        return points[n]
    a, b = fit(curve, regime, context)
    return a + b * n


def modelled_seconds(row: dict, curve: dict, context: int | None = None) -> tuple:
    """(plain decoding's, the row's) seconds under the curve, as modelled_speedup counts them.
    A KV row that carries its steps' sizes (`pass_sizes`: tokens fed -> steps, as Stats keeps
    them) is costed pass by pass at the curve's points (pass_seconds); one without, by the fit."""
    n, steps = row["n_tokens"], row["steps"]
    draft = (row.get("draft_s_per_step") or 0.0) * steps
    kv = row["regime"] == "kv"
    if kv and row.get("pass_sizes"):
        ours = sum(int(c) * pass_seconds(curve, int(size), "kv", context) for size, c in row["pass_sizes"].items())
        return n * pass_seconds(curve, 1, "kv", context), ours + draft
    fed = (row.get("forward_tokens") or steps) if kv else steps + (row.get("drafted") or 0)
    a, b = fit(curve, "kv" if kv else "uncached", context)
    return n * (a + b), steps * a + b * fed + draft


def add_modelled(cells, rows, curve: dict | None) -> None:
    """Each aggregated cell's mean modelled speedup over its rows under `curve` (None without
    one): a column of its own, beside the measured speedup, never in it."""
    by_cell = {}
    for r in rows:
        s = modelled_speedup(r, curve) if curve else None
        if s is not None:
            by_cell.setdefault((r["verifier"], r["task"], r["regime"], r["strategy"], r["k"]), []).append(s)
    for c in cells:
        got = by_cell.get((c["verifier"], c["task"], c["regime"], c["strategy"], c["k"]))
        c["modelled_speedup"] = sum(got) / len(got) if got else None

"""Several generations' verifier passes in one forward pass (continuous batching).

Each generation yields its passes (engine.forward). `Batch.round` takes every running
generation to its next pass, lets the planner cut their drafts (`plan_pass`), and runs their
Forwards as one: the rows of all of them go through the embedding, the dense layers and the
output layer together, and only attention is split, each generation's rows attending to its
own KV cache (its length, rollback, rotating window and quantization as when it runs alone).
That split is made without touching the model: `segmented(model)` is a twin sharing every
weight, whose layers' attention takes a `SegmentedCache` (one layer's caches of the batch)
and runs the model's own attention module on each generation's rows.

The planner reads a `PassCurve`: what a pass of R rows costs on this machine, measured once
per verifier and kept (`pass_curve`). Generations join and leave between rounds.
"""
from __future__ import annotations

import copy
import json
import os
import platform
import time
from dataclasses import dataclass

from olifant_mlx.engine.forward import Forward, Proposal, run
from olifant_mlx.mlx_setup import mx

ROWS = (1, 2, 4, 9, 18, 36, 72)      # the rows a pass-cost curve is measured at
BATCH_PREFILL_CHUNK = 128            # a newcomer's prompt tokens per batched pass


# ---- one pass over several generations' rows ------------------------------------------------

@dataclass(frozen=True)
class SegmentMask:
    """The mask a model asked its cache for (mlx-lm's make_mask arguments), made per
    generation by SegmentedAttention from that generation's own cache."""
    return_array: bool
    window_size: int | None


class SegmentedCache:
    """One layer's caches of a batch's generations (None: uncached) and how many rows each
    feeds, in order."""

    def __init__(self, caches, rows):
        self.caches, self.rows = caches, rows

    def make_mask(self, n, return_array=False, window_size=None):
        return SegmentMask(return_array, window_size)


class SegmentedAttention:
    """A layer's attention over a batch: each generation's rows through the model's own
    attention module with that generation's cache and mask; any other cache goes straight
    through."""

    def __init__(self, attention):
        self.attention = attention

    def __call__(self, x, mask=None, cache=None):
        if not isinstance(cache, SegmentedCache):
            return self.attention(x, mask, cache)
        from mlx_lm.models.base import create_attention_mask

        outs, start = [], 0
        for c, n in zip(cache.caches, cache.rows):
            rows = x[:, start:start + n]
            start += n
            m = None
            if isinstance(mask, SegmentMask):
                m = create_attention_mask(rows, c, window_size=mask.window_size, return_array=mask.return_array)
            outs.append(self.attention(rows, m, c))
        return mx.concatenate(outs, axis=1)


def _layers_path(model):
    """The names leading from `model` to the module holding its decoder layers (a `layers`
    list whose layers have `self_attn`), or None."""
    for name, module in model.named_modules():
        layers = module.get("layers") if isinstance(module, dict) else None
        if isinstance(layers, list) and layers and all("self_attn" in layer for layer in layers):
            return [p for p in name.split(".") if p]
    return None


def _twin(module, path):
    twin = copy.copy(module)
    if path:
        twin[path[0]] = _twin(module[path[0]], path[1:])
        return twin
    layers = []
    for layer in module["layers"]:
        layer_twin = copy.copy(layer)
        layer_twin["self_attn"] = SegmentedAttention(layer["self_attn"])
        layers.append(layer_twin)
    twin["layers"] = layers
    return twin


class _Twin:
    """The twin and its layer count, held by its model as a plain attribute (outside the
    model's parameter tree), so that it lives exactly as long as the model does and every
    batched pass finds it without walking the model's modules again."""

    def __init__(self, module, layers: int):
        self.module, self.layers = module, layers


def _held(model) -> _Twin:
    held = getattr(model, "_olifant_batched", None)
    if isinstance(held, _Twin):
        return held
    path = _layers_path(model)
    if path is None:
        held = _Twin(None, 0)
    else:
        inner = model
        for name in path:
            inner = inner[name]
        held = _Twin(_twin(model, path), len(inner["layers"]))
    object.__setattr__(model, "_olifant_batched", held)
    return held


def segmented(model):
    """The model's batched twin (made once per model; its weights are the model's), or None
    when its layers are not the kind this splits (no `self_attn` in each)."""
    return _held(model).module


def forward_batch(model, forwards) -> None:
    """Run `forwards` (engine.forward.Forward, each with its own cache) as one pass: each gets
    its rows' logits (lazy) and the batch's size."""
    for f in forwards:
        f.batch = len(forwards)
    if len(forwards) == 1:
        run(model, forwards[0])
        return
    twin = segmented(model)
    if twin is None:
        raise ValueError(f"{type(model).__name__}: its layers have no self_attn: passes cannot be batched")
    rows = [f.rows for f in forwards]
    caches = [SegmentedCache([None if f.cache is None else f.cache[i] for f in forwards], rows)
              for i in range(_held(model).layers)]
    inputs = mx.concatenate([f.inputs().astype(mx.int32) for f in forwards])[None]
    logits = twin(inputs, cache=caches)[0]
    start = 0
    for f, n in zip(forwards, rows):
        f.logits = logits[start:start + n]
        start += n


def batchable(model) -> str | None:
    """Why this model's passes cannot be batched (None: they can): two generations' passes
    run as one must give the logits each gets alone."""
    from olifant_mlx.engine import cache as kv

    if segmented(model) is None:
        return "its layers are not attention layers the batch can split"
    prompts, feeds = ([1, 2, 3], [4, 5, 6, 7]), ([8, 9], [10])
    alone, together = [], []
    for prompt, feed in zip(prompts, feeds):
        layers = kv.make_cache(model)
        kv.prefill(model, layers, prompt)
        alone.append(run(model, Forward(feed, layers)))
    forwards = []
    for prompt, feed in zip(prompts, feeds):
        layers = kv.make_cache(model)
        kv.prefill(model, layers, prompt)
        forwards.append(Forward(feed, layers))
    try:
        forward_batch(model, forwards)
        together = [f.logits for f in forwards]
        mx.eval(alone, together)
    except Exception as e:              # a model whose forward reads the cache itself
        return f"a batched pass failed ({type(e).__name__})"
    for a, b in zip(alone, together):
        if a.shape != b.shape or not bool((a.argmax(-1) == b.argmax(-1)).all()):
            return "a batched pass does not give the logits of a pass alone"
    return None


# ---- what a pass costs, and what a pass takes -----------------------------------------------

@dataclass(frozen=True)
class PassCurve:
    """Seconds of a verifier pass against its rows, measured at `rows`; between and past
    them, read along straight lines."""
    rows: tuple
    seconds: tuple

    def __call__(self, rows: int) -> float:
        xs, ys = self.rows, self.seconds
        if rows <= xs[0]:
            return ys[0]
        for i in range(1, len(xs)):
            if rows <= xs[i] or i == len(xs) - 1:
                x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
                return y0 + (y1 - y0) * (rows - x0) / (x1 - x0)
        return ys[-1]

    def as_dict(self) -> dict:
        return {"rows": list(self.rows), "seconds": list(self.seconds)}


def measure_curve(model, rows=ROWS, rounds: int = 3, context: int = 64, on_progress=None) -> PassCurve:
    """A PassCurve measured on `model`: passes of each row count after a `context`-token
    prompt, in alternating rounds, the fastest of each (the least disturbed by the machine's
    other work), never falling as rows grow."""
    from mlx_lm.models.cache import trim_prompt_cache

    from olifant_mlx.engine import cache as kv

    layers = kv.make_cache(model)
    kv.prefill(model, layers, [1 + i % 50 for i in range(context)])
    times, done = {r: [] for r in rows}, 0
    for k in range(rounds + 1):                # the first round warms up
        for r in (rows if k % 2 == 0 else tuple(reversed(rows))):
            t = time.perf_counter()
            mx.eval(model(mx.array([7] * r)[None], cache=layers))
            if k:
                times[r].append(time.perf_counter() - t)
            trim_prompt_cache(layers, r)
            done += 1
            if on_progress is not None:
                on_progress(done, (rounds + 1) * len(rows))
    return steady(PassCurve(tuple(rows), tuple(min(t) for t in times.values())))


def steady(curve: PassCurve) -> PassCurve:
    """The curve never falling as rows grow (a pass of more rows is never cheaper: a dip is
    the machine's noise)."""
    seconds, top = [], 0.0
    for s in curve.seconds:
        top = max(top, s)
        seconds.append(top)
    return PassCurve(curve.rows, tuple(seconds))


def curve_key(name: str) -> str:
    """What a kept curve was measured for: the verifier and this machine."""
    import hashlib

    machine = (name, platform.machine(), platform.processor(), os.cpu_count(), mx.__version__,
               str(mx.default_device()))
    return hashlib.sha256(repr(machine).encode()).hexdigest()[:16]


def pass_curve(model, name: str, directory=None, on_measure=None) -> PassCurve:
    """The verifier's PassCurve on this machine: kept in `directory` (the cache's pass-costs
    folder) after the first measurement; `on_measure(done, total)` reports that one's passes."""
    from olifant_mlx.files import cache_dir, write_atomic

    directory = directory or os.path.join(cache_dir(), "pass-costs")
    path = os.path.join(directory, curve_key(name) + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)
        return PassCurve(tuple(int(r) for r in kept["rows"]), tuple(float(s) for s in kept["seconds"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    curve = measure_curve(model, on_progress=on_measure)
    os.makedirs(directory, exist_ok=True)
    write_atomic(path, json.dumps({"verifier": name, **curve.as_dict()}))
    return curve


def max_batch_for(curve: PassCurve, rows: int = 9, gain: float = 1.1, largest: int = 16) -> int:
    """How many generations of `rows` rows a pass should hold: doubled while the tokens a
    second brings grow by `gain` at least, as far as the curve was measured, at most `largest`."""
    n = 1
    while 2 * n <= largest and 2 * n * rows <= curve.rows[-1] and \
            (2 * n / curve(2 * n * rows)) >= gain * (n / curve(n * rows)):
        n *= 2
    return n


def expected_tokens(acceptance: float, drafts: int) -> float:
    """Tokens a pass with `drafts` drafts yields: the verifier's own, and each draft while
    every one before it was accepted."""
    return sum(acceptance ** j for j in range(drafts + 1))


def plan_pass(proposals, cost, other_rows: int = 0, other_tokens: int = 0) -> None:
    """Set each Proposal's `allowed` so the pass's expected tokens per second is highest: the
    drafts taken in the order of what each adds in expected tokens (a draft adds its request's
    acceptance times what the one before it added), and of those orders' prefixes the one
    whose pass yields most tokens a second (every prefix is weighed, so a bump in a measured
    curve does not stop it short). The pass also holds `other_rows` rows of generations
    without drafts, yielding `other_tokens` (one each, none for a prefill's); `cost(rows)` is a
    pass's seconds. Each generation's pass is its drafts plus one."""
    taken = [0] * len(proposals)
    gains = [p.acceptance for p in proposals]          # what the next draft of each would add
    tokens = float(len(proposals) + other_tokens)
    rows = len(proposals) + other_rows
    order, best, best_rate = [], 0, tokens / cost(rows)
    while True:
        i = max((i for i, p in enumerate(proposals) if taken[i] < len(p.drafts)),
                key=lambda i: gains[i], default=None)
        if i is None:
            break
        tokens, rows = tokens + gains[i], rows + 1
        taken[i] += 1
        gains[i] *= proposals[i].acceptance
        order.append(i)
        if tokens / cost(rows) > best_rate:
            best, best_rate = len(order), tokens / cost(rows)
    allowed = [0] * len(proposals)
    for i in order[:best]:
        allowed[i] += 1
    for p, n in zip(proposals, allowed):
        p.allowed = n


# ---- the rounds --------------------------------------------------------------------------------

class Batch:
    """Runs generations' passes together, `max_batch` generations a pass at most; `cost` (a
    PassCurve, or None: every draft taken) plans each pass. A generation is a lane: an
    iterator of engine.forward events (its Steps go elsewhere: the server's lane handles its
    own), or of None where it ran a pass itself."""

    def __init__(self, model, max_batch: int = 8, cost=None):
        self.model, self.max_batch, self.cost = model, max(1, int(max_batch)), cost

    def round(self, lanes) -> dict:
        """Advance every lane by one pass, `max_batch` lanes to a pass; the lanes that ended,
        each with the exception it raised (or None)."""
        ended = {}
        for i in range(0, len(lanes), self.max_batch):
            ended.update(self._pass(lanes[i:i + self.max_batch]))
        return ended

    def _pass(self, lanes) -> dict:
        events, ended = {}, {}
        for lane in lanes:
            self._next(lane, events, ended)
        proposals = [e for e in events.values() if isinstance(e, Proposal)]
        if proposals:
            others = [e for e in events.values() if isinstance(e, Forward)]
            if self.cost is not None and len(events) > 1:
                plan_pass(proposals, self.cost, sum(f.rows for f in others), sum(f.rows == 1 for f in others))
            for lane, event in list(events.items()):
                while isinstance(event, Proposal):
                    if event.allowed is None:
                        event.allowed = len(event.drafts)
                    del events[lane]
                    event = self._next(lane, events, ended)
        if events:
            try:
                forward_batch(self.model, list(events.values()))
            except Exception as e:      # the pass failed: every generation in it ends with that
                for lane in events:
                    ended[lane] = e
                    lane.close()
        return ended

    @staticmethod
    def _next(lane, events, ended):
        try:
            event = next(lane)
        except StopIteration:
            ended[lane] = None
            return None
        except Exception as e:          # one generation's failure is its own
            ended[lane] = e
            return None
        if event is None:               # a lane that ran its pass itself (a sharded verifier's)
            return None
        if not isinstance(event, (Forward, Proposal)):
            raise TypeError(f"a batch lane yields passes, not {type(event).__name__}")
        events[lane] = event
        return event

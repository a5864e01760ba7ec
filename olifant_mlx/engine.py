"""Speculative decoding on an mlx-lm verifier (the paper's sections 2.2-2.4).

`generate_steps` yields one `Step` per verifier forward pass; the CLI, the
benchmark and the terminal UI all consume it. Greedy and exact: a drafted
token is accepted only if it equals the verifier's own argmax at its
position, so the output is token for token the verifier's plain greedy
output.

Regimes:
- uncached: every step feeds the whole sequence (context + k drafts) in one
  pass; the logits at positions ctx-1 .. ctx+k-1 decide the accepted prefix
  and give one more token (k+1 predictions per pass);
- KV-cached: prefill once; the verifier's next token is already known from
  the previous pass, so the first draft is checked against it for free
  (rejection fast-path: a rejected step costs one 1-token pass, like plain
  decoding); only an accepted first draft pays for the k-token pass, after
  which the cache is rolled back to the accepted prefix. Rotating caches
  that can no longer be trimmed (window wrapped) are restored from a
  snapshot and the accepted tokens re-fed, never left holding rejected
  drafts.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from olifant_mlx.drafters import NoDrafter
from olifant_mlx.mlx_setup import mx


@dataclass
class Step:
    index: int
    drafted: list            # tokens the drafter proposed
    accepted: int            # of those, accepted (and emitted)
    emitted: list            # tokens appended to the output this step
    verifier_token: int | None  # the verifier's own token emitted this step (correction/bonus)
    fast_path: bool          # KV regime: first draft rejected without a k-token pass
    forward_tokens: int      # tokens fed to the verifier this step
    draft_s: float
    verify_s: float
    step_s: float
    finished: bool = False
    stop_reason: str = ""    # "eos" | "max_tokens" when finished


@dataclass
class Stats:
    """The paper's metrics for one generation."""
    tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    fast_path_steps: int = 0
    forward_tokens: int = 0         # tokens fed to the verifier after the prefill
    stop_reason: str = ""
    extra: dict = field(default_factory=dict)

    def add(self, s: Step):
        self.tokens += len(s.emitted)
        self.steps += 1
        self.drafted += len(s.drafted)
        self.accepted += s.accepted
        self.decode_s += s.step_s
        self.draft_s += s.draft_s
        self.verify_s += s.verify_s
        self.fast_path_steps += s.fast_path
        self.forward_tokens += s.forward_tokens
        if s.finished:
            self.stop_reason = s.stop_reason

    @property
    def seconds(self):
        return self.prefill_s + self.decode_s

    @property
    def tokens_per_s(self):
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def acceptance(self):
        """Fraction of drafted tokens the verifier accepted."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self):
        """Draft tokens accepted per verification step."""
        return self.accepted / self.steps if self.steps else 0.0

    @property
    def overhead_ms_per_step(self):
        """Everything but the verifier's forward passes, per step."""
        return 1e3 * (self.decode_s - self.verify_s) / self.steps if self.steps else 0.0

    def as_dict(self):
        d = asdict(self)
        d.pop("extra")
        d.update(self.extra, seconds=round(self.seconds, 4), tokens_per_s=round(self.tokens_per_s, 3),
                 acceptance=round(self.acceptance, 4),
                 mean_accepted_length=round(self.mean_accepted_length, 4),
                 overhead_ms_per_step=round(self.overhead_ms_per_step, 4))
        return d


def make_cache(model, max_kv_size: int | None = None):
    """The model's own cache; with max_kv_size, plain KV layers become rotating windows."""
    from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache

    cache = make_prompt_cache(model)
    if max_kv_size:
        cache = [RotatingKVCache(max_size=max_kv_size) if type(c) is KVCache else c for c in cache]
    return cache


def _argmax(logits) -> list:
    return mx.argmax(logits, axis=-1).tolist()


@dataclass(frozen=True)
class Sampling:
    """Temperature / top-p sampling that stays lossless under speculation: the token at
    sequence position p is drawn with a key derived from (seed, p) alone, so the verifier's
    choice at a position does not depend on how many drafts were verified with it. A draft
    token is accepted only if it equals that draw, which makes speculative output identical
    to plain sampling with the same seed (and so distributed exactly like it)."""
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    def pick(self, logits, first_position: int) -> list:
        """One token per row of logits; row i is the token at first_position + i."""
        logits = logits.reshape(-1, logits.shape[-1]).astype(mx.float32) / self.temperature
        if self.top_p < 1.0:
            probs = mx.softmax(logits, axis=-1)
            order = mx.argsort(-probs, axis=-1)
            sorted_p = mx.take_along_axis(probs, order, axis=-1)
            keep_sorted = (mx.cumsum(sorted_p, axis=-1) - sorted_p) < self.top_p
            keep = mx.put_along_axis(mx.zeros_like(keep_sorted), order, keep_sorted, axis=-1)
            logits = mx.where(keep, logits, -mx.inf)
        out = []
        for i in range(logits.shape[0]):
            key = mx.random.key((self.seed * 1_000_003 + first_position + i) % (1 << 63))
            out.append(int(mx.random.categorical(logits[i], key=key).item()))
        return out


def _snapshot(cache):
    """Rotating caches' arrays and counters (a k-token update replaces, not mutates, them)."""
    from mlx_lm.models.cache import RotatingKVCache

    return [(c.keys, c.values, c.offset, c._idx) if isinstance(c, RotatingKVCache) else None
            for c in cache]


def _rollback(model, cache, passed: int, keep: list, snapshot):
    """Drop the last passed-len(keep) tokens of a pass of `passed` tokens from the cache."""
    from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

    n = passed - len(keep)
    if n == 0:
        return
    if can_trim_prompt_cache(cache):
        trimmed = trim_prompt_cache(cache, n)
        if trimmed != n:
            raise RuntimeError(f"KV cache trimmed {trimmed} of {n} tokens")
        return
    # a wrapped rotating window cannot drop tokens: restore it and re-feed the kept ones
    for c, snap in zip(cache, snapshot):
        if snap is not None:
            c.keys, c.values, c.offset, c._idx = snap
        elif c.trim(passed) != passed:
            raise RuntimeError("KV cache could not be rolled back")
    if keep:
        mx.eval(model(mx.array(keep)[None], cache=cache))


def _prefill(model, cache, prompt, chunk=512):
    for i in range(0, len(prompt) - 1, chunk):
        part = prompt[i:min(i + chunk, len(prompt) - 1)]
        if part:
            model(mx.array(part)[None], cache=cache)
            mx.eval([c.state for c in cache])
    return model(mx.array(prompt[-1:])[None], cache=cache)[0, -1]


def generate_steps(model, prompt, drafter=None, k: int = 3, max_tokens: int = 100,
                   kv_cache: bool = True, eos_ids=(), max_kv_size: int | None = None,
                   bos_id: int | None = None, stats: Stats | None = None,
                   sampling: Sampling | None = None):
    """Yield a Step per verifier pass until max_tokens or an EOS token (not emitted).
    Greedy by default; with `sampling`, the verifier samples (see Sampling)."""
    if not 0 <= k <= 64:
        raise ValueError(f"k must be between 0 and 64, got {k}")
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    prompt = [int(t) for t in prompt]
    if not prompt:
        raise ValueError("empty prompt: the verifier needs at least one token")
    drafter = drafter or NoDrafter()
    eos = set(int(e) for e in eos_ids)
    skip = 1 if bos_id is not None and prompt[0] == bos_id else 0
    wants_bos = getattr(drafter, "wants_bos", False)
    observe = getattr(drafter, "observe", None)   # drafters that learn from each pass
    seq = list(prompt)                      # everything the verifier has seen or will see
    drafter.start(seq if wants_bos else seq[skip:])
    stats = stats if stats is not None else Stats()
    produced = 0

    def pick(logits, position):
        """Greedy or sampled token(s) for logits of one position (an int) or of rows (a list)."""
        if sampling is None:
            return _argmax(logits)
        out = sampling.pick(logits, position)
        return out[0] if logits.ndim == 1 else out
    if max_tokens == 0:
        return

    def finish(emitted):
        """Cut emitted at EOS / max_tokens; returns (kept, stop reason or '')."""
        for i, t in enumerate(emitted):
            if t in eos:
                return emitted[:i], "eos"
        room = max_tokens - produced
        if len(emitted) >= room:
            return emitted[:room], "max_tokens"
        return emitted, ""

    t0 = time.perf_counter()
    cache = None
    if kv_cache:
        cache = make_cache(model, max_kv_size)
        logits = _prefill(model, cache, prompt)
        y = pick(logits, len(prompt))
        stats.prefill_s = time.perf_counter() - t0
    index = 0
    while True:
        ts = time.perf_counter()
        drafts = drafter.draft(seq if wants_bos else seq[skip:], k) if k else []
        drafts = [int(t) for t in drafts[:k]]
        td = time.perf_counter()
        fast = False
        if kv_cache:
            if drafts and drafts[0] == y:
                snap = _snapshot(cache)
                preds = pick(model(mx.array(drafts)[None], cache=cache)[0], len(seq) + 1)
                a = 1
                while a < len(drafts) and preds[a - 1] == drafts[a]:
                    a += 1
                emitted, accepted, own = drafts[:a], a, None
                _rollback(model, cache, len(drafts), drafts[:a], snap)
                y_next, passed = preds[a - 1], len(drafts)
            else:
                emitted, accepted, own, fast = [y], 0, y, bool(drafts)
                y_next, passed = None, 0
        else:
            logits = model(mx.array(seq + drafts)[None])[0, len(seq) - 1:]
            preds = pick(logits, len(seq))
            a = 0
            while a < len(drafts) and preds[a] == drafts[a]:
                a += 1
            emitted, accepted, own = drafts[:a] + [preds[a]], a, preds[a]
            passed = len(seq) + len(drafts)
        kept, reason = finish(emitted)
        accepted = min(accepted, len(kept))
        if own is not None and own not in kept:
            own = None
        seq.extend(kept)
        produced += len(kept)
        if kv_cache and not reason and y_next is None:
            # fast path or plain step: one 1-token pass gives the next token's logits
            y_next = pick(model(mx.array([y])[None], cache=cache)[0, -1], len(seq))
            passed = 1
        te = time.perf_counter()
        step = Step(index, drafts, accepted, kept, own, fast, passed, td - ts, te - td, te - ts,
                    finished=bool(reason), stop_reason=reason)
        stats.add(step)
        drafter.accept(kept)
        if observe is not None:
            observe(step, kv_cache)
        yield step
        if reason:
            return
        if kv_cache:
            y = y_next
        index += 1


def generate(model, prompt, drafter=None, **kw):
    """All tokens and the Stats of one generation (see generate_steps)."""
    stats = Stats()
    tokens = []
    for step in generate_steps(model, prompt, drafter, stats=stats, **kw):
        tokens.extend(step.emitted)
    return tokens, stats

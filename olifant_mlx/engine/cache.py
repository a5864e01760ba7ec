"""The verifier's KV cache: making it, prefilling it, and rolling it back after a pass.

Plain KV layers are trimmed. Rotating windows (`max_kv_size`, Gemma 3's sliding layers) stop
being trimmable once they wrap: they are restored from a snapshot of their public `state`
taken before the pass and the accepted tokens re-fed, so rejected drafts never stay cached.
"""
from __future__ import annotations

import weakref

from olifant_mlx.engine.forward import Forward, run
from olifant_mlx.mlx_setup import mx

PREFILL_CHUNK = 512          # prompt tokens a prefill pass feeds


def make_cache(model, max_kv_size: int | None = None):
    """The model's own cache; with max_kv_size, plain KV layers become rotating windows."""
    from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache

    cache = make_prompt_cache(model)
    if max_kv_size:
        cache = [RotatingKVCache(max_size=max_kv_size) if type(c) is KVCache else c for c in cache]
    return cache


def prefill(model, cache, prompt, chunk: int = PREFILL_CHUNK, on_progress=None):
    """Feed all but the last prompt token in chunks, then the last: its logits (vocab,)."""
    last = None
    for forward in prefill_passes(cache, prompt, chunk, on_progress):
        last = run(model, forward)
    return last[-1]


def prefill_passes(cache, prompt, chunk: int = PREFILL_CHUNK, on_progress=None):
    """prefill's passes (engine.forward: Forwards, run by whoever drives them); returns the
    last prompt token's logits (vocab,). Each chunk's cache is evaluated before the next."""
    n = len(prompt) - 1
    for i in range(0, n, chunk):
        yield Forward(list(prompt[i:min(i + chunk, n)]), cache)
        mx.eval([c.state for c in cache])
        if on_progress is not None:
            on_progress(min(i + chunk, n), len(prompt))
    last = Forward(list(prompt[-1:]), cache)
    yield last
    return last.logits[-1]


def snapshot(cache) -> list:
    """Rotating layers' state before a multi-token pass (which replaces, not mutates, their
    arrays); None for layers that can simply be trimmed."""
    from mlx_lm.models.cache import RotatingKVCache

    return [c.state if isinstance(c, RotatingKVCache) else None for c in cache]


def rollback(cache, passed: int, keep: list, snap):
    """Drop the last passed - len(keep) tokens of a pass of `passed` tokens from the cache: a
    generator of the passes that takes (engine.forward: a wrapped rotating window re-fed)."""
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
    for c, state in zip(cache, snap):
        if state is not None:
            c.state = state
        elif c.trim(passed) != passed:
            raise RuntimeError("KV cache could not be rolled back")
    if keep:
        refeed = Forward(list(keep), cache)
        yield refeed
        mx.eval(refeed.logits)


# ---- reuse between generations (a conversation's turns, a server's requests) ---------------

class SameObject:
    """A key part equal only to a key part of the same live object: a cache kept for a model
    that is gone (a verifier replaced in the TUI) never matches a new one at the same address."""
    __slots__ = ("ref", "hash")

    def __init__(self, obj):
        self.ref, self.hash = weakref.ref(obj), id(obj)

    def __eq__(self, other):
        return isinstance(other, SameObject) and self.ref() is not None and self.ref() is other.ref()

    def __hash__(self):
        return self.hash


def cache_key(model, max_kv_size=None, quantized=None) -> tuple:
    """What a kept cache must have been made for to be reused: this model and this kind of
    cache (window; quantization: bits, group size, start)."""
    return (SameObject(model), max_kv_size) + ((tuple(quantized),) if quantized else ())


def quantize(cache, bits, group_size, start) -> bool:
    """mlx-lm's maybe_quantize_kv_cache: plain KV layers holding `start` tokens or more become
    QuantizedKVCache (in place, between passes); whether that has happened."""
    from mlx_lm.models.cache import KVCache

    done = False
    for i, c in enumerate(cache):
        if type(c) is KVCache and c.offset >= start:
            cache[i] = c.to_quantized(group_size=group_size, bits=bits)
            done = True
    return done


def held_tokens(layers) -> int:
    """How many tokens a cache holds (its layers agree; the first with an offset says)."""
    for c in layers:
        if hasattr(c, "offset"):
            return int(c.offset)
    return 0


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def reuse(layers, tokens, prompt):
    """`layers` (holding `tokens`) trimmed to the longest prefix they share with `prompt`, and
    its length; (None, 0) when nothing can be reused exactly. At least the prompt's last token
    is always left to feed (its logits start the generation). A rotating window is reused only
    while it has not wrapped and the whole prompt fits it: a longer prompt read fresh slides
    its window chunk by chunk, which a reused one would not repeat. A quantized cache is not
    reused: read fresh, the prompt's tokens attend to unquantized keys."""
    from mlx_lm.models.cache import RotatingKVCache, can_trim_prompt_cache, trim_prompt_cache

    from mlx_lm.models.cache import QuantizedKVCache

    n = min(common_prefix(tokens, prompt), len(prompt) - 1)
    if n <= 0 or not can_trim_prompt_cache(layers):
        return None, 0
    if any(isinstance(c, QuantizedKVCache) for c in layers):
        return None, 0        # a fresh prefill reads the prompt unquantized, then quantizes
    if any(isinstance(c, RotatingKVCache) and c.max_size < len(prompt) for c in layers):
        return None, 0
    drop = len(tokens) - n
    if drop and trim_prompt_cache(layers, drop) != drop:
        return None, 0
    return layers, n


def settle(layers, seq):
    """After a generation: (the tokens `layers` hold, layers) with anything fed past `seq`
    (an EOS, drafts accepted after it) trimmed off; None when that cannot be done."""
    from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

    n = held_tokens(layers)
    if not can_trim_prompt_cache(layers):
        return None
    if n > len(seq):
        if trim_prompt_cache(layers, n - len(seq)) != n - len(seq):
            return None
        n = len(seq)
    return list(seq[:n]), layers


class PromptCache:
    """One conversation's KV cache, kept from one generation to the next (chat turns): the
    next generation takes it over (a conversation runs one generation at a time) and gives it
    back at its end. `key` is what the cache was made for (the model, the cache's kind)."""

    def __init__(self):
        self.entry = None          # (key, tokens, layers)

    def take(self, key, prompt):
        entry, self.entry = self.entry, None
        if entry is None or entry[0] != key:
            return None, 0
        return reuse(entry[2], entry[1], prompt)

    def keep(self, key, tokens, layers) -> None:
        self.entry = (key, tokens, layers)

    def clear(self) -> None:
        self.entry = None

    @property
    def tokens(self) -> list:
        return list(self.entry[1]) if self.entry else []


def cache_bytes(layers) -> int:
    return sum(int(getattr(c, "nbytes", 0) or 0) for c in layers)


class PrefixCache:
    """A server's caches across requests: the most recently used ones, at most `max_entries`
    and `max_bytes` in all (least recently used evicted first). A request gets a copy of the
    entry sharing the longest prefix with its prompt, so no two requests share a mutable
    cache; an entry that another one extends is dropped (the longer one serves both)."""

    def __init__(self, max_entries: int = 8, max_bytes: int = 1 << 30):
        import collections
        import threading

        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.entries = collections.OrderedDict()     # (key, tokens tuple) -> layers
        self.lock = threading.Lock()

    def take(self, key, prompt):
        import copy

        with self.lock:
            best, n = None, 0
            for k, tokens in self.entries:
                if k == key:
                    m = common_prefix(tokens, prompt)
                    if m > n:
                        best, n = (k, tokens), m
            if best is None:
                return None, 0
            self.entries.move_to_end(best)
            layers = copy.deepcopy(self.entries[best])
        return reuse(layers, best[1], prompt)

    def keep(self, key, tokens, layers) -> None:
        size = cache_bytes(layers)
        if self.max_entries < 1 or size > self.max_bytes:
            return
        tokens = tuple(tokens)
        with self.lock:
            for k, t in list(self.entries):
                if k == key and t == tokens[:len(t)]:
                    del self.entries[(k, t)]
            self.entries[(key, tokens)] = layers
            while len(self.entries) > self.max_entries or self.nbytes > self.max_bytes:
                self.entries.popitem(last=False)

    @property
    def nbytes(self) -> int:
        return sum(cache_bytes(v) for v in self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

"""The verifier's KV cache: making it, prefilling it, and rolling it back after a pass.

Plain KV layers are trimmed. Rotating windows (`max_kv_size`, Gemma 3's sliding layers) stop
being trimmable once they wrap: they are restored from a snapshot of their public `state`
taken before the pass and the accepted tokens re-fed, so rejected drafts never stay cached.
"""
from __future__ import annotations

from olifant_mlx.mlx_setup import mx


def make_cache(model, max_kv_size: int | None = None):
    """The model's own cache; with max_kv_size, plain KV layers become rotating windows."""
    from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache

    cache = make_prompt_cache(model)
    if max_kv_size:
        cache = [RotatingKVCache(max_size=max_kv_size) if type(c) is KVCache else c for c in cache]
    return cache


def prefill(model, cache, prompt, chunk: int = 512, on_progress=None):
    """Feed all but the last prompt token in chunks, then the last: its logits (vocab,)."""
    n = len(prompt) - 1
    for i in range(0, n, chunk):
        model(mx.array(prompt[i:min(i + chunk, n)])[None], cache=cache)
        mx.eval([c.state for c in cache])
        if on_progress is not None:
            on_progress(min(i + chunk, n), len(prompt))
    return model(mx.array(prompt[-1:])[None], cache=cache)[0, -1]


def snapshot(cache) -> list:
    """Rotating layers' state before a multi-token pass (which replaces, not mutates, their
    arrays); None for layers that can simply be trimmed."""
    from mlx_lm.models.cache import RotatingKVCache

    return [c.state if isinstance(c, RotatingKVCache) else None for c in cache]


def rollback(model, cache, passed: int, keep: list, snap) -> None:
    """Drop the last passed - len(keep) tokens of a pass of `passed` tokens from the cache."""
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
        mx.eval(model(mx.array(keep)[None], cache=cache))

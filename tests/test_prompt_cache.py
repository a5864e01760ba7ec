"""Prompt cache reuse: a generation that starts from an earlier one's KV cache prefills only the
new tokens and emits exactly what a fresh generation on the whole prompt emits."""
import numpy as np
import pytest

from olifant_mlx.drafters import AdaptiveDrafter, HybridDrafter, NgramDrafter, NoDrafter, OlifantDrafter
from olifant_mlx.engine import PrefixCache, PromptCache, Stats, generate, generate_steps
from olifant_mlx.engine.loop import script_options
from olifant_mlx.engine import cache as kv
from tiny_models import VOCAB, head64_llama, igtree_on_own_output, tiny_llama


def fresh_drafters(olifant):
    return {"none": NoDrafter, "olifant": lambda: OlifantDrafter(olifant), "ngram": NgramDrafter,
            "hybrid": lambda: HybridDrafter(OlifantDrafter(olifant, min_depth=1, min_share=0.2)),
            "adaptive-hybrid": lambda: AdaptiveDrafter(HybridDrafter(OlifantDrafter(olifant)))}


def turns(model, drafter, store, kv_cache=True, max_kv_size=None, n=5, k=4, eos=()):
    """A conversation of n turns: each prompt is the last prompt, its output and new tokens
    (every third turn also rewrites a token in the middle of the output, as a chat template
    re-rendering the answer might: the cache is trimmed back to it). Per turn: (tokens with the
    cache, tokens fresh, tokens taken from the cache, prompt length)."""
    rng = np.random.default_rng(7)
    prompt = rng.integers(1, VOCAB, size=9).tolist()
    out = []
    for turn in range(n):
        stats = Stats()
        got = [t for s in generate_steps(model, prompt, drafter(),
                                         script_options(k=k, max_tokens=12, kv_cache=kv_cache, max_kv_size=max_kv_size),
                                         stats=stats, prompt_cache=store, eos_ids=eos)
               for t in s.emitted]
        want, _ = generate(model, prompt, drafter(), k=k, max_tokens=12, kv_cache=kv_cache,
                           max_kv_size=max_kv_size, eos_ids=eos)
        out.append((got, want, stats.extra.get("cached_tokens"), len(prompt)))
        answer = list(got)
        if turn % 3 == 2 and got:
            answer[len(got) // 2] = got[len(got) // 2] % (VOCAB - 1) + 1
        prompt = prompt + answer + rng.integers(1, VOCAB, size=3 + turn).tolist()
    return out


@pytest.mark.parametrize("name", ["none", "olifant", "ngram", "hybrid", "adaptive-hybrid"])
def test_reused_cache_gives_the_fresh_output(model, olifant, name):
    store = PromptCache()
    result = turns(model, fresh_drafters(olifant)[name], store)
    for i, (got, want, cached, n_prompt) in enumerate(result):
        assert got == want, f"turn {i}"
        if i == 0:
            assert cached == 0
        else:       # the previous prompt and (most of) its answer were not prefilled again
            assert n_prompt - 3 - i - 12 <= cached < n_prompt, f"turn {i}: {cached} of {n_prompt}"
    assert store.entry is not None


def test_reuse_after_an_eos_trims_what_was_fed_past_it(model, olifant):
    """An EOS (not emitted) may have been fed to the cache: the kept cache holds only the sequence."""
    plain = turns(model, NoDrafter, PromptCache(), n=1)[0][1]
    eos = (plain[5],)
    store = PromptCache()
    for got, want, _, _ in turns(model, fresh_drafters(olifant)["olifant"], store, eos=eos, n=4):
        assert got == want
    tokens, layers = store.entry[1], store.entry[2]
    assert kv.held_tokens(layers) == len(tokens)


def test_uncached_regime_ignores_the_cache(model, olifant):
    store = PromptCache()
    for got, want, cached, _ in turns(model, fresh_drafters(olifant)["hybrid"], store, kv_cache=False, n=3):
        assert got == want and cached is None
    assert store.entry is None


@pytest.mark.parametrize("window", [256, 24])
def test_rotating_window_reuses_only_what_it_can(model, olifant, window):
    """A window the conversation fits is reused; one it outgrows falls back to a fresh prefill."""
    store = PromptCache()
    result = turns(model, fresh_drafters(olifant)["olifant"], store, max_kv_size=window, n=4)
    for i, (got, want, cached, n_prompt) in enumerate(result):
        assert got == want
        assert (cached == 0) == (i == 0 or n_prompt > window), f"turn {i}: {cached} of {n_prompt}"
    assert any(n > window for *_, n in result) == (window == 24)


def test_a_cache_made_for_another_model_or_window_is_not_used(model):
    store = PromptCache()
    prompt = list(range(1, 12))
    list(generate_steps(model, prompt, None, script_options(max_tokens=4), prompt_cache=store))
    other = tiny_llama(3)
    stats = Stats()
    got = [t for s in generate_steps(other, prompt + [5], None, script_options(max_tokens=4), prompt_cache=store,
                                     stats=stats)
           for t in s.emitted]
    assert stats.extra["cached_tokens"] == 0 and got == generate(other, prompt + [5], max_tokens=4)[0]
    stats = Stats()
    list(generate_steps(other, prompt + [5, 6], None, script_options(max_tokens=4, max_kv_size=100), prompt_cache=store,
                        stats=stats))
    assert stats.extra["cached_tokens"] == 0


def test_a_generation_closed_early_keeps_its_cache(model):
    store = PromptCache()
    prompt = list(range(1, 12))
    steps = generate_steps(model, prompt, None, script_options(max_tokens=20), prompt_cache=store)
    emitted = [t for _, s in zip(range(3), steps) for t in s.emitted]
    steps.close()
    assert store.tokens == (prompt + emitted)[:len(store.tokens)] and len(store.tokens) >= len(prompt)
    got = [t for s in generate_steps(model, prompt + emitted, None, script_options(max_tokens=5),
                                     prompt_cache=store) for t in s.emitted]
    assert got == generate(model, prompt + emitted, max_tokens=5)[0]


def test_prefix_cache_copies_evicts_and_bounds(model):
    store = PrefixCache(max_entries=2)
    a, b, c = [list(range(1, 10)), list(range(20, 30)), list(range(30, 40))]
    for p in (a, b):
        list(generate_steps(model, p, None, script_options(max_tokens=3), prompt_cache=store))
    assert len(store) == 2
    # two requests extending a: each gets its own copy, both exact
    key = kv.cache_key(model)
    first, n1 = store.take(key, a + [3, 4])
    second, n2 = store.take(key, a + [3, 4])
    assert n1 == n2 >= len(a) - 1 and first is not second and first[0] is not second[0]
    list(generate_steps(model, c, None, script_options(max_tokens=3),
                        prompt_cache=store))      # evicts b (a was used later)
    assert len(store) == 2 and store.take(key, b + [1])[1] == 0 and store.take(key, a + [1])[1] > 0
    for p in (a + [7, 8, 9], b + [1, 2]):
        got = [t for s in generate_steps(model, p, None, script_options(max_tokens=6),
                                         prompt_cache=store) for t in s.emitted]
        assert got == generate(model, p, max_tokens=6)[0]
    # an entry extended by a later one is dropped: the longer one serves both
    assert not any(t == tuple(a) for _, t in store.entries)
    tiny = PrefixCache(max_entries=4, max_bytes=1)
    list(generate_steps(model, a, None, script_options(max_tokens=3), prompt_cache=tiny))
    assert len(tiny) == 0


# ---- a prompt's cache in a file (cache-prompt, generate --prompt-cache-file) -----------------

def test_a_prompt_cache_file_round_trips_and_continues_exactly(model, olifant, tmp_path):
    import os

    from mlx_lm.models.cache import load_prompt_cache

    from olifant_mlx.engine import prompt_file
    from tiny_models import Tok, tiny_verifier

    v = tiny_verifier()
    cached = list(range(3, 20))
    layers = kv.make_cache(v.model)
    kv.prefill(v.model, layers, cached)
    path = tmp_path / "p.safetensors"
    prompt_file.save(path, layers, cached, v)
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.listdir(tmp_path) == ["p.safetensors"]
    assert len(load_prompt_cache(str(path))) == len(layers)          # mlx-lm reads it
    got_layers, tokens = prompt_file.load(path, Tok(), v.model)
    assert tokens == cached
    store = PromptCache()
    store.keep(kv.cache_key(v.model), tokens, got_layers)
    full = cached + [7, 8, 9]
    stats = Stats()
    got = [t for s in generate_steps(v.model, full, OlifantDrafter(olifant), script_options(k=4, max_tokens=10),
                                     prompt_cache=store, stats=stats) for t in s.emitted]
    assert stats.extra["cached_tokens"] == len(cached)
    assert got == generate(v.model, full, max_tokens=10)[0]


def test_a_prompt_cache_file_that_cannot_be_used_is_refused_naming_it(tmp_path):
    from mlx_lm.models.cache import save_prompt_cache

    from olifant_mlx.engine import prompt_file
    from tiny_models import Tok, tiny_verifier

    v = tiny_verifier()
    layers = kv.make_cache(v.model)
    kv.prefill(v.model, layers, [1, 2, 3])
    path = tmp_path / "p.safetensors"
    prompt_file.save(path, layers, [1, 2, 3], v)

    class Other(Tok):
        name, digest = "other", bytes([1] * 32)

    theirs = tmp_path / "mlx.safetensors"
    save_prompt_cache(str(theirs), layers, {"model": "x", "tokenizer_config": "{}"})
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a cache")
    cases = [(lambda: prompt_file.check(path, Other()), "made for another model (tiny), not other"),
             (lambda: prompt_file.check(theirs, Tok()), "mlx_lm.cache_prompt"),
             (lambda: prompt_file.check(junk, Tok()), "not a prompt cache file"),
             (lambda: prompt_file.check(tmp_path / "none.safetensors", Tok()), "no such file"),
             (lambda: prompt_file.check(tmp_path / "p.bin", Tok()), ".safetensors"),
             (lambda: prompt_file.load(path, Tok(), v.model, max_kv_size=64), "--max-kv-size"),
             (lambda: prompt_file.load(path, Tok(), tiny_llama(0, layers=3)), "another model")]
    for call, words in cases:
        with pytest.raises(prompt_file.PromptFileError) as e:
            call()
        assert words in str(e.value) and ".safetensors" in str(e.value), str(e.value)


# ---- a quantized KV cache (--kv-bits) -------------------------------------------------------

@pytest.fixture(scope="module")
def qmodel():
    return head64_llama()


@pytest.fixture(scope="module")
def qolifant(qmodel):
    return igtree_on_own_output(qmodel)


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
def test_speculation_on_a_quantized_cache_equals_plain_on_it(qmodel, qolifant):
    """Exact against plain decoding with the same quantized cache, wherever the switch falls:
    after the prefill, or inside the answer (passes stop at it, so it comes at the same token)."""
    rng = np.random.default_rng(3)
    changed = 0
    for bits in (4, 8):
        for start in (0, 10, 20, 5000):
            for n in (5, 12, 30):
                p = rng.integers(1, VOCAB, size=n).tolist()
                q = dict(kv_bits=bits, quantized_kv_start=start, max_tokens=40)
                plain, _ = generate(qmodel, p, **q)
                changed += plain != generate(qmodel, p, max_tokens=40)[0]
                for d in (lambda: OlifantDrafter(qolifant), NgramDrafter,
                          lambda: HybridDrafter(OlifantDrafter(qolifant))):
                    for k in (1, 4, 8):
                        assert generate(qmodel, p, d(), k=k, **q)[0] == plain, (bits, start, n, k)
    assert changed > 0           # the quantization is real: it changes the output somewhere


def test_a_quantized_cache_is_trimmed_on_rollback_and_not_reused(qmodel, qolifant):
    from mlx_lm.models.cache import QuantizedKVCache

    store = PromptCache()
    p = list(range(1, 15))
    stats = Stats()
    list(generate_steps(qmodel, p, OlifantDrafter(qolifant),
                        script_options(k=8, max_tokens=30, kv_bits=8, quantized_kv_start=0), prompt_cache=store,
                        stats=stats))
    assert stats.steps < 30 and all(isinstance(c, QuantizedKVCache) for c in store.entry[2])
    assert kv.held_tokens(store.entry[2]) == len(store.tokens)
    # the next turn reads its prompt afresh: a fresh prefill reads it unquantized first
    nxt = store.tokens + [4, 5, 6]
    stats = Stats()
    got = [t for s in generate_steps(qmodel, nxt, None,
                                     script_options(k=0, max_tokens=8, kv_bits=8, quantized_kv_start=0),
                                     prompt_cache=store, stats=stats) for t in s.emitted]
    assert stats.extra["cached_tokens"] == 0
    assert got == generate(qmodel, nxt, max_tokens=8, kv_bits=8, quantized_kv_start=0)[0]


def test_kv_quantization_options_are_checked():
    from olifant_mlx.engine import GenerationOptions, OptionsError

    for bad, words in [(dict(kv_bits=7), "KV bits"), (dict(kv_bits=4, kv_group_size=48), "group size"),
                       (dict(kv_bits=4, quantized_kv_start=-1), "start"),
                       (dict(kv_bits=4, max_kv_size=64), "sliding window"),
                       (dict(kv_bits=4, kv_cache=False), "uncached")]:
        with pytest.raises(OptionsError, match=words):
            GenerationOptions(**bad)
    assert GenerationOptions(kv_bits=8, kv_group_size=32, quantized_kv_start=0).kv_bits == 8


def test_a_cache_of_a_model_that_is_gone_never_matches():
    import gc

    store = PrefixCache()
    m = tiny_llama(5)
    list(generate_steps(m, list(range(1, 12)), None, script_options(max_tokens=3), prompt_cache=store))
    key = next(iter(store.entries))[0]
    assert key == kv.cache_key(m)
    del m
    gc.collect()
    assert not key[0] == key[0] and all(key != kv.cache_key(tiny_llama(5)) for _ in range(3))

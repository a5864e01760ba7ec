"""Speculative decoding is output-preserving: every drafter, both regimes, many k."""
import numpy as np
import pytest
from mlx.utils import tree_map

from olifant_mlx.mlx_setup import mx
from olifant_mlx.drafters import (AdaptiveDrafter, HybridDrafter, LookupDrafter, NeuralDrafter,
                                  NgramDrafter, NoDrafter, OlifantDrafter, WordNgramDrafter)
from olifant_mlx.engine import Stats, generate, generate_steps
from olifant_mlx.igtree import Builder

VOCAB = 64


def tiny_llama(seed, layers=2):
    from mlx_lm.models import llama

    mx.random.seed(seed)
    args = llama.ModelArgs(model_type="llama", hidden_size=48, num_hidden_layers=layers,
                           intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                           rms_norm_eps=1e-5, vocab_size=VOCAB, tie_word_embeddings=True)
    model = llama.Model(args)
    # scaled weights: greedy output that neither loops at once nor never repeats
    model.update(tree_map(lambda p: p * 2.0, model.parameters()))
    mx.eval(model.parameters())
    return model


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    return [rng.integers(1, VOCAB, size=n).tolist() for n in (1, 5, 12, 30)]


@pytest.fixture(scope="module")
def olifant(model, prompts):
    """An IGTree trained on the tiny verifier's own greedy output: drafts get accepted."""
    b = Builder(vocab_size=VOCAB)
    rng = np.random.default_rng(1)
    for i in range(30):
        p = rng.integers(1, VOCAB, size=8).tolist()
        out, _ = generate(model, p, max_tokens=60)
        b.add_document(p + out)
    return b.build()


class CharTok:
    """Token i <-> one letter, for the word-level n-gram."""

    def decode(self, ids):
        return "".join(" " if i % 7 == 0 else chr(97 + i % 26) for i in ids)

    def encode(self, text):
        return [(ord(c) - 97) % 26 + 1 for c in text.strip()]


def drafters(model, olifant):
    yield NoDrafter()
    yield OlifantDrafter(olifant)
    yield NgramDrafter()
    yield LookupDrafter()
    yield WordNgramDrafter(CharTok())
    yield NeuralDrafter(tiny_llama(1, layers=1))
    yield HybridDrafter(OlifantDrafter(olifant, min_depth=1, min_share=0.2))
    yield AdaptiveDrafter(OlifantDrafter(olifant))


@pytest.mark.parametrize("kv", [True, False], ids=["kv", "uncached"])
def test_output_equals_plain_greedy(model, olifant, prompts, kv):
    for prompt in prompts:
        ref, _ = generate(model, prompt, max_tokens=40, kv_cache=True)
        assert len(ref) == 40
        for d in drafters(model, olifant):
            for k in (1, 3, 5, 8):
                out, st = generate(model, prompt, d, k=k, max_tokens=40, kv_cache=kv)
                assert out == ref, (d.name, k, kv)
                assert st.tokens == 40 and st.accepted <= st.drafted


def test_drafters_actually_get_accepted(model, olifant, prompts):
    for d in (OlifantDrafter(olifant), NgramDrafter(), LookupDrafter()):
        st = Stats()
        for p in prompts:
            _, s = generate(model, p, d, k=5, max_tokens=60)
            st.accepted += s.accepted
        assert st.accepted > 0, d.name


def test_eos_and_max_tokens_cut_drafts(model, olifant, prompts):
    prompt = prompts[2]
    ref, _ = generate(model, prompt, max_tokens=40)
    eos = ref[9]
    first = ref.index(eos)
    for kv in (True, False):
        for d in (NoDrafter(), OlifantDrafter(olifant), NgramDrafter(), LookupDrafter()):
            for k in (1, 3, 8):
                out, st = generate(model, prompt, d, k=k, max_tokens=40, kv_cache=kv, eos_ids=[eos])
                assert out == ref[:first] and st.stop_reason == "eos", (d.name, k, kv)
                for m in (1, 2, 7):
                    out, st = generate(model, prompt, d, k=k, max_tokens=m, kv_cache=kv)
                    assert out == ref[:m] and st.stop_reason == "max_tokens"


def test_rotating_cache_after_wrap(model, olifant, prompts):
    """A sliding KV window that wraps many times: rollback never corrupts it."""
    prompt = prompts[3]
    for size in (8, 20):
        ref, _ = generate(model, prompt, max_tokens=60, max_kv_size=size)
        for d in (OlifantDrafter(olifant), NgramDrafter(), LookupDrafter()):
            for k in (3, 8):
                out, st = generate(model, prompt, d, k=k, max_tokens=60, max_kv_size=size)
                assert out == ref, (size, d.name, k)


def test_steps_report_what_happened(model, olifant, prompts):
    steps = list(generate_steps(model, prompts[1], OlifantDrafter(olifant), k=4, max_tokens=30))
    assert sum(len(s.emitted) for s in steps) == 30 and steps[-1].finished
    for s in steps:
        assert s.accepted <= len(s.drafted) and s.emitted[:s.accepted] == s.drafted[:s.accepted]
        if s.fast_path:
            assert s.accepted == 0 and s.emitted == [s.verifier_token]
            assert s.forward_tokens == (0 if s.finished else 1)
    with pytest.raises(ValueError, match="k must be"):
        list(generate_steps(model, prompts[1], k=65))
    with pytest.raises(ValueError, match="empty prompt"):
        list(generate_steps(model, []))


def test_adaptive_length_follows_acceptance(model, olifant, prompts):
    d = AdaptiveDrafter(NgramDrafter())
    steps = list(generate_steps(model, prompts[3], d, k=8, max_tokens=80))
    lengths = [len(s.drafted) for s in steps if s.drafted]
    assert lengths and max(lengths) <= 8
    assert len(set(lengths)) > 1   # k varied with acceptance


def test_hybrid_prefers_in_session_matches(olifant):
    h = HybridDrafter(OlifantDrafter(olifant), min_match=2)
    ctx = [5, 6, 7, 8, 9, 10, 5, 6]
    assert h.draft(ctx, 3)[:3] == [7, 8, 9]            # the session's own continuation
    lone = [60, 61, 62, 63]
    assert h.draft(lone, 3) == OlifantDrafter(olifant).draft(lone, 3)   # IGTree fallback


def test_sampling_is_lossless(model, olifant, prompts):
    from olifant_mlx.engine import Sampling

    for seed in range(3):
        s = Sampling(temperature=0.9, top_p=0.95, seed=seed)
        ref, _ = generate(model, prompts[2], max_tokens=30, sampling=s)
        greedy, _ = generate(model, prompts[2], max_tokens=30)
        assert ref != greedy
        for kv in (True, False):
            for d in (OlifantDrafter(olifant), NgramDrafter(), LookupDrafter()):
                for k in (1, 4):
                    out, _ = generate(model, prompts[2], d, k=k, max_tokens=30, kv_cache=kv, sampling=s)
                    assert out == ref, (seed, kv, d.name, k)


def test_sampling_follows_the_model_distribution(model, prompts):
    """First sampled token over many seeds vs the softmax: a chi-square goodness-of-fit test."""
    from olifant_mlx.engine import Sampling

    prompt = prompts[1]
    probs = np.array(mx.softmax(model(mx.array(prompt)[None])[0, -1].astype(mx.float32)))
    n = 3000
    counts = np.bincount([generate(model, prompt, NgramDrafter(), k=3, max_tokens=1,
                                   sampling=Sampling(seed=s))[0][0] for s in range(n)],
                         minlength=VOCAB)
    expected = probs * n
    big = expected >= 5                       # pool the rare tokens into one cell
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    chi2 = float(((obs - exp) ** 2 / np.maximum(exp, 1e-9)).sum())
    dof = len(obs) - 1
    # 99.9th percentile of chi-square(dof) (Wilson-Hilferty), so a correct sampler fails 0.1 %
    z = 3.09
    crit = dof * (1 - 2 / (9 * dof) + z * (2 / (9 * dof)) ** 0.5) ** 3
    assert chi2 < crit, (chi2, crit, dof)
    # and a wrong distribution (greedy) is rejected by the same test
    greedy = np.zeros(VOCAB)
    greedy[int(np.argmax(probs))] = n
    obs_g = np.append(greedy[big], greedy[~big].sum())
    assert float(((obs_g - exp) ** 2 / np.maximum(exp, 1e-9)).sum()) > crit

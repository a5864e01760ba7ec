"""Speculative decoding is output-preserving: every drafter, both regimes, many k."""
import numpy as np
import pytest

from olifant_mlx.drafters import (Draft, HybridDrafter, LookupDrafter, NgramDrafter,
                                  NoDrafter, OlifantDrafter, Signal)
from olifant_mlx.drafters.adaptive import AcceptanceEstimate, AdaptiveDrafter, best_length
from olifant_mlx.drafters.costs import PassCost
from olifant_mlx.engine import Stats, generate, generate_steps
from olifant_mlx.engine.loop import script_options
from olifant_mlx.mlx_setup import mx
from tiny_models import VOCAB, CharTok, drafters, igtree_on_own_output, tiny_llama  # noqa: F401 (kept importable)

@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
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


class Oracle:
    """Drafts the verifier's own continuation (`ref`, after `prompt`): every draft is accepted."""
    name = "oracle"

    def __init__(self, prompt, ref):
        self.prompt, self.ref = prompt, ref

    def start(self, p):
        pass

    def draft(self, context, k):
        done = len(context) - len(self.prompt)
        return self.ref[done:done + k]

    def accept(self, tokens):
        pass


def test_an_eos_past_max_tokens_is_never_reached(model, prompts):
    # a pass's accepted drafts may run past max_tokens with an EOS beyond it: max_tokens comes
    # first, as in plain decoding (a batched server request once returned 75 of its 64 tokens)
    prompt = prompts[2]
    ref, _ = generate(model, prompt, max_tokens=40)
    eos = ref[20]
    first = ref.index(eos)
    assert first > 3
    for kv in (True, False):
        for k in (8, 16, 32):
            for m in (1, first - 2, first - 1, first):
                out, st = generate(model, prompt, Oracle(prompt, ref), k=k, max_tokens=m, kv_cache=kv, eos_ids=[eos])
                assert out == ref[:m] and st.tokens == m and st.stop_reason == "max_tokens", (k, m, kv)
            out, st = generate(model, prompt, Oracle(prompt, ref), k=k, max_tokens=first + 1, kv_cache=kv,
                               eos_ids=[eos])
            assert out == ref[:first] and st.stop_reason == "eos", (k, kv)


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
    steps = list(generate_steps(model, prompts[1], OlifantDrafter(olifant), script_options(k=4, max_tokens=30)))
    assert sum(len(s.emitted) for s in steps) == 30 and steps[-1].finished
    for s in steps:
        assert s.accepted <= len(s.drafted) and s.emitted[:s.accepted] == s.drafted[:s.accepted]
        if s.fast_path:
            assert s.accepted == 0 and s.emitted == [s.verifier_token]
            assert s.forward_tokens == (0 if s.finished else 1)
    with pytest.raises(ValueError, match="k must be"):
        list(generate_steps(model, prompts[1], None, script_options(k=65)))
    with pytest.raises(ValueError, match="empty prompt"):
        list(generate_steps(model, [], None, script_options()))


def test_a_drafters_learning_counts_as_its_time(model, olifant, prompts):
    """What a drafter does with a pass (accept, observe) is drafting time, in every step."""
    import time

    class SlowLearner(NgramDrafter):
        def observe(self, step, kv_cache):
            time.sleep(0.02)

    for kv in (True, False):
        steps = list(generate_steps(model, prompts[1], SlowLearner(), script_options(k=3, max_tokens=6, kv_cache=kv)))
        for s in steps:
            assert s.draft_s >= 0.02 and s.step_s >= s.draft_s + s.verify_s - 1e-9


def test_adaptive_length_follows_acceptance(model, olifant, prompts):
    d = AdaptiveDrafter(NgramDrafter())
    steps = list(generate_steps(model, prompts[3], d, script_options(k=8, max_tokens=80)))
    lengths = [len(s.drafted) for s in steps if s.drafted]
    assert lengths and max(lengths) <= 8
    assert len(set(lengths)) > 1   # k varied with acceptance
    assert not d.lengths           # the generation drafted with its own state, not the drafter


def test_best_length_by_hand():
    cost = lambda x: 1 + 0.1 * (x - 1)          # noqa: E731  a 1-token pass costs 1
    p = [0.9, 0.9, 0.9, 0.1]
    # KV: j=2: 1.81 / 1.09 = 1.66; j=3: 2.539 / 1.18 = 2.15; j=4: 2.612 / 1.27 = 2.06
    assert best_length(p, cost, kv_cache=True) == 3
    assert best_length([0.01] * 4, cost, kv_cache=True) == 1    # the first check is free
    assert best_length([], cost, kv_cache=True) == 0
    # uncached, 10 tokens of context: j=0: 1 / 1.9; j=1: 1.01 / 2.0 -> no draft is worth it
    assert best_length([0.01] * 4, cost, kv_cache=False, context_len=10) == 0
    # ... but the same 0.9s are: j=3: 3.439 / 2.2 = 1.563 > j=4: 3.512 / 2.3 = 1.527
    assert best_length(p, cost, kv_cache=False, context_len=10) == 3


def test_acceptance_estimate_learns_backs_off_and_forgets():
    est = AcceptanceEstimate(prior=0.5, strength=2.0, half_life=10)
    assert est.p(Signal("igtree", 4, 3)) == 0.5
    for _ in range(20):
        est.update(Signal("igtree", 4, 3), True)
        est.update(Signal("igtree", 1, 0), False)
        est.tick()
    assert est.p(Signal("igtree", 4, 3)) > 0.8 and est.p(Signal("igtree", 1, 0)) < 0.2
    assert abs(est.p(Signal("igtree", 2, 2)) - 0.5) < 0.05      # unseen: the source's rate (half)
    assert est.p(Signal("lookup", 3)) == 0.5
    for _ in range(200):
        est.tick()
    assert abs(est.p(Signal("igtree", 1, 0)) - 0.5) < 0.02      # unused evidence decays to the prior
    with pytest.raises(ValueError, match="prior"):
        AcceptanceEstimate(prior=1.0)


def test_pass_cost_fits_time_per_token():
    cost = PassCost(rel_slope=0.1)
    assert cost.coefficients() == (1.0, 0.1)
    for _ in range(200):
        for x in (1, 3, 5, 9, 1, 1):
            cost.observe(x, 0.020 + 0.003 * x)
    a, b = cost.coefficients()
    assert abs(a - 0.020) < 1e-3 and abs(b - 0.003) < 2e-4
    cost.observe(0, 1.0)                                  # a finished step with no pass: ignored
    assert cost.coefficients() == (a, b)


def test_pass_cost_is_the_real_passes_once_their_lengths_spread():
    """Passes of 1 and 4 tokens only (a led chain): the pseudo-pass of 9 tokens from the prior
    must not flatten the slope the real passes show (Gemma-3-270M: 0.26 s and 0.45 s)."""
    cost = PassCost(rel_slope=0.1)
    cost.observe(1, 0.26)
    assert cost.coefficients()[1] / cost.coefficients()[0] == pytest.approx(0.1, rel=0.15)   # the prior
    for x in (1, 1, 4) + (4,) * 20:
        cost.observe(x, 0.20 + 0.06 * (x - 1) + 0.06)
    a, b = cost.coefficients()
    assert a == pytest.approx(0.20, abs=0.01) and b == pytest.approx(0.06, abs=0.005)


class ScriptedDrafter(NoDrafter):
    """Proposes 1..8 with signals: the first `good` tokens of a draft are the verifier's."""
    name = "scripted"

    def __init__(self, good):
        self.good = good

    def draft_scored(self, context, k):
        return Draft(list(range(1, k + 1)), [Signal("s", 1) if i < self.good else Signal("s", 0)
                                             for i in range(k)])


def run_scripted(d, kv, steps=60, context_len=50, start=True):
    """Feed the adaptive drafter passes as the engine would; returns the kept lengths."""
    from olifant_mlx.engine import Step

    if start:
        d.start([])
    lengths = []
    for i in range(steps):
        truth = list(range(1, d.inner.good + 1)) + [0] * 8     # the verifier's tokens
        drafts = d.draft([0] * context_len, 8)
        j = len(drafts)
        accepted = min(j, d.inner.good)
        passed = (j if accepted else 1) if kv else context_len + j
        lengths.append(j)
        # a partial pass emits its correction; a fully accepted one holds the next token back
        emitted = truth[:accepted + (accepted < j or not kv)] or truth[:1]
        d.observe(Step(index=i, drafted=drafts, accepted=accepted, emitted=emitted,
                       verifier_token=None, fast_path=kv and not accepted and j > 0,
                       forward_tokens=passed, draft_s=0.0,
                       verify_s=0.01 * (1 + 0.1 * (passed - 1)), step_s=0.0), kv)
    return lengths


@pytest.mark.parametrize("kv", [True, False], ids=["kv", "uncached"])
def test_adaptive_keeps_what_gets_accepted(kv):
    lengths = run_scripted(AdaptiveDrafter(ScriptedDrafter(good=3)), kv)
    assert lengths[0] > 3                                    # an optimistic start ...
    assert set(lengths[-20:]) <= {3, 4} and lengths[-20:].count(3) >= 10   # ... then 3, probing 4
    # the length choice alone: the guard would pause these useless drafts (tests/test_auto.py)
    d = AdaptiveDrafter(ScriptedDrafter(good=0), guard=False)
    lengths = run_scripted(d, kv, steps=200)
    if kv:
        assert set(lengths[20:]) == {1}        # only the free first check is kept
    else:
        assert set(lengths[20:]) == {0}        # drafting pauses ...
    # ... but what it would have drafted is still scored against the verifier's tokens, so
    # when its drafts turn good it drafts again at once, without paying to probe
    d.inner.good = 3
    lengths = run_scripted(d, kv, steps=40, start=False)
    assert set(lengths[-20:]) <= {3, 4} and lengths[-20:].count(3) >= 10


def test_hybrid_prefers_in_session_matches(olifant):
    h = HybridDrafter(OlifantDrafter(olifant), min_match=2)
    ctx = [5, 6, 7, 8, 9, 10, 5, 6]
    assert h.draft(ctx, 3)[:3] == [7, 8, 9]            # the session's own continuation
    lone = [60, 61, 62, 63]
    assert h.draft(lone, 3) == OlifantDrafter(olifant).draft(lone, 3)   # IGTree fallback


def test_copy_signals_grow_with_agreement():
    from olifant_mlx.drafters import copy_signals

    tokens, signals = LookupDrafter(repeat=True).draft_scored([4, 1, 2, 3, 5, 4, 1, 2, 3], 6)
    assert tokens == [5, 4, 1, 2, 3, 5]
    assert [s.level for s in signals] == [4, 4, 4, 4, 8, 8]      # 4 agree; 5..8 once accepted
    assert [s.level for s in copy_signals("lookup", 30, 4)] == [16, 16, 32, 32]


def test_hybrid_falls_back_to_a_one_token_match(olifant):
    mute = OlifantDrafter(olifant, min_depth=5)                 # never confident enough
    assert HybridDrafter(mute).draft([5, 9, 5], 3) == [9, 5, 9]  # copies after the last 5
    assert HybridDrafter(mute, min_match=1).draft([5, 9, 7], 3) == []


class TwoWays(NoDrafter):
    """Two candidate drafts: "a" (listed first) is always wrong, "b" always right."""
    name = "two-ways"
    good = 3

    def candidates(self, context, k):
        return [Draft([9] * k, [Signal("a")] * k), Draft([1] * k, [Signal("b")] * k)]


def test_adaptive_learns_which_candidate_to_take():
    from olifant_mlx.engine import Step

    d = AdaptiveDrafter(TwoWays())
    d.start([])
    picked = []
    for i in range(40):
        drafts = d.draft([0] * 10, 4)
        accepted = len(drafts) if drafts[:1] == [1] else 0
        picked.append(drafts[:1])
        d.observe(Step(index=i, drafted=drafts, accepted=accepted, emitted=drafts[:accepted] or [1],
                       verifier_token=None, fast_path=False,
                       forward_tokens=len(drafts) if accepted else 1, draft_s=0.0, verify_s=0.01,
                       step_s=0.0), True)
    assert picked[0] == [9] and picked[-20:] == [[1]] * 20
    d.start([])                      # the next generation starts from what this one learnt
    assert d.draft([0] * 10, 4)[:1] == [1]
    fresh = AdaptiveDrafter(TwoWays())
    fresh.start([])
    assert fresh.draft([0] * 10, 4)[:1] == [9]


def test_what_a_generation_teaches_outlives_it(model, olifant, prompts):
    """The hybrid's and the adaptive drafter's estimates, on the real loop: a second generation
    starts from the first one's counts (kept in the drafter's own learning, no Session given),
    not from the prior; the drafter object itself is never written."""
    for d in (HybridDrafter(OlifantDrafter(olifant)), AdaptiveDrafter(HybridDrafter(OlifantDrafter(olifant)))):
        list(generate_steps(model, prompts[1], d, script_options(k=4, max_tokens=30)))
        assert not d.learner.acceptance.counts and d.learner.acceptance.step == 0
        kept = d.own.peek(d.keys[0])
        learner = kept if isinstance(d, HybridDrafter) else kept[0]
        tested = sum(c[1] for c in learner.acceptance.counts.values())
        assert tested > 0 and learner.acceptance.step > 0
        state = d.open(prompts[2])
        assert state.learner is not learner and state.learner.offered == []
        assert state.learner.acceptance.counts == learner.acceptance.counts


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_sampling_is_lossless(model, olifant, prompts):
    for seed in range(3):
        s = {"temperature": 0.9, "top_p": 0.95, "seed": seed}
        ref, _ = generate(model, prompts[2], max_tokens=30, **s)
        greedy, _ = generate(model, prompts[2], max_tokens=30)
        assert ref != greedy
        for kv in (True, False):
            for d in (OlifantDrafter(olifant), NgramDrafter(), LookupDrafter()):
                for k in (1, 4):
                    out, _ = generate(model, prompts[2], d, k=k, max_tokens=30, kv_cache=kv, **s)
                    assert out == ref, (seed, kv, d.name, k)


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
def test_sampling_follows_the_model_distribution(model, prompts):
    """First sampled token over many seeds vs the softmax: a chi-square goodness-of-fit test."""
    prompt = prompts[1]
    probs = np.array(mx.softmax(model(mx.array(prompt)[None])[0, -1].astype(mx.float32)))
    n = 3000
    counts = np.bincount([generate(model, prompt, NgramDrafter(), k=3, max_tokens=1,
                                   temperature=1.0, seed=s)[0][0] for s in range(n)],
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


OUT_OF_VOCABULARY_CHILD = """
import sys
from tiny_models import VOCAB, tiny_llama
from olifant_mlx.engine import generate

model = tiny_llama(0)
prompt = [3, 1, 4, 1, 5]
ref, _ = generate(model, prompt, max_tokens=12)


class Wild:
    '''The verifier's own next token first (so the KV regime runs the k-token pass), then junk.'''
    name = "wild"

    def __init__(self, junk):
        self.junk = junk

    def start(self, p):
        pass

    def draft(self, context, k):
        done = len(context) - len(prompt)
        return ref[done:done + 1] + [self.junk] * (k - 1)

    def accept(self, tokens):
        pass


for junk in (10**6, VOCAB, -1, 2**40):
    for kv in (True, False):
        out, st = generate(model, prompt, Wild(junk), k=4, max_tokens=12, kv_cache=kv)
        assert out == ref, (junk, kv)
        assert st.accepted > 0 and st.drafted < 4 * st.steps   # cut after the good first draft
for bad, why in (([1, 2, 10**6], "id 1000000 at position 2"), ([VOCAB], f"id {VOCAB} at position 0"),
                 ([-1, 2], "id -1 at position 0")):
    for kv in (True, False):
        try:
            generate(model, bad, max_tokens=3, kv_cache=kv)
        except ValueError as e:
            assert why in str(e) and "outside the verifier's vocabulary" in str(e), e
        else:
            raise AssertionError(f"prompt {bad} was accepted")
print("ok")
"""


def test_ids_outside_the_vocabulary_never_reach_the_model():
    """A drafter proposing 10**6 (or -1) after a good draft is cut there, both regimes, output
    unchanged; a prompt id outside the vocabulary is refused by name. In a child process: an
    unchecked id segfaults MLX's embedding lookup."""
    import subprocess
    import sys
    from pathlib import Path

    r = subprocess.run([sys.executable, "-c", OUT_OF_VOCABULARY_CHILD], capture_output=True,
                       text=True, cwd=Path(__file__).parent)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stderr[-2000:])


def test_vocabulary_size_is_found_on_mlx_lm_models():
    from olifant_mlx.engine.loop import model_vocab_size
    from olifant_mlx.engine.reference import ReferenceModel

    model = tiny_llama(5, layers=1)
    assert model_vocab_size(model) == VOCAB
    model.args.vocab_size = None                    # from the embedding alone
    assert model_vocab_size(model) == VOCAB
    model.args.vocab_size = 1000                    # the smaller of the two wins
    assert model_vocab_size(model) == VOCAB
    assert model_vocab_size(ReferenceModel([1, 2], 10)) == 10
    assert model_vocab_size(object()) is None

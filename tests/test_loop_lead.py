"""The KV regime after a partial acceptance: the correction leads the next pass (no drafter
re-proposes a token just rejected), the older rule still measurable, reference-text mode
stepping exactly like a real verifier, plain decoding token for token mlx-lm's."""
import pytest
from tiny_models import VOCAB, drafters, igtree_on_own_output, tiny_llama

from olifant_mlx.drafters import (AdaptiveDrafter, HybridDrafter, LookupDrafter, NgramDrafter,
                                  OlifantDrafter)
from olifant_mlx.drafters.base import Draft, DrafterBase, Signal
from olifant_mlx.engine import generate, generate_steps
from olifant_mlx.engine.loop import script_options
from olifant_mlx.engine.costs import LeadRule
from olifant_mlx.engine.reference import ReferenceModel
from olifant_mlx.engine.stats import Step
from olifant_mlx.measure.bench import FixedCost
from olifant_mlx.mlx_setup import mx


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0)


@pytest.fixture(scope="module")
def olifant(model):
    return igtree_on_own_output(model)


PROMPTS = [[3, 9, 4], list(range(5, 25)), [7, 7, 2, 40, 11, 3, 9, 30]]


def check_steps(steps):
    """What every Step of the KV regime promises, led passes included."""
    for prev, s in zip([None] + steps, steps):
        assert s.emitted[:s.accepted] == s.drafted[:s.accepted]
        assert len(s.emitted) <= s.accepted + 1
        if prev is not None:
            assert s.led == prev.next_led                  # next_led says what comes next
        if s.next_led:                                     # ... a correction, emitted at once
            assert s.verifier_token == s.emitted[-1] and s.accepted < len(s.drafted)
        if s.led:                                          # the correction and the drafts after it
            assert s.forward_tokens == 1 + len(s.drafted) and not s.fast_path
        assert not s.reproposed


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
@pytest.mark.parametrize("lead", [True, False], ids=["lead", "hold"])
def test_both_rules_give_the_plain_output(model, olifant, lead):
    for prompt in PROMPTS:
        ref, _ = generate(model, prompt, max_tokens=40)
        for d in drafters(model, olifant):
            for k in (1, 3, 8):
                steps = list(generate_steps(model, prompt, d, script_options(k=k, max_tokens=40, lead=lead)))
                assert [t for s in steps for t in s.emitted] == ref, (d.name, k, lead)
                if lead:
                    check_steps(steps)


def test_the_correction_leads_and_nothing_is_re_proposed(model, olifant):
    """The older rule spends the free check on the rejected token again; the new one never."""
    totals = {}
    for lead in (False, True):
        for d in (OlifantDrafter(olifant), LookupDrafter(), HybridDrafter(OlifantDrafter(olifant))):
            for prompt in PROMPTS:
                _, st = generate(model, prompt, d, k=3, max_tokens=60, lead=lead)
                t = totals.setdefault((lead, d.name), [0, 0, 0, 0])
                t[0] += st.partial_steps
                t[1] += st.reproposals
                t[2] += st.led_steps
                t[3] += st.steps
    for name in ("olifant", "lookup", "hybrid"):
        partial, reproposed, led, _ = totals[(False, name)]
        assert partial > 0 and reproposed > partial // 2 and led == 0, (name, totals)
        _, reproposed, led, _ = totals[(True, name)]
        assert reproposed == 0 and led > 0, (name, totals)
    # fewer verifier passes for the same tokens
    assert sum(totals[(True, n)][3] for n in ("olifant", "lookup", "hybrid")) < \
        sum(totals[(False, n)][3] for n in ("olifant", "lookup", "hybrid"))


def step(drafted, accepted, forward_tokens=1, verify_s=0.01):
    return Step(index=0, drafted=drafted, accepted=accepted, emitted=drafted[:accepted] + [0],
                verifier_token=None, fast_path=False, forward_tokens=forward_tokens, draft_s=0.0,
                verify_s=verify_s, step_s=verify_s)


def test_lead_rule_weighs_the_pass_it_saves_against_the_tokens_it_feeds():
    """Lead iff p (a + b j) >= b j: tokens for free always lead, expensive ones need first
    drafts that are nearly always right, and the rate follows what the passes showed."""
    assert LeadRule(FixedCost(1.0, 0.0)).leads(8)
    rule = LeadRule(FixedCost(1.0, 0.5))           # p = 0.5 (prior): 0.5 * 2.5 < 1.5 at j = 3
    assert rule.leads(1) and not rule.leads(3)
    for _ in range(40):
        rule.observe(step([5, 6, 7], 2))
    assert rule.p() > 0.9 and rule.leads(3)
    for _ in range(40):
        rule.observe(step([5, 6, 7], 0))
        rule.observe(step([], 0))                  # a pass without drafts says nothing of them
    assert rule.p() < 1 / 3 and not rule.leads(1)
    fitted = LeadRule()                            # the pass-cost curve from pass times
    for n, secs in [(1, 1.0), (4, 2.5), (1, 1.0), (9, 5.0)] * 5:
        fitted.observe(step([1] * (n - 1), 0, n, secs))
    a, b = fitted.cost.coefficients()
    assert b / a > 0.5 and 0.3 < a < 0.8         # 0.5 + 0.5 n, not the prior's b / a = 0.1


def test_a_queued_pass_is_timed_in_its_two_parts():
    """The 1-token pass a fast-path step queues is timed by queueing it there plus the wait for
    its token in the next step, which is no part of that step's own (4-token) pass."""
    from olifant_mlx.drafters.costs import PassTimes

    class Recorder:
        def __init__(self):
            self.seen = []

        def observe(self, tokens, seconds):
            self.seen.append((tokens, round(seconds, 6)))

    cost, times = Recorder(), PassTimes()
    queued = step([5, 6, 7], 0, 1, 0.06)
    queued.queued = True
    times.observe(cost, queued)
    assert cost.seen == []                       # its time is not all known yet
    led = step([5, 6, 7], 1, 4, 0.15)
    led.waited_s = 0.02
    times.observe(cost, led)
    assert cost.seen == [(1, 0.08), (4, 0.13)]


def test_the_engine_marks_queued_passes_and_the_waits_for_them(model, olifant):
    """What PassTimes relies on, from the real loop: a queued pass is a 1-token one, and a wait
    comes only in a step right after a queued pass."""
    steps = list(generate_steps(model, PROMPTS[1], OlifantDrafter(olifant), script_options(k=3, max_tokens=60)))
    assert any(s.queued for s in steps)
    for prev, s in zip(steps, steps[1:]):
        assert not s.queued or s.forward_tokens == 1
        assert s.waited_s == 0.0 or prev.queued
        assert 0.0 <= s.waited_s <= s.verify_s


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
def test_auto_feeds_the_correction_alone_where_leading_does_not_pay(model, olifant):
    """With tokens fed far dearer than a pass, no led pass carries drafts: each correction is
    fed alone and the drafts after it get the free check; with tokens free the passes are
    exactly those of always leading. A drafter that sizes its led passes itself (the adaptive
    one) is left to it. (Adaptive drafters plan with measured times: only their output is compared.)"""
    alone = 0
    planner = OlifantDrafter(olifant)
    planner.plans_led_passes = True
    rules = [("dear", {"lead": "auto", "pass_cost": FixedCost(1.0, 100.0)}),
             ("free", {"lead": "auto", "pass_cost": FixedCost(1.0, 0.0)}), ("always", {"lead": True})]
    for prompt in PROMPTS:
        ref, _ = generate(model, prompt, max_tokens=40)
        runs = {}                        # drafter's position -> (drafter, {rule: steps})
        for name, lead in rules:
            # fresh drafters for every rule: learning ones keep what a run taught them
            for i, d in enumerate([*drafters(model, olifant), planner]):
                steps = list(generate_steps(model, prompt, d, script_options(k=3, max_tokens=40, **lead)))
                assert [t for s in steps for t in s.emitted] == ref, (d.name, name)
                check_steps(steps)
                runs.setdefault(i, (d, {}))[1][name] = [(s.drafted, s.accepted, s.emitted, s.led, s.forward_tokens)
                                                        for s in steps]
        for d, run in runs.values():
            if isinstance(d, AdaptiveDrafter):
                continue
            assert run["free"] == run["always"], d.name
            if d.plans_led_passes:
                assert run["dear"] == run["always"], d.name
            else:
                assert not any(led and drafted for drafted, _, _, led, _ in run["dear"]), d.name
                alone += sum(led and not drafted for drafted, _, _, led, _ in run["dear"])
                # the same drafts are checked either way, only the passes differ: so drafted and
                # accepted do not depend on the rule's (timing-dependent) choices, the passes do
                totals = {name: (sum(len(x[0]) for x in r), sum(x[1] for x in r)) for name, r in run.items()}
                assert totals["dear"] == totals["always"], d.name
    assert alone > 0


def test_led_passes_with_sampling_rotating_windows_and_processors(model, olifant):
    prompt = PROMPTS[1]
    for kw in ({"temperature": 0.8, "seed": 3}, {"max_kv_size": 8},
               {"max_kv_size": 20, "temperature": 1.0, "top_p": 0.9, "seed": 1},
               {"repetition_penalty": 1.3, "repetition_context_size": 8}):
        ref, _ = generate(model, prompt, max_tokens=50, **kw)
        led = 0
        for d in (OlifantDrafter(olifant), LookupDrafter(), NgramDrafter()):
            for k in (2, 5):
                steps = list(generate_steps(model, prompt, d, script_options(k=k, max_tokens=50, **kw)))
                assert [t for s in steps for t in s.emitted] == ref, (kw, d.name, k)
                check_steps(steps)
                led += sum(s.led for s in steps)
        assert led > 0, kw


class Rewinder(DrafterBase):
    """Drafts nothing after a correction, so a led pass only feeds it; elsewhere lookup."""
    name = "rewinder"

    def __init__(self):
        self.inner = LookupDrafter()
        self.led = False

    def draft_scored(self, context, k):
        return Draft([], []) if self.led else self.inner.draft_scored(context, k)

    def observe(self, step, kv_cache):
        self.led = step.next_led


def test_a_led_pass_without_drafts_feeds_the_correction_and_holds_the_next(model):
    prompt = PROMPTS[1]
    ref, _ = generate(model, prompt, max_tokens=40)
    steps = list(generate_steps(model, prompt, Rewinder(), script_options(k=4, max_tokens=40)))
    assert [t for s in steps for t in s.emitted] == ref
    empty = [s for s in steps if s.led and not s.drafted]
    assert empty and all(s.emitted == [] and s.forward_tokens == 1 and not s.next_led for s in empty)


class Script(DrafterBase):
    """Drafts k tokens with one Signal per token, all alike."""
    name = "script"

    def __init__(self, source):
        self.source = source

    def draft_scored(self, context, k):
        return Draft([1] * k, [Signal(self.source, 1)] * k)


def test_adaptive_uses_the_led_cost_model():
    """After a correction no draft is free: a pass of 1 + j tokens, j = 0 allowed."""
    from olifant_mlx.engine import Step

    d = AdaptiveDrafter(Script("s"), prior=0.05)
    d.start([])
    step = dict(index=0, accepted=0, emitted=[2], verifier_token=2, fast_path=False,
                forward_tokens=4, draft_s=0.0, verify_s=0.01, step_s=0.0, led=True)
    assert len(d.draft([0] * 10, 3)) == 1          # gate: the first check is free
    d.observe(Step(drafted=[1, 1, 1], next_led=True, **step), True)
    assert d.draft([0] * 10, 3) == []              # led: a 2 % draft does not pay for itself
    d.observe(Step(drafted=[], next_led=False, **dict(step, emitted=[], forward_tokens=1)), True)
    assert len(d.draft([0] * 10, 3)) == 1


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
def test_reference_mode_steps_exactly_like_the_real_verifier(model, olifant):
    """The real verifier's own greedy output as the reference text: every Step the same."""
    for prompt in PROMPTS:
        ref, _ = generate(model, prompt, max_tokens=50)
        sim = ReferenceModel(prompt + ref, VOCAB)
        for kv in (True, False):
            for lead in (True, False):
                for make in (lambda: OlifantDrafter(olifant), LookupDrafter, NgramDrafter,
                             lambda: HybridDrafter(OlifantDrafter(olifant)),
                             lambda: AdaptiveDrafter(HybridDrafter(OlifantDrafter(olifant)))):
                    real = list(generate_steps(model, prompt, make(),
                                               script_options(k=4, max_tokens=50, kv_cache=kv, lead=lead)))
                    fake = list(generate_steps(sim, prompt, make(),
                                               script_options(k=4, max_tokens=50, kv_cache=kv, lead=lead)))
                    name = make().name
                    if name.startswith("adaptive"):
                        # its lengths follow measured pass times, which differ: same output
                        assert [t for s in fake for t in s.emitted] == ref
                        continue
                    assert [(s.drafted, s.accepted, s.emitted, s.led, s.forward_tokens) for s in fake] == \
                        [(s.drafted, s.accepted, s.emitted, s.led, s.forward_tokens) for s in real], (kv, lead, name)


def test_plain_decoding_is_mlx_lms_token_for_token(model):
    from mlx_lm.generate import generate_step

    for prompt in PROMPTS:
        ours, _ = generate(model, prompt, max_tokens=30)
        theirs = [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=30)]
        assert ours == theirs


@pytest.mark.slow
def test_bench_runs_mlx_lms_stream_generate_as_strategies(tmp_path, smol):
    """mlx-lm plain (the second reference) and with a draft model, on SmolLM2, KV only."""
    from olifant_mlx.measure.bench import MlxLm, ModelRunner, aggregate, sweep

    v = smol
    strategies = {"lookup": LookupDrafter(), "self-draft": MlxLm("smollm2-135m").load(v.identity.digest)}
    rows = sweep(ModelRunner(v), {"legal": ["The Member States shall adopt the measures"]}, strategies,
                 [3], ["kv", "uncached"], 12, tmp_path / "r.jsonl", mlx_lm=True)
    names = {(r["strategy"], r["regime"]) for r in rows}
    assert ("mlx-lm", "kv") in names and ("self-draft", "kv") in names
    assert ("mlx-lm", "uncached") not in names and ("self-draft", "uncached") not in names
    assert all(r["exact_match"] for r in rows)          # mlx-lm's output is the plain output
    cells = {(c["strategy"], c["regime"]): c for c in aggregate(rows)}
    assert all(c["speedup_vs_mlx_lm"] for c in cells.values())
    assert cells[("self-draft", "kv")]["acceptance"] > 0.9     # the verifier drafting for itself

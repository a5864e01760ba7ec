"""Several generations' passes as one forward pass (engine.batch): the logits each generation
gets in a batch are the ones it gets alone, and a batch of generations, stepped by Batch.round
with the planner cutting drafts, emits every generation's solo tokens — each KV regime
(plain, rotating windows that wrap, quantized, uncached), each drafter, on the tiny model and
(slow) on SmolLM2, Gemma-3-270M (its sliding layers, a prompt past the window) and Qwen-1.5B."""
import pytest
from tiny_models import tiny_verifier

from olifant_mlx.drafters import NgramDrafter
from olifant_mlx.engine import GenerationOptions, Session
from olifant_mlx.engine import cache as kv
from olifant_mlx.engine.batch import (Batch, PassCurve, batchable, expected_tokens, forward_batch, max_batch_for,
                                      plan_pass)
from olifant_mlx.engine.forward import Forward, Proposal, run
from olifant_mlx.engine.loop import generate, generate_steps, script_options
from olifant_mlx.mlx_setup import mx

PROMPTS = ([5, 9, 12, 5, 9, 12, 5], [30, 2, 2, 41, 30, 2, 2, 41, 30], [7, 7, 7, 60, 1, 8, 7, 7], [3, 1, 4, 1, 5])


@pytest.fixture(scope="module")
def tiny():
    return tiny_verifier()


def primed(model, prompt, max_kv_size=None):
    layers = kv.make_cache(model, max_kv_size)
    kv.prefill(model, layers, prompt)
    return layers


@pytest.mark.parametrize("max_kv_size", [None, 6])
def test_each_generation_gets_its_own_logits_in_a_batch(tiny, max_kv_size):
    m = tiny.model
    feeds = ([1, 2, 3, 4, 5, 6, 7, 8, 9], [11], [4, 4, 4], [8, 1])
    alone = [run(m, Forward(f, primed(m, p, max_kv_size))) for p, f in zip(PROMPTS, feeds)]
    forwards = [Forward(f, primed(m, p, max_kv_size)) for p, f in zip(PROMPTS, feeds)]
    forward_batch(m, forwards)
    for a, f in zip(alone, forwards):
        assert f.batch == 4 and f.logits.shape == a.shape
        assert mx.allclose(f.logits, a, atol=1e-4).item()
        assert (f.logits.argmax(-1) == a.argmax(-1)).all().item()
    # each cache now holds its own prompt and feed, no other's
    for p, feed, f in zip(PROMPTS, feeds, forwards):
        assert kv.held_tokens(f.cache) == len(p) + len(feed)


def test_an_uncached_forward_batches_with_cached_ones(tiny):
    m = tiny.model
    alone = run(m, Forward(PROMPTS[0], None))
    cached = Forward([1, 2], primed(m, PROMPTS[1]))
    uncached = Forward(list(PROMPTS[0]), None)
    forward_batch(m, [cached, uncached])
    assert mx.allclose(uncached.logits, alone, atol=1e-4).item()


def test_the_tiny_model_is_batchable(tiny):
    assert batchable(tiny.model) is None


def lane(model, prompt, drafter, options, out, prefill_chunk=3):
    """A generation as a batch lane: its passes yielded, its tokens into `out`."""
    for event in generate_steps(model, prompt, drafter, options, batched=True, prefill_chunk=prefill_chunk):
        if isinstance(event, (Forward, Proposal)):
            yield event
        else:
            out.extend(event.emitted)


def run_batch(model, prompts, drafters, options, max_batch=4, cost=None, prefill_chunk=3) -> list:
    outs = [[] for _ in prompts]
    lanes = [lane(model, p, d, o, out, prefill_chunk) for p, d, o, out in zip(prompts, drafters, options, outs)]
    batch, rounds = Batch(model, max_batch, cost), 0
    while lanes:
        for ended, error in batch.round(lanes).items():
            assert error is None, error
            lanes.remove(ended)
        rounds += 1
    return outs, rounds


REGIMES = [dict(), dict(max_kv_size=8), dict(), dict(kv_cache=False)]
STEEP = PassCurve((1, 2, 8), (1.0, 1.9, 7.5))       # rows nearly linear: few drafts pay


@pytest.mark.parametrize("cost", [None, STEEP], ids=["all-drafts", "planned"])
@pytest.mark.parametrize("spec", ["ngram", "lookup", "auto", "adaptive:hybrid"])
def test_a_batch_emits_each_generations_solo_tokens(tiny, spec, cost):
    from olifant_mlx.drafters.registry import build_drafter, parse_spec

    options = [script_options(k=k, max_tokens=n, lead=lead, **r)
               for k, n, lead, r in zip((8, 3, 5, 12), (40, 25, 33, 40), (True, "auto", False, True), REGIMES)]
    drafters = [build_drafter(parse_spec(spec)) for _ in PROMPTS]
    solo = [generate(tiny.model, p, d, o)[0] for p, d, o in zip(PROMPTS, drafters, options)]
    got, rounds = run_batch(tiny.model, PROMPTS, drafters, options, cost=cost)
    assert got == solo
    assert rounds < sum(len(s) for s in solo), "no pass held more than one generation's tokens"


def test_quantized_caches_batch_too():
    from tiny_models import head64_llama

    model = head64_llama()
    options = [script_options(k=6, max_tokens=30, kv_bits=b, quantized_kv_start=s)
               for b, s in ((8, 6), (4, 9), (8, 40))]
    drafters = [NgramDrafter() for _ in options]
    solo = [generate(model, p, d, o)[0] for p, d, o in zip(PROMPTS, drafters, options)]
    assert run_batch(model, PROMPTS[:3], drafters, options)[0] == solo


def test_a_batch_of_one_each_runs_alone(tiny):
    prompts, drafters = PROMPTS[:3], [NgramDrafter() for _ in range(3)]
    options = [script_options(k=6, max_tokens=30)] * 3
    solo = [generate(tiny.model, p, d, o)[0] for p, d, o in zip(prompts, drafters, options)]
    got, _ = run_batch(tiny.model, prompts, drafters, options, max_batch=1)
    assert got == solo


def test_a_failing_lane_ends_alone(tiny):
    outs = []

    def broken():
        yield Forward([1, 2], primed(tiny.model, PROMPTS[0]))
        raise RuntimeError("boom")

    good = lane(tiny.model, PROMPTS[1], NgramDrafter(), script_options(k=4, max_tokens=12), outs)
    bad = broken()
    lanes, batch, errors = [good, bad], Batch(tiny.model, 4), {}
    while lanes:
        for ended, error in batch.round(lanes).items():
            errors[ended] = error
            lanes.remove(ended)
    assert isinstance(errors[bad], RuntimeError) and errors[good] is None
    assert outs == generate(tiny.model, PROMPTS[1], NgramDrafter(), script_options(k=4, max_tokens=12))[0]


# ---- the planner ------------------------------------------------------------------------------

def test_the_planner_gives_confident_drafts_more_rows():
    sure = Proposal(list(range(8)), accepted=90, rejections=2)
    unsure = Proposal(list(range(8)), accepted=2, rejections=30)
    plan_pass([sure, unsure], PassCurve((1, 4, 72), (1.0, 1.05, 4.0)))
    assert sure.allowed > unsure.allowed
    assert sure.allowed == 8


def test_the_planner_takes_every_draft_when_rows_are_free_and_none_when_they_cost_all():
    flat = PassCurve((1, 100), (1.0, 1.0))
    linear = PassCurve((1, 100), (1.0, 100.0))
    a, b = Proposal([1, 2, 3], 5, 5), Proposal([1, 2, 3, 4], 5, 5)
    plan_pass([a, b], flat)
    assert (a.allowed, b.allowed) == (3, 4)
    plan_pass([a, b], linear)
    assert (a.allowed, b.allowed) == (0, 0)


def test_expected_tokens_and_acceptance():
    assert Proposal([1], 0, 0).acceptance == 0.8 and Proposal([1], 6, 9).acceptance == 0.5
    assert expected_tokens(0.5, 0) == 1 and expected_tokens(0.5, 2) == 1.75


def test_a_pass_curve_reads_between_and_past_its_points_and_says_what_batch_pays():
    c = PassCurve((1, 9, 36, 72), (1.0, 1.8, 2.9, 4.4))
    assert c(1) == 1.0 and c(0) == 1.0 and abs(c(18) - (1.8 + 1.1 / 3)) < 1e-9
    assert abs(c(144) - (4.4 + 1.5 * 2)) < 1e-9
    assert max_batch_for(c) == 8                       # 8 x 9 rows: 1.8x the tokens of 4 for 1.5x the time
    assert max_batch_for(PassCurve((1, 1000), (1.0, 1000.0))) == 1


# ---- real verifiers (slow) ---------------------------------------------------------------------

def check_real(verifier, texts, max_tokens=24):
    ids = [verifier.tokenizer.encode(t) for t in texts]
    session = Session(verifier, "ngram", GenerationOptions(k=8, max_tokens=max_tokens))
    assert batchable(verifier.model) is None
    options = [session.options] * len(ids)
    drafters = [NgramDrafter() for _ in ids]
    solo = [generate(verifier.model, p, d, o)[0] for p, d, o in zip(ids, drafters, options)]
    got, rounds = run_batch(verifier.model, ids, drafters, options, prefill_chunk=128)
    assert got == solo
    assert rounds < sum(len(s) for s in solo)


LEGAL = ("The Member States shall ensure that", "Article 4 of this Regulation applies to",
         "The tenant shall pay the rent on the first day of", "This Agreement is governed by the laws of")


@pytest.mark.slow
def test_a_batch_on_smollm2_emits_each_solo_answer(smol):
    check_real(smol, LEGAL)


@pytest.mark.slow
def test_a_batch_on_gemmas_sliding_layers_emits_each_solo_answer(gemma):
    long = " ".join(f"Clause {i}: the parties agree to clause {i + 1}." for i in range(60))  # past the window
    check_real(gemma, (long,) + LEGAL[:2])

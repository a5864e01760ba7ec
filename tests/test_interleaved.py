"""Several generations at once on one Session (issue 46): streams stepped in turn, each drafting
with a state of its own, produce their solo text AND their solo drafting — drafted, accepted,
passes, tokens fed — exactly. Equal text alone proves nothing here (a drafter never changes
greedy output); before the drafters had per-generation state, three interleaved `ngram` streams
on SmolLM2 accepted 0, 3 and 1 tokens where alone they accepted 31, 4 and 22.

The pass costs are fixed (FixedCost: the lead rule and the adaptive drafter plan with them, its
guard counts a fixed drafter time), so what each request drafts depends on nothing measured.
With the session's learning frozen every request starts from the same estimates, alone or not;
with it on, streams that run together each start from what was kept when they opened (nothing,
here), which is again each one's solo drafting from a frozen start — and the one to finish
last is what the next request starts from."""
import pytest
from tiers import extended
from tiny_models import igtree_on_own_output, tiny_llama, tiny_verifier

from olifant_mlx.drafters import NeuralDrafter, OlifantDrafter
from olifant_mlx.engine import GenerationOptions, Session
from olifant_mlx.measure.bench import FixedCost


def costs(**kw) -> GenerationOptions:
    fixed = FixedCost(1.0, 0.1, draft_s=0.0001)
    return GenerationOptions(**{"k": 8, "max_tokens": 40, "pass_cost": fixed, "draft_cost": fixed, **kw})


def drafting(tokens, r) -> tuple:
    """What a generation drafted: its tokens, and the drafting counts of its last Response."""
    s = r.stats
    return (tuple(tokens), s.tokens, s.drafted, s.accepted, s.steps, s.forward_tokens, s.led_steps,
            tuple(sorted(s.pass_sizes.items())))


def run(session, prompts, interleave: bool, **kw) -> list:
    """Each prompt's drafting, the streams stepped in turn (interleave) or one after another."""
    if not interleave:
        return [to_the_end(session.stream(session.plan(p, **kw))) for p in prompts]
    return in_turn([session.stream(session.plan(p, **kw)) for p in prompts])


def in_turn(streams) -> list:
    """Step the streams one Response each in turn until all end; each one's drafting."""
    tokens, last, live = [[] for _ in streams], [None] * len(streams), list(range(len(streams)))
    while live:
        for i in list(live):
            r = next(streams[i], None)
            if r is None:
                live.remove(i)
                continue
            tokens[i] += r.tokens
            last[i] = r
    return [drafting(t, r) for t, r in zip(tokens, last)]


def to_the_end(stream) -> tuple:
    tokens, last = [], None
    for r in stream:
        tokens += r.tokens
        last = r
    return drafting(tokens, last)


def check_solo_and_interleaved(session, prompts, learning_on: bool = True, **kw):
    """Frozen learning: interleaved == solo, count for count; learning on: interleaved streams
    start from what was kept when they opened (nothing), so again == the frozen solo runs."""
    session.learning.frozen = True
    solo = run(session, prompts, False, **kw)
    assert run(session, prompts, True, **kw) == solo
    assert any(d[3] for d in solo), "nothing accepted: the test would prove little"
    if learning_on:
        session.learning.frozen = False
        assert run(session, prompts, True, **kw) == solo


@pytest.fixture(scope="module")
def tiny():
    return tiny_verifier()


TINY_PROMPTS = ([5, 9, 12, 5, 9, 12, 5], [30, 2, 2, 41, 30, 2, 2], [7, 7, 7, 60, 1, 8, 7, 7])


@pytest.mark.parametrize("spec", ["ngram", "lookup", "adaptive:hybrid", "auto", "olifant", "neural",
                                  "adaptive:olifant"])
def test_interleaved_generations_draft_as_they_do_alone_on_the_tiny_model(tiny, spec):
    if spec.endswith("olifant"):
        d = OlifantDrafter(igtree_on_own_output(tiny.model))
        if spec.startswith("adaptive"):
            from olifant_mlx.drafters import AdaptiveDrafter

            d = AdaptiveDrafter(d)
    elif spec == "neural":
        d = NeuralDrafter(tiny_llama(1, layers=1))
    else:
        d = spec
    for kv in (True, False):
        check_solo_and_interleaved(Session(tiny, d, costs(kv_cache=kv)), TINY_PROMPTS)


def test_interleaved_predictions_draft_as_they_do_alone(tiny):
    """Three requests with three predictions (drafters made per request around the session's)."""
    session = Session(tiny, "auto", costs(k=16))
    preds = [[5, 9, 12, 5, 9, 12, 5, 9, 12, 3], [2, 41, 30, 2, 2, 41, 30], [7, 60, 1, 8, 7, 7, 7, 60]]
    session.learning.frozen = True
    solo = [to_the_end(session.stream(session.plan(p, prediction=q))) for p, q in zip(TINY_PROMPTS, preds)]
    assert in_turn([session.stream(session.plan(p, prediction=q)) for p, q in zip(TINY_PROMPTS, preds)]) == solo
    assert any(d[3] for d in solo)


def test_the_shared_drafter_is_never_written_and_learning_goes_through_the_session(tiny):
    """The Session's drafter object is the same before and after generations (it is opened, not
    drafted with); what they learn is in session.learning, and the next generation starts from it."""
    import copy

    session = Session(tiny, "adaptive:hybrid", costs())
    before = copy.deepcopy(session.drafter.learner.acceptance.counts)
    first = session.generate(TINY_PROMPTS[0])
    assert session.drafter.learner.acceptance.counts == before == {}
    kept = session.learning.peek(session.drafter.keys[0])
    assert kept is not None and kept[0].acceptance.counts
    session.learning.frozen = True
    again = session.generate(TINY_PROMPTS[0])
    fresh = Session(tiny, "adaptive:hybrid", costs())
    fresh.learning.frozen = True
    cold = fresh.generate(TINY_PROMPTS[0])
    assert again.tokens == cold.tokens == first.tokens
    # the second run started from what the first one learnt, the cold one from the prior
    assert (again.stats.drafted, again.stats.accepted) != (cold.stats.drafted, cold.stats.accepted) or \
        again.stats.steps != cold.stats.steps


SMOL_PROMPTS = ("The Member States shall ensure that", "Article 4 of this Regulation applies to")


@pytest.mark.slow
def test_interleaved_generations_on_smollm2(smol, draft_path):
    """SmolLM2 (KV cache; text prompts): ngram, olifant and the adaptive hybrid (learning frozen),
    auto (frozen and on) each draft two interleaved requests exactly as alone (lookup keeps no
    state: the tiny model's test has it)."""
    opts = costs(max_tokens=32)
    for spec in ("ngram", f"olifant:{draft_path}", f"adaptive:hybrid:{draft_path}"):
        check_solo_and_interleaved(Session(smol, spec, opts), SMOL_PROMPTS, learning_on=False)
    check_solo_and_interleaved(Session(smol, "auto", opts), SMOL_PROMPTS)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["auto", pytest.param("ngram", marks=extended)])
def test_interleaved_generations_on_gemmas_rotating_layers(gemma, spec):
    """Gemma-3-270M: its sliding-window layers keep rotating KV caches, one per request."""
    check_solo_and_interleaved(Session(gemma, spec, costs(max_tokens=24)), SMOL_PROMPTS, learning_on=spec == "auto")

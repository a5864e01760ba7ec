"""What the engine receives instead of knowing: a pass-cost model (engine.costs.PassCostModel)
for its lead rule and for a drafter that plans with one (given to `Drafter.open`), and a
collective for a sharded verifier (engine.collective.Collective). Fakes of each, given to the
real loop on a tiny model: the loop plans with them, hands a drafter its model for one
generation only, and the output stays the verifier's plain output."""
import pytest
from tiny_models import tiny_llama

from olifant_mlx.drafters import AdaptiveDrafter, LookupDrafter
from olifant_mlx.drafters.base import Drafter, DrafterBase, as_drafter
from olifant_mlx.drafters.costs import PassCost
from olifant_mlx.engine import GenerationOptions, generate, generate_steps
from olifant_mlx.engine.collective import Collective
from olifant_mlx.engine.costs import PassCostModel

PROMPT = [7, 7, 2, 40, 11, 3, 9, 30, 7, 7, 2, 40]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0)


class HalfRight(DrafterBase):
    """Drafts the verifier's own continuation (`ref`) with its second token wrong: every pass
    that checks drafts ends with a correction, so the next one may be led."""
    name = "half-right"

    def __init__(self, ref):
        self.ref = ref

    def draft(self, context, k):
        at = len(context) - len(PROMPT)
        drafts = self.ref[at:at + k]
        return drafts[:1] + [(t + 1) % 64 for t in drafts[1:2]] + drafts[2:]


class FakeCost:
    """A fixed a + b * tokens that records what it is told and asked."""

    def __init__(self, a=1.0, b=0.1):
        self.a, self.b, self.seen, self.asked = a, b, [], 0

    def coefficients(self):
        self.asked += 1
        return self.a, self.b

    def observe(self, tokens, seconds):
        self.seen.append(tokens)

    def __call__(self, tokens):
        return self.a + self.b * tokens


def test_the_cost_models_are_pass_cost_models():
    assert isinstance(PassCost(), PassCostModel) and isinstance(FakeCost(), PassCostModel)
    from olifant_mlx.measure.bench import FixedCost

    assert isinstance(FixedCost(), PassCostModel)


def test_the_lead_rule_plans_with_the_cost_model_it_is_given(model):
    """lead="auto" with a pass_cost: the loop's rule asks that model and feeds it every pass;
    tokens far dearer than a pass make it feed every correction alone."""
    ref, _ = generate(model, PROMPT, max_tokens=40)
    dear = FakeCost(1.0, 100.0)
    opts = GenerationOptions(k=3, max_tokens=40, lead="auto", pass_cost=dear)
    steps = list(generate_steps(model, PROMPT, HalfRight(ref), opts))
    assert [t for s in steps for t in s.emitted] == ref
    assert dear.seen                             # every pass fed to it
    assert dear.asked > 0 and any(s.led for s in steps) and not any(s.led and s.drafted for s in steps)
    free = opts.replace(pass_cost=FakeCost(1.0, 0.0))   # tokens for free: every correction leads
    steps = list(generate_steps(model, PROMPT, HalfRight(ref), free))
    assert [t for s in steps for t in s.emitted] == ref and any(s.led and s.drafted for s in steps)


class Planner(DrafterBase):
    """A drafter that records the model each generation's `open` gave it."""
    name = "planner"

    def __init__(self):
        self.given = []

    def open(self, prompt, learning=None, cost=None):
        self.given.append(cost)
        return self

    def draft(self, context, k):
        return []


def test_a_cost_aware_drafter_gets_the_draft_cost_for_one_generation(model):
    cost = FakeCost()
    d = Planner()
    generate(model, PROMPT, d, options=GenerationOptions(max_tokens=5, draft_cost=cost))
    generate(model, PROMPT, d, options=GenerationOptions(max_tokens=5))
    assert d.given == [cost, None]
    adaptive = AdaptiveDrafter(LookupDrafter())
    ref, _ = generate(model, PROMPT, max_tokens=30)
    tokens, _ = generate(model, PROMPT, adaptive, options=GenerationOptions(k=4, max_tokens=30, draft_cost=cost))
    assert tokens == ref and cost.seen                 # it planned with, and fed, the given model
    own = adaptive.own.peek(adaptive.keys[0])[1]       # the fit it keeps: not the given model, unfed
    assert own is not cost and own.sums is None
    state = adaptive.open(PROMPT, None, None)          # the next generation: its own fit again
    assert state.planning is state.cost and state.cost is not cost


class Duck:
    """A drafter by duck typing, with an optional method of its own but no plans_led_passes;
    each generation drafts with a copy of it (`as_drafter`'s open), which shares `log`."""
    name = "duck"

    def __init__(self):
        self.log = []

    def start(self, prompt):
        self.started = True

    def draft(self, context, k):
        return [7, 7][:k]

    def accept(self, tokens):
        pass

    def observe(self, step, kv_cache):
        self.log.append(getattr(self, "started", False))


def test_as_drafter_declares_every_member_the_engine_reads(model):
    d = as_drafter(Duck())
    assert isinstance(d, Drafter) and d.plans_led_passes is False
    ref, _ = generate(model, PROMPT, max_tokens=20)
    duck = Duck()
    assert generate(model, PROMPT, duck, k=2, max_tokens=20)[0] == ref
    assert duck.log and all(duck.log) and not hasattr(duck, "started")    # a started copy observed


class FakeCollective:
    """One rank's collective: rank 0's drafts and choices are this rank's own, counted."""

    def __init__(self):
        self.drafts = self.choices_made = 0

    def drafter(self, drafter):
        outer = self

        class Counted(DrafterBase):
            name, wants_bos = drafter.name, drafter.wants_bos

            def draft(self, context, k):
                outer.drafts += 1
                return drafter.draft(context, k)

            def accept(self, tokens):
                drafter.accept(tokens)

        return Counted()

    def choices(self, pick):
        def shared(logits, position, context=()):
            self.choices_made += 1
            return pick(logits, position, context)
        shared.lazy = lambda logits, position, context=(): None
        shared.lazy_ok = False
        return shared


def test_the_loop_takes_every_draft_and_choice_through_the_collective(model):
    """The loop asks the collective for its drafter and its choices and nothing else; with one,
    every pass after a correction is led whatever the lead rule (ranks' pass times differ)."""
    assert isinstance(FakeCollective(), Collective)
    for kv in (True, False):
        ref, _ = generate(model, PROMPT, max_tokens=30, kv_cache=kv)
        c = FakeCollective()
        opts = GenerationOptions(k=3, max_tokens=30, kv_cache=kv, lead="auto", pass_cost=FakeCost(1.0, 100.0))
        steps = list(generate_steps(model, PROMPT, HalfRight(ref), opts, shared=c))
        assert [t for s in steps for t in s.emitted] == ref
        assert c.drafts == len(steps) and c.choices_made >= len(steps)
        if kv:
            assert any(s.led and s.drafted for s in steps)     # the dear cost's rule is left out

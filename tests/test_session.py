"""The Session API: text with provenance, running stats, stop reasons, energy windows, options
validated in one place, drafters changed without reloading the verifier."""
import pytest

from olifant_mlx.drafters import LookupDrafter, NgramDrafter
from olifant_mlx.energy import open_meter
from olifant_mlx.engine import GenerationOptions, OptionsError, Session, generate, step_kinds
from olifant_mlx.engine.reference import ReferenceVerifier
from tiny_models import WordTok, tiny_verifier


@pytest.fixture(scope="module")
def verifier():
    return tiny_verifier()


def test_stream_gives_text_steps_stats_and_a_stop_reason(verifier):
    session = Session(verifier, "lookup", GenerationOptions(k=4, max_tokens=30))
    responses = list(session.stream(session.plan("The Member States shall")))
    last = responses[-1]
    assert last.finish_reason == "max_tokens" and all(r.finish_reason is None for r in responses[:-1])
    tokens = [t for r in responses for t in r.tokens]
    assert len(tokens) == 30 == last.stats.tokens and last.stats.steps == len(responses)
    ids = verifier.encode("The Member States shall")
    plain, _ = generate(verifier.model, ids, max_tokens=30)
    assert tokens == plain                                   # exactly the verifier's output
    assert "".join(r.text for r in responses) == verifier.tokenizer.decode(tokens)
    for r in responses:                                       # provenance of every piece of text
        assert "".join(s for s, _ in r.segments) == r.text
        assert [k for _, k in r.segments] == step_kinds(r.step)[:len(r.segments)]
    assert {k for r in responses for _, k in r.segments} <= {"accepted", "correction", "bonus", "plain"}
    assert last.stats.extra["drafter"] == "lookup" and last.energy is None


def test_the_same_text_with_every_regime_and_a_per_call_drafter(verifier):
    session = Session(verifier)
    ref = session.generate("Article 4 of Regulation", GenerationOptions(k=0, max_tokens=24))
    for kv in (True, False):
        for d in (NgramDrafter(), LookupDrafter()):
            r = session.generate("Article 4 of Regulation", GenerationOptions(k=3, max_tokens=24, kv_cache=kv),
                                 drafter=d)
            assert r.tokens == ref.tokens and r.text == ref.text


def test_should_stop_and_zero_tokens(verifier):
    session = Session(verifier, "ngram", GenerationOptions(k=3, max_tokens=200))
    seen = []
    rs = list(session.stream(session.plan("patients were randomised to"),
                             should_stop=lambda: len(seen.append(1) or seen) >= 3))
    assert len(rs) == 3 and rs[-1].finish_reason == "stopped" and rs[-1].stats.stop_reason == "stopped"
    r = session.generate("x", GenerationOptions(max_tokens=0))
    assert r.tokens == [] and r.finish_reason == "max_tokens"


def test_energy_window_from_the_sessions_meter(verifier, shared):
    trace = shared / "fixtures/energy/ioreport/replay_synthetic_burst_and_cpu_stall.json"
    session = Session(verifier, "ngram", GenerationOptions(max_tokens=12), meter=open_meter(f"replay:{trace}"))
    r = session.generate("The Member States shall")
    assert r.energy is not None and r.energy.info.backend == "replay"


def test_options_are_validated_where_they_are_made():
    bad = [dict(k=65), dict(k=-1), dict(k=2.5), dict(max_tokens=-5), dict(max_kv_size=0),
           dict(max_kv_size=-5), dict(temperature=-1), dict(temperature=float("nan")),
           dict(top_p=0), dict(top_p=1.5), dict(seed="x")]
    for kw in bad:
        with pytest.raises(OptionsError):
            GenerationOptions(**kw)
    o = GenerationOptions(temperature=0.7, top_p=0.9, seed=3)
    assert o.sampling.temperature == 0.7 and GenerationOptions().sampling is None
    with pytest.raises(OptionsError):
        o.replace(k=100)
    with pytest.raises(AttributeError):
        o.k = 3                                                # frozen


def test_changing_the_drafter_keeps_the_verifier(verifier):
    session = Session(verifier, "ngram")
    model = session.verifier.model
    other = session.with_drafter("lookup:2")
    assert other.drafter.name == "lookup" and other.verifier.model is model
    assert other.spec.text == "lookup:2" and other.learning is session.learning
    assert session.spec.text == "ngram" and session.drafter.name.startswith("ngram")     # left as it was


def test_history_needs_a_hybrid(verifier, tmp_path):
    with pytest.raises(OptionsError, match="hybrid"):
        Session(verifier, "ngram", GenerationOptions(history=str(tmp_path / "h.bin")))
    assert not (tmp_path / "h.bin").exists()


def test_reference_verifier_runs_the_engine_loop():
    """Reference text through the same loop: both regimes emit the document; the KV regime's
    fast path decides differently after a partial acceptance, as the engine does."""
    tok = WordTok()
    prompt, cont = tok.encode("abcabcabcab"), tok.encode("cabcabxyzabcabc")
    for kv in (True, False):
        v = ReferenceVerifier(tok, prompt, cont)
        r = Session(v, LookupDrafter(), GenerationOptions(k=4, max_tokens=len(cont), kv_cache=kv)).generate(prompt)
        assert r.tokens == cont and r.finish_reason == "max_tokens"
        assert 0 < r.stats.accepted < r.stats.drafted


def test_the_lead_rule_plans_with_one_cost_curve_across_generations(verifier):
    """`lead = "auto"` (the default): every generation's LeadRule starts from the pass-cost curve
    the last one kept in the session's learning, so what the verifier's passes cost is learnt
    once per session; frozen, nothing is kept; the text is the plain one."""
    from olifant_mlx.engine.costs import LEAD_COST

    session = Session(verifier, "lookup", GenerationOptions(k=3, max_tokens=24))
    assert session.lead == "auto" and session.learning.peek(LEAD_COST) is None     # nothing fitted yet
    first = session.generate("The Member States shall")
    seen = session.learning.peek(LEAD_COST).sums[0]
    second = session.generate("Article 4 of Regulation")
    assert session.learning.peek(LEAD_COST).sums[0] > seen          # the same curve, more passes
    session.learning.frozen = True
    kept = session.learning.peek(LEAD_COST)
    session.generate("The Member States shall")
    assert session.learning.peek(LEAD_COST) is kept
    for r, text in ((first, "The Member States shall"), (second, "Article 4 of Regulation")):
        plain, _ = generate(verifier.model, verifier.encode(text), max_tokens=24)
        assert r.tokens == plain

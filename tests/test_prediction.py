"""Drafting from a prediction (issue 44): the source keeps its place in the prediction and finds
it again after a change; a request's prediction becomes one more source of its hybrid drafter
without touching the Session's; the output is plain decoding's whatever the prediction; OpenAI's
accepted / rejected counts. The tiny verifier; SmolLM2-135M (slow) on a clause revision."""
import numpy as np
import pytest
from tiny_models import tiny_chat_verifier, tiny_llama

from olifant_mlx.drafters import (AdaptiveDrafter, HybridDrafter, LookupDrafter, PredictionSource, build_drafter,
                                  predicting, prediction_counts)
from olifant_mlx.engine import ContextError, GenerationOptions, Session, generate

PRED = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]


def follow(source, tokens):
    source.start([1, 2, 3])
    source.accept(tokens)
    return source.draft_scored([], 4).tokens


def test_it_proposes_the_prediction_from_its_place():
    assert follow(PredictionSource(PRED), []) == [10, 11, 12, 13]
    assert follow(PredictionSource(PRED), [10, 11, 12]) == [13, 14, 15, 16]


def test_a_changed_word_is_rejoined_on_the_next_token_that_agrees_nearby():
    # 13 replaced by 60: lost; the answer goes on with 14, one token past the place it was lost
    src = PredictionSource(PRED)
    assert follow(src, [10, 11, 12, 60]) == []
    src.accept([14])
    assert src.draft_scored([], 3).tokens == [15, 16, 17]


def test_an_insertion_is_rejoined_where_the_answer_comes_back():
    assert follow(PredictionSource(PRED), [10, 11, 61, 62, 63, 12]) == [13, 14, 15, 16]


def test_a_deleted_stretch_is_rejoined_far_ahead_on_two_tokens_not_one():
    # 12..24 deleted: 25 alone, 13 tokens ahead of the lost place, is within the near window ...
    assert follow(PredictionSource(PRED), [10, 11, 25]) == [26, 27, 28, 29]
    # ... one far beyond it needs two tokens of agreement
    long = list(range(100, 160)) + [25, 26, 27, 28]
    src = PredictionSource(long)
    assert follow(src, [100, 101, 25]) == []
    src.accept([26])
    assert src.draft_scored([], 2).tokens == [27, 28]


def test_the_nearest_of_equal_agreements_wins_and_signals_grow_with_agreement():
    pred = [5, 7, 8, 9, 5, 7, 1, 2]
    src = PredictionSource(pred)
    assert follow(src, [5, 7, 8, 50, 5, 7]) == [1, 2]    # 5 7 agrees at both; after the lost place
    src = PredictionSource(PRED)
    src.start([])
    src.accept([10, 11, 12])
    levels = [s.level for s in src.draft_scored([], 3).signals]
    assert levels == sorted(levels) and levels[0] >= 3 and src.draft_scored([], 3).signals[0].source == "prediction"


def test_an_empty_or_spent_prediction_drafts_nothing():
    assert follow(PredictionSource([]), [1, 2]) == []
    assert follow(PredictionSource([4, 5]), [4, 5]) == []


def test_predicting_gives_a_request_its_own_drafter_and_leaves_the_given_one():
    shared = AdaptiveDrafter(HybridDrafter(None, sources=[LookupDrafter(name="other")]))
    mine = predicting(shared, PRED)
    assert mine is not shared and mine.inner is not shared.inner
    assert [s.name for s in shared.inner.sources] == ["other"]
    assert [s.name for s in mine.inner.sources] == ["other", "prediction"]
    assert mine.inner.sources[1].prediction == PRED
    again = predicting(mine, [1, 2])                       # one prediction source at a time
    assert [s.prediction for s in again.inner.sources if s.name == "prediction"] == [[1, 2]]
    plain = LookupDrafter()
    assert predicting(plain, PRED) is plain                # not built on the hybrid: as it is
    built = build_drafter("prediction")
    assert predicting(built, PRED).inner.sources[-1].prediction == PRED


def test_openai_counts_are_the_prediction_tokens_in_the_output_and_the_rest():
    assert prediction_counts([1, 2, 3, 4], [1, 2, 3, 4]) == (4, 0)
    assert prediction_counts([1, 2, 3, 4], [1, 9, 3, 4, 5]) == (3, 1)
    assert prediction_counts([1, 2], []) == (0, 2)


@pytest.fixture(scope="module")
def tiny():
    model = tiny_llama(0)
    prompt = [3, 9, 4, 17, 22, 5, 8]
    plain, _ = generate(model, prompt, max_tokens=48, lead=True)
    return model, prompt, plain


def variants(plain):
    """Predictions of every kind: exact, a word changed, a stretch deleted, one inserted, noise."""
    rng = np.random.default_rng(0)
    changed = list(plain)
    changed[10] = (changed[10] + 1) % 64
    yield plain
    yield changed
    yield plain[:12] + plain[24:]
    yield plain[:20] + [1, 2, 3, 4, 5] + plain[20:]
    yield rng.integers(0, 64, 40).tolist()


@pytest.mark.parametrize("k", [1, 3, 8, 32])
@pytest.mark.parametrize("kv_cache", [True, False])
def test_the_output_is_plain_decodings_whatever_the_prediction(tiny, k, kv_cache):
    model, prompt, plain = tiny
    for prediction in variants(plain):
        drafter = predicting(build_drafter("prediction"), prediction)
        out, stats = generate(model, prompt, drafter, k=k, max_tokens=48, kv_cache=kv_cache, lead=True)
        assert out == plain
    drafter = predicting(build_drafter("prediction"), plain)
    _, stats = generate(model, prompt, drafter, k=k, max_tokens=48, kv_cache=kv_cache, lead=True)
    if k >= 8:                            # the exact answer predicted: long passes
        assert stats.tokens / stats.steps > 3


def test_a_request_carries_its_prediction_and_the_session_keeps_none():
    verifier = tiny_chat_verifier()
    session = Session(verifier, "auto", GenerationOptions(k=16, max_tokens=40))
    plain = session.generate("abcdefgh", drafter="none")
    request = session.plan("abcdefgh", prediction=plain.tokens)
    assert request.prediction == tuple(plain.tokens)
    assert request.drafter is not session.drafter
    assert "prediction" not in [s.name for s in session.drafter.inner.sources]
    result = session.generate(request)
    assert result.tokens == plain.tokens
    assert result.stats.extra["prediction"] == {"tokens": 40, "accepted": 40, "rejected": 0}
    assert result.stats.steps < plain.stats.steps / 3
    text = session.generate("abcdefgh", prediction="abcdxyz")      # text is encoded as the verifier writes it
    assert text.tokens == plain.tokens and text.stats.extra["prediction"]["tokens"] == 7
    assert "prediction" not in session.generate("abcdefgh").stats.extra
    assert session.plan("abcdefgh").drafter is session.drafter     # without one: the drafting of before
    with pytest.raises(TypeError, match="prediction"):
        session.stream(request, prediction=[1])


def test_a_prediction_past_the_context_is_refused_before_any_pass():
    verifier = tiny_chat_verifier()
    session = Session(verifier, "auto", GenerationOptions(max_tokens=10))
    with pytest.raises(ContextError, match="prediction is 2,100 tokens"):
        session.plan("abcdefgh", prediction=[5] * 2100)


@pytest.mark.slow
def test_a_clause_revision_on_smollm2_copies_the_prediction_and_equals_plain(smol):
    from olifant_mlx.engine import Chat

    clause = ("The Customer shall notify the Supplier of any claim within thirty (30) days of becoming aware "
              "of it, and the Supplier shall respond within ten (10) business days.")
    prompt = Chat.of("Revise the clause below so that the notice period is sixty (60) days. Keep all other "
                     "wording unchanged and output only the revised clause.\n\n" + clause)
    session = Session(smol, "auto", GenerationOptions(max_tokens=80))
    plain = session.generate(prompt, drafter="none")
    for k in (8, 32):
        r = session.generate(prompt, GenerationOptions(k=k, max_tokens=80), prediction=clause)
        assert r.tokens == plain.tokens
        counts = r.stats.extra["prediction"]
        assert counts["accepted"] + counts["rejected"] == counts["tokens"] > 20
        assert r.stats.steps < plain.stats.steps / 2

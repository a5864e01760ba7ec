"""Metrics and the speedup calculator on hand-computed cases."""
import gzip

import pytest

from olifant_mlx.cli.analysis import chart, parse_verify_costs
from olifant_mlx.engine import Stats, Step
from olifant_mlx.measure import calc
from olifant_mlx.measure.metrics import (cross_document_overlap, gzip_ratio, lcs_length, redundancy,
                                         rouge_l, within_text_repetition)


def test_rouge_l_by_hand():
    # reference a b c d e, candidate a c e f: LCS = a c e (3); P = 3/4, R = 3/5, F1 = 2PR/(P+R) = 2/3
    assert lcs_length("abcde", "acef") == 3
    assert rouge_l(list("abcde"), list("acef")) == pytest.approx(2 * 0.75 * 0.6 / 1.35)
    assert rouge_l([1, 2, 3], [1, 2, 3]) == 1.0
    assert rouge_l([1, 2], [3, 4]) == 0.0
    assert rouge_l([], []) == 1.0 and rouge_l([1], []) == 0.0


def test_redundancy_by_hand():
    # 1 2 3 4 1 2 3 4: 4-grams (1234)(2341)(3412)(4123)(1234): the last one repeats -> 1/5
    assert within_text_repetition([1, 2, 3, 4, 1, 2, 3, 4]) == pytest.approx(1 / 5)
    assert within_text_repetition([1, 2, 3]) is None
    # text A has distinct 4-grams {1234, 2345}; B {1234, 2399}; C {7777}
    a, b, c = [1, 2, 3, 4, 5], [1, 2, 3, 4, 99], [7, 7, 7, 7]
    assert cross_document_overlap([a, b, c]) == [0.5, 0.5, 0.0]
    texts = ["the same line\n" * 20, "another text"]
    raw = "\n".join(texts).encode()
    assert gzip_ratio(texts) == len(gzip.compress(raw, 9, mtime=0)) / len(raw) < 0.5
    r = redundancy(["x", "y", "z"], [a, b, c])
    assert r["within_text"] == 0.0 and r["cross_document"] == pytest.approx(1 / 3)


def test_acceptance_and_mal_by_hand():
    st = Stats()
    # step 1: 3 drafted, 2 accepted; step 2: 3 drafted, 0 accepted; step 3: 2 drafted, 2 accepted
    for drafted, acc in (([5, 6, 7], 2), ([1, 2, 3], 0), ([8, 9], 2)):
        st.add(Step(index=0, drafted=drafted, accepted=acc, emitted=drafted[:acc] or [4],
                    verifier_token=None, fast_path=False, forward_tokens=3, draft_s=0.001,
                    verify_s=0.01, step_s=0.011))
    assert st.acceptance == pytest.approx(4 / 8)
    assert st.mean_accepted_length == pytest.approx(4 / 3)
    assert st.tokens == 5 and st.steps == 3


def test_calculator_reference_values():
    assert calc.speedup(0.8, 4, 0.1) == pytest.approx(2.40, abs=0.005)
    assert calc.speedup(0.6, 3, 0.2) == pytest.approx(1.36, abs=0.005)
    for a in (0.0, 0.3, 0.8, 1.0):
        for g in (1, 4, 12):
            assert calc.expected_tokens(a, g) == pytest.approx(calc.expected_tokens_series(a, g))
    assert calc.expected_tokens(1.0, 4) == 5.0
    g, s = calc.best_gamma(0.8, 0.1)
    assert s == max(calc.speedup(0.8, x, 0.1) for x in range(1, 13)) and g == 6
    with pytest.raises(ValueError):
        calc.speedup(1.5, 3, 0.1)


def test_measured_inputs():
    # acceptance ratio -> alpha: expected accepted fraction of gamma drafts reproduces the ratio
    for acc in (0.05, 0.38, 0.9):
        a = calc.alpha_from_acceptance(acc, 3)
        assert (calc.expected_tokens(a, 3) - 1) / 3 == pytest.approx(acc, abs=1e-9)
    costs = parse_verify_costs("1:1,2:1.39,3:1.52")
    assert costs == {1: 1.0, 2: 1.39, 3: 1.52}
    r = calc.report(alpha=0.5, gamma=3, c=0.0, verify_costs=costs)
    assert r["speedup"] == pytest.approx(calc.expected_tokens(0.5, 3) / 1.52)
    assert r["fast_path_speedup"] == pytest.approx(calc.speedup_fast_path(0.5, 3, 0.0, 1.52))
    assert r["curve"][4] == pytest.approx(calc.expected_tokens(0.5, 4))   # no measured cost: 1 step
    same = calc.report(alpha=0.5, gamma=3, c=0.0, verify_costs=1.52)      # one cost for every g
    assert same["curve"][1] == pytest.approx(calc.expected_tokens(0.5, 1) / 1.52)
    # fast path at alpha 0: a rejected first draft costs one plain step -> exactly 1x (never a loss)
    assert calc.speedup_fast_path(0.0, 5, 0.0, 3.0) == pytest.approx(1.0)
    # and at alpha 1 with a free verify pass of gamma tokens: gamma tokens per step
    assert calc.speedup_fast_path(1.0, 5, 0.0, 1.0) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="g:cost"):
        parse_verify_costs("3=1.5")
    assert "γ= 4" in chart(calc.report(alpha=0.8, gamma=4, c=0.1)["curve"])
    with pytest.raises(ValueError, match="gamma"):
        calc.report(alpha=0.5, gamma=0)

"""Cost curves: stored per machine and verifier; modelled speedups from them, labelled as such."""
import json

import pytest

from olifant_mlx.measure.curves import (fit, load_curve, modelled_speedup, pass_seconds, save_curve,
                                        seeded_pass_cost)

CURVE = {"format": 1, "verifier": "v", "verifier_id": "abc", "machine": {"arch": "x"}, "max_new": 9,
         # a pass of n tokens: 0.5 + 0.05 n seconds (KV); uncached 2 + 0.01 n
         "kv": {64: {n: 0.5 + 0.05 * n for n in range(1, 10)}, 512: {n: 0.6 + 0.05 * n for n in range(1, 10)}},
         "uncached": {64: {n: 2.0 + 0.01 * n for n in range(1, 10)}}}


def test_fit_and_modelled_speedup():
    a, b = fit(CURVE)
    assert a == pytest.approx(0.5) and b == pytest.approx(0.05)
    assert fit(CURVE, "kv", context=600)[0] == pytest.approx(0.6)     # the nearest context
    # 40 tokens in 10 KV passes feeding 50 tokens, no drafting time: 40 * 0.55 / (10 * 0.5 + 0.05 * 50)
    row = {"strategy": "lookup", "regime": "kv", "n_tokens": 40, "steps": 10, "forward_tokens": 50,
           "drafted": 60, "draft_s_per_step": 0.0}
    assert modelled_speedup(row, CURVE) == pytest.approx(40 * 0.55 / 7.5)
    unc = {**row, "regime": "uncached"}                               # fed: 10 corrections + 60 drafts
    assert modelled_speedup(unc, CURVE) == pytest.approx(40 * 2.01 / (10 * 2.0 + 0.01 * 70))
    assert modelled_speedup({**row, "strategy": "plain"}, CURVE) is None


def test_a_row_with_its_pass_sizes_is_costed_at_the_curves_points():
    """A bent curve (1 token: 0.1 s, the line through its points says more): a row that carries
    its steps' sizes is costed at the points, the fit only past them; one without, by the fit."""
    bent = {**CURVE, "kv": {64: {1: 0.10, 2: 0.15, 3: 0.17, 4: 0.18, 5: 0.18}}}
    a, b = fit(bent)
    assert a + b > 0.11                                               # the line misses the 1-token pass
    assert pass_seconds(bent, 1) == 0.10 and pass_seconds(bent, 0) == 0.0
    assert pass_seconds(bent, 9) == pytest.approx(a + 9 * b)          # past the points: the fit
    # 12 tokens in 5 steps: three 3-token passes, one 1-token (fast path), one 9-token
    row = {"strategy": "auto", "regime": "kv", "n_tokens": 12, "steps": 5, "forward_tokens": 19,
           "drafted": 30, "draft_s_per_step": 0.01, "pass_sizes": {"3": 3, "1": 1, "9": 1}}
    ours = 3 * 0.17 + 0.10 + (a + 9 * b) + 5 * 0.01
    assert modelled_speedup(row, bent) == pytest.approx(12 * 0.10 / ours)
    no_sizes = {k: v for k, v in row.items() if k != "pass_sizes"}
    assert modelled_speedup(no_sizes, bent) == pytest.approx(12 * (a + b) / (5 * a + 19 * b + 0.05))


def test_stats_count_the_steps_by_size_and_keep_them_out_of_outputs():
    from olifant_mlx.engine.stats import Stats, Step

    st = Stats()
    for fed in (1, 4, 4, 9):
        st.add(Step(index=0, drafted=[], accepted=0, emitted=[1], verifier_token=1, fast_path=False,
                    forward_tokens=fed, draft_s=0.0, verify_s=0.0, step_s=0.0))
    assert st.pass_sizes == {1: 1, 4: 2, 9: 1} and st.forward_tokens == 18
    assert "pass_sizes" not in st.as_dict()


def test_a_seeded_pass_cost_starts_from_the_curve():
    cost = seeded_pass_cost(CURVE)
    a, b = cost.coefficients()
    assert a == pytest.approx(0.5) and b == pytest.approx(0.05)
    for _ in range(200):                  # real passes take over: a verifier twice as slow
        cost.observe(1, 1.1)
        cost.observe(9, 1.9)
    assert cost.coefficients()[0] == pytest.approx(1.0, rel=0.05)


def test_store_and_load(tmp_path, monkeypatch):
    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path))
    path = save_curve(CURVE)
    assert path.parent == tmp_path / "curves" and path.name.startswith("v-")
    back = load_curve(path)
    assert back["kv"][64][3] == pytest.approx(0.65)                  # keys back to ints
    (tmp_path / "bad.json").write_text(json.dumps({"format": 1, "kv": []}))
    with pytest.raises(ValueError, match="bad.json: not a cost curve"):
        load_curve(tmp_path / "bad.json")


@pytest.mark.slow
def test_measure_a_real_curve(tmp_path, monkeypatch, smol):
    """SmolLM2: a curve at two short contexts, both regimes, stored with the machine."""
    from olifant_mlx.measure.curves import measure_curve

    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path))
    v = smol
    c = measure_curve(v, "The Licensee shall not sublicense the Software.", max_new=4, contexts=(16, 64), repeats=1)
    assert set(c["kv"]) == {16, 64} and set(c["kv"][16]) == {1, 2, 3, 4}
    assert all(s > 0 for row in c["uncached"].values() for s in row.values())
    assert c["machine"]["cpus"] >= 1 and c["verifier"] == "smollm2-135m"
    assert load_curve(save_curve(c))["uncached"][64][4] == pytest.approx(c["uncached"][64][4])

"""bench --experiment: named configurations run by the package's own measurement code."""
import argparse
import json
import lzma

import pytest

from olifant_mlx.cli import main
from olifant_mlx.measure.experiments import EXPERIMENTS, configure

DOCS = ["The Member States shall adopt the measures necessary to comply with this Directive. "
        "The Commission shall report to the Council on the application of this Directive.",
        "Article 4 of Regulation (EC) No 1234/2007 is replaced by the following text. "
        "The Member States shall notify the Commission of the measures they adopt."]
PROMPTS = ["The Member States shall", "Article 4 of Regulation"]


@pytest.fixture
def tiny_shared(tmp_path, monkeypatch):
    """A shared folder whose legal corpus and prompts are a few sentences."""
    legal = tmp_path / "shared" / "corpora" / "legal"
    legal.mkdir(parents=True)
    text = "\n\n".join(DOCS * 20) + "\n"
    for split in ("train", "valid"):
        (legal / f"eurlexsum.{split}.txt.xz").write_bytes(lzma.compress(text.encode()))
    (legal / "prompts.dev.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    monkeypatch.setenv("OLIFANT_SHARED", str(tmp_path / "shared"))
    return tmp_path


def tiny_speculative(out):
    """The reference verifier: the held-out document's own continuation, no model run."""
    return ["--verifier", "reference", "--n-prompts", "2", "--max-tokens", "8", "-k", "3",
            "--regimes", "kv", "--results", str(out / "r.jsonl"), "--out-dir", str(out / "speculative")]


def check_speculative(out):
    rows = [json.loads(line) for line in (out / "r.jsonl").read_text().splitlines()]
    assert {r["strategy"] for r in rows} == {"plain", "olifant", "ngram", "lookup"}
    assert {r["task"] for r in rows} == {"legal"} and {r["k"] for r in rows if r["strategy"] != "plain"} == {3}
    assert (out / "models" / "legal.smollm2-135m.olif").is_file()   # trained on first use
    assert (out / "speculative" / "bench.md").is_file()


def tiny_plain_vs_mlx_lm(out):
    return ["--n-prompts", "1", "--max-tokens", "4", "--rounds", "1", "--out-dir", str(out)]


def check_plain_vs_mlx_lm(out):
    result = json.loads((out / "plain_vs_mlx_lm.json").read_text())
    assert result["prompts"] == 1 and len(result["rounds"]) == 1 and result["median"] > 0


def tiny_live(out):
    return ["--model", "smollm2-135m", "--prompts", "legal={shared}/corpora/legal/prompts.dev.jsonl".format(
        shared=str(out.parent / "shared")), "--n-prompts", "1", "--max-tokens", "6", "--rounds", "1", "-k", "3",
        "--calibrate", "--contexts", "16", "--strategy", "auto=auto", "olifant=olifant:{olifant}",
        "--out-dir", str(out)]


def check_live(out):
    result = json.loads((out / "live-smollm2-135m.json").read_text())
    # what benchmarks/precedent_workload.py reads of it
    assert isinstance(result["load_average_start"], float) and isinstance(result["load_average_end"], float)
    legal = result["tasks"]["legal"]["kv"]
    assert legal["outputs_identical"] and set(legal["summary"]) == {"plain", "mlx-lm", "auto", "olifant"}
    assert legal["strategies"]["auto"].startswith("adaptive:hybrid:") and "rest:" in legal["strategies"]["auto"]
    assert (out / "models" / "legal" / "legal.smollm2-135m.1000000.sfx").is_file()   # built on first use
    assert legal["summary"]["olifant"]["modelled_speedup"] > 0 and result["curve"]
    assert {r["label"] for r in legal["runs"]} == {"plain", "mlx-lm", "auto", "olifant"}


TINY = {"speculative": (tiny_speculative, check_speculative),
        "plain_vs_mlx_lm": (tiny_plain_vs_mlx_lm, check_plain_vs_mlx_lm),
        "live": (tiny_live, check_live)}


def test_every_experiment_has_a_tiny_run_here():
    assert set(TINY) == set(EXPERIMENTS)


@pytest.mark.parametrize("name", [
    "speculative",
    pytest.param("plain_vs_mlx_lm", marks=pytest.mark.slow),      # a real verifier (SmolLM2-135M)
    pytest.param("live", marks=pytest.mark.slow),
])
def test_every_experiment_runs_in_a_tiny_configuration(name, tiny_shared):
    flags, check = TINY[name]
    out = tiny_shared / "out"
    assert main(["bench", "--experiment", name, *flags(out)]) == 0
    check(out)


def test_the_command_line_wins_over_the_experiment():
    defaults = {"model": None, "max_tokens": None, "k": None, "out_dir": "bench-results", "strategy": None}
    args = argparse.Namespace(**{**defaults, "max_tokens": 7, "strategy": ["lookup=lookup"]})
    configure("speculative", args, defaults)
    assert args.max_tokens == 7 and args.strategy == ["lookup=lookup"]     # given: kept
    assert args.k == [3, 5, 8] and args.model == "smollm2-135m"            # left at defaults: set


def test_list_and_unknown_experiments(capsys):
    assert main(["bench", "--list-experiments"]) == 0
    listed = capsys.readouterr().out
    assert all(f"{name}: " in listed for name in EXPERIMENTS) and "--no-mlx-lm" in listed
    assert main(["bench", "--experiment", "nope"]) == 1
    assert "--experiment 'nope': not one of live, plain_vs_mlx_lm, speculative" in capsys.readouterr().err


def run(label, rnd, seconds, tokens=10, steps=10, forward=10, drafted=0, accepted=0, draft_s=0.0, regime="kv"):
    return {"round": rnd, "prompt": 0, "label": label, "regime": regime, "seconds": seconds,
            "decode_s": seconds - 1.0, "tokens": tokens, "steps": steps, "forward_tokens": forward,
            "drafted": drafted, "accepted": accepted, "draft_s": draft_s}


def test_live_summary_measures_and_models_the_same_generations():
    """Measured speedups per round (plain / ours, end to end), decode-only over all rounds, and
    the modelled one under the curve's fit (a + b n per pass: here a = 1, b = 0.5)."""
    from olifant_mlx.measure.experiments import live_summary

    curve = {"kv": {64: {1: 1.5, 2: 2.0, 3: 2.5}}, "uncached": {64: {1: 1.0, 2: 1.0}}}
    runs = [run("plain", 0, 11.0), run("plain", 1, 13.0), run("mlx-lm", 0, 12.0), run("mlx-lm", 1, 12.0),
            # 10 tokens in 4 passes feeding 16 tokens, 0.2 s drafting: modelled 10 * 1.5 / (4 + 8 + 0.2)
            run("draft", 0, 6.0, steps=4, forward=16, drafted=12, accepted=6, draft_s=0.2),
            run("draft", 1, 4.0, steps=4, forward=16, drafted=12, accepted=6, draft_s=0.2)]
    s = live_summary(runs, curve, ["plain", "mlx-lm", "draft"])
    d = s["draft"]
    assert d["speedup_rounds"] == [round(11 / 6, 4), round(13 / 4, 4)]
    assert d["vs_mlx_lm_rounds"] == [2.0, 3.0] and d["vs_mlx_lm_median"] == 2.5
    assert d["decode_speedup"] == round((10 + 12) / (5 + 3), 4)
    assert d["modelled_speedup"] == round(15 / 12.2, 4)
    assert d["modelled_over_measured"] == round(d["modelled_speedup"] / d["decode_speedup"], 4)
    assert d["acceptance"] == 0.5 and d["tokens_per_pass"] == 2.5
    assert "modelled_speedup" not in s["plain"] and s["plain"]["speedup_median"] == 1.0
    assert "modelled_speedup" not in live_summary(runs, None, ["draft"])["draft"]    # no curve: not modelled


def test_live_refuses_what_it_cannot_run_before_loading_a_verifier(tmp_path, capsys):
    base = ["bench", "--experiment", "live", "--out-dir", str(tmp_path)]
    for extra, said in ((["-k", "3", "5"], "takes one -k"), (["--strategy", "plain=none"], "baselines"),
                        (["--verifier", "reference"], "times a real verifier"),
                        (["--strategy", "x=nope", "--model", str(tmp_path / "absent")], "unknown drafter 'nope'")):
        assert main(base + extra) == 1
        assert said in capsys.readouterr().err

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


TINY = {"speculative": (tiny_speculative, check_speculative),
        "plain_vs_mlx_lm": (tiny_plain_vs_mlx_lm, check_plain_vs_mlx_lm)}


def test_every_experiment_has_a_tiny_run_here():
    assert set(TINY) == set(EXPERIMENTS)


@pytest.mark.parametrize("name", [
    "speculative",
    pytest.param("plain_vs_mlx_lm", marks=pytest.mark.slow),      # a real verifier (SmolLM2-135M)
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
    assert "--experiment 'nope': not one of plain_vs_mlx_lm, speculative" in capsys.readouterr().err

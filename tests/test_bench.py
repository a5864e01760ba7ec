"""bench: the sweep, resume after a kill, metrics per generation, tables, energy labels."""
import csv
import json

import pytest
from test_engine import VOCAB, tiny_llama

from olifant_mlx.drafters import LookupDrafter, NgramDrafter
from olifant_mlx.energy import open_meter
from olifant_mlx.engine.reference import TextDetokenizer
from olifant_mlx.measure.bench import (ModelRunner, aggregate, alternating_rounds, load_rows,
                                       read_prompts, sweep, write_tables)
from olifant_mlx.verifier import Verifier


class Tok:
    """What a Verifier needs of an mlx-lm tokenizer, over tiny-model ids."""
    eos_token_ids = []
    bos_token_id = None
    name, vocab_size, digest = "tiny", VOCAB, bytes(32)

    def encode(self, text):
        return [1 + ord(c) % (VOCAB - 1) for c in text]

    def decode(self, ids):
        return "".join(chr(96 + i % 26) for i in ids)

    @property
    def detokenizer(self):
        return TextDetokenizer(self.decode)


def tiny_verifier():
    return Verifier(tiny_llama(0), Tok(), Tok(), "tiny")


@pytest.fixture(scope="module")
def session():
    return ModelRunner(tiny_verifier())


TASKS = {"legal": ["The Member States shall", "Article 4 of Regulation"],
         "medical": ["patients were randomised to"]}


def test_sweep_resume_and_tables(session, tmp_path):
    results = tmp_path / "r.jsonl"
    strategies = {"ngram": NgramDrafter(), "lookup": LookupDrafter()}
    rows = sweep(session, TASKS, strategies, [3, 5], ["kv", "uncached"], 16, results)
    # 3 prompts x 2 regimes x (plain + 2 strategies x 2 k)
    assert len(rows) == 3 * 2 * 5 == len(load_rows(results))
    assert all(r["exact_match"] and r["rouge_l"] == 1.0 for r in rows)  # output-preserving
    assert all(r["energy_j"] is None and r["compute_cpu_s_per_100_tokens"] > 0 for r in rows)
    # a run killed mid-line: the torn line is ignored and only missing cells run again
    lines = results.read_text().splitlines()
    results.write_text("\n".join(lines[:-3]) + "\n" + lines[-3][:20])
    again = sweep(session, TASKS, strategies, [3, 5], ["kv", "uncached"], 16, results)
    assert len(load_rows(results)) == 30 and len(again) == 30
    assert sweep(session, TASKS, strategies, [3, 5], ["kv", "uncached"], 16, results) and \
        len(load_rows(results)) == 30   # nothing left to do
    cells = aggregate(load_rows(results))
    assert len(cells) == 2 * 2 * (1 + 2 * 2)
    plain = [c for c in cells if c["strategy"] == "plain"]
    assert all(c["speedup"] == pytest.approx(1.0) and c["acceptance"] == 0.0 for c in plain)
    paths = write_tables(cells, tmp_path)
    with open(paths["csv"]) as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(cells) and table[0]["energy_label"] == "not measured"
    assert "not measured" in paths["markdown"].read_text()


def test_alternating_rounds(session):
    runners = [("plain", None, 0), ("lookup", LookupDrafter(), 4)]
    rounds = alternating_rounds(session, TASKS["legal"], runners, 2, 12, True)
    assert len(rounds) == 2 and all(set(r) == {"plain", "lookup"} for r in rounds)
    assert all(sec > 0 for r in rounds for sec in r.values())

    class Broken(ModelRunner):   # outputs that differ (a broken drafter) stop the measurement
        def run(self, prompt, drafter, *a):
            return ([drafter is None], *super().run(prompt, drafter, *a)[1:])

    with pytest.raises(RuntimeError, match="outputs differ"):
        alternating_rounds(Broken(session.verifier), TASKS["legal"], runners, 1, 4, True)


def test_energy_from_a_meter(session, tmp_path, shared):
    trace = shared / "fixtures/energy/ioreport/replay_synthetic_burst_and_cpu_stall.json"
    meter = open_meter(f"replay:{trace}")
    rows = sweep(ModelRunner(session.verifier, meter), {"legal": TASKS["legal"][:1]},
                 {"ngram": NgramDrafter()}, [3], ["kv"], 12, tmp_path / "r.jsonl")
    for r in rows:
        assert r["energy_backend"] == "replay" and r["energy_label"] != "not measured"
        if r["energy_j"]:
            assert r["j_per_100_tokens"] == pytest.approx(100 * r["energy_j"] / r["n_tokens"])


def test_prompt_files(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": 1, "prompt": "a b"}) + "\n\n")
    (tmp_path / "p.txt").write_text("one\ntwo\n")
    assert read_prompts(str(tmp_path / "p.jsonl")) == ["a b"]
    assert read_prompts(str(tmp_path / "p.txt")) == ["one", "two"]


class WordTok:
    """Our Tokenizer's encode, one id per character (enough to compare drafts with truth)."""
    name, vocab_size = "chars", 256

    def encode(self, text):
        return list(text.encode())

    def decode(self, ids):
        return bytes(ids).decode("utf-8", "replace")


def test_reference_mode_and_predictions(tmp_path):
    from olifant_mlx.measure.bench import ReferenceRunner, add_predictions, continuations_of, write_plots

    doc = " ".join(f"word{i % 7}" for i in range(80))
    (tmp_path / "valid.txt").write_text(doc + "\n\nanother document here\n")
    prompt = " ".join(doc.split()[:50])
    conts = continuations_of([prompt], str(tmp_path / "valid.txt"))
    assert conts[prompt] == doc[len(prompt):]
    with pytest.raises(ValueError, match="not the start of any document"):
        continuations_of(["no such start"], str(tmp_path / "valid.txt"))
    ref = ReferenceRunner(WordTok(), conts)
    rows = sweep(ref, {"legal": [prompt]}, {"lookup": LookupDrafter(), "ngram": NgramDrafter()}, [4],
                 ["kv"], 60, tmp_path / "r.jsonl")
    truth = WordTok().encode(conts[prompt])[:60]
    for r in rows:
        assert r["verifier"] == "reference" and r["n_tokens"] == 60 and r["exact_match"]
    spec = [r for r in rows if r["strategy"] != "plain"]
    assert all(r["acceptance"] >= 0.4 for r in spec)   # a periodic text is easy to look up
    plain = [r for r in rows if r["strategy"] == "plain"][0]
    assert plain["tokens"] == truth and plain["steps"] == 60   # one true token per step
    cells = aggregate(rows)
    assert all(c["speedup"] is None for c in cells)  # nothing was timed: no measured speed
    cal = {"kv_ms": {"1": 100.0}, "kv_relative": {"4": 1.5}, "uncached_full_context_ms": 900.0}
    add_predictions(cells, rows, cal)
    for c in cells:
        if c["strategy"] != "plain":
            assert c["predicted_speedup"] > 1.0
    paths = write_plots(cells, tmp_path, note="simulated verifier: reference text")
    assert paths and all(p.stat().st_size > 1000 for p in paths.values())

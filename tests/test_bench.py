"""bench: the sweep, resume after a kill, metrics per generation, tables, energy labels."""
import csv
import json

import numpy as np
import pytest

from olifant_mlx.bench import aggregate, load_rows, read_prompts, sweep, write_tables
from olifant_mlx.drafters import LookupDrafter, NgramDrafter
from olifant_mlx.energy import open_meter
from test_engine import VOCAB, tiny_llama


class Tok:
    """What the sweep needs of an mlx-lm tokenizer, over tiny-model ids."""
    eos_token_ids = []
    bos_token_id = None

    def encode(self, text):
        return [1 + ord(c) % (VOCAB - 1) for c in text]


@pytest.fixture(scope="module")
def session():
    return tiny_llama(0), Tok(), "tiny"


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


def test_energy_from_a_meter(session, tmp_path, shared):
    trace = shared / "fixtures/energy/ioreport/replay_synthetic_burst_and_cpu_stall.json"
    meter = open_meter(f"replay:{trace}")
    rows = sweep(session, {"legal": TASKS["legal"][:1]}, {"ngram": NgramDrafter()}, [3], ["kv"], 12,
                 tmp_path / "r.jsonl", meter=meter)
    for r in rows:
        assert r["energy_backend"] == "replay" and r["energy_label"] != "not measured"
        if r["energy_j"]:
            assert r["j_per_100_tokens"] == pytest.approx(100 * r["energy_j"] / r["n_tokens"])


def test_prompt_files(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": 1, "prompt": "a b"}) + "\n\n")
    (tmp_path / "p.txt").write_text("one\ntwo\n")
    assert read_prompts(str(tmp_path / "p.jsonl")) == ["a b"]
    assert read_prompts(str(tmp_path / "p.txt")) == ["one", "two"]

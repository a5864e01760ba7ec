"""bench: the sweep, resume after a kill, metrics per generation, tables, energy labels."""
import csv
import json
import os
import stat

import pytest
from tiny_models import VOCAB, Tok, WordTok, tiny_llama, tiny_verifier  # noqa: F401 (WordTok: kept importable)

from olifant_mlx.engine import Chat
from olifant_mlx.drafters import LookupDrafter, NgramDrafter
from olifant_mlx.energy import open_meter
from olifant_mlx.measure.bench import (ModelRunner, aggregate, alternating_rounds, load_rows,
                                       read_prompts, sweep, write_tables)
from olifant_mlx.verifier import Verifier


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
    chat = [{"role": "user", "content": "Draft it."}]
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": 2, "messages": chat}) + "\n")
    assert read_prompts(str(tmp_path / "c.jsonl")) == [Chat(tuple(chat))]     # the chat template formats it


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


# --- resume: a row is reused only for exactly what defines it ---------------------------------

def small_sweep(runner, results, strategies=None, tasks=None, max_tokens=8):
    return sweep(runner, tasks or {"legal": TASKS["legal"][:1]}, strategies or {"s": NgramDrafter()},
                 [3], ["kv"], max_tokens, results)


def test_resume_never_reuses_rows_of_other_settings(session, tmp_path):
    """A rerun with other max tokens, another prompt file under the same task name, another
    drafter under the same strategy name or another verifier under the same name runs again;
    the same command resumes (runs nothing)."""
    results = tmp_path / "r.jsonl"
    first = small_sweep(session, results)
    assert {r["n_tokens"] for r in first} == {8}
    assert small_sweep(session, results) == first                       # resumed: the same rows
    longer = small_sweep(session, results, max_tokens=14)
    assert {r["n_tokens"] for r in longer} == {14}
    other_prompts = small_sweep(session, results, tasks={"legal": ["Article 7 of the Directive"]})
    assert other_prompts[0]["tokens"] != first[0]["tokens"]
    assert other_prompts[0]["prompt_sha256"] != first[0]["prompt_sha256"]
    other_drafter = small_sweep(session, results, strategies={"s": LookupDrafter()})
    assert other_drafter[1]["drafter"] != first[1]["drafter"]
    assert other_drafter[1]["time"] > first[1]["time"]                  # measured, not reused
    other_model = ModelRunner(Verifier(tiny_llama(7), Tok(), Tok(), "tiny"))   # same name, other weights
    assert other_model.identity != session.identity
    again = small_sweep(other_model, results)
    assert again[0]["tokens"] != first[0]["tokens"] and again[0]["verifier_id"] == other_model.identity
    assert len(load_rows(results)) == 2 * 4 + 1       # every run kept apart (the plain row reused once)


def test_a_spec_names_its_model_file_as_it_is(tmp_path):
    from olifant_mlx.drafters import parse_spec
    from olifant_mlx.draftmodel.igtree import Builder
    from olifant_mlx.measure.bench import spec_identity

    path = tmp_path / "d.olif"
    b = Builder(vocab_size=VOCAB)
    b.add_document(list(range(1, 40)))
    b.build().save(path)
    spec = parse_spec(f"olifant:{path}")
    before = spec_identity(spec)
    os.utime(path, ns=(1, 1))                   # the same name, retrained (another time)
    assert spec_identity(spec) != before and spec_identity(parse_spec("ngram:3")) == "ngram:3"


def test_lines_that_are_not_rows_are_skipped(session, tmp_path):
    results = tmp_path / "r.jsonl"
    rows = small_sweep(session, results)
    with open(results, "a") as f:
        f.write('3\n[1, 2]\n"text"\nnull\n{"verifier": "tiny"}\n\xff\xfe not utf-8\n{"torn": ')
    assert small_sweep(session, results) == rows                        # resumes over them
    assert load_rows(results) == rows
    from olifant_mlx.measure.bench import read_results

    assert read_results(results) == (rows, 7)                          # and counts them


def test_results_and_tables_are_private_where_they_hold_outputs(session, tmp_path):
    results = tmp_path / "r.jsonl"
    small_sweep(session, results)
    assert stat.S_IMODE(os.stat(results).st_mode) == 0o600             # rows hold generated ids
    os.chmod(results, 0o644)
    small_sweep(session, results, max_tokens=5)
    assert stat.S_IMODE(os.stat(results).st_mode) == 0o600
    paths = write_tables(aggregate(load_rows(results)), tmp_path / "tables")
    assert all(p.is_file() for p in paths.values())
    assert not list((tmp_path / "tables").glob(".*.tmp"))              # written atomically


def test_prompt_files_that_are_not_prompts_are_named(tmp_path):
    cases = {"a.jsonl": ('{"id": 1}\n', r"a.jsonl:1: wants an object"),
             "b.jsonl": ('{"prompt": "ok"}\n[1, 2]\n', r"b.jsonl:2: wants an object"),
             "c.jsonl": ('{"prompt": "ok"}\n{"prompt": \n', r"c.jsonl:2: not JSON"),
             "d.txt": ("\n\n", "holds no prompt"),
             "e.txt": (b"fine\n\xff\xfe\n", r"e.txt is not UTF-8 text"),
             "f.jsonl": ('{"messages": []}\n', r"f.jsonl:1: \"messages\" wants a non-empty list"),
             "g.jsonl": ('{"messages": [{"role": "user"}]}\n', r"g.jsonl:1: a chat message needs a role")}
    for name, (content, why) in cases.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(ValueError, match=why):
            read_prompts(str(path))


def test_the_command_line_becomes_the_sweep_settings(tmp_path):
    """`bench`'s flags win over --config's values, which win over --quick's and the defaults;
    the command hands measure.sweep_command the settings and nothing else."""
    from olifant_mlx.cli import build_parser
    from olifant_mlx.cli.bench import sweep_settings

    cfg = tmp_path / "bench.toml"
    cfg.write_text('ks = [2]\nprompts = 4\nmax_tokens = 9\n[tasks]\nlegal = "a.jsonl"\n'
                   '[strategies]\nolifant = "olifant:m.olif"\n')
    parse = build_parser("olifant").parse_args
    s = sweep_settings(parse(["bench", "--config", str(cfg), "--quick", "--prompts", "medical=b.jsonl",
                              "--max-tokens", "0", "--strategy", "lookup=lookup"]))
    assert s.tasks == {"legal": "a.jsonl", "medical": "b.jsonl"}
    assert s.strategies == {"olifant": "olifant:m.olif", "lookup": "lookup"}
    assert (s.ks, s.regimes, s.n_prompts, s.max_tokens) == ([2], ["kv"], 4, 0)
    assert s.reference is None and not s.simulated and s.shard is None
    s = sweep_settings(parse(["bench", "--verifier", "reference", "--reference", "legal=c.txt"]))
    assert s.strategies == {"ngram": "ngram", "lookup": "lookup"} and s.ks == [3, 5, 8]
    assert s.reference == {"legal": "c.txt"} and s.simulated and (s.n_prompts, s.max_tokens) == (100, 100)
    with pytest.raises(ValueError, match="NAME=VALUE"):
        sweep_settings(parse(["bench", "--verifier", "reference", "--reference", "legal"]))


@pytest.mark.slow    # a sweep with its tables and figures: over the fast loop's 1.4 s
def test_bench_without_prompts_runs_the_shipped_ones_and_says_what_it_ran(tmp_path, monkeypatch, capsys):
    """`bench` as the README names it: no --prompts runs the 12 clause openings shipped with the
    package; the header gives the prompts it ran and their tokens (not the default 100 prompts);
    without an energy meter there is no tokens-per-joule figure."""
    from olifant_mlx.cli import build_parser, main
    from olifant_mlx.cli.bench import default_prompts, sweep_settings

    s = sweep_settings(build_parser("olifant").parse_args(["bench"]))
    assert s.tasks == {"legal": default_prompts()} and len(read_prompts(default_prompts())) == 12
    monkeypatch.setattr("olifant_mlx.verifier.load_verifier", lambda *a, **k: tiny_verifier())
    assert main(["bench", "--quick", "--no-mlx-lm", "--energy", "none", "--strategy", "lookup=lookup",
                 "--results", str(tmp_path / "r.jsonl"), "--out-dir", str(tmp_path)]) == 0
    err = " ".join(capsys.readouterr().err.split())           # rich folds its lines
    assert "energy: not measured; 2 prompts (legal 2) x up to 24 tokens; 1 strategies" in err, err
    assert len(load_rows(tmp_path / "r.jsonl")) == 2 * 2           # 2 prompts x (plain + lookup at k 3)
    assert (tmp_path / "speedup_vs_k.png").is_file() and not (tmp_path / "tokens_per_joule.png").exists()
    assert "tokens_per_joule.png skipped: energy was not measured" in err

"""benchmarks/revision_workload.py and the measuring pieces it added: prompts that carry a
prediction (bench's prompt files, the live experiment), transcripts that keep it, and a replay
that drafts from it as the live request did."""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import Tok, tiny_chat_verifier, tiny_verifier

from olifant_mlx.drafters import build_drafter
from olifant_mlx.engine import Chat, GenerationOptions, Session
from olifant_mlx.measure.bench import REFERENCE_COST, ModelRunner, Predicted, read_prompts, unpredicted

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "revision_workload.py"
COMMITTED = ROOT / "docs" / "workload" / "revisions.jsonl"


def workload_module():
    """The script as a module (benchmarks/ is not a package, and no test edits sys.path)."""
    spec = importlib.util.spec_from_file_location("revision_workload", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def items():
    return [json.loads(line) for line in COMMITTED.read_text().splitlines()]


def test_the_committed_workload_has_the_revisions_the_issue_asks_for():
    """>= 24 revisions of >= 5 kinds of instruction, legal and medical, from validation splits
    only, each clause 40-200 words, and each instruction fitting its clause: the number,
    name, parties or sentence it names are in it."""
    got = items()
    assert len(got) >= 24 and len({it["id"] for it in got}) == len(got)
    assert len({it["kind"] for it in got}) >= 5
    assert {it["scenario"] for it in got} == {"legal", "medical"}
    assert sum(it["scenario"] == "legal" for it in got) >= 12
    assert {it["source"]["file"] for it in got} == {"legal/eurlexsum.valid.txt.xz", "medical/sumpubmed.valid.txt.xz"}
    for it in got:
        clause, text = it["clause"], it["instruction"]
        assert 40 <= len(clause.split()) <= 200, it["id"]
        quoted = re.findall(r'"([^"]+)"', text)
        if it["kind"] in ("delete_sentence", "restructure"):
            assert quoted and quoted[0] in clause, it["id"]
        if it["kind"] == "change_name":
            assert re.search(r"\b" + re.escape(quoted[0]) + r"\b", clause), it["id"]
        if it["kind"] == "change_number":
            old = re.search(r"(?:of|date) (EUR [\d ]+\d|[\d.]+%|\w+ \w+ \d{4}|\w+ (?:days|weeks|months|years))", text)
            assert old and old.group(1) in clause, (it["id"], text)
        if it["kind"] == "mutual":
            parties = re.search(r"of (.+) towards (.+) mutual", text)
            assert all(p.lower() in clause.lower() for p in parties.groups()), it["id"]


@pytest.mark.slow
def test_build_is_reproducible_and_every_clause_stands_in_its_document(tmp_path):
    """`build` again gives the committed file's bytes, and every clause is one paragraph of its
    validation document, verbatim."""
    from olifant_mlx.draftmodel.corpus import iter_documents
    from olifant_mlx.measure.corpora import shared_dir

    if not (shared_dir() / "corpora" / "legal").is_dir():
        pytest.skip("the shared corpora are not here")
    out = tmp_path / "revisions.jsonl"
    subprocess.run([sys.executable, str(SCRIPT), "build", "--out", str(out)], check=True, capture_output=True,
                   cwd=tmp_path)
    assert out.read_bytes() == COMMITTED.read_bytes()
    docs = {}
    for it in items():
        name = it["source"]["file"]
        assert ".valid." in name
        if name not in docs:
            docs[name] = list(iter_documents(str(shared_dir() / "corpora" / name)))
        lines = docs[name][it["source"]["document"]].split("\n")
        assert lines[it["source"]["paragraph"]] == it["clause"], it["id"]


def test_sentences_and_the_writers_read_the_clause():
    rw = workload_module()
    assert rw.sentences("Regulation (EC) No. 5 applies. The Commission shall act. it ends here.") == [
        "Regulation (EC) No. 5 applies.", "The Commission shall act.", "it ends here."]
    clause = "Once a year the operator shall notify the Commission within 30 days. The notice shall be in writing."
    assert rw.change_number(clause, "legal") == "Change the period of 30 days to 45 days."
    assert rw.change_name(clause, "legal").startswith('Replace "the operator"')
    assert rw.mutual(clause, "legal") == ("Make the obligation of the operator towards the Commission mutual, so "
                                          "that it binds the Commission towards the operator in the same way.")
    assert "30 days may be extended" in rw.proviso(clause, "legal")
    assert rw.delete_sentence(clause, "legal") == 'Delete the sentence beginning "The notice shall be in"; ' \
                                                  'keep the rest as it is.'
    assert rw.change_number("no figure here at all", "legal") is None
    medical = rw.change_number("a rate of 95% and of 62 % in the others", "medical")
    assert medical.startswith("Correct the figure of 62%")


def test_a_prompt_files_prediction_reaches_every_generation(tmp_path):
    """A prompts JSONL line's "prediction" becomes a Predicted prompt; the runner gives it to the
    generation: the output stays plain decoding's, the prediction drafter drafts from it (the
    prediction is the answer itself here: nearly every draft is right), OpenAI's counts are kept."""
    path = tmp_path / "p.jsonl"
    v = tiny_verifier()
    runner = ModelRunner(v, options=GenerationOptions(pass_cost=REFERENCE_COST, draft_cost=REFERENCE_COST))
    plain, st_plain, _, _ = runner.run("abcabc", None, 0, True, 24)
    text = "".join(chr(t - 1) for t in plain)
    assert Tok().encode(text) == plain                   # the tiny tokenizer writes the answer back
    path.write_text(json.dumps({"prompt": "abcabc", "prediction": text}) + "\n"
                    + json.dumps({"messages": [{"role": "user", "content": "hi"}], "prediction": "x"}) + "\n")
    got = read_prompts(str(path))
    assert got == [Predicted("abcabc", text), Predicted(Chat(({"role": "user", "content": "hi"},)), "x")]
    assert unpredicted(got[0]) == ("abcabc", text) and unpredicted("p") == ("p", None)
    with_prediction, st, _, _ = runner.run(got[0], build_drafter("prediction"), 8, True, 24)
    without, st_without, _, _ = runner.run("abcabc", build_drafter("prediction"), 8, True, 24)
    assert with_prediction == without == plain
    assert st.extra["prediction"] == {"tokens": len(plain), "accepted": len(plain), "rejected": 0}
    assert st.steps <= len(plain) / 4 < st_without.steps
    path.write_text(json.dumps({"prompt": "a", "prediction": 3}) + "\n")
    with pytest.raises(ValueError, match="p.jsonl:1: \"prediction\" wants a string"):
        read_prompts(str(path))


def test_the_live_prompts_carry_their_clauses_as_predictions(tmp_path):
    """`live` writes each scenario's first revisions (kinds in turn) as `revise` prompts them,
    each with its clause as the prediction, in a file bench's live experiment reads."""
    rw = workload_module()
    session = Session(tiny_chat_verifier(), "none")
    files = rw.live_prompts(session, tmp_path, {"legal": 7, "medical": 2})
    by_id = {it["id"]: it for it in items()}
    legal = [json.loads(line) for line in Path(files["legal"]).read_text().splitlines()]
    assert len({by_id[r["id"]]["kind"] for r in legal}) == 7       # the first of each kind
    for scenario, n in (("legal", 7), ("medical", 2)):
        prompts = read_prompts(str(files[scenario]))
        records = [json.loads(line) for line in Path(files[scenario]).read_text().splitlines()]
        assert len(prompts) == n
        for p, r in zip(prompts, records):
            it = by_id[r["id"]]
            assert isinstance(p, Predicted) and p.prediction == it["clause"]
            assert isinstance(p.prompt, Chat) and it["clause"] in p.prompt.messages[-1]["content"]
            assert it["instruction"] in p.prompt.messages[-1]["content"]


def test_the_apple_curve_cites_a_source_for_every_point():
    """Each point of the Apple-silicon curves says whether it was measured (and where), or how it
    was interpolated or extrapolated; the committed file is what the script writes."""
    from olifant_mlx.measure.curves import pass_seconds

    rw = workload_module()
    data = rw.apple_curves()
    assert json.loads((ROOT / "docs" / "results" / "curves" / "apple-silicon-4bit.json").read_text()) == \
        json.loads(json.dumps(data))
    apple = rw.load_curve_data(data["curves"]["apple"])
    assert pass_seconds(apple, 1) == pytest.approx(0.0759) and pass_seconds(apple, 8) == pytest.approx(0.1708)
    for curve in data["curves"].values():
        assert set(curve["points"]) == {str(n) for n in range(1, 34)}
        for n, how in curve["points"].items():
            assert how.split(":")[0] in ("measured", "interpolated between the measured rows either side",
                                         "extrapolated", "constructed"), (n, how)
            assert not how.startswith(("measured", "extrapolated", "constructed")) or "https://github.com/" in how
    assert all(url.startswith("https://github.com/ml-explore/mlx/") for url in data["sources"])


@pytest.mark.slow
def test_a_revision_replayed_with_its_prediction_equals_the_live_generation(tmp_path, monkeypatch, smol):
    """SmolLM2, one revision as `revise` prompts it, its clause the prediction: the transcript's
    replay (no verifier) and the live generation draft, accept and pass alike with the
    prediction drafter at k 32 and the adaptive hybrid (auto's kind) at k 8, both planning on one
    fixed cost, as in test_transcripts; without the prediction the replay takes more passes."""
    from olifant_mlx.measure.bench import FixedCost, reference_options
    from olifant_mlx.measure.transcripts import TranscriptRunner, make_transcripts
    from olifant_mlx.revise import max_tokens_for

    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path / "cache"))
    rw = workload_module()
    item = next(it for it in items() if it["kind"] == "change_number")
    session = Session(smol, "none")
    p = rw.prompts_for(session, [item])[item["id"]]
    n = max_tokens_for(len(smol.identity.encode(item["clause"])))
    key = rw._key(p.prompt)
    t = make_transcripts(smol, {key: p}, n, drafter="prediction", options=GenerationOptions(k=16))[key]
    assert t["prediction_ids"] == smol.identity.encode(item["clause"])
    cost = FixedCost(1.0, 0.2, draft_s=0.0)
    live = ModelRunner(smol, options=reference_options(cost))
    plain, _, _, _ = live.run(p.prompt, None, 0, True, n)
    assert plain == t["tokens"], "drafted transcripts must be plain decoding's output"
    replay = TranscriptRunner(smol.identity, {key: t}, reference_options(cost), predicted=True)
    unpredicted_replay = TranscriptRunner(smol.identity, {key: t}, reference_options(cost))
    differences, passes = [], {}
    for spec, k in (("prediction", 32), ("adaptive:hybrid", 8)):      # two of each, for CI's time
        a, sa, _, _ = live.run(p, build_drafter(spec, smol.identity), k, True, n)
        b, sb, _, _ = replay.run(key, build_drafter(spec, smol.identity), k, True, n)
        _, sc, _, _ = unpredicted_replay.run(key, build_drafter(spec, smol.identity), k, True, n)
        got = [(x.drafted, x.accepted, x.steps, x.led_steps, dict(x.pass_sizes)) for x in (sa, sb)]
        if a != b or got[0] != got[1]:
            differences.append((spec, k, got))
        passes[(spec, k)] = (sb.steps, sc.steps)
    assert not differences, differences
    assert any(with_ < without for with_, without in passes.values()), passes


@pytest.mark.slow
def test_bench_live_gives_a_prompt_files_prediction_to_the_drafter(tmp_path, smol):
    """`bench --experiment live` over a prompts file whose line carries a prediction (here the
    verifier's own answer, which nothing else in the prompt holds): every output identical to
    plain, and the prediction drafter copies it, many tokens a pass."""
    messages = [{"role": "user", "content": "Write one sentence about the sea."}]
    plain, _, _, _ = ModelRunner(smol).run(Chat(tuple(messages)), None, 0, True, 16)
    assert len(plain) == 16
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"messages": messages, "prediction": smol.identity.decode(plain)}) + "\n")
    curve = ROOT / "docs" / "results" / "curves" / "smollm2-135m.json"
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "bench", "--experiment", "live", "--model", "smollm2-135m",
                        "--prompts", f"revision={prompts}", "--n-prompts", "1", "--max-tokens", "16", "--rounds", "1",
                        "-k", "8", "--no-mlx-lm", "--curve", str(curve), "--strategy", "pred=prediction",
                        "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads((tmp_path / "live-smollm2-135m.json").read_text())["tasks"]["revision"]["kv"]
    assert got["outputs_identical"] and set(got["summary"]) == {"plain", "pred"}
    assert got["summary"]["pred"]["tokens_per_pass"] >= 4, got["summary"]["pred"]

"""Transcripts: a verifier's own greedy output replayed through the engine's loop gives exactly
the drafts the live verifier accepts (the equivalence is what makes transcript tables exact)."""
import json

import pytest

from olifant_mlx.engine import GenerationOptions
from olifant_mlx.measure.bench import REFERENCE_COST, ModelRunner, read_prompts
from olifant_mlx.measure.corpora import shared_dir
from olifant_mlx.measure.transcripts import (TranscriptRunner, make_transcripts, read_transcript_set,
                                             transcript_file, write_transcript_set)

SHARED = shared_dir() / "corpora"      # $OLIFANT_SHARED, else shared/ beside the checkout


class FakeReplayTokenizer:
    name, vocab_size, digest = "fake", 50, b"\x01"

    def encode(self, text):
        return [ord(c) % 50 for c in text]

    def decode(self, ids):
        return "".join(chr(65 + i % 26) for i in ids)


def test_transcript_set_round_trip_and_bad_file(tmp_path):
    t = {"p": {"format": 1, "verifier": "v", "verifier_id": "x", "prompt": "p", "prompt_ids": [1, 2],
               "tokens": [3, 4, 5], "text": "abc", "eos_ids": [0], "bos_id": None}}
    path = write_transcript_set(tmp_path / "t.json", t, {"legal": ["p"]})
    items = read_transcript_set(path)
    assert items[0]["task"] == "legal" and items[0]["tokens"] == [3, 4, 5]
    (tmp_path / "bad.json").write_text(json.dumps({"format": 1, "transcripts": [{"prompt": "p"}]}))
    with pytest.raises(ValueError, match="bad.json: not a transcript file"):
        read_transcript_set(tmp_path / "bad.json")


def test_replay_accepts_exactly_the_transcript():
    """On a repeating transcript the lookup drafter's drafts are accepted (all but one that
    runs past the end); the replay's output is the transcript."""
    from olifant_mlx.drafters import LookupDrafter

    tokens = [7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9]
    runner = TranscriptRunner(FakeReplayTokenizer(), {"p": {"prompt_ids": [7, 8, 9], "tokens": tokens,
                                                            "verifier": "v", "verifier_id": "x"}})
    out, st, _, _ = runner.run("p", LookupDrafter(), 3, True, 12)
    assert out == tokens and st.accepted >= st.drafted - 1 > 0     # one may draft past the end
    assert runner.name == "transcript:v"


# --- the equivalence on a real verifier --------------------------------------------------

def deterministic_drafters(ours, draft_path):
    """Fresh drafters (specs) whose drafts depend on the context alone: with the adaptive one on
    a fixed cost curve (it plans with pass costs, measured live otherwise). `draft_path`: the
    demo's draft model (conftest's fixture, built once per session)."""
    from olifant_mlx.draftmodel.igtree import IGTree
    from olifant_mlx.draftmodel.open import open_model_file
    from olifant_mlx.drafters import AdaptiveDrafter, HybridDrafter, LookupDrafter, NgramDrafter, \
        OlifantDrafter, WordNgramDrafter

    model = open_model_file(draft_path, want=IGTree)

    def adaptive():
        d = AdaptiveDrafter(HybridDrafter(OlifantDrafter(model)))
        d.cost = REFERENCE_COST
        return d

    return {"olifant": lambda: OlifantDrafter(model), "ngram": NgramDrafter,
            "ngram-words": lambda: WordNgramDrafter(ours), "lookup": LookupDrafter,
            "hybrid": lambda: HybridDrafter(OlifantDrafter(model)), "adaptive": adaptive}


@pytest.mark.slow
def test_transcript_replay_equals_the_live_engine(tmp_path, monkeypatch, smol, draft_path):
    """SmolLM2, a legal prompt x 24 tokens with the KV cache and its first 12 without it
    (uncached passes re-read the whole context; one prompt, not two: CI's time), every
    deterministic drafter, both regimes, k 3 and 8 (k 5 lies between them and adds nothing
    they do not; CI's time): drafted, accepted, passes and tokens equal
    between the live verifier and the replay of its transcript. Both run the lead rule on one
    fixed cost curve: live, it plans with measured pass times, which would make which drafts are
    fed (not what is emitted) depend on the machine's timing."""
    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path / "cache"))
    v = smol
    prompts = read_prompts(str(SHARED / "legal" / "prompts.dev.jsonl"))[:1]
    transcripts = make_transcripts(v, prompts, 24)
    vid = next(iter(transcripts.values()))["verifier_id"]
    assert all(transcript_file(vid, p, 24).stat().st_mode & 0o777 == 0o600 for p in prompts)
    assert make_transcripts(v, prompts, 24) == transcripts          # the second time: read from the cache
    live = ModelRunner(v, options=GenerationOptions(pass_cost=REFERENCE_COST))
    replay = TranscriptRunner(v.identity, transcripts)
    differences = []
    for kv, n in ((True, 24), (False, 12)):
        for p in prompts:
            plain, _, _, _ = live.run(p, None, 0, kv, n)
            assert plain == transcripts[p]["tokens"][:n], "the regime's greedy output differs from the transcript"
        for name, make in deterministic_drafters(v.identity, draft_path).items():
            for k in (3, 8):
                for p in prompts:
                    a, sa, _, _ = live.run(p, make(), k, kv, n)
                    b, sb, _, _ = replay.run(p, make(), k, kv, n)
                    got = [(x.drafted, x.accepted, x.steps, x.led_steps) for x in (sa, sb)]
                    if a != b or got[0] != got[1]:
                        differences.append((name, k, kv, p[:30], got))
    assert not differences, differences


@pytest.mark.slow
def test_bench_transcript_command(tmp_path):
    """`bench --verifier transcript`: transcripts generated and written (--transcripts-out), then
    replayed from that file with no verifier and a stored curve: the modelled speedup is its
    own column; the measured speedup columns of the replay stay empty."""
    import os
    import subprocess
    import sys

    from document_fixtures import cache_with_models

    # a fresh cache for the transcripts and curves; the verifier found there by a link, not fetched again
    env = {**os.environ, "OLIFANT_CACHE": str(cache_with_models(tmp_path / "cache")), "COLUMNS": "250"}
    prompts = tmp_path / "p.jsonl"
    lines = (SHARED / "legal" / "prompts.dev.jsonl").read_text().splitlines()[:2]
    prompts.write_text("\n".join(lines) + "\n")
    common = ["--n-prompts", "2", "--max-tokens", "12", "-k", "3", "--regimes", "kv", "--strategy",
              "lookup=lookup", "--no-mlx-lm"]

    def bench(*args):
        r = subprocess.run([sys.executable, "-m", "olifant_mlx", "bench", "--verifier", "transcript", *common,
                            *args], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        return r

    out = tmp_path / "t.json"
    bench("--model", "smollm2-135m", "--prompts", f"legal={prompts}", "--transcripts-out", str(out),
          "--results", str(tmp_path / "r1.jsonl"), "--out-dir", str(tmp_path / "o1"), "--calibrate",
          "--contexts", "16", "32")
    items = read_transcript_set(out)
    assert len(items) == 2 and all(len(t["tokens"]) == 12 and t["task"] == "legal" for t in items)
    curve = next((tmp_path / "cache" / "curves").glob("smollm2-135m-*.json"))
    r = bench("--transcripts", str(out), "--curve", str(curve), "--results", str(tmp_path / "r2.jsonl"),
              "--out-dir", str(tmp_path / "o2"))
    assert "modelled speedup: under the cost curve" in r.stdout and "modelled" in r.stdout
    rows = [json.loads(x) for x in (tmp_path / "r2.jsonl").read_text().splitlines()]
    assert {x["verifier"] for x in rows} == {"transcript:smollm2-135m"}

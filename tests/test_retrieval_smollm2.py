"""The corpus retrieval peers on the real offline verifier (SmolLM2-135M) and a real legal
corpus: built with build-rest from part of the legal train split, output identical to plain
greedy decoding for rest, ngram-cache and their adaptive forms in both regimes, and drafts
that get accepted."""
import json
import os
import subprocess
import sys

import pytest

from olifant_mlx.drafters import build_drafter
from olifant_mlx.engine import generate
from tiers import kv_regimes

pytestmark = pytest.mark.slow    # the real offline verifier: minutes on two cores

LEGAL = ("Article 1\nThis Regulation lays down rules concerning the protection of natural persons "
         "with regard to the processing of personal data")


@pytest.fixture(scope="module")
def files(shared, tmp_path_factory):
    d = tmp_path_factory.mktemp("legal")
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "build-rest", "--corpus",
                        str(shared / "corpora" / "legal" / "eurlexsum.train.txt.xz"),
                        "--tokenizer", "smollm2-135m", "--max-tokens", "400000",
                        "--out", str(d / "legal.sfx"), "--ngram-cache", str(d / "legal.ngc"),
                        "--json", "--quiet"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["tokens"] == 400000 and s["index"]["tokenizer"] == "smollm2-135m"
    return d / "legal.sfx", d / "legal.ngc"


def test_retrieval_peers_preserve_output(smol, files):
    sfx, ngc = files
    model, prompt = smol.model, smol.tokenizer.encode(LEGAL)
    drafters = [build_drafter(spec, smol.identity) for spec in
                (f"rest:{sfx}", f"ngram-cache:{ngc}", f"adaptive:rest:{sfx}",
                 f"adaptive:ngram-cache:{ngc}")]
    accepted = 0
    for kv in kv_regimes():       # both in the extended tier (tests/tiers.py)
        n = 24 if kv else 12  # uncached steps re-read the whole context: keep them few
        ref, _ = generate(model, prompt, max_tokens=n, kv_cache=kv)
        for d in drafters:
            for k in (1, 8):     # the shortest draft and the longest (CI's time)
                d.start(prompt)
                out, st = generate(model, prompt, d, k=k, max_tokens=n, kv_cache=kv)
                assert out == ref, (d.name, k, kv)
                accepted += st.accepted
    assert accepted > 0


def test_generate_and_bench_commands(files, tmp_path):
    sfx, ngc = files
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "generate", "--model", "smollm2-135m",
                        "--draft", f"rest:{sfx}", "-k", "5", "-p", LEGAL, "--max-tokens", "12",
                        "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["tokens"]) == 12
    prompts = tmp_path / "p.txt"
    prompts.write_text(LEGAL + "\n")
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "bench", "--model", "smollm2-135m",
                        "--prompts", f"legal={prompts}", "--strategy", f"rest=rest:{sfx}",
                        f"cache=ngram-cache:{ngc}", "-k", "3", "--regimes", "kv", "uncached",
                        "--n-prompts", "1", "--max-tokens", "8", "--results",
                        str(tmp_path / "r.jsonl"), "--out-dir", str(tmp_path / "out")],
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": "220"})
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    # bench also runs mlx-lm's own plain stream_generate (KV only), the second baseline
    assert {r["strategy"] for r in rows} == {"plain", "mlx-lm", "rest", "cache"}
    assert {r["regime"] for r in rows if r["strategy"] == "mlx-lm"} == {"kv"}
    assert {r["regime"] for r in rows} == {"kv", "uncached"} and all(r["exact_match"] for r in rows)

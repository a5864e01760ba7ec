"""The scripts under benchmarks/ and the measuring tools that published numbers depend on."""
import json
import re
import subprocess
import sys
from pathlib import Path

from olifant_mlx.measure.processes import run_measured

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
GROW = "import sys; x = bytearray({mb} << 20); x[::4096] = b'y' * len(x[::4096]); print('ok'); sys.exit(3)"

# Each script's --help, run in one interpreter (an mlx import costs seconds), without the
# script's folder on sys.path: a script that imports a sibling fails here.
HELP_ALL = """
import contextlib, io, json, runpy, sys
failed = {}
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        failed[path] = "ran without exiting"
    except SystemExit as e:
        if e.code not in (0, None) or "usage:" not in out.getvalue():
            failed[path] = f"exit {e.code}: {out.getvalue()[-300:]}"
    except Exception as e:
        failed[path] = f"{type(e).__name__}: {e}"
print(json.dumps(failed))
"""


def scripts():
    return sorted(BENCHMARKS.glob("*.py"))


def test_a_childs_peak_rss_is_its_own_not_its_parents():
    """A parent holding 400 MB: subprocess's own wait4 would give its child a 400 MB peak
    (the high-water mark carried over at exec); run_measured gives the child's 60 MB."""
    held = bytearray(400 << 20)
    held[::4096] = b"x" * len(held[::4096])
    m = run_measured([sys.executable, "-c", GROW.format(mb=60)])
    assert (m["code"], m["stdout"]) == (3, b"ok\n")
    assert 60 <= m["peak_rss_mb"] < 200, m["peak_rss_mb"]
    assert m["cpu_s"] > 0
    del held


def test_no_benchmark_edits_sys_path():
    """Benchmarks import the installed package (`pip install -e .`) and share code through it."""
    edits = [f"{p.name}:{n}" for p in scripts()
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bsys\.path\b", line)]
    assert len(scripts()) >= 20
    assert not edits, edits


def test_every_benchmark_answers_help(tmp_path):
    """From a folder outside the checkout, so that they import the installed package."""
    r = subprocess.run([sys.executable, "-c", HELP_ALL, *map(str, scripts())], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {}


def test_tokens_of_caps_the_corpus_and_caches_it_privately(tmp_path):
    from olifant_mlx.measure.corpora import tokens_of
    from olifant_mlx.verifier import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    corpus = tmp_path / "c.txt"
    corpus.write_text("one two three four five\n\nsix seven eight\n\nnine ten\n")
    cache = tmp_path / "c.npz"
    tokens, starts = tokens_of(corpus, tok, cache, max_tokens=6)
    assert tokens.size == 6 and starts[0] == 0 and all(s < 6 for s in starts)
    assert cache.stat().st_mode & 0o777 == 0o600
    corpus.write_text("changed\n")                # read from the cache, not the corpus
    again, again_starts = tokens_of(corpus, tok, cache, max_tokens=6)
    assert again.tolist() == tokens.tolist() and again_starts.tolist() == starts.tolist()


def test_the_committed_drafting_workload_is_what_its_script_builds(tmp_path):
    """docs/workload/precedents.jsonl is made from the shared corpora's validation splits by
    benchmarks/precedent_workload.py: built again, it is the same bytes, with >= 12 requests of
    each scenario and every legal request's intended article in the library's acts."""
    import pytest

    from olifant_mlx.measure.corpora import shared_dir

    if not (shared_dir() / "corpora" / "legal").is_dir():
        pytest.skip("the shared corpora are not here")
    out = tmp_path / "workload.jsonl"
    subprocess.run([sys.executable, str(BENCHMARKS / "precedent_workload.py"), "build", "--out", str(out)],
                   check=True, capture_output=True)
    committed = BENCHMARKS.parent / "docs" / "workload" / "precedents.jsonl"
    assert out.read_bytes() == committed.read_bytes()
    items = [json.loads(line) for line in out.read_text().splitlines()]
    for scenario in ("legal", "medical", "fresh"):
        assert sum(it["scenario"] == scenario for it in items) >= 12, scenario
    acts = {f"act-{n:03d}.txt" for n in range(40)}
    assert all(it["intended"]["path"] in acts and it["intended"]["paragraphs"] for it in items
               if it["scenario"] == "legal")


def test_batched_serving_calls_an_output_identical_only_with_its_solo_text_and_token_count():
    import runpy

    summarize = runpy.run_path(str(BENCHMARKS / "batched_serving.py"))["summarize"]

    def run(mode, tps, texts, counts, latencies=(1.0, 2.0)):
        return {"mode": mode, "clients": 2, "aggregate_tps": tps, "latencies_s": list(latencies), "texts": texts,
                "completion_tokens": counts, "mean_batch_sizes": [2.0, 2.0] if mode == "batched" else [1, 1]}

    solo = run("one-at-a-time", 10.0, ["a b", "c d"], [64, 64], (2.0, 4.0))
    same = summarize("v", "revision", [solo, run("batched", 15.0, ["a b", "c d"], [64, 64])])
    assert same == [{"verifier": "v", "workload": "revision", "clients": 2, "batched_tps": 15.0,
                     "one_at_a_time_tps": 10.0, "ratio": 1.5, "batched_mean_latency_s": 1.5,
                     "one_at_a_time_mean_latency_s": 3.0, "batched_max_latency_s": 2.0,
                     "one_at_a_time_max_latency_s": 4.0, "mean_batch_size": 2.0, "identical": True}]
    longer = summarize("v", "revision", [solo, run("batched", 15.0, ["a b", "c d e"], [64, 75])])
    assert longer[0]["identical"] is False
    counted = summarize("v", "revision", [solo, run("batched", 15.0, ["a b", "c d"], [64, 63])])
    assert counted[0]["identical"] is False

"""docs/results.md is generated from the committed JSON of the runs: regenerating it gives the
committed file, a changed number in a JSON file makes it differ, and its links resolve."""
import json
import re
import shutil
from pathlib import Path

import pytest

from olifant_mlx.measure.report import ReportError, anchor, render

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MANIFEST = DOCS / "results" / "index.json"
REBUILD = "python -m olifant_mlx bench --report docs/results.md"


def copy_docs(tmp_path) -> Path:
    """The manifest and every JSON file it names, under tmp_path/docs."""
    docs = tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    shutil.copy(MANIFEST, docs / "results" / "index.json")
    for q in json.loads(MANIFEST.read_text())["questions"]:
        for s in q["sources"]:
            (docs / s).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(DOCS / s, docs / s)
    return docs


def test_the_committed_results_match_their_json():
    assert (DOCS / "results.md").read_text() == render(MANIFEST), \
        f"docs/results.md no longer matches the JSON it is made from: run `{REBUILD}`"


def test_a_changed_json_value_changes_the_table(tmp_path):
    docs = copy_docs(tmp_path)
    assert render(docs / "results" / "index.json") == (DOCS / "results.md").read_text()
    summary = docs / "bench-adaptive" / "summary.json"
    rows = json.loads(summary.read_text())
    assert rows[0]["speedup"] == 2.3
    rows[0]["speedup"] = 2.9
    summary.write_text(json.dumps(rows))
    changed = render(docs / "results" / "index.json")
    assert changed != (DOCS / "results.md").read_text()
    assert "| legal | kv | adaptive-hybrid | 16 | 6 | 2.900 |" in changed
    assert "| legal | kv | adaptive-hybrid | 16 | 6 | 2.300 |" not in changed


def test_the_command_writes_the_committed_file(tmp_path):
    from olifant_mlx.cli import main

    docs = copy_docs(tmp_path)
    assert main(["bench", "--report", str(docs / "results.md")]) == 0
    assert (docs / "results.md").read_text() == (DOCS / "results.md").read_text()


def test_a_missing_json_file_is_named(tmp_path):
    docs = copy_docs(tmp_path)
    (docs / "bench-prompt-cache" / "smollm2-135m.json").unlink()
    with pytest.raises(ReportError, match="prompt-cache.*smollm2-135m.json"):
        render(docs / "results" / "index.json")


def headings(path: Path) -> set:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_links_into_the_results_resolve():
    """Every results.md#... and results-archive.md#... link in the docs names a heading there."""
    targets = {"results.md": headings(DOCS / "results.md"),
               "results-archive.md": headings(DOCS / "results-archive.md")}
    files = [ROOT / "README.md", *DOCS.rglob("*.md")]
    bad, seen = [], 0
    for f in files:
        for name, frag in re.findall(r"\((?:[\w./-]*/)?(results(?:-archive)?\.md)#([^)\s]+)\)", f.read_text()):
            seen += 1
            if frag not in targets[name]:
                bad.append(f"{f.relative_to(ROOT)}: {name}#{frag}")
    assert seen > 10 and not bad, bad


def test_nested_mappings_become_rows():
    from olifant_mlx.measure.report import records

    data = {"verifiers": {"a": {"x": {"n": 1}, "y": {"n": 2}}, "b": {"x": {"n": 3}}}}
    rows = records(data, "verifiers", "f.json", ["verifier", "drafter"])
    assert rows == [{"verifier": "a", "drafter": "x", "n": 1}, {"verifier": "a", "drafter": "y", "n": 2},
                    {"verifier": "b", "drafter": "x", "n": 3}]
    with pytest.raises(ReportError, match="f.json.*'drafter'"):
        records({"verifiers": {"a": {"x": 1}}}, "verifiers", "f.json", ["verifier", "drafter"])
    # KEY>NAME: the level's mapping sits under KEY, beside other fields of its object
    data = {"tasks": {"legal": {"kv": {"prompts": 6, "summary": {"plain": {"s": 1.0}, "auto": {"s": 2.0}}}}}}
    rows = records(data, "tasks", "f.json", ["task", "regime", "summary>strategy"])
    assert rows == [{"task": "legal", "regime": "kv", "strategy": "plain", "s": 1.0},
                    {"task": "legal", "regime": "kv", "strategy": "auto", "s": 2.0}]
    with pytest.raises(ReportError, match="f.json.*'nothing>strategy'"):
        records(data, "tasks", "f.json", ["task", "regime", "nothing>strategy"])


def test_links_inside_the_results_resolve():
    """The contents' and the archive's own #anchors name headings in the same file, and the
    data links of results.md name committed files."""
    bad = []
    for name in ("results.md", "results-archive.md"):
        text = (DOCS / name).read_text()
        bad += [f"{name}#{a}" for a in re.findall(r"\]\(#([^)\s]+)\)", text) if a not in headings(DOCS / name)]
    files = re.findall(r"\]\((bench[^)#]+)\)", (DOCS / "results.md").read_text())
    bad += [f for f in files if not (DOCS / f).is_file()]
    assert files and not bad, bad


def test_a_misspelt_manifest_key_is_named(tmp_path):
    docs = copy_docs(tmp_path)
    manifest = docs / "results" / "index.json"
    data = json.loads(manifest.read_text())
    data["questions"][1]["colums"] = data["questions"][1].pop("columns")
    manifest.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=r"index.json: plain-vs-mlx-lm: missing columns; unknown colums"):
        render(manifest)

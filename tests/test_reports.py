"""Reports a reader can use (issue 38, item 6): the per-file table of `train`, `library build`
and `build-rest` names each file relative to the folder given, whole, folded onto more lines in
an 80-column log rather than cut; the provenance summary of `generate` names every source
document with its pages and paragraphs. Real pieces: SmolLM2's tokenizer, real folders, the CLI,
and (slow) the real offline verifier over a real library."""
import json
import re
import subprocess
import sys

import pytest
from document_fixtures import cache_with_models

from olifant_mlx.cli import main
from olifant_mlx.cli.generate import source_documents
from olifant_mlx.provenance import Place, Source

LONG = ("brokerage agreements/2024 renewals/brokerage-agreement-with-exclusive-mandate-final-signed.txt",
        "brokerage agreements/unreadable-binary-attachment-from-the-client-file.bin")


@pytest.fixture
def precedents(tmp_path, monkeypatch):
    monkeypatch.setenv("OLIFANT_CACHE", str(cache_with_models(tmp_path / "cache")))
    monkeypatch.setenv("COLUMNS", "80")
    folder = tmp_path / "Precedents"
    for name in LONG:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / LONG[0]).write_text("The Broker shall use reasonable endeavours to procure purchasers. " * 30)
    (folder / LONG[1]).write_bytes(b"\x00\x01 not a document")
    return folder


def whole_names(out: str) -> str:
    """The first column of the tables, its lines joined without spaces: a folded name reads whole."""
    return "".join(line.split("│")[1].replace(" ", "") for line in out.splitlines() if line.startswith("│"))


@pytest.mark.parametrize("command", [pytest.param("train", marks=pytest.mark.slow), "library"])
def test_file_table_names_are_relative_and_never_cut(precedents, tmp_path, capsys, command):
    if command == "train":
        argv = ["train", "--tokenizer", "smollm2-135m", "--corpus", str(precedents), "--out",
                str(tmp_path / "x.olif"), "--quiet"]
    else:
        argv = ["library", "build", "deeds", str(precedents), "--tokenizer", "smollm2-135m", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "…" not in out and str(precedents) + "/" not in out, out       # not cut, relative
    for name in LONG:
        assert name.replace(" ", "") in whole_names(out), (name, out)


def test_the_summary_names_every_source_document_with_page_and_paragraph():
    def place(path, page, paragraph):
        return Place(0, path, "", None, page, paragraph, 0)

    sources = [Source(0, 20, 20, None, (place("a.pdf", 3, 4), place("b.docx", 0, 2), place("c.eml", 0, 1)), 3),
               Source(30, 45, 15, None, (place("a.pdf", 5, 1), place("a.pdf", 3, 4)), 2)]
    assert source_documents(sources) == ["  a.pdf: p. 3 ¶4, p. 5 ¶1", "  b.docx: ¶2", "  c.eml: ¶1"]


@pytest.mark.slow        # the real offline verifier, twice
def test_generate_lists_the_three_documents_it_copies_from(tmp_path):
    """The verifier's own greedy continuation, filed as three documents: generating again copies
    it, and the summary names all three (it named the first one only)."""
    env = {"OLIFANT_CACHE": str(cache_with_models(tmp_path / "cache"))}
    prompt = "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND"

    def olifant(*argv):
        import os

        r = subprocess.run([sys.executable, "-m", "olifant_mlx", *argv], capture_output=True, text=True,
                           env={**os.environ, **env}, timeout=600)
        assert r.returncode == 0, r.stderr
        return r

    base = ["generate", "--model", "smollm2-135m", "--ignore-chat-template", "-m", "40", "-p", prompt]
    text = json.loads(olifant(*base, "--draft", "none", "--json").stdout)["text"]
    folder = tmp_path / "precedents"
    folder.mkdir()
    for name in ("one.txt", "two.txt", "three.txt"):
        (folder / name).write_text(prompt + text)
    olifant("library", "build", "licences", str(folder), "--model", "smollm2-135m", "--quiet")
    err = olifant(*base, "--draft", "none", "--sources", "licences").stderr
    assert re.search(r"sources: \d+ verbatim span\(s\), the longest \d+ tokens, from 3 document\(s\):", err), err
    for name in ("one.txt", "two.txt", "three.txt"):
        assert re.search(rf"^  {name}: ¶1$", err, re.M), err


def test_models_names_libraries_and_their_folders_whole(precedents, capsys):
    name = "brokerage-precedents-2024-for-smollm2"
    assert main(["library", "build", name, str(precedents), "--tokenizer", "smollm2-135m", "--quiet", "--json"]) == 0
    capsys.readouterr()
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("precedent libraries"):]
    assert "…" not in table, table
    lines = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    assert "".join(cells[1].strip() for cells in lines) == name
    assert "".join(cells[5].strip() for cells in lines) == str(precedents)

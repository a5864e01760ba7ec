"""Folders of Word, PDF, OpenDocument, RTF, HTML, e-mail, Markdown and text files: the real
reader libraries on files the format libraries wrote (no mocks), read through train's CLI."""
import asyncio
import json
import os
import subprocess
import sys

import pytest

for name in ("docx", "docx2python", "fpdf", "pypdf", "pypdfium2", "odf", "striprtf"):
    pytest.importorskip(name)

import document_fixtures as fx  # noqa: E402

from olifant_mlx.draftmodel import documents  # noqa: E402
from olifant_mlx.draftmodel.corpus import iter_documents  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("OLIFANT_CACHE", str(root))
    return root


@pytest.fixture
def folder(tmp_path):
    return fx.make_mixed_folder(tmp_path / "precedents")


def paragraphs(path):
    ext, outcome = documents.read_document(path)
    assert outcome.status == "read", outcome
    return ext


def test_docx_keeps_order_header_table_cells_and_footnote(folder, cache):
    cells = [c for row in fx.DOCX_CELLS for c in row]
    want = [fx.DOCX_HEADER, *fx.DOCX_PARAS[:2], *cells, fx.DOCX_PARAS[2], fx.DOCX_FOOTNOTE]
    assert paragraphs(folder / "contract.docx").paragraphs == want


def test_pdf_paragraphs_in_order_and_running_header_once(folder, cache):
    ext = paragraphs(folder / "precedent.pdf")
    assert ext.paragraphs == [fx.PDF_HEADER, *fx.PDF_PARAS], "header once, page numbers dropped"
    assert ext.page_count == 3 and ext.pages == [1, 1, 1, 1, 2, 2, 2, 3, 3]


@pytest.mark.parametrize("name, want", [
    ("minutes.odt", fx.ODT_PARAS), ("sale.rtf", fx.RTF_PARAS), ("notice.html", fx.HTML_PARAS),
    ("offer.eml", [fx.EML_SUBJECT, *fx.EML_PARAS]), ("checklist.md", fx.MD_PARAS)])
def test_other_formats_paragraphs_equal_what_was_written(folder, cache, name, want):
    assert paragraphs(folder / name).paragraphs == want


def test_every_bad_file_has_its_reason(folder, cache):
    with documents.reporting() as report:
        docs = list(iter_documents(str(folder)))
    by_name = {os.path.basename(o.path): o for o in report.outcomes}
    assert sorted(by_name) == sorted(fx.GOOD + list(fx.BAD))
    for name, why in fx.BAD.items():
        assert by_name[name].status == "skipped" and why in by_name[name].reason, by_name[name]
    for name in fx.GOOD:
        assert by_name[name].status == "read" and by_name[name].paragraphs > 0
    assert all(d.strip() for d in docs) and len(docs) == len(fx.GOOD) + 1   # plain.txt: 2 documents


def test_cache_rereads_only_changed_files_and_is_private(folder, cache):
    def extracted():
        with documents.reporting() as report:
            list(iter_documents(str(folder)))
        return report
    first = extracted()
    assert first.extracted == 8, "every file read afresh"
    entries = list((cache / "documents").iterdir())
    assert entries and all(p.stat().st_mode & 0o777 == 0o600 for p in entries)
    assert extracted().as_dict()["extracted"] == 4     # .html .eml .md .txt: parsed again, not cached
    odt = folder / "minutes.odt"                       # rewritten, the same bytes: still cached (odfpy's
    odt.write_bytes(odt.read_bytes())                  # own rewrite stamps the second it runs in)
    (folder / "sale.rtf").write_text(fx.rtf_text(["A changed clause."]))
    again = extracted()
    assert again.extracted == 4 + 1
    assert [o.paragraphs for o in again.outcomes if o.path.endswith("sale.rtf")] == [1]


def test_train_on_a_mixed_folder_in_one_command(folder, cache, tmp_path):
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "train", "--tokenizer", "mistral",
                        "--corpus", str(folder), "--out", str(tmp_path / "m.olif"), "--json", "--quiet"],
                       capture_output=True, text=True, env={**os.environ, "OLIFANT_CACHE": str(cache),
                                                            "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    s = json.loads(r.stdout)
    files = {os.path.basename(f["path"]): f for f in s["files"]["files"]}
    assert s["files"]["read"] == len(fx.GOOD) and s["files"]["skipped"] == len(fx.BAD)
    assert {n for n, f in files.items() if f["status"] == "skipped"} == set(fx.BAD)
    assert s["documents"] == len(fx.GOOD) + 1 and s["instances"] > 300
    table = subprocess.run([sys.executable, "-m", "olifant_mlx", "train", "--tokenizer", "mistral",
                            "--corpus", str(folder), "--out", str(tmp_path / "m.olif"), "--quiet"],
                           capture_output=True, text=True,
                           env={**os.environ, "OLIFANT_CACHE": str(cache), "COLUMNS": "200"}).stdout
    # the second run: the documents' text from the cache; HTML and e-mail (never cached) extracted again,
    # the plain text and Markdown files read, not extracted (issue 48: they were counted as extracted)
    assert "8 read, 11 skipped, 2 extracted afresh" in table and "encrypted" in table


HIDE = ("import runpy, sys\n"
        "for m in ('docx2python', 'pypdfium2', 'odf', 'striprtf'): sys.modules[m] = None\n"
        "sys.argv = ['olifant_mlx'] + sys.argv[1:]\n"
        "runpy.run_module('olifant_mlx', run_name='__main__')\n")


def test_without_the_extra_the_message_names_it_and_text_formats_still_work(folder, cache, tmp_path):
    """The readers' libraries hidden, as if the extra were not installed."""
    env = {**os.environ, "OLIFANT_CACHE": str(cache)}
    r = subprocess.run([sys.executable, "-c", HIDE, "train", "--tokenizer", "mistral", "--corpus", str(folder),
                        "--out", str(tmp_path / "m.olif"), "--json", "--quiet"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr
    files = {os.path.basename(f["path"]): f for f in json.loads(r.stdout)["files"]["files"]}
    for name in ("contract.docx", "precedent.pdf", "minutes.odt", "sale.rtf"):
        assert files[name]["status"] == "skipped" and documents.INSTALL_HINT in files[name]["reason"]
    for name in ("notice.html", "offer.eml", "checklist.md", "plain.txt"):
        assert files[name]["status"] == "read"
    named = subprocess.run([sys.executable, "-c", HIDE, "train", "--tokenizer", "mistral", "--corpus",
                            str(folder / "contract.docx"), "--out", str(tmp_path / "n.olif")],
                           capture_output=True, text=True, env=env)
    assert named.returncode != 0 and documents.INSTALL_HINT in named.stderr and "Traceback" not in named.stderr


def test_build_rest_on_a_mixed_folder(folder, cache, tmp_path):
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "build-rest", "--tokenizer", "mistral",
                        "--corpus", str(folder), "--out", str(tmp_path / "c.sfx"), "--json", "--quiet"],
                       capture_output=True, text=True, env={**os.environ, "OLIFANT_CACHE": str(cache)})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    s = json.loads(r.stdout)
    assert s["files"]["read"] == len(fx.GOOD) and s["files"]["skipped"] == len(fx.BAD)
    assert s["documents"] == len(fx.GOOD) + 1 and s["index"]["out"] == str(tmp_path / "c.sfx")


@pytest.mark.slow    # trains with the real SmolLM2 tokenizer in the TUI
def test_tui_training_on_a_mixed_folder_names_the_skipped_files(folder, tmp_path, monkeypatch):
    from tui_fakes import fake_session, static_text, wait_for

    from olifant_mlx.tui.app import OlifantApp

    monkeypatch.setenv("OLIFANT_CACHE", str(fx.cache_with_models(tmp_path / "models-cache")))

    async def go():
        app = OlifantApp(model="smollm2-135m", energy="none", model_dirs=[tmp_path / "out"],
                         session_factory=fake_session)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("f6")
            app.query_one("#corpus").value = str(folder)
            app.query_one("#train-out").value = "precedents"
            await pilot.click("#train-go")
            await wait_for(pilot, lambda: "trained" in static_text(app, "#train-status"), 180)
            status = static_text(app, "#train-status")
            assert "8 files read, 11 skipped" in status and "old.doc (binary Word" in status, status

    asyncio.run(go())

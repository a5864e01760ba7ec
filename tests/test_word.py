"""Word in and out (issue 38): a .docx with tracked changes and a comment reads as its accepted
text (docx2python, with moves fixed up); the Word export (olifant_mlx/exports.py) holds the text,
the copied spans highlighted and the sources appendix, as python-docx reads it back; `generate
--output` on the real smollm2-135m and a real library writes every format by its suffix,
atomically and 0600, refusing what is not a regular file before the model loads; LibreOffice
opens the exports (slow; it skips without soffice)."""
import json
import os
import stat

import pytest
from word_files import TRACKED_ACCEPTED, TRACKED_GONE, docx_contents, libreoffice_text, write_tracked_docx

pytest.importorskip("docx")
pytest.importorskip("docx2python")

from olifant_mlx.draftmodel.documents import docx_paragraphs  # noqa: E402
from olifant_mlx.conversation import Conversation, Run, Turn, export_data  # noqa: E402

SOURCE = {"start": 0, "end": 9, "tokens": 9, "text": "shall keep confidential all information",
          "library": "contracts", "chars": [4, 43],
          "places": [{"document": 3, "path": "nda/mutual.docx", "title": "Mutual NDA", "matter": "acme",
                      "page": 2, "paragraph": 4, "offset": 120}]}


def test_tracked_changes_read_as_the_accepted_text_without_comments(tmp_path):
    path = tmp_path / "tracked.docx"
    write_tracked_docx(path)
    got = docx_paragraphs(path.read_bytes()).paragraphs
    assert got == TRACKED_ACCEPTED
    assert not any(gone in p for p in got for gone in TRACKED_GONE)
    import docx2python
    with docx2python.docx2python(str(path)) as raw:        # the check can fail: the raw reader keeps
        assert "old place" in str(raw.body)                  # the text a move took away


def test_the_word_export_marks_the_copied_spans_and_lists_the_sources(tmp_path):
    doc = Conversation(kind="document", title="NDA", text="You shall keep confidential all information.\n"
                       "Second paragraph\x0b with a control character.")
    doc.marks = [(4, 43, "copied"), (0, 3, "accepted")]
    doc.runs = [Run(0, len(doc.text), sources=[SOURCE])]
    chat = Conversation(kind="chat", title="nda", system_prompt="Be brief.")
    chat.turns = [Turn("user", "draft it"), Turn("assistant", "You shall keep confidential all information.",
                                                  stats={"tokens": 9, "acceptance": 0.5}, sources=[SOURCE])]
    for name, conv in (("doc.docx", doc), ("chat.docx", chat)):
        data = export_data(conv, "docx")
        assert isinstance(data, bytes)
        (tmp_path / name).write_bytes(data)
        text, marked = docx_contents(tmp_path / name)
        assert "You shall keep confidential all information." in text, name
        assert marked == ["shall keep confidential all information"], name
        body, appendix = text.split("\nSources\n")
        assert "14" not in body and "9 tokens copied from library contracts" in appendix, name
        assert "nda/mutual.docx, page 2, paragraph 4, matter acme" in appendix, name
    assert "Second paragraph\ufffd with" in docx_contents(tmp_path / "doc.docx")[0]
    text = docx_contents(tmp_path / "chat.docx")[0]
    assert text.index("You\n") < text.index("draft it") < text.index("Assistant") and "Be brief." in text


# issue 45 item 11: the Word export is linear (10,000 lines took 6.75 s, with copied marks 25 s, 20,000
# with marks 114 s: python-docx's add_paragraph searched the whole body for the section properties and
# Run.style's setter scanned every style, per paragraph and per run, and every line met every mark;
# figures in benchmarks/word_export.py); a title over 255 characters (python-docx's ValueError) is cut in
# the core properties and whole in the heading
def test_the_word_export_is_linear_and_takes_any_title(tmp_path, monkeypatch):
    import docx
    from docx.oxml.xmlchemy import BaseOxmlElement
    from docx.styles.styles import Styles

    from olifant_mlx import exports

    seen = {"wide": 0, "defaults": 0}
    search, default = BaseOxmlElement.first_child_found_in, Styles.default

    def counted_search(self, *tags):          # insertions that look through many children
        seen["wide"] += len(self) > 100
        return search(self, *tags)

    def counted_default(self, style_type):
        seen["defaults"] += 1
        return default(self, style_type)

    monkeypatch.setattr(BaseOxmlElement, "first_child_found_in", counted_search)
    monkeypatch.setattr(Styles, "default", counted_default)
    lines = [f"{i}. The supplier shall deliver the goods within thirty days." for i in range(300)]
    text = "\n".join(lines)
    starts = [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]
    marks = [(a + 4, a + 20) for a in starts] + [(starts[7] + 10, starts[9] + 5), (starts[7] + 2, starts[7] + 12)]
    title = "T" * 300
    data = exports.docx_bytes(title, [("heading", "Part", []), ("text", text, marks)],
                              [SOURCE], [("the answer", [{"number": 1, "citation": "a.docx, paragraph 2"}])])
    assert seen["wide"] < 5 and seen["defaults"] < 5, seen    # was: every paragraph past 100, every run
    (tmp_path / "x.docx").write_bytes(data)
    d = docx.Document(str(tmp_path / "x.docx"))
    assert d.core_properties.title == "T" * 255 and d.paragraphs[0].text == title
    body = [p for p in d.paragraphs if p.text[:1].isdigit() and ". The supplier" in p.text]
    assert [p.text for p in body] == lines
    copied = [[r.text for r in p.runs if r.style.name == exports.COPIED_STYLE] for p in body]
    assert copied[0] == [lines[0][4:20]] and copied[100] == [lines[100][4:20]]
    assert "".join(copied[7]) == lines[7][2:] and "".join(copied[8]) == lines[8]       # merged marks
    assert "".join(copied[9]) == lines[9][:20]
    assert all(r.font.highlight_color is not None for p in body for r in p.runs if r.style.name == exports.COPIED_STYLE)
    names = [p.style.name for p in d.paragraphs]
    assert names.count("Heading 1") == 3 and names.count("List Bullet") == 2     # Part, Sources, Precedents


def test_the_word_export_names_the_drafter_not_the_cache_path(tmp_path):
    """Issue 48: `generate --output x.docx` headed the answer with the resolved drafter spec,
    the user's cache path in it; the heading names the files only (the Markdown export too)."""
    spec = "adaptive:hybrid:/home/u/.cache/olifant_mlx/drafts/licenses.smollm2-135m.olif+rest:/home/u/lib/index.sfx"
    chat = Conversation(kind="chat", title="nda")
    chat.turns = [Turn("user", "draft it"), Turn("assistant", "Agreed.", verifier="smollm2-135m", drafter=spec)]
    (tmp_path / "chat.docx").write_bytes(export_data(chat, "docx"))
    text = docx_contents(tmp_path / "chat.docx")[0]
    shown = "Assistant (smollm2-135m · drafter adaptive:hybrid:licenses.smollm2-135m.olif+rest:index.sfx)"
    assert shown in text and "/home/u" not in text and shown in export_data(chat, "md")


# ---- generate --output on the real verifier (slow) ------------------------------------------

PROMPT = "Article 1\nThis Regulation lays down rules concerning"


@pytest.fixture(scope="module")
def outputs(smol, tmp_path_factory):
    """generate --output in every format over a library that holds the verifier's own output;
    chat --output of one answer. The verifier loads once (load_verifier gives the fixture's)."""
    from document_fixtures import cache_with_models

    import olifant_mlx.verifier
    from olifant_mlx import library
    from olifant_mlx.cli import main
    from olifant_mlx.engine import GenerationOptions, Session

    tmp = tmp_path_factory.mktemp("word")
    own = Session(smol, "none", GenerationOptions(k=0, max_tokens=40)).generate(PROMPT)
    mp = pytest.MonkeyPatch()
    mp.setenv("OLIFANT_CACHE", str(cache_with_models(tmp / "cache")))
    folder = tmp / "echo"
    folder.mkdir()
    (folder / "echo.txt").write_text(PROMPT + own.text + "\n")
    library.build("echo", folder, smol.identity)
    mp.setattr(olifant_mlx.verifier, "load_verifier", lambda *a, **k: smol)
    (tmp / "out.docx").write_text("an older file, readable by others")
    os.chmod(tmp / "out.docx", 0o644)
    base = ["--model", "smollm2-135m", "--draft", "none", "-m", "40", "--sources", "echo", "--quiet"]
    try:
        for suffix in ("docx", "md", "txt", "json"):
            assert main(["generate", *base, "--ignore-chat-template", "-p", PROMPT,
                         "--output", str(tmp / f"out.{suffix}")]) == 0
        mp.setattr("sys.stdin", __import__("io").StringIO("Say hello.\n"))
        assert main(["chat", *base, "--output", str(tmp / "chat.docx")]) == 0
    finally:
        mp.undo()
    return tmp, own


@pytest.mark.slow
def test_generate_output_writes_each_format_by_its_suffix(outputs):
    tmp, own = outputs
    for p in tmp.glob("*.*"):
        if p.is_file():
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p      # the older 0644 file replaced too
    assert not [p.name for p in tmp.iterdir() if p.name.startswith(".")]      # no temporary left
    text, marked = docx_contents(tmp / "out.docx")
    body, appendix = text.split("\nSources\n")
    assert PROMPT + own.text in body
    assert marked and all(m in own.text for m in marked)           # the copied spans, highlighted
    assert "tokens copied from library echo" in appendix and "echo.txt" in appendix
    md, txt = (tmp / "out.md").read_text(), (tmp / "out.txt").read_text()
    assert PROMPT + own.text in md and "## Sources" in md and "echo.txt" in md
    assert txt.startswith(PROMPT + own.text) and "Sources:" in txt
    data = json.loads((tmp / "out.json").read_text())
    assert data["kind"] == "document" and data["text"] == PROMPT + own.text and data["sources"]
    assert data["continuations"][0]["start"] == len(PROMPT)
    chat, _ = docx_contents(tmp / "chat.docx")
    assert "You\nSay hello.\nAssistant (smollm2-135m" in chat


def test_generate_output_refuses_a_bad_target_before_the_model_loads(tmp_path, monkeypatch, capsys):
    import olifant_mlx.verifier
    from olifant_mlx.cli import main

    def no_load(*a, **k):
        raise AssertionError("the verifier loaded")

    monkeypatch.setattr(olifant_mlx.verifier, "load_verifier", no_load)
    os.mkfifo(tmp_path / "pipe.docx")
    (tmp_path / "folder.md").mkdir()
    for target, said in (("pipe.docx", "is a FIFO"), ("folder.md", "is a folder"),
                         ("out.pdf", "suffix picks the format"), ("no/such.txt", "folder does not exist")):
        for command in (["generate", "-p", "x"], ["chat"]):
            assert main([*command, "--output", str(tmp_path / target)]) == 1, target
            err = capsys.readouterr().err
            assert err.startswith("error: ") and said in err and err.count("\n") == 1, (target, err)


@pytest.mark.slow
def test_libreoffice_opens_the_exports(outputs, tmp_path):
    out, own = outputs
    text = libreoffice_text(out / "out.docx", tmp_path)
    if text is None:
        pytest.skip("no soffice (apt-get install libreoffice-writer-nogui)")
    flat = " ".join(text.split())
    assert " ".join((PROMPT + own.text).split())[:60] in flat and "Sources" in flat and "echo.txt" in flat

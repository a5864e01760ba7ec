"""Provenance in the TUI (issue 26): copied spans marked in the chat and the document, the
Sources tab (ctrl+l) listing them with the source passage read from a real library, and the
sources appendix of every export. The library is real (olifant_mlx.library over a byte
tokenizer); the tracker's reports are scripted on the fake session here (the real tracker
with the real verifier is in test_server_sources.py and the screenshots)."""
import asyncio
import json
import stat

import numpy as np
import pytest
from textual.widgets import DataTable, TabbedContent
from tui_fakes import (FAKE_IDENTITY, ByteTokenizer, FakeSession, FakeVerifier, Identity, settle, static_text,
                       wait_for)
from word_files import docx_contents, libreoffice_text

from olifant_mlx import library
from olifant_mlx.tui.app import OlifantApp
from olifant_mlx.conversation import Conversation, Run, Turn, export_text
from olifant_mlx.tui.flow import DocEditor, FlowText

COPIED = "the warranties, merchantability, a"         # the fake engine's first six tokens
DOCUMENT = "Recitals of the agreement.\n\nWe give " + COPIED + " fine thing to all.\n"


class DecodingIdentity(Identity):
    def decode(self, ids):
        return bytes(int(i) for i in ids).decode("utf-8", "replace")


@pytest.fixture
def precedents(tmp_path, monkeypatch):
    """A real library ("precedents") of one document, for the byte tokenizer."""
    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "licence.txt").write_text(DOCUMENT)
    library.build("precedents", folder, ByteTokenizer(FAKE_IDENTITY))
    lib = library.load("precedents")
    stream = np.fromfile(lib.path / "tokens.u32", dtype="<u4").tobytes()
    row = lib.table()[0]
    offset = bytes(stream[::4]).find(COPIED.encode()) - row["start"]
    assert offset > 0
    n = len(COPIED)      # the library's tokens are bytes (the output's, in the real case, the same)
    return {"start": 0, "end": n, "tokens": n, "text": COPIED,
            "places": [{"document": row["id"], "path": row["path"], "title": row["title"],
                        "matter": None, "page": 1, "paragraph": 1, "offset": offset}]}


class SourcedSession(FakeSession):
    """The fake session, its last Response carrying the tracker's sources (scripted)."""
    found: list = []

    def stream(self, request, *args, **kw):
        for r in super().stream(request, *args, **kw):
            if r.finish_reason:
                r.sources = list(self.found)
                r.verbatim = self.found[0]           # as if over max_verbatim
            yield r


def sourced_app(source, **kw):
    def make(model, meter):
        v = FakeVerifier()
        v.identity = DecodingIdentity()
        SourcedSession.found = [source]
        return SourcedSession(v, "none", meter=meter)

    kw.setdefault("energy", "none")
    kw.setdefault("model_dirs", [])
    return OlifantApp(session_factory=make, tokenizer_fn=lambda m: FAKE_IDENTITY, draft="library:precedents",
                      max_tokens=12, k=3, **kw)


def reversed_cells(strip_or_text) -> str:
    return "".join(seg.text for seg in strip_or_text if seg.style is not None and seg.style.reverse)


def test_a_copied_span_is_marked_listed_and_its_passage_shown(precedents):
    async def go():
        app = sourced_app(precedents)
        async with app.run_test(size=(120, 36)) as pilot:
            app.chat_tab.composer.text = "give the warranties"
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: app.workspace.current["chat"].turns[-1].stats)   # the answer ended
            await settle(pilot, app)
            turn = app.workspace.current["chat"].turns[-1]
            assert turn.content.startswith(COPIED)
            assert turn.sources[0]["chars"] == [0, len(COPIED)] and turn.sources[0]["library"] == "precedents"
            assert "1 copied" in str(app.chat_tab.view(1).query_one(".msg-head").render())
            assert any(f"copies {len(COPIED)} tokens in a row from licence.txt, page 1, paragraph 1"
                       in n.message for n in app._notifications)      # the verbatim guard's warning
            await pilot.press("ctrl+f")                        # text with its marks, not Markdown
            await pilot.pause()
            flow = app.chat_tab.view(1).query_one(FlowText)
            assert flow.copied == [(0, len(COPIED))]
            assert reversed_cells(flow.render_line(0)).strip() == COPIED
            await pilot.press("ctrl+l")
            await pilot.pause()
            assert app.query_one("#tabs", TabbedContent).active == "sources"
            table = app.query_one("#sources-table", DataTable)
            assert table.row_count == 1
            row = table.get_row_at(0)
            assert row[1] == "licence.txt" and row[3] == "1" and row[4] == str(len(COPIED))
            passage = app.query_one("#sources-passage").content
            assert "We give " + COPIED + " fine thing" in passage.plain
            assert "".join(passage.plain[s.start:s.end] for s in passage.spans
                           if "reverse" in str(s.style)) == COPIED
            assert "licence.txt, page 1, paragraph 1" in passage.plain
            await pilot.press("f10", "f10")                    # marks off: no copied mark either
            await pilot.pause()
            assert not reversed_cells(flow.render_line(0)).strip()

    asyncio.run(go())


def test_the_document_keeps_its_copied_mark_through_edits(precedents):
    async def go():
        app = sourced_app(precedents, mode="document", prompt="Start.")
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause(0.2)          # the app shows its document first (after a refresh)
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: app.workspace.current["document"].runs)     # the continuation ended
            await settle(pilot, app)
            ed = app.doc_tab.editor
            assert COPIED in ed.text, repr(ed.text)
            start = ed.text.index(COPIED)
            assert ed.copied == [(start, start + len(COPIED))]
            conv = app.workspace.current["document"]
            assert conv.runs[-1].sources and (start, start + len(COPIED), "copied") in conv.marks
            ed.move_cursor((0, 0))
            await pilot.press("X", "Y")                        # typing before it moves the mark
            await pilot.pause()
            assert ed.copied == [(start + 2, start + 2 + len(COPIED))]
            assert isinstance(ed, DocEditor)
            await pilot.press("ctrl+l")
            await pilot.pause()
            assert app.query_one("#sources-table", DataTable).row_count == 1
            assert "1 copied span from precedents" in static_text(app, "#sources-head")

    asyncio.run(go())


@pytest.mark.slow   # LibreOffice converts the export: seconds
def test_the_word_export_from_the_dialog_marks_the_copy(precedents, tmp_path):
    pytest.importorskip("docx")
    out = tmp_path / "contract.docx"

    async def go():
        app = sourced_app(precedents, mode="document", prompt="Start.")
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause(0.2)
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: app.workspace.current["document"].runs)
            await settle(pilot, app)
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert "Word" in str(app.screen.query_one("#fmt-docx").label)     # beside md, txt, json
            await pilot.press(*str(out), "enter")                 # the suffix picks Word
            await pilot.pause()
            return app.doc_tab.editor.text

    text = asyncio.run(go())
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    body, marked = docx_contents(out)
    assert text.strip() in body and marked == [COPIED]
    appendix = body.split("\nSources\n")[1]
    assert f"{len(COPIED)} tokens copied from library precedents" in appendix and "licence.txt" in appendix
    laid_out = libreoffice_text(out, tmp_path)
    if laid_out is None:
        pytest.skip("no soffice (apt-get install libreoffice-writer-nogui)")
    assert COPIED in " ".join(laid_out.split()) and "licence.txt" in laid_out


def test_the_sources_tab_says_what_it_is_for_when_empty():
    from tui_fakes import fake_app

    async def go():
        app = fake_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("ctrl+l")
            await pilot.pause()
            assert app.query_one("#sources-table", DataTable).row_count == 0
            assert "No copied spans yet" in static_text(app, "#sources-head")

    asyncio.run(go())


SOURCE = {"start": 2, "end": 16, "tokens": 14, "text": "shall keep confidential all information",
          "library": "contracts", "chars": [4, 43],
          "places": [{"document": 3, "path": "nda/mutual.docx", "title": "Mutual NDA", "matter": "acme",
                      "page": 2, "paragraph": 4, "offset": 120}]}


def chat_with_sources():
    conv = Conversation(kind="chat", title="nda")
    conv.turns = [Turn("user", "draft it"),
                  Turn("assistant", "You shall keep confidential all information.", sources=[SOURCE])]
    return conv


@pytest.mark.parametrize("fmt", ["md", "txt"])
def test_every_export_has_a_sources_appendix(fmt):
    text = export_text(chat_with_sources(), fmt)
    head = "## Sources" if fmt == "md" else "Sources:"
    body, appendix = text.split(head)
    assert "You shall keep confidential" in body
    assert "14 tokens copied from library" in appendix and "contracts" in appendix
    assert '"shall keep confidential all information"' in appendix
    assert "nda/mutual.docx, page 2, paragraph 4, matter acme" in appendix
    doc = Conversation(kind="document", text="Intro. shall keep confidential all information")
    doc.runs = [Run(7, len(doc.text), sources=[SOURCE])]
    assert "nda/mutual.docx" in export_text(doc, fmt).split(head)[1]
    assert head not in export_text(Conversation(kind="document", text="no copies"), fmt)


def test_the_json_export_and_the_store_keep_the_sources():
    conv = chat_with_sources()
    data = json.loads(export_text(conv, "json"))
    assert data["sources"] == [SOURCE] and data["messages"][1]["sources"] == [SOURCE]
    again = Conversation.from_dict(json.loads(json.dumps(conv.as_dict())))
    assert again.turns[1].sources == [SOURCE]
    doc = Conversation(kind="document", text="Intro. copied text", marks=[(0, 6, "plain"), (7, 18, "copied")])
    doc.runs = [Run(7, 18, sources=[SOURCE])]
    back = Conversation.from_dict(json.loads(json.dumps(doc.as_dict())))
    assert back.marks == doc.marks and back.runs[0].sources == [SOURCE]

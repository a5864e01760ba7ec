"""Drafting with precedents in the TUI (issue 36): the Precedents tab (ctrl+j) lists the passages
the answer or continuation was given, pins (p) a document so later generations get it first,
unpins it, and every export carries a precedents appendix. The library is real
(olifant_mlx.library and its passage index over a byte tokenizer), the Session real (its
precedents gathered and put into the prompt by olifant_mlx.precedents); the engine is scripted."""
import asyncio
import json

import pytest
from textual.widgets import DataTable
from tui_fakes import FAKE_IDENTITY, ByteTokenizer, FakeSession, FakeVerifier, Identity, settle, static_text

from olifant_mlx import library
from olifant_mlx.tui.app import OlifantApp
from olifant_mlx.conversation import Conversation, Run, Turn, export_text

NDA = ("Confidentiality. Each party shall keep the confidential information of the other party "
       "secret for three years.\n\nAuditors may see the confidential information.\n")
LEASE = "Rent. The tenant pays the rent monthly in advance.\n\nThe landlord repairs the roof.\n"


class BytesIdentity(Identity):
    """The fake tokenizer identity, encoding as the library's byte tokenizer does."""

    def encode(self, text):
        return list(text.encode())

    def encode_batch(self, texts):
        return [list(t.encode()) for t in texts]

    def decode(self, ids):
        return bytes(int(i) for i in ids).decode("utf-8", "replace")


class PromptedSession(FakeSession):
    """The fake session; the `firm` fixture keeps every prompt it plans with its precedents."""
    prompts_given: list = []


@pytest.fixture
def firm(tmp_path, monkeypatch):
    """A real library "firm" of two documents, with its passage index."""
    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "nda.txt").write_text(NDA)
    (folder / "lease.txt").write_text(LEASE)
    library.build("firm", folder, ByteTokenizer(FAKE_IDENTITY))
    PromptedSession.prompts_given = []
    from olifant_mlx.engine import request

    real = request.with_precedents

    def recording(verifier, prompt, opts):
        out = real(verifier, prompt, opts)
        PromptedSession.prompts_given.append(out[0])
        return out

    monkeypatch.setattr(request, "with_precedents", recording)
    return "firm"


def precedent_app(**kw):
    def make(model, meter):
        v = FakeVerifier()
        v.identity = BytesIdentity()
        return PromptedSession(v, "none", meter=meter)

    return OlifantApp(session_factory=make, tokenizer_fn=lambda m: FAKE_IDENTITY, energy="none", model_dirs=[],
                      max_tokens=6, k=3, **kw)


def last_user(prompt) -> str:
    return [m for m in prompt.messages if m["role"] == "user"][-1]["content"]


async def ask(pilot, app, text):
    app.chat_tab.composer.text = text
    await pilot.press("ctrl+g")
    await settle(pilot, app)


def listed(app) -> list:
    table = app.query_one("#precedents-table", DataTable)
    return [table.get_row_at(i) for i in range(table.row_count)]


@pytest.mark.slow   # about 10 s on two cores
def test_precedents_are_listed_pinned_first_unpinned_and_exported(firm, tmp_path):
    async def go():
        app = precedent_app()
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("f7")
            app.query_one("#set-precedents").value = firm          # Settings: precedents library
            await pilot.press("f2")
            await ask(pilot, app, "the confidentiality of information")
            assert last_user(PromptedSession.prompts_given[-1]).startswith("Precedents from the user's documents")
            await pilot.press("ctrl+j")
            await pilot.pause()
            rows = listed(app)
            assert rows and all("nda.txt" in str(r[1]) for r in rows), rows
            assert str(rows[0][0]) == "1" and not any(r[2] for r in rows)
            assert "Confidentiality. Each party" in static_text(app, "#precedents-passage")
            assert "passage" in static_text(app, "#precedents-head") and "firm" in static_text(app, "#precedents-head")
            await pilot.press("p")                                  # pin nda.txt
            await pilot.pause()
            assert app.workspace.pins.items == [("firm", "nda.txt")]
            assert all(r[2] for r in listed(app)) and "pinned for the next" in static_text(app, "#precedents-head")
            # the next request matches only the lease: the pinned NDA still comes first
            await pilot.press("f2")
            await ask(pilot, app, "rent")
            block = last_user(PromptedSession.prompts_given[-1])
            assert block.index("[1] nda.txt") < block.index("lease.txt") < block.index("Request:")
            given = app.workspace.current["chat"].turns[-1].precedents
            assert given[0]["path"] == "nda.txt" and given[0]["pinned"]
            assert any(p["path"] == "lease.txt" and not p["pinned"] for p in given)
            await pilot.press("ctrl+j")
            await pilot.pause()
            assert [str(r[1]) for r in listed(app)] == [p["citation"] for p in given]
            app.query_one("#precedents-table", DataTable).move_cursor(row=0)
            await pilot.press("p")                                  # unpin it
            await pilot.pause()
            assert app.workspace.pins.items == [] and not any(r[2] for r in listed(app))
            await pilot.press("f2")
            await ask(pilot, app, "the landlord repairs the roof")
            assert not any(p["pinned"] for p in app.workspace.current["chat"].turns[-1].precedents)
            # the export: a Precedents appendix with each answer's passages
            await pilot.press("ctrl+s")
            await pilot.pause()
            await pilot.press(*str(tmp_path / "chat.md"), "enter")
            await pilot.pause()
            md = (tmp_path / "chat.md").read_text()
            appendix = md.split("## Precedents\n", 1)[1]
            assert "Answer 2:" in appendix and "- [1] `nda.txt, paragraph" in appendix
            assert "(library *firm*, pinned)" in appendix

    asyncio.run(go())


@pytest.mark.slow   # about 3 s on two cores
def test_a_continued_document_lists_its_precedents(firm):
    async def go():
        app = precedent_app(mode="document", prompt="The tenant pays the rent")
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause(0.2)          # the app shows its document first (after a refresh)
            await pilot.press("f7")
            app.query_one("#set-precedents").value = firm
            await pilot.press("f3", "ctrl+g")
            await settle(pilot, app)
            prompt = PromptedSession.prompts_given[-1]
            assert prompt.startswith("Precedents:\n\n[1] lease.txt") and prompt.endswith("The tenant pays the rent")
            assert app.doc_tab.editor.text.startswith("The tenant pays the rent")     # not the block
            await pilot.press("ctrl+j")
            await pilot.pause()
            assert str(listed(app)[0][1]).startswith("lease.txt")
            assert app.workspace.current["document"].runs[-1].precedents[0]["path"] == "lease.txt"

    asyncio.run(go())


def test_the_precedents_tab_says_how_to_get_them():
    from tui_fakes import fake_app

    async def go():
        app = fake_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("ctrl+j")
            await pilot.pause()
            assert app.tabs.active == "precedents"
            assert "precedents library" in static_text(app, "#precedents-head")
            await pilot.press("p")
            await pilot.pause()
            assert any("no passage to pin" in n.message for n in app._notifications)
            assert app.workspace.pins.items == []

    asyncio.run(go())


PASSAGE = {"number": 1, "citation": "acme/nda.docx, page 2, paragraph 4", "path": "acme/nda.docx",
           "library": "firm", "pinned": True, "text": "Each party shall keep ..."}


@pytest.mark.parametrize("fmt", ["md", "txt", "json"])
def test_every_export_has_a_precedents_appendix(fmt):
    conv = Conversation(kind="chat", title="nda")
    conv.turns = [Turn("user", "draft it"), Turn("assistant", "You shall keep it.", precedents=[PASSAGE])]
    text = export_text(conv, fmt)
    if fmt == "json":
        data = json.loads(text)
        assert data["precedents"] == [{"for": "answer 1", "passages": [PASSAGE]}]
        assert data["messages"][1]["precedents"] == [PASSAGE]
    else:
        head = "## Precedents" if fmt == "md" else "Precedents:"
        body, appendix = text.split(head)
        assert "You shall keep it." in body and "Answer 1:" in appendix
        assert "[1] " in appendix and "acme/nda.docx, page 2, paragraph 4" in appendix and "pinned" in appendix
    doc = Conversation(kind="document", text="Intro. more")
    doc.runs = [Run(7, len(doc.text), precedents=[PASSAGE])]
    assert "Continuation 1:" in export_text(doc, "txt")
    assert "Precedents" not in export_text(Conversation(kind="document", text="none given"), "txt")


def test_the_store_keeps_the_precedents_and_refuses_bad_ones():
    from olifant_mlx.conversation import ConversationError

    conv = Conversation(kind="chat")
    conv.turns = [Turn("user", "q"), Turn("assistant", "a", precedents=[PASSAGE])]
    again = Conversation.from_dict(json.loads(json.dumps(conv.as_dict())))
    assert again.turns[1].precedents == [PASSAGE]
    bad = conv.as_dict()
    bad["messages"][1]["precedents"] = [{"number": 1}]
    with pytest.raises(ConversationError, match="precedents must be a list of passages"):
        Conversation.from_dict(bad)

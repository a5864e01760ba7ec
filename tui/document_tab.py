"""The Document tab: a text continued as it is (the paper's protocol, base models, "continue
my contract"). You write in the editor; ctrl+g continues it at the end, the continuation
flowing into the editor marked by provenance; the marks stay on the text through your
edits (ctrl+z undoes a continuation, ctrl+r writes it again). Each continuation runs on the
tab's own worker (tui/writing.py) and the tab handles what it posts (`on_chunk`, `on_done`,
`on_failed`)."""
from __future__ import annotations

from olifant_mlx.conversation import Run
from olifant_mlx.tui.copied import ranges
from olifant_mlx.tui.flow import DocEditor, Legend
from olifant_mlx.tui.messages import Chunk, Done, Failed
from olifant_mlx.tui.writing import WritingPane, setting_up
from textual.app import ComposeResult
from textual.widgets import Static

DEFAULT_DOCUMENT = ("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR "
                    "IMPLIED, INCLUDING BUT NOT LIMITED TO")   # what the editor holds at first


class DocumentTab(WritingPane):
    what = "this document"
    copies = "the document"

    def __init__(self, text: str = ""):
        super().__init__("F3 Document", id="document")
        self.initial = text

    def compose(self) -> ComposeResult:
        yield DocEditor(self.initial, id="doc-editor", compact=True,
                        placeholder="the beginning of your document: ctrl+g continues it")
        yield Legend(id="doc-legend")
        yield Static("", id="doc-status", classes="status")

    @property
    def editor(self) -> DocEditor:
        return self.query_one("#doc-editor", DocEditor)

    def on_mount(self) -> None:
        self.editor.move_cursor(self.editor.document.end)     # where typing continues the text

    async def open(self, conv, clear: bool = False) -> None:
        """Show a document (chosen in the list, or the current one at start)."""
        self.editor.set_document(conv.text, [m for m in conv.marks if m[2] != "copied"])
        self.editor.set_copied([m for m in conv.marks if m[2] == "copied"])
        self.editor.move_cursor(self.editor.document.end)

    def stash(self) -> None:
        """Keep what the editor holds in the current document."""
        conv = self.ws.current.get("document")
        if conv is not None:
            conv.text, conv.marks = self.editor.text, self.editor.all_marks()

    def begin(self) -> int:
        """Lock the editor for a continuation; returns where it will start."""
        ed = self.editor
        ed.read_only = True
        ed.history.checkpoint()
        return len(ed.text)

    def append(self, segments) -> None:
        ed = self.editor
        follow = ed.scroll_y >= ed.max_scroll_y - 1
        ed.append_generated(segments)
        if follow:
            ed.scroll_end(animate=False)

    def end(self) -> None:
        ed = self.editor
        ed.history.checkpoint()
        ed.read_only = False
        ed.move_cursor(ed.document.end)

    def set_marks(self, mode: str) -> None:
        self.editor.set_marks(mode)
        self.query_one(Legend).set_marks(mode)

    def status(self, text: str) -> None:
        self.query_one("#doc-status", Static).update(text)

    def show_loading(self, on: bool) -> None:
        self.editor.loading = on and self.running() is not None

    def text(self) -> str:
        return self.editor.text

    # ---- writing: continue, continue again ---------------------------------------------

    @setting_up
    async def action_send(self) -> None:
        self._continue()

    def _continue(self) -> None:
        s = self.settings()
        if s is None:
            return
        text = self.editor.text
        if not text.strip():
            self.notify("write the beginning of the document first", severity="warning")
            return
        self.stash()
        self.start(self.ws.job("document", self.ws.current["document"], s, text, self.begin()))

    @setting_up
    async def action_regenerate(self) -> None:
        """The last continuation again, if the text has not changed since."""
        conv, ed = self.ws.current["document"], self.editor
        if not conv.runs or conv.text != ed.text or conv.runs[-1].end != len(ed.text):
            self.notify("nothing to write again: the document changed since its last "
                        "continuation (ctrl+z undoes it)", severity="warning")
            return
        if self.ws.generating:
            self.notify("already generating; esc stops it", severity="warning")
            return
        run = conv.runs.pop()
        ed.delete(ed.document.get_location_from_index(run.start), ed.document.end)
        self._continue()

    # ---- what the continuation's worker posts ------------------------------------------

    def on_chunk(self, m: Chunk) -> None:
        job = self.took(m)
        if job is None:
            return
        job.sources += m.sources
        ed = self.editor
        ed.loading = False
        self.append(m.segments)
        if m.sources:
            ed.set_copied(ed.copied + ranges(m.sources, job.index))
        self.writing(m)

    async def on_done(self, m: Done) -> None:
        job = self.ended(m)
        if job is None:
            return
        self.end()
        conv, kept = job.conv, self.ws.record(job, m)
        conv.text, conv.marks = self.editor.text, self.editor.all_marks()
        conv.runs.append(Run(job.index, len(conv.text), sources=job.sources, precedents=job.precedents, **kept))
        conv.touch()
        self.finished(job, m)

    async def on_failed(self, m: Failed) -> None:
        job = self.ended(m)
        if job is not None:
            self.editor.loading = False
            self.end()
            self.stash()
        self.failed(m, job)

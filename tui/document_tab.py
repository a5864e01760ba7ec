"""The Document tab: a text continued as it is (the paper's protocol, base models, "continue
my contract"). You write in the editor; ctrl+g continues it at the end, the continuation
flowing into the editor marked by provenance; the marks stay on the text through your
edits (ctrl+z undoes a continuation, ctrl+r writes it again)."""
from __future__ import annotations

from olifant_mlx.tui.flow import DocEditor, Legend
from textual.app import ComposeResult
from textual.widgets import Static, TabPane

DEFAULT_DOCUMENT = ("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR "
                    "IMPLIED, INCLUDING BUT NOT LIMITED TO")   # what the editor holds at first


class DocumentTab(TabPane):
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

    def show(self, conv) -> None:
        self.editor.set_document(conv.text, [m for m in conv.marks if m[2] != "copied"])
        self.editor.set_copied([m for m in conv.marks if m[2] == "copied"])
        self.editor.move_cursor(self.editor.document.end)

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

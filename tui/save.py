"""The save dialog: the only way output reaches the disk."""
from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label


class SaveScreen(ModalScreen):
    """Ask for a path; dismissed with the path, or None."""

    def compose(self) -> ComposeResult:
        with Vertical(id="save-box"):
            yield Label("Save the output to (nothing is saved otherwise):")
            yield Input(placeholder="/path/to/file.txt", id="save-path")
            with Horizontal():
                yield Button("Save", id="save-ok", variant="primary")
                yield Button("Cancel", id="save-cancel")

    @on(Button.Pressed, "#save-ok")
    @on(Input.Submitted, "#save-path")
    def ok(self) -> None:
        self.dismiss(self.query_one("#save-path", Input).value.strip() or None)

    @on(Button.Pressed, "#save-cancel")
    def cancel(self) -> None:
        self.dismiss(None)

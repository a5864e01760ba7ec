"""The export dialog: the only way a conversation or document reaches the disk (besides the
opt-in files of the Settings tab). The file is written by the App with write_atomic (0600)."""
from __future__ import annotations

import os

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Static

from olifant_mlx.files import NotARegularFile, check_file_path
from olifant_mlx.conversation import FORMATS, format_for

NOTE = "created readable by you only (mode 0600)"


class ExportScreen(ModalScreen):
    """Ask for a path and a format; dismissed with (path, format), or None. `check` (the
    Review tab's): the format from the path, no choice offered, a ValueError's message shown
    under the path."""
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, what: str, suggestion: str = "", check=None, note: str = NOTE):
        super().__init__()
        self.what = what
        self.suggestion = suggestion
        self.check, self.note = check, note
        self._confirm = None

    def compose(self) -> ComposeResult:
        with Vertical(id="save-box"):
            yield Label(f"Export {self.what} to a file (nothing is written otherwise):")
            yield Input(self.suggestion, placeholder="/path/to/file.md", id="save-path", compact=True)
            if self.check is None:
                with RadioSet(id="save-format", compact=True):
                    yield RadioButton("from the file's extension", True, id="fmt-auto")
                    for key, name in FORMATS.items():
                        yield RadioButton(f"{name} (.{key})", id=f"fmt-{key}")
            yield Static(self.note, id="save-note")
            with Horizontal(id="save-buttons"):
                yield Button("Export", id="save-ok", variant="primary", compact=True)
                yield Button("Cancel", id="save-cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#save-path", Input).focus()

    def chosen_format(self) -> str | None:
        pressed = self.query_one("#save-format", RadioSet).pressed_button
        if pressed is None or pressed.id == "fmt-auto":
            return None
        return pressed.id.removeprefix("fmt-")

    @on(Button.Pressed, "#save-ok")
    @on(Input.Submitted, "#save-path")
    def ok(self) -> None:
        path = os.path.expanduser(self.query_one("#save-path", Input).value.strip())
        if not path:
            self.query_one("#save-note", Static).update("give a path")
            return
        if os.path.isdir(path):
            self.query_one("#save-note", Static).update(f"{path} is a folder: add a file name")
            return
        try:             # a FIFO, a device, a link to nothing, a folder that does not exist
            check_file_path(path, "export file")
        except NotARegularFile as e:
            self.query_one("#save-note", Static).update(str(e))
            return
        try:
            fmt = self.check(path) if self.check is not None else format_for(path, self.chosen_format())
        except ValueError as e:
            self.query_one("#save-note", Static).update(str(e))
            return
        if os.path.exists(path) and self._confirm != (path, fmt):
            self._confirm = (path, fmt)
            self.query_one("#save-note", Static).update(f"{path} exists: Export again to replace it")
            return
        self.dismiss((path, fmt))

    @on(Button.Pressed, "#save-cancel")
    def cancel(self) -> None:
        self.dismiss(None)

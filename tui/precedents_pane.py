"""The Precedents tab (ctrl+j): the passages the current answer or continuation was given.

With a precedents library in Settings (or documents pinned here), the Session puts the passages
that best match the conversation or the document so far into the prompt, each under its number
and citation (olifant_mlx/precedents.py); the generation worker passes them on with the first
chunk (tui/workers.py) and the workspace keeps them with the answer. This tab lists them, shows
the selected one's text, and pins (p) its document: the workspace then puts it first among the
options' precedent files for every later generation of this session (p again unpins it)."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static, TabPane

from olifant_mlx.tui.workspace import precedents

PIN = "● pinned"
EMPTY = ("No precedents yet. Name a precedents library in Settings (F7: precedents library) and "
         "write: the passages of the library that best match the conversation or the document so "
         "far go into the prompt with their citations, and are listed here; p pins the selected "
         "passage's document, so that later generations get it first.")


def pins_line(pins) -> str:
    """The documents pinned now, as the head of the tab says them."""
    if not pins:
        return ""
    return "pinned for the next generations: " + "; ".join(
        path + (f" ({lib})" if lib else "") for lib, path in pins)


class PrecedentsTab(TabPane):
    DEFAULT_CSS = """
    #precedents-head { height: auto; padding: 0 1; }
    #precedents-table { height: auto; max-height: 45%; }
    #precedents-scroll { height: 1fr; padding: 0 1; }
    """
    BINDINGS = [Binding("p", "pin", "Pin/unpin")]

    def __init__(self):
        super().__init__("^J Precedents", id="precedents")
        self.passages: list = []

    def compose(self) -> ComposeResult:
        yield Static(EMPTY, id="precedents-head")
        table = DataTable(id="precedents-table", cursor_type="row", zebra_stripes=True)
        table.add_columns("#", "citation", "pin")
        yield table
        with VerticalScroll(id="precedents-scroll"):
            yield Static("", id="precedents-passage")

    def show(self, passages: list) -> None:
        """List these passages (Precedents.as_list()); the selected one's text shows below."""
        self.passages = list(passages)
        table = self.query_one("#precedents-table", DataTable)
        row = table.cursor_row
        table.clear()
        pinned = self.app.workspace.pins.has
        for p in self.passages:
            table.add_row(str(p.get("number", "")), Text(p.get("citation", "")), PIN if pinned(p) else "")
        if self.passages:
            table.move_cursor(row=min(max(row, 0), len(self.passages) - 1))
        self.show_head()
        self.show_passage(table.cursor_row)

    def show_head(self) -> None:
        n, pins = len(self.passages), pins_line(self.app.workspace.pins.items)
        libs = sorted({p["library"] for p in self.passages if p.get("library")})
        head = (f"{n} passage{'s' * (n != 1)} given{' from ' + ', '.join(libs) if libs else ''}: "
                f"↑↓ chooses one, its text shows below; p pins (or unpins) its document"
                if n else EMPTY)
        self.query_one("#precedents-head", Static).update(Text(head + (f"\n{pins}" if pins else "")))

    def show_passage(self, row: int) -> None:
        out = self.query_one("#precedents-passage", Static)
        if not 0 <= row < len(self.passages):
            out.update("")
            return
        p = self.passages[row]
        out.update(Text(f"[{p.get('number', '')}] {p.get('citation', '')}"
                        f"{' (pinned)' if p.get('pinned') else ''}\n\n{p.get('text', '')}"))

    def action_pin(self) -> None:
        row = self.query_one("#precedents-table", DataTable).cursor_row
        if not 0 <= row < len(self.passages):
            self.notify("no passage to pin: generate with precedents first", severity="warning")
            return
        p = self.passages[row]
        now = self.app.workspace.pins.toggle(p)
        self.notify(f"pinned {p.get('path')}: the next generations get it first" if now else
                    f"unpinned {p.get('path')}", timeout=4)
        self.show(self.passages)

    def show_current(self) -> None:
        """What the current answer (or continuation) of the tab last used was given."""
        given = precedents(self.app.workspace, self.app.mode)
        if given is not None:
            self.show(given)

    def on_show(self) -> None:
        self.show_current()      # the conversation (or document) now current

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "precedents-table":
            self.show_passage(event.cursor_row)

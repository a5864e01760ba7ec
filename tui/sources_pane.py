"""The Sources tab (ctrl+l): where the current answer's or document's copied spans come from.

The Session's tracker (olifant_mlx/provenance.py) reports each span of the output that occurs
verbatim in a precedent library; the generation worker passes them on with the text
(tui/workers.py), the text marks them (tui/copied.py), and this tab lists them: the document,
page, paragraph and length of each. Selecting one shows the source passage, decoded from the
library's own tokens (tokens.u32) with some context around it, the copied part marked."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static, TabPane

from olifant_mlx.tui.copied import LABEL, where

CONTEXT = 40         # tokens of the source shown before and after the copied span
EMPTY = ("No copied spans yet. With a library for provenance (Settings: sources, or a "
         "library:NAME drafter), every span of the output found verbatim in it is listed here, "
         "with the document and the place; the text marks it (" + LABEL + ").")


def token_offset(place: dict) -> int | None:
    """Where the span starts in its document, in tokens (Place.offset)."""
    return place["offset"] if isinstance(place.get("offset"), int) else None


class Passages:
    """The libraries' token streams and document tables, opened once each (memory-mapped)."""

    def __init__(self):
        self.open = {}

    def library(self, name: str):
        if name not in self.open:
            import numpy as np

            from olifant_mlx import library

            lib = library.load(name)
            rows = {r.get("id", i): r for i, r in enumerate(lib.table())}
            self.open[name] = (rows, np.memmap(lib.path / "tokens.u32", dtype="<u4", mode="r"))
        return self.open[name]

    def passage(self, source: dict, decode, context: int = CONTEXT) -> Text:
        """The source passage of `source`'s first place: context, the copied span (marked),
        context, never past its document's ends."""
        places = source.get("places") or []
        name = source.get("library")
        if not places or not name or decode is None:
            return Text(source.get("text") or "(the passage is shown once the verifier's tokenizer is loaded)")
        place = places[0]
        rows, stream = self.library(name)
        row = rows.get(place.get("document", place.get("id")))
        offset = token_offset(place)
        if row is None or offset is None:
            return Text(source.get("text") or "")
        lo, hi = row["start"], row["start"] + row["tokens"]
        a = lo + offset
        b = min(a + int(source.get("tokens", source["end"] - source["start"])), hi)
        ids = [int(t) for t in stream[max(lo, a - context):min(hi, b + context)]]
        before, copied = a - max(lo, a - context), b - a
        t = Text()
        t.append(f"{where(place)}\n\n", style="bold")
        t.append(("… " if a - context > lo else "") + decode(ids[:before]))
        t.append(decode(ids[before:before + copied]), style="reverse")
        t.append(decode(ids[before + copied:]) + (" …" if b + context < hi else ""))
        return t


class SourcesTab(TabPane):
    DEFAULT_CSS = """
    #sources-head { height: auto; padding: 0 1; }
    #sources-table { height: auto; max-height: 45%; }
    #sources-scroll { height: 1fr; padding: 0 1; }
    """

    def __init__(self):
        super().__init__("^L Sources", id="sources")
        self.sources: list = []
        self.decode = None
        self.passages = Passages()

    def compose(self) -> ComposeResult:
        yield Static(EMPTY, id="sources-head")
        table = DataTable(id="sources-table", cursor_type="row", zebra_stripes=True)
        table.add_columns("#", "document", "page", "para", "tokens")
        yield table
        with VerticalScroll(id="sources-scroll"):
            yield Static("", id="sources-passage")

    def show(self, sources: list, decode=None) -> None:
        """List these sources (Source.as_dict() with "library"); the first one's passage shows."""
        self.sources, self.decode = list(sources), decode
        table = self.query_one("#sources-table", DataTable)
        table.clear()
        for i, s in enumerate(self.sources, 1):
            p = (s.get("places") or [{}])[0]
            more = len(s.get("places") or []) - 1
            table.add_row(str(i), where({k: p.get(k) for k in ("path", "title", "document")})
                          + (f" (+{more})" if more > 0 else ""),
                          str(p.get("page", "") or ""), str(p.get("paragraph", "") or ""),
                          str(s.get("tokens", s.get("end", 0) - s.get("start", 0))))
        libs = sorted({s.get("library") for s in self.sources if s.get("library")})
        self.query_one("#sources-head", Static).update(
            f"{len(self.sources)} copied span{'s' * (len(self.sources) != 1)} from "
            f"{', '.join(libs) or 'a library'}: ↑↓ chooses one, its source passage shows below"
            if self.sources else EMPTY)
        self.show_passage(0)

    def show_passage(self, row: int) -> None:
        out = self.query_one("#sources-passage", Static)
        if not 0 <= row < len(self.sources):
            out.update("")
            return
        try:
            out.update(self.passages.passage(self.sources[row], self.decode))
        except (OSError, ValueError) as e:       # a library removed or rebuilt since
            out.update(f"the source passage cannot be read: {e}")

    def show_current(self) -> None:
        """The copied spans of the current conversation (or document) of the tab last used."""
        ws = self.app.workspace
        sources = ws.sources(self.app.mode)
        if sources is not None:
            self.show(sources, ws.decode())

    def on_show(self) -> None:
        self.show_current()      # the conversation (or document) now current

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_passage(event.cursor_row)

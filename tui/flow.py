"""Text that flows like a document, with each piece marked by where it came from.

`FlowText` shows a growing text (an answer being written) as one wrapped area: paragraphs are
word-wrapped to the widget's width once, and an append re-wraps only from the start of the
last line, so a long answer costs the same per update as a short one and no line is ever
broken in mid-word. `DocEditor` is a TextArea (the document you continue) that keeps the
same marks on the text a verifier wrote, through your edits, undo and redo.

Marks never rely on colour alone: an accepted draft token is underlined, the verifier's
correction of a rejected draft is bold, its bonus token after a fully accepted draft is bold
italic, text generated without a draft is plain. The colours come from the theme (component
classes); `marks` is "styled" (colour and the cue), "mono" (the cue only) or "off".
"""
from __future__ import annotations

import bisect
import re

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static, TextArea

from olifant_mlx.tui.copied import COPIED_CSS, LEGEND as COPIED, Copied

KINDS = ("accepted", "correction", "bonus", "plain")
LEGEND = {"accepted": "accepted draft", "correction": "correction", "bonus": "bonus",
          "plain": "no draft"}
CUES = {"accepted": "underlined", "correction": "bold", "bonus": "bold italic", "plain": "plain"}
MARK_MODES = ("styled", "mono", "off")
MARK_NAMES = {"styled": "colour + style", "mono": "style only", "off": "off"}

PROVENANCE_CSS = """
{name} > .prov--accepted {{ color: $text-success; text-style: underline; }}
{name} > .prov--correction {{ color: $text-warning; text-style: bold; }}
{name} > .prov--bonus {{ color: $text-primary; text-style: bold italic; }}
{name} > .prov--plain {{ }}
""" + COPIED_CSS

COMPONENTS = {f"prov--{k}" for k in KINDS} | {"prov--copied"}


class Provenance:
    """Mixin: the Rich style of each provenance kind, from the theme, in the current mode
    (the widget declares COMPONENTS as its COMPONENT_CLASSES)."""
    marks = "styled"

    def prov_style(self, kind: str) -> Style | None:
        if kind not in KINDS or self.marks == "off" or kind == "plain":
            return None
        style = self.get_component_rich_style(f"prov--{kind}", partial=True)
        if self.marks == "mono":
            return Style(bold=style.bold, italic=style.italic, underline=style.underline)
        return style

    def set_marks(self, mode: str) -> None:
        if mode not in MARK_MODES:
            raise ValueError(f"marks must be one of {', '.join(MARK_MODES)}, got {mode!r}")
        self.marks = mode
        self.marks_changed()

    def marks_changed(self) -> None:
        self.refresh()


class Legend(Copied, Provenance, Static):
    """One line naming each mark, drawn with the marks themselves."""
    COMPONENT_CLASSES = COMPONENTS
    DEFAULT_CSS = PROVENANCE_CSS.format(name="Legend") + "Legend { height: 1; }"

    def on_mount(self) -> None:
        self.marks_changed()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        if self.is_mounted:
            self.marks_changed()

    def marks_changed(self) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        if self.marks == "off":
            t.append("marks off (F10)")
        else:
            for kind in KINDS:
                t.append(LEGEND[kind], style=self.prov_style(kind) or "")
                t.append("  ")
            t.append(COPIED, style=self.copied_style() or "")
            t.append(f"  F10: {MARK_NAMES[self.marks]}", style="dim")
        unline_spaces(t)
        self.update(t)


# ---- wrapping ------------------------------------------------------------------------

_PIECE = re.compile(r"\S+\s*|\s+")
_SPACES = re.compile(r"\s+")
NO_UNDERLINE = Style(underline=False)


def unline_spaces(text: Text) -> None:
    """Underline words, not the spaces between them (a mark never reads as an underscore)."""
    for m in _SPACES.finditer(text.plain):
        text.stylize(NO_UNDERLINE, m.start(), m.end())


def wrap_starts(text: str, width: int, start: int = 0) -> list[int]:
    """Where each line of `text[start:]` starts when word-wrapped to `width` cells (greedy:
    a word that does not fit moves to the next line; a word longer than a line is folded;
    spaces after a word may run past the edge). Re-wrapping from the start of the last line
    gives the same lines as wrapping everything: earlier lines never depend on later text."""
    width = max(width, 1)
    starts, col = [start], 0
    for m in _PIECE.finditer(text, start):
        piece = m.group()
        body = piece.rstrip()
        wb = cell_len(body)
        if col and body and col + wb > width:
            starts.append(m.start())
            col = 0
        if wb > width:                     # fold a word longer than a line
            pos = m.start()
            end = pos + len(body)
            line_w = col
            for i in range(pos, end):
                w = cell_len(text[i])
                if line_w + w > width and line_w:
                    starts.append(i)
                    line_w = 0
                line_w += w
            col = line_w + cell_len(piece[len(body):])
            continue
        col += cell_len(piece)
    return starts


class FlowText(Copied, Provenance, Widget):
    """A growing, word-wrapped text of (text, provenance) segments; cheap to append to."""
    COMPONENT_CLASSES = COMPONENTS
    DEFAULT_CSS = PROVENANCE_CSS.format(name="FlowText") + "FlowText { height: auto; }"
    ALLOW_SELECT = True

    def __init__(self, segments=(), *, id=None, classes=None):
        super().__init__(id=id, classes=classes)
        self._paras: list[list] = [[]]        # runs [(text, kind)] per paragraph
        self._plain: list[str] = [""]
        self._width = 0
        self._starts: list[list[int]] = [[0]]  # line starts per paragraph, at self._width
        self._cache: dict[int, Strip] = {}
        self._index: list[tuple[int, int]] | None = None   # line -> (paragraph, line in it)
        if segments:
            self.append(segments, refresh=False)

    # ---- content ----

    @property
    def text(self) -> str:
        return "\n".join(self._plain)

    def clear(self) -> None:
        self._paras, self._plain, self._starts = [[]], [""], [[0]]
        self._reset()
        self.refresh(layout=True)

    def set_segments(self, segments) -> None:
        self._paras, self._plain, self._starts = [[]], [""], [[0]]
        self._reset()
        self.append(segments)

    def append(self, segments, refresh: bool = True) -> str:
        """Add segments at the end; returns the text added."""
        added = []
        first = len(self._paras) - 1
        before = self.line_count if self._width else 0
        for text, kind in segments:
            if not text:
                continue
            added.append(text)
            parts = text.split("\n")
            for i, part in enumerate(parts):
                if i:
                    self._paras.append([])
                    self._plain.append("")
                    self._starts.append([0])
                if part:
                    runs = self._paras[-1]
                    if runs and runs[-1][1] == kind:
                        runs[-1] = (runs[-1][0] + part, kind)
                    else:
                        runs.append((part, kind))
                    self._plain[-1] += part
        if not added:
            return ""
        if self._width:
            # the paragraph that grew re-wraps from its last line; new ones from the start
            starts = self._starts[first]
            self._starts[first] = starts[:-1] + wrap_starts(self._plain[first], self._width, starts[-1])
            for p in range(first + 1, len(self._paras)):
                self._starts[p] = wrap_starts(self._plain[p], self._width)
            self._index = None
            line = self._first_line(first) + len(starts) - 1
            for y in [y for y in self._cache if y >= line]:
                del self._cache[y]
        if refresh and self.is_mounted:
            self.refresh(layout=not self._width or self.line_count != before)
        return "".join(added)

    # ---- layout ----

    def _reset(self) -> None:
        self._width = 0
        self._cache.clear()
        self._index = None

    def _wrap(self, width: int) -> None:
        if width == self._width:
            return
        self._width = width
        self._starts = [wrap_starts(p, width) for p in self._plain]
        self._cache.clear()
        self._index = None

    def _lines(self) -> list[tuple[int, int]]:
        if self._index is None:
            self._index = [(p, i) for p, starts in enumerate(self._starts) for i in range(len(starts))]
        return self._index

    def _first_line(self, para: int) -> int:
        return sum(len(s) for s in self._starts[:para])

    @property
    def line_count(self) -> int:
        return sum(len(s) for s in self._starts)

    def get_content_height(self, container, viewport, width: int) -> int:
        if width <= 0:
            return 0
        self._wrap(width)
        return self.line_count

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def marks_changed(self) -> None:
        self._cache.clear()
        self.refresh()

    def _line_text(self, p: int, i: int) -> tuple[int, int]:
        starts = self._starts[p]
        end = starts[i + 1] if i + 1 < len(starts) else len(self._plain[p])
        return starts[i], len(self._plain[p][starts[i]:end].rstrip()) + starts[i]

    def visual_lines(self) -> list[str]:
        """The text as it is shown, one string per screen line."""
        out = []
        for p, i in self._lines():
            a, b = self._line_text(p, i)
            out.append(self._plain[p][a:b])
        return out

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if width != self._width:
            self._wrap(width)
        lines = self._lines()
        if y >= len(lines):
            return Strip.blank(width, base)
        selection = self.text_selection
        if selection is None and y in self._cache:
            return self._cache[y]
        p, i = lines[y]
        a, b = self._line_text(p, i)
        t = Text(style=base, no_wrap=True, end="")
        pos = 0
        for run, kind in self._paras[p]:
            lo, hi = max(a, pos), min(b, pos + len(run))
            if lo < hi:
                t.append(run[lo - pos:hi - pos], style=self.prov_style(kind) or "")
            pos += len(run)
            if pos >= b:
                break
        self.mark_copied(t, a, lambda: sum(len(x) + 1 for x in self._plain[:p]))
        unline_spaces(t)
        if selection is not None and (span := selection.get_span(y)) is not None:
            s, e = span
            t.stylize(self.screen.get_component_rich_style("screen--selection"), s,
                      len(t) if e == -1 else e)
        strip = Strip(t.render(self.app.console), t.cell_len).apply_style(base)
        strip = strip.extend_cell_length(width, base)
        if selection is None:
            self._cache[y] = strip
        return strip

    def get_selection(self, selection):
        return selection.extract("\n".join(self.visual_lines())), "\n"

    def selection_updated(self, selection) -> None:
        self._cache.clear()
        self.refresh()


# ---- the document editor -------------------------------------------------------------

def changed_span(old: str, new: str) -> tuple[int, int, int]:
    """(start, end, inserted length): `old[start:end]` became `new[start:start+inserted]`."""
    n = min(len(old), len(new))
    lo, hi = 0, n                      # longest common prefix, by bisection on slices
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[:mid] == new[:mid]:
            lo = mid
        else:
            hi = mid - 1
    p = lo
    lo, hi = 0, n - p                  # longest common suffix that does not overlap it
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[len(old) - mid:] == new[len(new) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return p, len(old) - lo, len(new) - lo - p


def shift_marks(marks: list, start: int, end: int, inserted: int) -> list:
    """Marks [(a, b, kind)] after `[start, end)` was replaced by `inserted` characters: the
    parts outside the replaced text stay marked (shifted), the new text is unmarked."""
    delta = inserted - (end - start)
    out = []
    for a, b, kind in marks:
        if b <= start:
            out.append((a, b, kind))
        elif a >= end:
            out.append((a + delta, b + delta, kind))
        else:
            if a < start:
                out.append((a, start, kind))
            if b > end:
                out.append((end + delta, b + delta, kind))
    return out


def add_marks(marks: list, new: list) -> list:
    """Marks with `new` ones (on unmarked text) added, sorted, neighbours of a kind merged."""
    out = []
    for a, b, kind in sorted(marks + [m for m in new if m[1] > m[0]]):
        if out and out[-1][1] == a and out[-1][2] == kind:
            out[-1] = (out[-1][0], b, kind)
        else:
            out.append((a, b, kind))
    return out


class DocEditor(Copied, Provenance, TextArea):
    """A soft-wrapped editor whose generated text keeps its provenance marks. The marks are
    character ranges, moved along with every change (typing, paste, undo, redo): the text
    before and after each change is compared and the marks outside the changed part kept."""
    COMPONENT_CLASSES = TextArea.COMPONENT_CLASSES | COMPONENTS
    DEFAULT_CSS = PROVENANCE_CSS.format(name="DocEditor")

    def __init__(self, text: str = "", **kw):
        kw.setdefault("soft_wrap", True)
        # a paragraph is one line of the editor: its highlight would paint over the marks
        kw.setdefault("highlight_cursor_line", False)
        super().__init__(text, **kw)
        self.marks_list: list = []        # [(start, end, kind)] in self.text, sorted
        self._known = text
        self._pending: tuple[int, list] | None = None
        self._line_starts = self._starts_of(text)

    @staticmethod
    def _starts_of(text: str) -> list[int]:
        starts, pos = [0], 0
        for line in text.split("\n")[:-1]:
            pos += len(line) + 1
            starts.append(pos)
        return starts

    def append_generated(self, segments) -> str:
        """Insert generated segments at the end of the document, marked by provenance."""
        text = "".join(t for t, _ in segments)
        if not text:
            return ""
        base = len(self._known)
        marks, pos = [], base
        for t, kind in segments:
            marks.append((pos, pos + len(t), kind))
            pos += len(t)
        self._pending = (base, marks)
        self.insert(text, self.document.end, maintain_selection_offset=False)
        self._pending = None
        return text

    def set_document(self, text: str, marks=()) -> None:
        self._known = text
        self.marks_list = add_marks([], [tuple(m) for m in marks if 0 <= m[0] < m[1] <= len(text)])
        self.load_text(text)

    def _sync(self) -> None:
        new = self.text
        old = self._known
        if new == old:
            return
        start, end, inserted = changed_span(old, new)
        marks = shift_marks(self.marks_list, start, end, inserted)
        if self._pending is not None and self._pending[0] == start == end == len(old):
            marks = add_marks(marks, self._pending[1])
        self.marks_list = marks
        self.copied = [m[:2] for m in shift_marks([(*c, "") for c in self.copied], start, end, inserted)]
        self._known = new
        self._line_starts = self._starts_of(new)

    def _build_highlight_map(self) -> None:
        # TextArea calls this after every edit, undo, redo and load: the moment to move marks
        super()._build_highlight_map()
        if hasattr(self, "marks_list"):
            self._sync()

    def get_line(self, line_index: int) -> Text:
        line = super().get_line(line_index)
        if not getattr(self, "marks_list", None) or self.marks == "off" \
                or line_index >= len(self._line_starts):
            return line
        start = self._line_starts[line_index]
        end = start + len(line)
        i = max(bisect.bisect_right(self.marks_list, (start,)) - 1, 0)
        for a, b, kind in self.marks_list[i:]:
            if a >= end:
                break
            lo, hi = max(a, start), min(b, end)
            style = self.prov_style(kind)
            if lo < hi and style is not None:
                line.stylize(style, lo - start, hi - start)
        self.mark_copied(line, start)
        unline_spaces(line)
        return line

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self.marks_changed()

    def marks_changed(self) -> None:
        cache = getattr(self, "_line_cache", None)
        if cache is not None:
            cache.clear()
        self.refresh()

"""The Review tab's widgets (tui/review_tab.py): the list of the document's paragraphs, where
clauses are checked and what became of each is said; and below it the view, which shows the
clause being drafted live (its provenance marks) or, once revised, its redline, where the
changes are stepped through (n, p), accepted (a, A) and rejected (r, R). The review's state is
tui/review.py's `Review`, which the tab gives the view when a document opens."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.strip import Strip
from textual.widgets import SelectionList, Static
from textual.widgets.selection_list import Selection

from olifant_mlx.tui.flow import FlowText, Legend
from olifant_mlx.tui.review import Review, label, redline, title

EMPTY = ("Open a document (its path above, enter), write what to change, check the clauses to revise "
         "(or let the instruction's search choose them) and press ctrl+g.")
CHOOSING = "space check · + all · - none · s the search's · ^G revise the checked clauses"
REVIEWING = "n/p next/previous change · a/r accept/reject · A/R whole clause · ^S export"


class ClauseList(SelectionList):
    """Every paragraph of the document, by number; clauses can be checked, the rest are shown
    for where they are (headings, short lines, paragraphs with tracked changes of their own)."""
    review: Review | None = None

    def fill(self, review: Review) -> None:
        self.review = review
        self.clear_options()
        self.add_options([Selection(label(p, None, self.room()), p.index, False,
                                    disabled=not p.is_clause or bool(p.tracked)) for p in review.doc.paragraphs])

    def room(self) -> int:
        return max(self.size.width - 5, 40)     # the checkbox and the scroll bar

    def relabel(self, index: int) -> None:
        p = self.review.doc.paragraphs[index]
        self.replace_option_prompt_at_index(index, label(p, self.review.clauses.get(index), self.room()))

    def on_resize(self) -> None:
        if self.review is not None:
            for index in range(self.option_count):
                self.relabel(index)

    def check(self, indexes) -> None:
        """Exactly these paragraphs checked, in one change (one SelectedChanged: a long
        document's + stays quick)."""
        wanted = set(indexes)
        self._apply_to_all(lambda value: self._select(value) if value in wanted else self._deselect(value))

    def render_line(self, y: int) -> Strip:
        """The checkbox in characters, not colour alone: X checked, blank not."""
        strip = super().render_line(y)
        index = self.scroll_offset.y + y
        segments = list(strip)
        if len(segments) > 1 and index < self.option_count and self.get_option_at_index(index).value not in \
                self._selected:
            text, style, control = segments[1]
            segments[1] = Segment(" " * len(text), style, control)
            return Strip(segments, strip.cell_length)
        return strip


class RedlineView(Static):
    """A clause's redline: the marks' cues always (struck through, underlined, reverse video),
    the theme's colours unless the marks are "style only" or off (F10)."""
    COMPONENT_CLASSES = {"redline--del", "redline--ins", "redline--current"}
    DEFAULT_CSS = """
    RedlineView > .redline--del { color: $text-error; text-style: strike; }
    RedlineView > .redline--ins { color: $text-success; text-style: underline; }
    RedlineView > .redline--current { text-style: reverse; }
    """
    marks = "styled"

    def show(self, clause, current) -> None:
        styles = {}
        if self.marks == "styled":
            styles = {name: self.get_component_rich_style(f"redline--{name}", partial=True)
                      for name in ("del", "ins", "current")} | {"rejected": Style(dim=True)}
        self.update(redline(clause, current, styles))


class ReviewView(Vertical):
    """The list and the clause shown below it; its keys (n, p, a, r, A, R) act while the focus
    is in it (in a field, the letters are the field's)."""
    DEFAULT_CSS = """
    ReviewView { height: 1fr; }
    #review-clauses { height: 1fr; min-height: 3; }
    #review-view { height: 1fr; min-height: 3; padding: 0 1; border-top: hkey $primary-darken-2; }
    #review-title { text-style: bold; }
    #review-legend, #review-keys { height: 1; padding: 0 1; color: $text-muted; }
    """
    BINDINGS = [Binding("n", "change(1)", "Next"), Binding("p", "change(-1)", "Prev", show=False),
                Binding("a", "decide(True)", "Accept"), Binding("r", "decide(False)", "Reject"),
                Binding("A", "decide(True, True)", "Accept clause", show=False),    # the keys line
                Binding("R", "decide(False, True)", "Reject clause", show=False)]   # says them all
    review: Review | None = None
    live: int | None = None          # the paragraph being drafted

    def compose(self) -> ComposeResult:
        yield ClauseList(id="review-clauses", compact=True)
        yield Static("", id="review-clauses-error", classes="field-error")
        with VerticalScroll(id="review-view"):
            yield Static(EMPTY, id="review-title")
            yield FlowText(id="review-draft")
            yield RedlineView("", id="review-redline")
        yield Legend(id="review-legend")
        yield Static(CHOOSING, id="review-keys")

    def on_mount(self) -> None:
        self.drafting(False)

    @property
    def clauses(self) -> ClauseList:
        return self.query_one(ClauseList)

    def use(self, review: Review) -> None:
        self.review = review
        self.clauses.fill(review)
        self.show_at()

    def set_marks(self, mode: str) -> None:
        self.query_one(FlowText).set_marks(mode)
        self.query_one(Legend).set_marks(mode)
        self.query_one(RedlineView).marks = mode
        self.show_at()

    def check_action(self, action: str, parameters) -> bool | None:
        if action in ("change", "decide"):
            return self.review is not None and self.live is None and bool(self.review.stops())
        return True

    # ---- a clause drafted live -------------------------------------------------------------

    def drafting(self, on: bool) -> None:
        self.query_one(FlowText).display = self.query_one(Legend).display = on
        self.query_one(RedlineView).display = self.query_one("#review-keys").display = not on

    def begin(self, paragraphs) -> None:
        self.review.begin(paragraphs)
        for p in paragraphs:
            self.clauses.relabel(p.index)
        self.drafting(True)

    def start(self, index: int, order: int, of: int) -> None:
        self.live = index
        self.review.started(index)
        self.clauses.relabel(index)
        self.drafting(True)
        self.query_one(FlowText).clear()
        self.query_one("#review-title", Static).update(f"¶{index + 1} ({order} of {of}): revising …")
        self.clauses.highlighted = index

    def append(self, segments) -> None:
        self.query_one(FlowText).append(segments)

    def end(self) -> None:
        """The run over: the first change shown (else the first clause revised), the list focused."""
        self.live = None
        self.drafting(False)
        for index in self.review.stop():
            self.clauses.relabel(index)
        r = self.review
        r.at = None
        if r.move(1) is None and r.revised():
            r.goto(r.revised()[0].paragraph.index)
        if r.at is not None:
            self.clauses.highlighted = r.at[0]
        self.show_at()
        self.clauses.focus()

    # ---- the changes ------------------------------------------------------------------------

    @on(SelectionList.SelectionHighlighted, "#review-clauses")
    def _highlighted(self, event: SelectionList.SelectionHighlighted) -> None:
        if self.review is None or self.live is not None:
            return
        index = event.selection.value
        if index in self.review.clauses:
            self.review.goto(index)
        else:
            self.review.at = (index, None)
        self.show_at()

    def show_at(self) -> None:
        """The clause looked at: its redline with the change looked at, or its text."""
        r, head, view = self.review, self.query_one("#review-title", Static), self.query_one(RedlineView)
        self.query_one("#review-keys", Static).update(REVIEWING if r is not None and r.stops() else CHOOSING)
        if r is None or r.at is None:
            head.update(EMPTY if r is None else "")
            view.update("")
            return
        index, current = r.at
        c = r.clauses.get(index)
        if c is not None and c.revision is not None:
            head.update(title(c, current))
            view.show(c, current)
            return
        p = r.doc.paragraphs[index]
        head.update(f"¶{p.number}: " + (c.status() if c is not None else "not revised"))
        view.update(p.text)

    def action_change(self, step: int) -> None:
        if self.review.move(step) is None:
            self.notify("no more changes that way", timeout=2)
            return
        self.clauses.highlighted = self.review.at[0]
        self.show_at()

    def action_decide(self, accept: bool, whole_clause: bool = False) -> None:
        """a/r: accept or reject the change shown and go on to the next; A/R: every change of its clause."""
        if not self.review.decide(accept, whole_clause):
            self.notify("no change here: n and p go to the changes", severity="warning", timeout=3)
            return
        self.clauses.relabel(self.review.at[0])
        if not whole_clause and self.review.move(1) is not None:
            self.clauses.highlighted = self.review.at[0]
        self.show_at()
        self.post_message(self.Decided())

    class Decided(Message):
        """A change accepted or rejected (the tab's status line says where the review stands)."""

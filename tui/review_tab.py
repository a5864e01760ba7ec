"""The Review tab (F12): a document's clauses revised on instruction, each change accepted or
rejected, the redline exported.

Type the document's path (enter opens it: .docx, .md, .txt, .odt, .rtf, .html; what is wrong
with it is said under the field, as `revise` says it) and the instruction (enter checks the
clauses its search over the document finds). The list shows every paragraph with its number;
space checks or unchecks a clause, + checks all, - none, s the search's. ctrl+g revises the
checked clauses (none checked: the search's), one after another on the tab's own worker
(tui/review.py: revise_clauses), each drafted live with its provenance marks; then n and p step
through the changes, a and r accept or reject the one shown, A and R every change of its
clause (tui/review_view.py), and ctrl+s writes the redline (.docx: the changes kept as Word
tracked changes; .md, .txt), atomically and readable by you only. Nothing is written unless
you export. The settings are the Settings tab's, but for k and max tokens (review.revise_options).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Input, Label, SelectionList, Static

from olifant_mlx.tui import render
from olifant_mlx.tui.messages import Chunk, Failed
from olifant_mlx.tui.review import (FORMATS, Asked, ClauseDone, ClauseFailed, ClauseStarted, Opened, Review, Revised,
                                    check_export, describe, open_document, revise_clauses, revise_options)
from olifant_mlx.tui.review_view import ReviewView
from olifant_mlx.tui.save import NOTE, ExportScreen
from olifant_mlx.tui.writing import WritingPane, setting_up


class ReviewTab(WritingPane):
    what = "the redline"
    copies = "the clause as revised (the changes kept)"
    own_keys = ("send", "export", "copy")      # ctrl+g, ctrl+s, ctrl+o here are this tab's
    DEFAULT_CSS = "#review-head { height: auto; max-height: 2; padding: 0 1; color: $text-muted; }"
    BINDINGS = [Binding("plus", "check('all')", "All clauses", show=False),      # the keys line says them
                Binding("minus", "check('none')", "No clause", show=False),
                Binding("s", "check('search')", "Search's clauses", show=False)]

    def __init__(self):
        super().__init__("F12 Review", id="review")
        self.review: Review | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(classes="row"):
            yield Label("document", classes="key")
            yield Input(placeholder=".docx, .md, .txt, .odt, .rtf or .html: enter opens it", id="review-path",
                        compact=True)
        yield Static("", id="review-path-error", classes="field-error")
        with Horizontal(classes="row"):
            yield Label("instruction", classes="key")
            yield Input(placeholder="what to change: enter checks the clauses it concerns", id="review-instruction",
                        compact=True)
        yield Static("", id="review-instruction-error", classes="field-error")
        yield Static("", id="review-head")
        yield ReviewView()
        yield Static("", id="review-status", classes="status")

    @property
    def view(self) -> ReviewView:
        return self.query_one(ReviewView)

    def status(self, text: str) -> None:
        self.query_one("#review-status", Static).update(text)

    def error(self, field: str, text: str = "") -> None:
        """Say what is wrong under a field (path, instruction, clauses); "" clears it."""
        w = self.query_one(f"#review-{field}-error", Static)
        w.update(text)
        w.set_class(bool(text), "-shown")

    def set_marks(self, mode: str) -> None:
        self.view.set_marks(mode)

    def check_action(self, action: str, parameters) -> bool | None:
        if action == "check":          # not while typing in a field: the letters are the field's
            return self.review is not None and not isinstance(self.app.focused, Input)
        return True

    # ---- opening a document and choosing its clauses --------------------------------------

    @on(Input.Submitted, "#review-path")
    def open_path(self) -> None:
        path = str(Path(self.query_one("#review-path", Input).value.strip()).expanduser())
        if path in ("", "."):
            self.error("path", "give the document's path")
            return
        self.error("path", "reading ...")
        self._read(path)

    @work(thread=True, exclusive=True, group="open", exit_on_error=False)
    def _read(self, path: str) -> None:
        open_document(path, self.post_message)

    def on_opened(self, m: Opened) -> None:
        if m.doc is None:
            self.error("path", m.error)
            return
        if self.running() is not None:
            self.error("path", "a revision is running: esc stops it, then open another document")
            return
        self.error("path")
        self.review = Review(m.doc)
        self.view.use(self.review)
        self.query_one("#review-head", Static).update(describe(m.doc))
        self.query_one("#review-instruction", Input).focus()
        self.app.refresh_bindings()

    @on(Input.Submitted, "#review-instruction")
    def instruction_given(self) -> None:
        if self.review is not None and self.search():
            self.view.clauses.focus()

    def instruction(self) -> str:
        return " ".join(self.query_one("#review-instruction", Input).value.split())

    def search(self) -> list:
        """Check the clauses the instruction's search finds (revise.select); [] (said under the
        list) when it finds none."""
        from olifant_mlx.revise import RevisionError, select

        self.error("clauses")
        try:
            chosen = sorted(p.index for p in select(self.review.doc, self.instruction()).chosen)
        except RevisionError:
            self.error("clauses", "the instruction's search finds no clause: check them yourself (space; + all)")
            return []
        self.view.clauses.check(chosen)
        self.notify(f"the instruction's search checked {len(chosen)} clause{'s' * (len(chosen) != 1)}", timeout=3)
        return chosen

    @on(SelectionList.SelectedChanged, "#review-clauses")
    def _checked(self) -> None:
        if self.review is not None:
            n = len(self.view.clauses.selected)
            self.query_one("#review-head", Static).update(f"{describe(self.review.doc)} · {n} checked")

    def action_check(self, which: str) -> None:
        """+ checks every clause, - none, s those the instruction's search finds."""
        if which == "search":
            if not self.instruction():
                self.error("instruction", "give the instruction first: its search chooses the clauses")
                return
            self.search()
            return
        self.error("clauses")
        ps = self.review.doc.paragraphs
        self.view.clauses.check([p.index for p in ps if p.is_clause and not p.tracked] if which == "all" else [])

    # ---- revising ---------------------------------------------------------------------------

    @setting_up
    async def action_send(self) -> None:
        """ctrl+g: revise the checked clauses (none checked: those the instruction's search finds)."""
        from olifant_mlx.verifier.loader import check_text

        if self.review is None:
            self.error("path", "open a document first: its path, then enter")
            return
        instruction = self.instruction()
        try:
            if not instruction:
                raise ValueError("give the instruction: what to change (e.g. make the notice period sixty days)")
            check_text(instruction, "the instruction")
        except ValueError as e:
            self.error("instruction", str(e))
            return
        self.error("instruction")
        chosen = sorted(self.view.clauses.selected) or self.search()
        s = self.settings() if chosen else None
        if s is None:
            return
        options, max_tokens = revise_options(s.options)
        paragraphs = tuple(self.review.doc.paragraphs[i] for i in chosen)
        self.view.begin(paragraphs)
        self.start(self.ws.job("review", None, dataclasses.replace(s, options=options),
                               Asked(instruction, paragraphs, max_tokens)), revise_clauses)

    def on_clause_started(self, m: ClauseStarted) -> None:
        if self.ws.jobs.get(m.run) is not None:
            self.view.start(m.index, m.order, m.of)

    def on_chunk(self, m: Chunk) -> None:
        if self.took(m) is None:
            return
        self.view.append(m.segments)
        self.writing(m)
        self.status(f"revising ¶{(self.view.live or 0) + 1} · " + render.status_line(m.stats))

    def on_clause_done(self, m: ClauseDone) -> None:
        job = self.ws.jobs.get(m.run)
        if job is None:
            return
        self.review.done(m.revision)
        self.view.clauses.relabel(m.revision.paragraph.index)
        self.ws.last_stats, self.ws.last_window = m.stats, m.window
        self.app.live.show_end(m.stats, m.window, time.perf_counter() - job.t0)

    def on_clause_failed(self, m: ClauseFailed) -> None:
        if self.ws.jobs.get(m.run) is not None:
            self.review.failed(m.index, m.error)
            self.view.clauses.relabel(m.index)

    def on_revised(self, m: Revised) -> None:
        if self.ended(m) is not None:
            self.view.end()
            self.status(self.review.summary())

    def on_failed(self, m: Failed) -> None:
        job = self.ended(m)
        if job is not None and self.review is not None:
            self.view.end()
        self.failed(m, job)

    def on_review_view_decided(self) -> None:
        self.status(self.review.summary())

    # ---- export and copy --------------------------------------------------------------------

    def text(self) -> str:
        """ctrl+o: the clause looked at as revised, with the changes kept."""
        from olifant_mlx.redline import apply_edits

        r = self.review
        c = r.clauses.get(r.at[0]) if r is not None and r.at is not None else None
        return apply_edits(list(c.revision.edits), c.kept()) if c is not None and c.revision is not None else ""

    def action_export(self) -> None:
        """ctrl+s: the redline to a file (.docx, .md, .txt), the rejected changes left out."""
        if self.review is None or not self.review.revised():
            self.notify("nothing to export yet: revise clauses first (ctrl+g)", severity="warning")
            return
        doc = self.review.doc
        source = Path(doc.path)
        kinds = "; ".join(f".{k} {v}" for k, v in FORMATS.items())
        self.app.push_screen(ExportScreen(self.what, str(source.with_name(source.stem + "-redline.docx")),
                                          check=lambda path: check_export(path, doc.path),
                                          note=f"the suffix picks the format: {kinds}; {NOTE}"), self.export)

    def export(self, choice) -> None:
        if not choice:
            return
        from olifant_mlx.files import write_atomic
        from olifant_mlx.revise import export

        path, fmt = choice
        r = self.review
        try:
            write_atomic(path, export(r.doc, r.revisions(), fmt, keep=r.keep()))
        except (OSError, ValueError) as e:
            self.notify(f"cannot export: {e}", severity="error")
            return
        n = r.counts()
        self.notify(f"exported to {path}: {n['accepted'] + n['pending']} changes kept, {n['rejected']} rejected "
                    f"left out (readable by you only)")

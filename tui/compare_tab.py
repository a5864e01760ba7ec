"""The Plain-vs-speculative tab: the same prompt twice, outputs side by side, the speedup.

ctrl+b (or its button) runs the last prompt of the Chat or Document tab (or what its editor
holds) plain and speculative side by side, their passes batched, then measured rounds one at
a time, on the tab's own worker
(tui/workers.py: compare); the tab handles what it posts (`on_chunk`, `on_compare_done`,
`on_failed`)."""
from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Static

from olifant_mlx.tui import render, workers
from olifant_mlx.tui.flow import FlowText, Legend
from olifant_mlx.tui.messages import Chunk, CompareDone, Failed
from olifant_mlx.tui.writing import WritingPane

STACK_BELOW = 72        # narrower than this, the two outputs are stacked


class CompareTab(WritingPane):
    def __init__(self):
        super().__init__("F4 Compare", id="compare")

    def compose(self) -> ComposeResult:
        yield Button("Run plain and speculative  ^b", id="compare-go", variant="primary", compact=True)
        yield Static("the last prompt of the Chat or Document tab (or what its editor holds), "
                     "with the settings; timings measured here, on this machine", id="compare-result")
        with Horizontal(id="compare-outs"):
            with VerticalScroll(classes="compare-out"):
                yield Static("plain", classes="heading")
                yield FlowText(id="compare-plain")
            with VerticalScroll(classes="compare-out"):
                yield Static("speculative", classes="heading")
                yield FlowText(id="compare-spec")
        yield Legend(id="compare-legend")

    def on_resize(self) -> None:
        self.query_one("#compare-outs").styles.layout = (
            "vertical" if self.size.width < STACK_BELOW else "horizontal")

    def clear(self) -> None:
        for w in self.query(FlowText):
            w.clear()

    def set_marks(self, mode: str) -> None:
        for w in self.query(FlowText):
            w.set_marks(mode)
        self.query_one(Legend).set_marks(mode)

    def status(self, text: str) -> None:
        self.query_one("#compare-result", Static).update(text)

    @on(Button.Pressed, "#compare-go")
    def action_compare(self) -> None:
        """The last prompt (or what the Chat or Document editor holds), plain and speculative."""
        s = self.settings()
        if s is None:
            return
        prompt = self.ws.last_prompt
        prompt = prompt[1] if prompt is not None else self.app.writer().compare_prompt()
        if prompt is None:
            return
        self.app.action_tab("compare")
        self.clear()
        self.status("running plain and speculative side by side, then measuring ...")
        self.start(self.ws.job("compare", None, s, prompt), workers.compare)

    # ---- what the worker posts ----------------------------------------------------------

    def on_chunk(self, m: Chunk) -> None:
        job = self.took(m)
        if job is None:
            return
        self.query_one("#compare-plain" if m.run < 0 else "#compare-spec", FlowText).append(m.segments)
        self.writing(m)

    def on_compare_done(self, m: CompareDone) -> None:
        self.ws.end(getattr(self.running(), "id", None))
        (_, ps, pw), (_, ss, sw) = m.plain, m.spec
        self.status(render.compare_text(ps, ss, pw.total_j if pw else None, sw.total_j if sw else None,
                                        m.same, m.measured, m.rates))
        self.ws.last_stats = ss
        self.app.refresh_bindings()
        self.app.live.show_session(self.ws.session, self.ws.last_request, self.ws.last_k)

    def on_failed(self, m: Failed) -> None:
        self.failed(m, self.ended(m))

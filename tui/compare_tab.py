"""The Plain-vs-speculative tab: the same prompt twice, outputs side by side, the speedup."""
from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Static, TabPane

from olifant_mlx.tui.flow import FlowText, Legend

STACK_BELOW = 72        # narrower than this, the two outputs are stacked


class CompareTab(TabPane):
    def __init__(self):
        super().__init__("F4 Compare", id="compare")

    def compose(self) -> ComposeResult:
        yield Button("Run plain, then speculative  ^b", id="compare-go", variant="primary", compact=True)
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

    @on(Button.Pressed, "#compare-go")
    def _go(self) -> None:
        self.app.action_compare()       # the same as ctrl+b (tui/generation.py)

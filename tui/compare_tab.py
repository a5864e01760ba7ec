"""The Plain-vs-speculative tab: the same prompt twice, outputs side by side, the speedup."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Static, TabPane


class CompareTab(TabPane):
    def __init__(self):
        super().__init__("Plain vs speculative", id="compare")

    def compose(self) -> ComposeResult:
        yield Button("Run plain, then speculative  ^b", id="compare-go", variant="primary")
        with Horizontal(id="compare-outs"):
            with VerticalScroll():
                yield Static("plain", classes="heading")
                yield Static("", id="compare-plain")
            with VerticalScroll():
                yield Static("speculative", classes="heading")
                yield Static("", id="compare-spec")
        yield Static("same prompt and settings as the Generate tab; timings measured "
                     "here, on this machine", id="compare-result")

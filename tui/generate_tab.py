"""The Generate tab: settings, the prompt, the live output with provenance, stats and power."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Checkbox, Input, Label, RichLog, Sparkline, Static, TabPane, TextArea

from olifant_mlx.drafters.registry import help_text
from olifant_mlx.engine import Stats
from olifant_mlx.tui import render

TAIL_MAX = 240          # characters kept in the one-line tail before it moves to the log


class GenerateTab(TabPane):
    def __init__(self, model: str, draft: str, k: int, max_tokens: int, prompt: str):
        super().__init__("Generate", id="generate")
        self.settings = (model, draft, k, max_tokens, prompt)
        self._line = Text()

    def compose(self) -> ComposeResult:
        model, draft, k, max_tokens, prompt = self.settings
        with Horizontal():
            with VerticalScroll(id="controls"):
                yield Label("verifier")
                yield Input(model, placeholder="smollm2-135m", id="model")
                yield Label("drafter")
                yield Input(draft, id="draft", placeholder=help_text(), tooltip=help_text())
                yield Label("k (draft tokens)")
                yield Input(str(k), type="integer", id="k")
                yield Label("max tokens")
                yield Input(str(max_tokens), type="integer", id="max-tokens")
                yield Checkbox("KV cache", True, id="kv")
                yield Button("Generate  ^g", id="go", variant="primary")
                yield Button("Stop  esc", id="stop", variant="error")
            with Vertical(id="centre"):
                yield TextArea(prompt, id="prompt")
                yield Static(render.legend(), id="legend")
                with Vertical(id="output-box"):
                    yield RichLog(wrap=True, markup=False, id="output")
                    yield Static("", id="tail")
                yield Static("ready", id="status")
            with VerticalScroll(id="side"):
                yield Static("statistics", classes="heading")
                yield Static(render.stats_text(Stats()), id="stats")
                yield Static("energy", classes="heading")
                yield Static("", id="energy")
                yield Vertical(id="power")

    def clear_output(self) -> None:
        self.query_one("#output", RichLog).clear()
        self._line = Text()
        self.query_one("#tail", Static).update("")

    def append(self, segments) -> str:
        """Add (text, provenance) segments: finished lines to the log, the rest to the tail;
        returns the plain text added."""
        log = self.query_one("#output", RichLog)
        added = []
        for seg, kind in segments:
            added.append(seg)
            style = render.STYLES[kind][0]
            parts = seg.split("\n")
            for part in parts[:-1]:
                self._line.append(part, style=style)
                log.write(self._line)
                self._line = Text()
            self._line.append(parts[-1], style=style)
            if len(self._line) > TAIL_MAX:
                cut = self._line.plain.rfind(" ", 0, TAIL_MAX) + 1 or TAIL_MAX
                log.write(self._line[:cut])
                self._line = self._line[cut:]
        self.query_one("#tail", Static).update(self._line)
        return "".join(added)

    def show_meter(self, info) -> dict:
        """Label the meter and add a sparkline per domain; returns {domain: [watts]}."""
        self.query_one("#energy", Static).update(f"meter: {info.label}")
        box = self.query_one("#power", Vertical)
        series = {}
        for d in info.domains:
            series[d] = []
            box.mount(Label(f"{d} W", id=f"power-label-{d}", classes="power-label"))
            box.mount(Sparkline([], id=f"power-{d}", classes="power"))
        if not info.measured:
            box.mount(Label("power: not measured"))
        return series

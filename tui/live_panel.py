"""The live-numbers panel: what is drafting, the statistics as they change, energy and power."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Label, Sparkline, Static

from olifant_mlx.engine import Stats
from olifant_mlx.tui import render

POWER_POINTS = 60


class LivePanel(VerticalScroll):
    def __init__(self):
        super().__init__(id="live")
        self.series: dict[str, list] = {}
        self.label = "not measured"

    def compose(self) -> ComposeResult:
        yield Static("drafting", classes="heading")
        yield Static("verifier loads on the first run", id="live-session")
        yield Static("statistics", classes="heading")
        yield Static(render.stats_text(Stats()), id="stats")
        yield Static("energy", classes="heading")
        yield Static("", id="energy")
        yield Vertical(id="power")

    def show_session(self, verifier: str, requested: str, resolved: str | None, k: int) -> None:
        drafter = requested if not resolved or resolved == requested else f"{requested} → {resolved}"
        self.query_one("#live-session", Static).update(f"verifier {verifier}\ndrafter {drafter}\nk {k}")

    def show_stats(self, stats, elapsed: float | None = None) -> None:
        self.query_one("#stats", Static).update(render.stats_text(stats, elapsed))

    def show_energy(self, text: str) -> None:
        self.query_one("#energy", Static).update(text)

    def show_meter(self, info) -> None:
        """Label the meter and add a power chart per domain."""
        self.label = info.label
        self.show_energy(f"meter: {info.label}")
        box = self.query_one("#power", Vertical)
        box.remove_children()
        self.series = {}
        for d in info.domains:
            self.series[d] = []
            box.mount(Label(f"{d} W", id=f"power-label-{d}", classes="power-label"))
            box.mount(Sparkline([], id=f"power-{d}", classes="power"))
        if not info.measured:
            box.mount(Label("power: not measured"))

    def add_power(self, watts: dict) -> None:
        for d, w in watts.items():
            if d not in self.series:
                continue
            series = self.series[d]
            series.append(max(w, 0.0))
            del series[:-POWER_POINTS]
            self.query_one(f"#power-{d}", Sparkline).data = list(series)
            self.query_one(f"#power-label-{d}", Label).update(f"{d} {w:6.2f} W")

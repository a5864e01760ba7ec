"""The live-numbers panel: what is drafting, the statistics as they change, energy and power.
It opens the workspace's meter and reads the live power itself (every half second while a
run is in flight); the tabs' runs hand it their numbers through the App (`app.show_chunk`,
`app.show_end`)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Label, Sparkline, Static

from olifant_mlx.conversation import short_spec
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

    def on_mount(self) -> None:
        ws = self.app.workspace
        warning = ws.open_meter()
        if warning:
            self.notify(warning, severity="warning")
        self.show_meter(ws.meter.info)
        self.set_interval(0.5, self.tick)

    def tick(self) -> None:
        """The live power, while a run is in flight (tui/workspace.py: power_tick)."""
        tick = self.app.workspace.power_tick()
        if tick is not None:
            watts, line = tick
            if watts:
                self.add_power(watts)
            if line:
                self.show_energy(line)

    def show_session(self, session, request, k: int) -> None:
        """The verifier, the drafter the last run's `request` asked for (and what it resolved
        to; without one, the session's default) and its k, here and in the header."""
        if session is None:
            return
        d, k = (request.drafting, request.options.k) if request is not None else (session.drafting, k)
        requested = short_spec(str(getattr(d.requested, "text", d.requested)))
        resolved = short_spec(d.spec.text if d.spec is not None else d.drafter.name)
        drafter = requested if not resolved or resolved == requested else f"{requested} → {resolved}"
        self.query_one("#live-session", Static).update(f"verifier {session.verifier.name}\ndrafter {drafter}\nk {k}")
        self.app.sub_title = f"{session.verifier.name} · {resolved} · k {k}"

    def show_end(self, stats, window, elapsed: float) -> None:
        """A finished run's numbers, its energy and the session that wrote it."""
        ws = self.app.workspace
        self.show_stats(stats, elapsed)
        self.show_energy(render.energy_text(window, stats.tokens, ws.meter.info.label if ws.meter else "not measured"))
        self.show_session(ws.session, ws.last_request, ws.last_k)

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

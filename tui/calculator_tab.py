"""The Calculator tab: the speedup model of olifant_mlx.measure.calc, live as you type."""
from __future__ import annotations

from olifant_mlx.tui import render
from textual import on
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Label, Static, TabPane

FIELDS = (("alpha", "α acceptance", "0.8", "number"), ("gamma", "γ draft length", "4", "integer"),
          ("c", "c cost ratio", "0.1", "number"), ("v", "verify cost", "1.0", "number"))
NARROW = 100            # narrower than this, two inputs a row and the chart below the numbers


class CalculatorTab(TabPane):
    def __init__(self):
        super().__init__("F5 Calc", id="calculator")      # 80 columns hold all seven tabs

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="calc-body"):
            with Grid(id="calc-inputs"):
                for ident, label, value, kind in FIELDS:
                    with Vertical(classes="calc-field"):
                        yield Label(label)
                        yield Input(value, type=kind, id=f"calc-{ident}", compact=True)
            yield Button("use measured (the last run's acceptance, k and costs)", id="calc-measured",
                         compact=True)
            with Horizontal(id="calc-out"):
                with Vertical(id="calc-left"):
                    yield Static("", id="calc-summary")
                    yield Static(render.FAST_PATH_LINE, id="calc-note")
                yield Static("", id="calc-chart")

    def on_mount(self) -> None:
        self.recompute()

    def on_resize(self) -> None:
        narrow = self.size.width < NARROW
        self.query_one("#calc-inputs").styles.grid_size_columns = 2 if narrow else 4
        self.query_one("#calc-out").styles.layout = "vertical" if narrow else "horizontal"

    @on(Input.Changed, "#calc-inputs Input")
    def recompute(self) -> None:
        summary = self.query_one("#calc-summary", Static)
        chart = self.query_one("#calc-chart", Static)
        try:
            a = float(self.query_one("#calc-alpha", Input).value)
            g = int(self.query_one("#calc-gamma", Input).value)
            c = float(self.query_one("#calc-c", Input).value)
            v = float(self.query_one("#calc-v", Input).value)
            result = render.calculator(a, g, c, v)
        except ValueError as e:
            summary.update(f"check the inputs: {e}")
            chart.update("")
            return
        summary.update(render.calc_summary(result, a, g, c))
        chart.update(render.calc_chart(result, g))

    def use_measured(self, stats, k: int) -> bool:
        """Fill α, γ and c from a speculative generation's stats; False if there is none."""
        from olifant_mlx.measure.calc import alpha_from_acceptance

        if stats is None or not stats.drafted or k < 1:
            return False
        self.query_one("#calc-alpha", Input).value = f"{alpha_from_acceptance(stats.acceptance, k):.3f}"
        self.query_one("#calc-gamma", Input).value = str(k)
        if stats.verify_s > 0:
            per_draft = stats.draft_s / max(stats.drafted, 1)
            per_verify = stats.verify_s / max(stats.steps, 1)
            self.query_one("#calc-c", Input).value = f"{per_draft / per_verify:.4f}"
        return True

    @on(Button.Pressed, "#calc-measured")
    def _use_measured(self) -> None:
        ws = self.app.workspace
        if not self.use_measured(ws.last_stats, ws.last_k):
            self.notify("run a speculative generation first", severity="warning")

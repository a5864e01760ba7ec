"""The Textual app: live speculative drafting, plain-vs-speculative, the calculator, models.

MLX work (loading the verifier, generating) runs in thread workers; the workers never touch
widgets and post batched messages. Nothing typed or generated is written to disk unless the
user saves it (ctrl+s, to a path they choose).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import (Button, Checkbox, DataTable, Footer, Header, Input, Label,
                             ProgressBar, RichLog, Sparkline, Static, TabbedContent, TabPane,
                             TextArea)
from textual.worker import get_current_worker

from tui import render

DEFAULT_PROMPT = ("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR "
                  "IMPLIED, INCLUDING BUT NOT LIMITED TO")
FLUSH_S = 0.05          # at most ~20 UI messages a second from a generation
TAIL_MAX = 240          # characters kept in the one-line tail before it moves to the log


def default_model_dirs() -> list[Path]:
    from olifant_mlx.tokenizers import cache_dir

    return [Path("models"), cache_dir() / "drafts"]


def find_models(dirs) -> list[Path]:
    found = []
    for d in dirs:
        d = Path(d)
        if d.is_dir():
            found.extend(sorted(p for p in d.glob("*.olif") if p.is_file()))
    return found


# ---- messages from workers -------------------------------------------------------------

@dataclass
class Chunk(Message):
    segments: list            # [(text, kind)]
    stats: str
    target: str = "generate"


@dataclass
class Status(Message):
    text: str
    loading: bool = False


@dataclass
class Done(Message):
    stats: object
    text: str
    window: object
    cancelled: bool


@dataclass
class CompareDone(Message):
    plain: tuple              # (text, Stats, Window)
    spec: tuple
    same: bool


@dataclass
class Failed(Message):
    where: str
    error: str


@dataclass
class TrainDone(Message):
    summary: dict = field(default_factory=dict)


@dataclass
class TrainProgress(Message):
    phase: str = ""
    done: int = 0
    total: int | None = None


class SaveScreen(ModalScreen):
    """Ask for a path; the only way output reaches the disk."""

    def compose(self) -> ComposeResult:
        with Vertical(id="save-box"):
            yield Label("Save the output to (nothing is saved otherwise):")
            yield Input(placeholder="/path/to/file.txt", id="save-path")
            with Horizontal():
                yield Button("Save", id="save-ok", variant="primary")
                yield Button("Cancel", id="save-cancel")

    @on(Button.Pressed, "#save-ok")
    @on(Input.Submitted, "#save-path")
    def ok(self) -> None:
        self.dismiss(self.query_one("#save-path", Input).value.strip() or None)

    @on(Button.Pressed, "#save-cancel")
    def cancel(self) -> None:
        self.dismiss(None)


class OlifantApp(App):
    TITLE = "olifant_mlx"
    SUB_TITLE = "private on-device speculative drafting"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("ctrl+g", "generate", "Generate"),
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+b", "compare", "Plain vs spec"),
        Binding("ctrl+s", "save", "Save output"),
        Binding("f2", "tab('generate')", "Generate tab", show=False),
        Binding("f3", "tab('compare')", "Compare tab", show=False),
        Binding("f4", "tab('calculator')", "Calculator tab", show=False),
        Binding("f5", "tab('models')", "Models tab", show=False),
    ]

    def __init__(self, model: str | None = None, draft: str = "ngram", k: int = 3,
                 max_tokens: int = 100, energy: str | None = None, prompt: str = DEFAULT_PROMPT,
                 session_factory=None, steps_fn=None, model_dirs=None, train_fn=None,
                 tokenizer_fn=None, meter_clock=None):
        super().__init__()
        self.model_spec = model or ""
        self.draft_spec = draft
        self.k = k
        self.max_tokens = max_tokens
        self.energy_spec = energy
        self.initial_prompt = prompt
        self.session_factory = session_factory
        self.steps_fn = steps_fn
        self.model_dirs = model_dirs
        self.train_fn = train_fn
        self.tokenizer_fn = tokenizer_fn
        self.meter_clock = meter_clock
        self._sessions = {}                 # (model, draft) -> open_session tuple
        self.meter = None
        self.meter_error = ""
        self.output_text = ""
        self.last_stats = None
        self.last_window = None
        self.last_k = k
        self.generating = False
        self._line = Text()
        self._power = {}
        self._t0 = 0.0
        self._compare_texts = {}

    # ---- layout --------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial="generate", id="tabs"):
            with TabPane("Generate", id="generate"):
                with Horizontal():
                    with VerticalScroll(id="controls"):
                        yield Label("verifier")
                        yield Input(self.model_spec, placeholder="smollm2-135m", id="model")
                        yield Label("drafter")
                        yield Input(self.draft_spec, id="draft",
                                    placeholder="none|olifant:PATH|ngram|lookup|neural:M")
                        yield Label("k (draft tokens)")
                        yield Input(str(self.k), type="integer", id="k")
                        yield Label("max tokens")
                        yield Input(str(self.max_tokens), type="integer", id="max-tokens")
                        yield Checkbox("KV cache", True, id="kv")
                        yield Button("Generate  ^g", id="go", variant="primary")
                        yield Button("Stop  esc", id="stop", variant="error")
                    with Vertical(id="centre"):
                        yield TextArea(self.initial_prompt, id="prompt")
                        yield Static(render.legend(), id="legend")
                        with Vertical(id="output-box"):
                            yield RichLog(wrap=True, markup=False, id="output")
                            yield Static("", id="tail")
                        yield Static("ready", id="status")
                    with VerticalScroll(id="side"):
                        yield Static("statistics", classes="heading")
                        yield Static(render.stats_text(_empty_stats()), id="stats")
                        yield Static("energy", classes="heading")
                        yield Static("", id="energy")
                        yield Vertical(id="power")
            with TabPane("Plain vs speculative", id="compare"):
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
            with TabPane("Calculator", id="calculator"):
                with Horizontal(id="calc-inputs"):
                    for ident, label, value, kind in (("alpha", "α acceptance", "0.8", "number"),
                                                      ("gamma", "γ draft length", "4", "integer"),
                                                      ("c", "c cost ratio", "0.1", "number"),
                                                      ("v", "verify cost", "1.0", "number")):
                        with Vertical(classes="calc-field"):
                            yield Label(label)
                            yield Input(value, type=kind, id=f"calc-{ident}")
                    yield Button("use measured", id="calc-measured")
                with Horizontal():
                    yield Static("", id="calc-summary")
                    yield Static("", id="calc-chart")
            with TabPane("Models", id="models"):
                yield DataTable(cursor_type="row", id="model-table")
                yield Button("Use selected as drafter", id="use-model")
                yield Label("train a draft model with the verifier's tokenizer")
                with Horizontal(id="train-row"):
                    yield Input(placeholder="corpus: .txt/.jsonl file or folder", id="corpus")
                    yield Input(placeholder="output name (e.g. mine)", id="train-out")
                    yield Button("Train", id="train-go")
                yield ProgressBar(total=None, show_eta=False, id="train-progress")
                yield Static("", id="train-status")
        yield Footer()

    def on_mount(self) -> None:
        self._log = self.query_one("#output", RichLog)
        self._tail = self.query_one("#tail", Static)
        self._stats = self.query_one("#stats", Static)
        self._status = self.query_one("#status", Static)
        self.query_one("#train-progress").display = False
        self.query_one("#model-table", DataTable).add_columns("model", "folder", "size")
        self._open_meter()
        self.refresh_models()
        self.recompute_calc()
        self.set_interval(0.5, self._tick_power)

    def get_system_commands(self, screen):
        # privacy: Textual's "Screenshot" command writes the screen (prompts, output) to disk
        for cmd in super().get_system_commands(screen):
            if "screenshot" not in cmd.title.lower():
                yield cmd

    # ---- energy ---------------------------------------------------------------------

    def _open_meter(self) -> None:
        from olifant_mlx.energy import EnergyError, open_meter

        opts = {"clock": self.meter_clock} if self.meter_clock else {}
        try:
            self.meter = open_meter(self.energy_spec, **opts)
        except (EnergyError, ValueError, OSError) as e:
            self.meter_error = str(e)
            self.notify(f"energy meter: {e}; not measuring", severity="warning")
            self.meter = open_meter("none")
        info = self.meter.info
        self.query_one("#energy", Static).update(f"meter: {info.label}")
        box = self.query_one("#power", Vertical)
        for d in info.domains:
            self._power[d] = []
            box.mount(Label(f"{d} W", id=f"power-label-{d}", classes="power-label"))
            box.mount(Sparkline([], id=f"power-{d}", classes="power"))
        if not info.measured:
            box.mount(Label("power: not measured"))

    def _tick_power(self) -> None:
        if not self.generating or self.meter is None or not self.meter.info.measured:
            return
        p = self.meter.power()
        if not p.watts:
            return
        for d, w in p.watts.items():
            if d not in self._power:
                continue
            series = self._power[d]
            series.append(max(w, 0.0))
            del series[:-60]
            self.query_one(f"#power-{d}", Sparkline).data = list(series)
            self.query_one(f"#power-label-{d}", Label).update(f"{d} {w:6.2f} W")

    # ---- generation -----------------------------------------------------------------

    def _settings(self):
        text = self.query_one("#prompt", TextArea).text
        if not text.strip():
            raise ValueError("the prompt is empty")
        try:
            k = int(self.query_one("#k", Input).value or 0)
            max_tokens = int(self.query_one("#max-tokens", Input).value or 0)
        except ValueError:
            raise ValueError("k and max tokens must be whole numbers") from None
        if not 0 <= k <= 64:
            raise ValueError(f"k must be between 0 and 64, got {k}")
        model = self.query_one("#model", Input).value.strip() or None
        draft = self.query_one("#draft", Input).value.strip() or "none"
        return dict(prompt=text, k=k, max_tokens=max_tokens, model=model, draft=draft,
                    kv=self.query_one("#kv", Checkbox).value)

    def _ready_settings(self):
        """The settings for a new run, or None (with a notification) when one cannot start."""
        if self.generating:
            self.notify("already generating; esc stops it", severity="warning")
            return None
        try:
            return self._settings()
        except ValueError as e:
            self.notify(str(e), severity="error")
            return None

    def action_generate(self) -> None:
        s = self._ready_settings()
        if s is None:
            return
        self._log.clear()
        self._line = Text()
        self._tail.update("")
        self.output_text = ""
        self.last_k = s["k"]
        self.generating = True
        self._t0 = time.perf_counter()
        if self.meter is not None and self.meter.info.measured:
            self.meter.power()               # reset the live-power baseline
        self._generate_worker(s)

    def action_compare(self) -> None:
        s = self._ready_settings()
        if s is None:
            return
        self.query_one("#tabs", TabbedContent).active = "compare"
        self._compare_texts = {}
        self.query_one("#compare-plain", Static).update("")
        self.query_one("#compare-spec", Static).update("")
        self.query_one("#compare-result", Static).update("running plain, then speculative ...")
        self.generating = True
        self._compare_worker(s)

    def action_stop(self) -> None:
        if self.screen is not self.screen_stack[0]:
            self.pop_screen()
            return
        if self.generating:
            self.workers.cancel_group(self, "generate")
            self._status.update("stopping ...")

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab

    def _session(self, model, draft):
        """(model, mlx-lm tokenizer, our tokenizer, drafter, name); call on a worker thread."""
        key = (model, draft)
        if key not in self._sessions:
            factory = self.session_factory
            if factory is None:
                from olifant_mlx.decode_cli import open_session as factory
            self.post_message(Status(f"loading verifier {model or '(default)'} and drafter "
                                     f"{draft} ...", loading=True))
            self._sessions = {key: factory(model, draft)}   # one session held at a time
        return self._sessions[key]

    def _run(self, worker, session, drafter, s, target):
        """One generation on the worker thread: (ids, text, Stats, Window, cancelled)."""
        from olifant_mlx.engine import Stats, generate_steps

        model, tok = session[0], session[1]
        steps_fn = self.steps_fn or generate_steps
        ids = tok.encode(s["prompt"])
        detok = tok.detokenizer
        detok.reset()
        stats = Stats()
        tokens, pending, kind = [], [], "plain"
        last = time.perf_counter()
        start = self.meter.start() if self.meter else None
        cancelled = False
        for step in steps_fn(model, ids, drafter, k=s["k"], max_tokens=s["max_tokens"],
                             kv_cache=s["kv"], eos_ids=tok.eos_token_ids,
                             bos_id=tok.bos_token_id, stats=stats):
            tokens.extend(step.emitted)
            for t, kind in zip(step.emitted, render.step_kinds(step)):
                detok.add_token(t)
                seg = detok.last_segment          # reading it clears it (mlx-lm)
                if seg:
                    pending.append((seg, kind))
            now = time.perf_counter()
            if now - last >= FLUSH_S:
                self.post_message(Chunk(pending, render.stats_text(stats, now - self._t0), target))
                pending, last = [], now
            if worker.is_cancelled:
                cancelled = True
                break
        detok.finalize()
        seg = detok.last_segment
        if seg:
            pending.append((seg, kind))
        window = self.meter.between(start, self.meter.mark()) if self.meter else None
        if pending:
            self.post_message(Chunk(pending, render.stats_text(stats, time.perf_counter() - self._t0),
                                    target))
        return tokens, detok.text, stats, window, cancelled

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    def _generate_worker(self, s) -> None:
        worker = get_current_worker()
        try:
            session = self._session(s["model"], s["draft"])
            self.post_message(Status(f"generating with {session[4]}, drafter {session[3].name}, "
                                     f"k={s['k']} ..."))
            _, text, stats, window, cancelled = self._run(worker, session, session[3], s, "generate")
            self.post_message(Done(stats, text, window, cancelled))
        except Exception as e:     # shown in the UI, never as a traceback
            self.post_message(Failed("generation", f"{type(e).__name__}: {e}"))

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    def _compare_worker(self, s) -> None:
        from olifant_mlx.drafters import NoDrafter

        worker = get_current_worker()
        try:
            session = self._session(s["model"], s["draft"])
            self._t0 = time.perf_counter()
            p_ids, p_text, p_stats, p_win, c1 = self._run(worker, session, NoDrafter(),
                                                          dict(s, k=0), "compare-plain")
            if c1:
                raise InterruptedError("stopped")
            self._t0 = time.perf_counter()
            s_ids, s_text, s_stats, s_win, c2 = self._run(worker, session, session[3], s,
                                                          "compare-spec")
            if c2:
                raise InterruptedError("stopped")
            self.post_message(CompareDone((p_text, p_stats, p_win), (s_text, s_stats, s_win),
                                          p_ids == s_ids))
        except InterruptedError:
            self.post_message(Failed("compare", "stopped"))
        except Exception as e:
            self.post_message(Failed("compare", f"{type(e).__name__}: {e}"))

    # ---- message handlers (UI thread) -----------------------------------------------

    def on_status(self, m: Status) -> None:
        self._status.update(m.text)
        self.query_one("#output-box").loading = m.loading

    def on_chunk(self, m: Chunk) -> None:
        self.query_one("#output-box").loading = False
        if m.target != "generate":
            t = self._compare_texts.setdefault(m.target, Text())
            for seg, kind in m.segments:
                t.append(seg, style=render.STYLES[kind][0])
            self.query_one(f"#{m.target}", Static).update(t)
            return
        for seg, kind in m.segments:
            self.output_text += seg
            style = render.STYLES[kind][0]
            parts = seg.split("\n")
            for part in parts[:-1]:
                self._line.append(part, style=style)
                self._log.write(self._line)
                self._line = Text()
            self._line.append(parts[-1], style=style)
            if len(self._line) > TAIL_MAX:
                cut = self._line.plain.rfind(" ", 0, TAIL_MAX) + 1 or TAIL_MAX
                self._log.write(self._line[:cut])
                self._line = self._line[cut:]
        self._tail.update(self._line)
        self._stats.update(m.stats)

    def on_done(self, m: Done) -> None:
        self.generating = False
        self.query_one("#output-box").loading = False
        self.output_text = m.text
        self.last_stats, self.last_window = m.stats, m.window
        elapsed = time.perf_counter() - self._t0
        self._stats.update(render.stats_text(m.stats, elapsed))
        label = self.meter.info.label if self.meter else "not measured"
        self.query_one("#energy", Static).update(render.energy_text(m.window, m.stats.tokens, label))
        reason = "stopped" if m.cancelled else f"done ({m.stats.stop_reason or 'end'})"
        self._status.update(f"{reason}: {m.stats.tokens} tokens")

    def on_compare_done(self, m: CompareDone) -> None:
        self.generating = False
        (_, ps, pw), (_, ss, sw) = m.plain, m.spec
        self.query_one("#compare-result", Static).update(
            render.compare_text(ps, ss, pw.total_j if pw else None, sw.total_j if sw else None,
                                m.same))
        self.last_stats = ss

    def on_failed(self, m: Failed) -> None:
        self.generating = False
        self.query_one("#output-box").loading = False
        self.query_one("#train-progress").display = False
        self._status.update(f"{m.where} failed: {m.error}")
        if m.where == "compare":
            self.query_one("#compare-result", Static).update(f"{m.where}: {m.error}")
        if m.where == "training":
            self.query_one("#train-status", Static).update(f"training failed: {m.error}")
        self.notify(m.error, title=f"{m.where} failed", severity="error", timeout=8)

    # ---- buttons --------------------------------------------------------------------

    @on(Button.Pressed, "#go")
    def _go(self) -> None:
        self.action_generate()

    @on(Button.Pressed, "#stop")
    def _stop(self) -> None:
        self.action_stop()

    @on(Button.Pressed, "#compare-go")
    def _compare(self) -> None:
        self.action_compare()

    # ---- save -----------------------------------------------------------------------

    def action_save(self) -> None:
        if not self.output_text:
            self.notify("nothing to save yet", severity="warning")
            return

        def write(path):
            if not path:
                return
            try:
                Path(path).expanduser().write_text(self.output_text)
            except OSError as e:
                self.notify(f"cannot save: {e}", severity="error")
                return
            self.notify(f"saved to {path}")

        self.push_screen(SaveScreen(), write)

    # ---- calculator -----------------------------------------------------------------

    @on(Input.Changed, "#calc-inputs Input")
    def recompute_calc(self) -> None:
        summary = self.query_one("#calc-summary", Static)
        chart = self.query_one("#calc-chart", Static)
        try:
            a = float(self.query_one("#calc-alpha", Input).value)
            g = int(self.query_one("#calc-gamma", Input).value)
            c = float(self.query_one("#calc-c", Input).value)
            v = float(self.query_one("#calc-v", Input).value)
            if g < 1:
                raise ValueError("γ must be at least 1")
            result = render.calculator(a, g, c, v)
        except ValueError as e:
            summary.update(f"check the inputs: {e}")
            chart.update("")
            return
        summary.update(render.calc_summary(result, a, g, c))
        chart.update(render.calc_chart(result, g))

    @on(Button.Pressed, "#calc-measured")
    def use_measured(self) -> None:
        from olifant_mlx.calc import alpha_from_acceptance

        s = self.last_stats
        if s is None or not s.drafted or self.last_k < 1:
            self.notify("run a speculative generation first", severity="warning")
            return
        self.query_one("#calc-alpha", Input).value = f"{alpha_from_acceptance(s.acceptance, self.last_k):.3f}"
        self.query_one("#calc-gamma", Input).value = str(self.last_k)
        if s.verify_s > 0:
            per_draft = s.draft_s / max(s.drafted, 1)
            per_verify = s.verify_s / max(s.steps, 1)
            self.query_one("#calc-c", Input).value = f"{per_draft / per_verify:.4f}"

    # ---- models ---------------------------------------------------------------------

    def refresh_models(self) -> None:
        table = self.query_one("#model-table", DataTable)
        table.clear()
        dirs = self.model_dirs if self.model_dirs is not None else default_model_dirs()
        for p in find_models(dirs):
            table.add_row(p.name, str(p.parent), f"{p.stat().st_size / 1e6:.2f} MB", key=str(p))
        if not table.row_count:
            self.query_one("#train-status", Static).update(
                "no draft models found in " + ", ".join(str(d) for d in dirs))

    @on(Button.Pressed, "#use-model")
    def use_model(self) -> None:
        table = self.query_one("#model-table", DataTable)
        if not table.row_count:
            self.notify("no model to use", severity="warning")
            return
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        self.query_one("#draft", Input).value = f"olifant:{key}"
        self.notify(f"drafter set to olifant:{key}")

    @on(Button.Pressed, "#train-go")
    def train_model(self) -> None:
        corpus = self.query_one("#corpus", Input).value.strip()
        name = self.query_one("#train-out", Input).value.strip()
        if not corpus or not name:
            self.notify("give a corpus path and an output name", severity="error")
            return
        if "/" in name:
            out = Path(name)
        else:
            dirs = self.model_dirs if self.model_dirs is not None else default_model_dirs()
            out = Path(dirs[-1]) / (name if name.endswith(".olif") else name + ".olif")
        model = self.query_one("#model", Input).value.strip() or None
        self.query_one("#train-progress").display = True
        self.query_one("#train-status", Static).update(f"training {out.name} from {corpus} ...")
        self._train_worker(corpus, out, model)

    @work(thread=True, exclusive=True, group="train", exit_on_error=False)
    def _train_worker(self, corpus, out, model) -> None:
        try:
            tok_fn = self.tokenizer_fn
            if tok_fn is None:
                from olifant_mlx.tokenizers import load_tokenizer
                from olifant_mlx.verifier import default_model

                def tok_fn(spec):
                    return load_tokenizer(spec or default_model())
            train = self.train_fn
            if train is None:
                from olifant_mlx.train import train
            tokenizer = tok_fn(model)
            out.parent.mkdir(parents=True, exist_ok=True)
            last = [0.0]

            def progress(phase, done, total):
                now = time.monotonic()
                if now - last[0] >= 0.1 or (total and done >= total):   # at most ~10 a second
                    last[0] = now
                    self.post_message(TrainProgress(phase, done, total))

            summary = train([corpus], tokenizer, str(out), show_progress=False, on_progress=progress)
            self.post_message(TrainDone(dict(summary, out=str(out))))
        except Exception as e:
            self.post_message(Failed("training", f"{type(e).__name__}: {e}"))

    def on_train_progress(self, m: TrainProgress) -> None:
        bar = self.query_one("#train-progress", ProgressBar)
        bar.update(total=m.total, progress=m.done)
        self.query_one("#train-status", Static).update(f"training: {m.phase}")

    def on_train_done(self, m: TrainDone) -> None:
        self.query_one("#train-progress").display = False
        s = m.summary
        self.query_one("#train-status", Static).update(
            f"trained {s['out']}: {s.get('nodes', 0):,} nodes from {s.get('instances', 0):,} "
            f"instances")
        self.notify(f"draft model saved to {s['out']}")
        self.refresh_models()


def _empty_stats():
    from olifant_mlx.engine import Stats

    return Stats()

"""The Textual app: live speculative drafting, plain-vs-speculative, the calculator, models.

The App keeps the bindings, the workers and the shared Session; each tab is its own module.
MLX work (loading the verifier, generating) runs in thread workers, which never touch widgets
and post batched messages. Changing the drafter never reloads the verifier. Nothing typed or
generated is written to disk unless the user saves it (ctrl+s, to a path they choose).
"""
from __future__ import annotations

import time
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import (Button, Checkbox, Footer, Header, Input, Label, ProgressBar, Sparkline,
                             Static, TabbedContent, TextArea)
from textual.worker import get_current_worker

from olifant_mlx.tui import render
from olifant_mlx.tui.calculator_tab import CalculatorTab
from olifant_mlx.tui.compare_tab import CompareTab
from olifant_mlx.tui.generate_tab import GenerateTab
from olifant_mlx.tui.messages import Chunk, CompareDone, Done, Failed, Status, TrainDone, TrainProgress
from olifant_mlx.tui.models_tab import ModelsTab
from olifant_mlx.tui.save import SaveScreen

DEFAULT_PROMPT = ("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR "
                  "IMPLIED, INCLUDING BUT NOT LIMITED TO")
FLUSH_S = 0.05          # at most ~20 UI messages a second from a generation


def default_session(model, meter):
    """A Session on a freshly loaded verifier (runs on a worker thread)."""
    from olifant_mlx.engine import Session
    from olifant_mlx.verifier import load_verifier

    return Session(load_verifier(model), "none", meter=meter)


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
                 session_factory=None, model_dirs=None, train_fn=None, tokenizer_fn=None,
                 meter_clock=None):
        super().__init__()
        self.model_spec = model or ""
        self.draft_spec = draft
        self.k = k
        self.max_tokens = max_tokens
        self.energy_spec = energy
        self.initial_prompt = prompt
        self.session_factory = session_factory or default_session
        self.model_dirs = model_dirs
        self.train_fn = train_fn
        self.tokenizer_fn = tokenizer_fn
        self.meter_clock = meter_clock
        self.session = None                 # the shared Session (one verifier held at a time)
        self._session_model = None
        self.meter = None
        self.output_text = ""
        self.last_stats = None
        self.last_window = None
        self.last_k = k
        self.generating = False
        self._power = {}
        self._t0 = 0.0
        self._compare_texts = {}

    # ---- layout --------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial="generate", id="tabs"):
            yield GenerateTab(self.model_spec, self.draft_spec, self.k, self.max_tokens,
                              self.initial_prompt)
            yield CompareTab()
            yield CalculatorTab()
            yield ModelsTab(self.model_dirs)
        yield Footer()

    def on_mount(self) -> None:
        self._generate = self.query_one(GenerateTab)
        self._stats = self.query_one("#stats", Static)
        self._status = self.query_one("#status", Static)
        self._open_meter()
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
            self.notify(f"energy meter: {e}; not measuring", severity="warning")
            self.meter = open_meter("none")
        self._power = self._generate.show_meter(self.meter.info)

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

    # ---- settings and the session --------------------------------------------------

    def _settings(self):
        """The Generate tab's settings, validated (GenerationOptions) before anything runs."""
        from olifant_mlx.drafters import parse_spec
        from olifant_mlx.engine import GenerationOptions

        text = self.query_one("#prompt", TextArea).text
        if not text.strip():
            raise ValueError("the prompt is empty")
        try:
            k = int(self.query_one("#k", Input).value or 0)
            max_tokens = int(self.query_one("#max-tokens", Input).value or 0)
        except ValueError:
            raise ValueError("k and max tokens must be whole numbers") from None
        options = GenerationOptions(k=k, max_tokens=max_tokens,
                                    kv_cache=self.query_one("#kv", Checkbox).value)
        draft = parse_spec(self.query_one("#draft", Input).value.strip() or "none")
        model = self.query_one("#model", Input).value.strip() or None
        return dict(prompt=text, options=options, model=model, draft=draft)

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

    def _session_for(self, model, draft):
        """The shared Session for `model` with drafter `draft`; loads the verifier only when the
        model changes. Call on a worker thread."""
        if self.session is None or self._session_model != model:
            self.post_message(Status(f"loading verifier {model or '(default)'} ...", loading=True))
            self.session = None
            self.session = self.session_factory(model, self.meter)
            self._session_model = model
        if self.session.spec != draft:
            self.session.set_drafter(draft)
        return self.session

    # ---- generation -----------------------------------------------------------------

    def action_generate(self) -> None:
        s = self._ready_settings()
        if s is None:
            return
        self._generate.clear_output()
        self.output_text = ""
        self.last_k = s["options"].k
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

    def _run(self, worker, session, s, target, drafter=None, options=None):
        """One generation on the worker thread: (ids, text, Stats, Window, cancelled)."""
        tokens, text, pending = [], [], []
        last_flush = time.perf_counter()
        final = None
        for r in session.stream(s["prompt"], options or s["options"], drafter,
                                should_stop=lambda: worker.is_cancelled):
            tokens.extend(r.tokens)
            text.append(r.text)
            pending.extend(r.segments)
            now = time.perf_counter()
            if now - last_flush >= FLUSH_S or r.finish_reason:
                self.post_message(Chunk(pending, render.stats_text(r.stats, now - self._t0), target))
                pending, last_flush = [], now
            final = r
        return tokens, "".join(text), final.stats, final.energy, final.finish_reason == "stopped"

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    def _generate_worker(self, s) -> None:
        worker = get_current_worker()
        try:
            session = self._session_for(s["model"], s["draft"])
            self.post_message(Status(f"generating with {session.verifier.name}, drafter "
                                     f"{session.drafter.name}, k={s['options'].k} ..."))
            _, text, stats, window, cancelled = self._run(worker, session, s, "generate")
            self.post_message(Done(stats, text, window, cancelled))
        except Exception as e:     # shown in the UI, never as a traceback
            self.post_message(Failed("generation", f"{type(e).__name__}: {e}"))

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    def _compare_worker(self, s) -> None:
        from olifant_mlx.drafters import NoDrafter

        worker = get_current_worker()
        try:
            session = self._session_for(s["model"], s["draft"])
            self._t0 = time.perf_counter()
            p_ids, p_text, p_stats, p_win, c1 = self._run(
                worker, session, s, "compare-plain", NoDrafter(), s["options"].replace(k=0))
            if c1:
                raise InterruptedError("stopped")
            self._t0 = time.perf_counter()
            s_ids, s_text, s_stats, s_win, c2 = self._run(worker, session, s, "compare-spec")
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
            from rich.text import Text

            t = self._compare_texts.setdefault(m.target, Text())
            for seg, kind in m.segments:
                t.append(seg, style=render.STYLES[kind][0])
            self.query_one(f"#{m.target}", Static).update(t)
            return
        self.output_text += self._generate.append(m.segments)
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
            from olifant_mlx.files import write_atomic

            try:
                write_atomic(Path(path).expanduser(), self.output_text)
            except OSError as e:
                self.notify(f"cannot save: {e}", severity="error")
                return
            self.notify(f"saved to {path}")

        self.push_screen(SaveScreen(), write)

    # ---- calculator -----------------------------------------------------------------

    @on(Button.Pressed, "#calc-measured")
    def use_measured(self) -> None:
        if not self.query_one(CalculatorTab).use_measured(self.last_stats, self.last_k):
            self.notify("run a speculative generation first", severity="warning")

    # ---- models ---------------------------------------------------------------------

    @on(Button.Pressed, "#use-model")
    def use_model(self) -> None:
        key = self.query_one(ModelsTab).selected()
        if key is None:
            self.notify("no model to use", severity="warning")
            return
        self.query_one("#draft", Input).value = f"olifant:{key}"
        self.notify(f"drafter set to olifant:{key}")

    @on(Button.Pressed, "#train-go")
    def train_model(self) -> None:
        corpus = self.query_one("#corpus", Input).value.strip()
        name = self.query_one("#train-out", Input).value.strip()
        if not corpus or not name:
            self.notify("give a corpus path and an output name", severity="error")
            return
        out = self.query_one(ModelsTab).output_path(name)
        model = self.query_one("#model", Input).value.strip() or None
        self.query_one("#train-progress").display = True
        self.query_one("#train-status", Static).update(f"training {out.name} from {corpus} ...")
        self._train_worker(corpus, out, model)

    @work(thread=True, exclusive=True, group="train", exit_on_error=False)
    def _train_worker(self, corpus, out, model) -> None:
        try:
            tok_fn = self.tokenizer_fn
            if tok_fn is None:
                from olifant_mlx.verifier import default_model, load_tokenizer

                def tok_fn(spec):
                    return load_tokenizer(spec or default_model())
            train = self.train_fn
            if train is None:
                from olifant_mlx.draftmodel.train import train
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
        self.query_one(ModelsTab).refresh_models()

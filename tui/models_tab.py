"""The Models tab: the draft models and precedent libraries on this machine
(olifant_mlx.catalog, olifant_mlx.library), each with the tokenizer it was made for and whether
that is the verifier's; training one with the verifier's tokenizer. A model or library made for
another tokenizer is marked here and refused before anything is generated with it. The tab
runs its own workers (the verifier's tokenizer alone, to mark what fits; training) and handles
what they post; the messages of training are defined here, beside it."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from olifant_mlx.tui import workers
from olifant_mlx.tui.messages import Failed, TokenizerKnown
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Static, TabPane

from olifant_mlx.teardown import on_own_thread


def default_model_dirs() -> list[Path]:
    from olifant_mlx.catalog import draft_model_dirs

    return draft_model_dirs()


def fit_text(entry, identity) -> str:
    """Whether a draft model fits the verifier's tokenizer, in words (never colour alone)."""
    if identity is None:
        return "? verifier not known yet"
    if entry.fits(identity):
        return "✓ fits"
    return "✗ no: another tokenizer"


class ModelsTab(TabPane):
    """The draft-model list and the training form; it trains on its own worker, with the
    workspace's tokenizer and trainer (self.app.workspace: tokenizer(), train_fn)."""

    @dataclass
    class Trained(Message):
        summary: dict = field(default_factory=dict)

    @dataclass
    class Progress(Message):
        phase: str = ""
        done: int = 0
        total: int | None = None

    def __init__(self, model_dirs):
        super().__init__("F6 Models", id="models")
        self.model_dirs = model_dirs
        self.identity = None           # the verifier's tokenizer, once known
        self.entries = {}

    @property
    def dirs(self) -> list:
        return self.model_dirs if self.model_dirs is not None else default_model_dirs()

    def compose(self) -> ComposeResult:
        yield Static("", id="models-about")
        yield DataTable(cursor_type="row", id="model-table")
        with Horizontal(id="models-buttons"):
            yield Button("Use as drafter (olifant)", id="use-model", compact=True)
            yield Button("Use in hybrid (adaptive)", id="use-hybrid", compact=True)
            yield Button("Refresh", id="models-refresh", compact=True)
        yield Label("train a draft model with the verifier's tokenizer")
        with Horizontal(id="train-row"):
            yield Input(placeholder="corpus: .txt/.jsonl file or folder", id="corpus", compact=True)
            yield Input(placeholder="output name (e.g. mine)", id="train-out", compact=True)
            yield Button("Train", id="train-go", compact=True)
        yield ProgressBar(total=None, show_eta=False, id="train-progress")
        yield Static("", id="train-status")

    def on_mount(self) -> None:
        self.query_one("#train-progress").display = False
        self.query_one("#model-table", DataTable).add_columns(
            "model", "trained for", "fits the verifier", "instances", "size", "folder")
        self.refresh_models()
        ws = self.app.workspace        # the verifier's tokenizer alone, to mark what fits
        self.run_worker(partial(workers.tokenizer, ws, ws.model_spec, self.post_message),
                        name="tokenizer", group="tokenizer", thread=True, exit_on_error=False)

    def on_tokenizer_known(self, m: TokenizerKnown) -> None:
        ws = self.app.workspace
        if ws.identity is None and m.model == ws.model_spec:
            self.set_identity(m.identity)

    def set_identity(self, identity) -> None:
        self.identity = identity
        self.refresh_models()

    def refresh_models(self) -> None:
        from olifant_mlx.catalog import draft_models
        from olifant_mlx.library import list_libraries

        table = self.query_one("#model-table", DataTable)
        table.clear()
        self.entries = {}
        for e in draft_models(self.dirs):
            self.entries[str(e.path)] = e
            table.add_row(e.path.name, f"{e.tokenizer} ({e.vocab_size:,})", fit_text(e, self.identity),
                          f"{e.instances:,}", f"{e.size / 1e6:.2f} MB", str(e.path.parent),
                          key=str(e.path))
        for lib in list_libraries():          # a library drafts as `library:NAME`
            key, made_for, d = f"library:{lib.name}", lib.meta.get("tokenizer", {}), lib.as_dict()
            self.entries[key] = lib
            table.add_row(key, f"{made_for.get('name')} ({made_for.get('vocab_size', 0):,})",
                          fit_text(lib, self.identity), f"{lib.tokens:,} tokens", f"{d['size'] / 1e6:.2f} MB",
                          str(d.get("folder", "")), key=key)
        verifier = self.identity.name if self.identity is not None else "the verifier (not loaded yet)"
        self.query_one("#models-about", Static).update(
            f"draft models in {', '.join(str(d) for d in self.dirs)} and precedent libraries "
            f"(library:NAME); marked for {verifier}")
        if not table.row_count:
            self.query_one("#train-status", Static).update(
                "no draft models found in " + ", ".join(str(d) for d in self.dirs)
                + "; no precedent libraries (`library build NAME FOLDER`)")

    def selected(self):
        """The highlighted DraftModelEntry, or None."""
        table = self.query_one("#model-table", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.entries.get(key)

    def output_path(self, name: str) -> Path:
        if "/" in name:
            return Path(name)
        return Path(self.dirs[-1]) / (name if name.endswith(".olif") else name + ".olif")

    @on(Button.Pressed, "#use-model")
    @on(Button.Pressed, "#use-hybrid")
    def use_model(self, event: Button.Pressed) -> None:
        from olifant_mlx.tui.settings_tab import SettingsTab

        entry = self.selected()
        if entry is None:
            self.notify("no draft model to use", severity="warning")
            return
        library = getattr(entry, "meta", None) is not None     # a precedent library, not an .olif
        if self.identity is not None and not entry.fits(self.identity):
            made_for = entry.meta.get("tokenizer", {}).get("name") if library else entry.tokenizer
            self.notify(f"{entry.name if library else entry.path.name} was made for {made_for}, not the "
                        f"verifier's {self.identity.name}: not used", severity="error")
            return
        if library:                  # its own drafter: the adaptive hybrid over its IGTree and index
            spec = f"library:{entry.name}"
        else:
            spec = f"olifant:{entry.path}" if event.button.id == "use-model" else f"adaptive:hybrid:{entry.path}"
        self.app.query_one(SettingsTab).use_drafter(spec)
        self.notify(f"drafter set to {spec} (the verifier stays loaded)")

    @on(Button.Pressed, "#models-refresh")
    def _refresh(self) -> None:
        self.refresh_models()

    @on(Button.Pressed, "#train-go")
    def train_model(self) -> None:
        corpus = self.query_one("#corpus", Input).value.strip()
        name = self.query_one("#train-out", Input).value.strip()
        if not corpus or not name:
            self.notify("give a corpus path and an output name", severity="error")
            return
        out = self.output_path(name)
        from olifant_mlx.tui.settings_tab import SettingsTab

        model = self.app.query_one(SettingsTab).model.values["model"]
        self.query_one("#train-progress").display = True
        self.query_one("#train-status", Static).update(f"training {out.name} from {corpus} ...")
        self._train_worker(corpus, out, model)

    @work(thread=True, exclusive=True, group="train", exit_on_error=False)
    @on_own_thread           # MLX never runs on the pool's thread: see olifant_mlx.teardown
    def _train_worker(self, corpus, out, model) -> None:
        try:
            workspace = self.app.workspace
            train = workspace.train_fn
            if train is None:
                from olifant_mlx.draftmodel.train import train
            tokenizer = workspace.tokenizer(model)
            out.parent.mkdir(parents=True, exist_ok=True)
            last = [0.0]

            def progress(phase, done, total):
                now = time.monotonic()
                if now - last[0] >= 0.1 or (total and done >= total):   # at most ~10 a second
                    last[0] = now
                    self.post_message(self.Progress(phase, done, total))

            from olifant_mlx.draftmodel.documents import reporting

            with reporting() as files:       # a folder's files: each read or skipped, and why
                summary = train([corpus], tokenizer, str(out), show_progress=False, on_progress=progress)
            self.post_message(self.Trained(dict(summary, out=str(out), files=files.as_dict())))
        except Exception as e:      # shown here, never as a traceback
            self.post_message(Failed("training", f"{type(e).__name__}: {e}"))

    def on_models_tab_progress(self, m: ModelsTab.Progress) -> None:
        bar = self.query_one("#train-progress", ProgressBar)
        bar.update(total=m.total, progress=m.done)
        self.query_one("#train-status", Static).update(f"training: {m.phase}")

    def on_models_tab_trained(self, m: ModelsTab.Trained) -> None:
        self.query_one("#train-progress").display = False
        s = m.summary
        files = s.get("files") or {}
        skipped = [f"{os.path.basename(f['path'])} ({f['reason']})" for f in files.get("files", ())
                   if f["status"] == "skipped"]
        self.query_one("#train-status", Static).update(
            f"trained {s['out']}: {s.get('nodes', 0):,} nodes from {s.get('instances', 0):,} "
            f"instances" + (f"; {files['read']} files read, {len(skipped)} skipped: " + "; ".join(skipped)
                            if skipped else ""))
        self.notify(f"draft model saved to {s['out']}")
        self.refresh_models()

    def on_failed(self, m: Failed) -> None:
        self.query_one("#train-progress").display = False
        self.query_one("#train-status", Static).update(f"training failed: {m.error}")
        self.notify(m.error, title="training failed", severity="error", timeout=8)

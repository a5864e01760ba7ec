"""The Models tab: the draft models on this machine (olifant_mlx.catalog), each with the
tokenizer it was trained for and whether that is the verifier's; training one with the
verifier's tokenizer. A model trained for another tokenizer is marked here and refused
before anything is generated with it."""
from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Static, TabPane


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

    def set_identity(self, identity) -> None:
        self.identity = identity
        self.refresh_models()

    def refresh_models(self) -> None:
        from olifant_mlx.catalog import draft_models

        table = self.query_one("#model-table", DataTable)
        table.clear()
        self.entries = {}
        for e in draft_models(self.dirs):
            self.entries[str(e.path)] = e
            table.add_row(e.path.name, f"{e.tokenizer} ({e.vocab_size:,})", fit_text(e, self.identity),
                          f"{e.instances:,}", f"{e.size / 1e6:.2f} MB", str(e.path.parent),
                          key=str(e.path))
        verifier = self.identity.name if self.identity is not None else "the verifier (not loaded yet)"
        self.query_one("#models-about", Static).update(
            f"draft models in {', '.join(str(d) for d in self.dirs)}; marked for {verifier}")
        if not table.row_count:
            self.query_one("#train-status", Static).update(
                "no draft models found in " + ", ".join(str(d) for d in self.dirs))

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

"""The Models tab: draft models found on disk, and training one with the verifier's tokenizer."""
from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Static, TabPane


def default_model_dirs() -> list[Path]:
    from olifant_mlx.files import cache_dir

    return [Path("models"), cache_dir() / "drafts"]


def find_models(dirs) -> list[Path]:
    found = []
    for d in dirs:
        d = Path(d)
        if d.is_dir():
            found.extend(sorted(p for p in d.glob("*.olif") if p.is_file()))
    return found


class ModelsTab(TabPane):
    def __init__(self, model_dirs):
        super().__init__("Models", id="models")
        self.model_dirs = model_dirs

    @property
    def dirs(self) -> list:
        return self.model_dirs if self.model_dirs is not None else default_model_dirs()

    def compose(self) -> ComposeResult:
        yield DataTable(cursor_type="row", id="model-table")
        yield Button("Use selected as drafter", id="use-model")
        yield Label("train a draft model with the verifier's tokenizer")
        with Horizontal(id="train-row"):
            yield Input(placeholder="corpus: .txt/.jsonl file or folder", id="corpus")
            yield Input(placeholder="output name (e.g. mine)", id="train-out")
            yield Button("Train", id="train-go")
        yield ProgressBar(total=None, show_eta=False, id="train-progress")
        yield Static("", id="train-status")

    def on_mount(self) -> None:
        self.query_one("#train-progress").display = False
        self.query_one("#model-table", DataTable).add_columns("model", "folder", "size")
        self.refresh_models()

    def refresh_models(self) -> None:
        table = self.query_one("#model-table", DataTable)
        table.clear()
        for p in find_models(self.dirs):
            table.add_row(p.name, str(p.parent), f"{p.stat().st_size / 1e6:.2f} MB", key=str(p))
        if not table.row_count:
            self.query_one("#train-status", Static).update(
                "no draft models found in " + ", ".join(str(d) for d in self.dirs))

    def selected(self) -> str | None:
        table = self.query_one("#model-table", DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def output_path(self, name: str) -> Path:
        if "/" in name:
            return Path(name)
        return Path(self.dirs[-1]) / (name if name.endswith(".olif") else name + ".olif")

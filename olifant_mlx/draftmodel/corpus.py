"""Corpora for draft-model training: documents in, token batches out.

Sources (`spec`):
- `.txt` files, documents separated by blank lines; `.jsonl` files, one
  document per line in a text field; either may be `.gz`, `.xz` or `.bz2`;
- Word, PDF, OpenDocument, RTF, HTML, e-mail and Markdown files, one document
  each (`documents.py`, the `[documents]` extra);
- a directory means every file in it, sorted: each one read, or skipped with
  the reason in the run's `documents.Report` (the hook at the end);
- `builtin:licenses`: the licence texts of the installed Python packages —
  legal text that every installation carries, the embedded default;
- `name[:config]:split`: a Hugging Face dataset, when `datasets` is installed.

Text stays as the verifier sees it: line breaks and spacing inside a document
are kept (verifiers emit newlines; a model trained on collapsed whitespace
could never draft them). Each document starts a fresh, padded context.

Only text: a file whose first bytes are binary (NUL bytes, mostly invalid
UTF-8 or control characters, the magic of a known binary format) is refused
before any slow work, and one that turns binary later when it gets there
(`check_corpora`, `NotTextError`); `force=True` (`train --force`) reads it anyway.

Memory is bounded by design, whatever the corpus looks like:
- a line is read at most MAX_DOC_CHARS characters at a time, so one huge line
  never sits in memory whole;
- a longer document is split into parts of at most MAX_DOC_CHARS characters
  (`split_document`): at its last line break before the limit, else its last
  space or tab, else at the limit. The separator at a cut is dropped and each
  part starts a fresh context, as a document does (one reset per ~250k tokens);
- documents are tokenised in batches of about BATCH_CHARS characters with at
  most a few batches in flight (`ordered_map`), and the consumer stops reading
  as soon as it has enough (e.g. `train --max-tokens`).
"""
from __future__ import annotations

import bz2
import codecs
import gzip
import hashlib
import io
import json
import lzma
import os
import queue
import select
import signal
import stat
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np

from olifant_mlx.draftmodel import documents
from olifant_mlx.draftmodel.sniff import BAD_SHARE, MAGIC, SNIFF_BYTES, binary_reason  # noqa: F401 (re-exported)

TEXT_SUFFIXES = (".txt", ".text")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
COMPRESSED = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}
# what a broken archive raises while it is read: bad headers, bad data, a cut-off end
READ_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)

MAX_DOC_CHARS = 1 << 20     # longest document part (and line piece) held at once
MAX_JSONL_CHARS = 1 << 24   # longest .jsonl record: a record must be parsed whole
BATCH_CHARS = 1 << 19       # text per tokenisation batch: bounds memory and Ctrl-C latency
BATCH_DOCS = 256            # documents per tokenisation batch, at most


class CorpusError(ValueError):
    """A corpus that cannot be read, or that holds no text."""


class NotTextError(CorpusError):
    """A corpus file that is not UTF-8 text (binary, another encoding); `force` reads it anyway."""


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


# ---- is it text? ---------------------------------------------------------------------


class _Undecodable(threading.local):
    """Bytes the reading thread's decoder replaced so far (the 'olifant-count' handler)."""
    count = 0


_UNDECODABLE = _Undecodable()


def _count_and_replace(e: UnicodeDecodeError):
    _UNDECODABLE.count += e.end - e.start
    return "\ufffd", e.end


codecs.register_error("olifant-count", _count_and_replace)


def _refuse(path, reason: str) -> NotTextError:
    return NotTextError(f"{path} is not a text corpus: {reason}. Pass --force to read it anyway")


def _head(path: Path) -> bytes:
    """The first SNIFF_BYTES bytes of a file, decompressed."""
    _, opener = _split_suffix(path)
    try:
        with (opener or open)(path, "rb") as f:
            return f.read(SNIFF_BYTES)
    except READ_ERRORS as e:
        raise CorpusError(f"{path}: cannot decompress or read it: {e}") from e


def _check_jsonl_head(path: Path, head: bytes, text_field: str) -> None:
    """The first record of a .jsonl file parses and has the text field."""
    lines = head.split(b"\n")[:-1]    # whole lines only
    n, first = next(((n, ln) for n, ln in enumerate(lines, 1) if ln.strip()), (0, None))
    if first is not None:
        _record_text(path, n, first, text_field)


def _record_text(path, n: int, line, text_field: str):
    """The text field of .jsonl record `line` (line n of path)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise CorpusError(f"{path}:{n}: not JSON: {e.msg}") from e
    if not isinstance(obj, dict) or text_field not in obj:
        raise CorpusError(f"{path}:{n}: no field {text_field!r} (use --text-field)")
    return obj[text_field]


def refuse_device(path: Path) -> None:
    """A device or socket named as a corpus is a CorpusError before it is opened: /dev/zero or
    /dev/urandom would be read forever (a terminal would wait forever). A named pipe is read:
    it is a corpus still being written."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        what = "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise CorpusError(f"corpus {path} is {what}, not a file: refused without reading it "
                          f"(give a file, a folder or a named pipe)")


def check_file(path: Path, text_field: str = "text", force: bool = False) -> None:
    """Refuse a file that cannot be read or is not text, from its first bytes, and a device
    (pipes are only checked as they are read)."""
    if not path.is_file():
        refuse_device(path)
        return
    if _document_file(path, named=True):
        return
    head = _head(path)
    reason = None if force else binary_reason(head)
    if reason:
        raise _refuse(path, reason)
    if _split_suffix(path)[0] in JSONL_SUFFIXES:
        _check_jsonl_head(path, head, text_field)


def check_corpora(specs, text_field: str = "text", force: bool = False) -> None:
    """Everything that can be known about corpora before reading them: they exist, are text,
    and their readers are installed. Raises CorpusError naming the source."""
    for spec in specs:
        spec = str(spec)
        if spec == "builtin:licenses":
            continue
        path = Path(spec)
        if not path.exists():
            if _is_dataset(spec):
                _import_datasets(spec)
                continue
            raise CorpusError(f"corpus {spec!r} does not exist")
        if _document_file(path, named=True) and documents.missing_reader(path):
            raise CorpusError(f"corpus {spec}: {documents.missing_reader(path)}")
        for f in _files(path):
            if f == path or not _document_file(f):     # in a folder, documents.py reports the rest
                check_file(f, text_field, force)


# ---- reading -------------------------------------------------------------------------

def _split_suffix(path: Path):
    """(format suffix, opener) of e.g. x.txt.xz -> ('.txt', lzma.open)."""
    suffixes = [s.lower() for s in path.suffixes]
    opener = None
    if suffixes and suffixes[-1] in COMPRESSED:
        opener = COMPRESSED[suffixes[-1]]
        suffixes = suffixes[:-1]
    return (suffixes[-1] if suffixes else ""), opener


def _check_unchanged(path: Path, before, after, read: int) -> None:
    """CorpusError when the file was cut or rewritten while it was read: what was read is then
    part of it (or a mix), and a model of it would be silently wrong."""
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or read < before.st_size:
        raise CorpusError(f"{path} changed while it was read ({before.st_size:,} bytes at the start, "
                          f"{after.st_size:,} now, {read:,} read): stopped rather than use part of it; "
                          f"run again when nothing writes to it (or on a copy)")


def _lines(path: Path, progress: Progress | None, limit: int, check: bool) -> Iterator[str]:
    """The file's lines, decompressed and decoded, each at most `limit` characters (a longer
    line comes in pieces). With `check`, stops at a stretch that is not text."""
    total = 0
    raw = stream = text = None
    refuse_device(path)           # before open(): a device may block in it, or never end
    try:
        raw = open(path, "rb", buffering=0)
        st = os.fstat(raw.fileno())
        total = st.st_size
        raw = io.BufferedReader(raw) if stat.S_ISREG(st.st_mode) else _Waiting(raw)
        _, opener = _split_suffix(path)
        stream = opener(raw) if opener else raw
        head = stream.read(SNIFF_BYTES)
        reason = binary_reason(head) if check else None
        if reason:
            raise _refuse(path, reason)
        text = io.TextIOWrapper(io.BufferedReader(_Prefixed(head, stream)), encoding="utf-8",
                                errors="olifant-count", newline="\n")
        undecodable = _UNDECODABLE.count
        bad = chars = since = 0
        while line := text.readline(limit):
            if check:
                bad += line.count("\0")
                chars += len(line)
                if chars >= SNIFF_BYTES:
                    bad += _UNDECODABLE.count - undecodable
                    _check_window(path, bad, chars, raw)
                    undecodable, bad, chars = _UNDECODABLE.count, 0, 0
            since += len(line)
            if progress is not None and since >= SNIFF_BYTES:
                since = 0
                progress.update(done=raw.tell(), total=total)
            yield line
        if check and chars:
            _check_window(path, bad + _UNDECODABLE.count - undecodable, chars, raw)
        if stat.S_ISREG(st.st_mode):
            # (a compressed file's reader may stop short of its end: only its size and time count)
            _check_unchanged(path, st, os.fstat(raw.fileno()), raw.tell() if not opener else st.st_size)
    except READ_ERRORS as e:
        raise CorpusError(f"{path}: cannot decompress or read it ({type(e).__name__}: {e}); "
                          f"is the file complete?") from e
    finally:
        if progress is not None:
            progress.update(done=total, total=total)
        for f in (text, stream, raw):   # an archive's reader does not close the file under it
            if f is not None:
                f.close()


class _Waiting(io.RawIOBase):
    """A pipe or device, read in waits of at most WAIT_S. A SIGINT that the kernel hands to a
    thread other than the main one (a library's thread that does not block it) only sets
    Python's flag: a main thread asleep in read() on a pipe nobody writes to would never see
    it. Between waits the main thread runs Python again, so it sees Ctrl-C within WAIT_S."""

    WAIT_S = 0.2

    def __init__(self, raw):
        self.raw = raw
        self.done = 0

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.raw.fileno()

    def tell(self) -> int:
        return self.done

    def close(self) -> None:
        self.raw.close()
        super().close()

    def readinto(self, b) -> int:
        while not select.select([self.raw], [], [], self.WAIT_S)[0]:
            pass
        n = self.raw.readinto(b)
        self.done += n or 0
        return n


class _Prefixed(io.RawIOBase):
    """A stream whose first bytes were already read (to look at them), then the rest of it."""

    def __init__(self, head: bytes, rest):
        self.head = memoryview(head)
        self.rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if not self.head:
            return self.rest.readinto(b)
        n = min(len(b), len(self.head))
        b[:n] = self.head[:n]
        self.head = self.head[n:]
        return n


def _check_window(path, bad: int, chars: int, raw) -> None:
    if bad > BAD_SHARE * chars:
        raise _refuse(path, f"{bad / chars:.0%} of the text before byte {raw.tell():,} is NUL "
                            f"bytes or not valid UTF-8")


def split_document(text: str, limit: int | None = None) -> list[str]:
    """`text` in parts of at most `limit` characters (default MAX_DOC_CHARS): each cut at the
    last line break before the limit, else the last space or tab, else at the limit; the
    separator at a cut is dropped. The last part may be blank."""
    limit = limit or MAX_DOC_CHARS
    parts = []
    while len(text) > limit:
        cut = text.rfind("\n", 0, limit + 1)
        if cut <= 0:
            cut = max(text.rfind(" ", 0, limit + 1), text.rfind("\t", 0, limit + 1))
        if cut <= 0:
            parts.append(text[:limit])
            text = text[limit:]
        else:
            parts.append(text[:cut])
            text = text[cut + 1:]
    parts.append(text)
    return parts


def _nonblank(parts) -> Iterator[str]:
    return (p for p in parts if p.strip())


def _documents(lines: Iterable[str], limit: int) -> Iterator[str]:
    """Blank-line separated documents of at most `limit` characters; the lines inside keep
    their breaks."""
    parts: list[str] = []
    size = 0
    continued = False   # this piece continues a line longer than `limit`
    for line in lines:
        blank = not continued and not line.strip()
        continued = not line.endswith("\n")
        if blank:
            if parts:
                yield from _nonblank(["".join(parts).rstrip("\n")])
            parts, size = [], 0
            continue
        parts.append(line)
        size += len(line)
        if size > limit:
            *heads, rest = split_document("".join(parts), limit)
            yield from _nonblank(heads)
            parts, size = [rest], len(rest)
    if parts:
        yield from _nonblank(["".join(parts).rstrip("\n")])


def read_text_documents(path: Path, progress=None, force: bool = False) -> Iterator[str]:
    """Blank-line separated documents; the lines inside keep their breaks."""
    limit = MAX_DOC_CHARS
    return _documents(_lines(path, progress, limit, check=not force), limit)


def read_jsonl_documents(path: Path, text_field: str, progress=None, force: bool = False
                         ) -> Iterator[str]:
    limit = MAX_JSONL_CHARS
    for n, line in enumerate(_lines(path, progress, limit, check=not force), 1):
        if len(line) >= limit and not line.endswith("\n"):
            raise CorpusError(f"{path}:{n}: a record longer than {limit:,} characters "
                              f"(split the document into several records)")
        if not line.strip():
            continue
        text = _record_text(path, n, line, text_field)
        if isinstance(text, str):
            yield from _nonblank(split_document(text))


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
            yield from _nonblank(split_document(text))


def _is_dataset(spec: str) -> bool:
    return ":" in spec and not spec.startswith((".", "/"))


def _import_datasets(spec: str):
    try:
        import datasets
    except ImportError as e:
        raise CorpusError(f"{spec!r} looks like a Hugging Face dataset, but the 'datasets' "
                          f"package is not installed (pip install datasets)") from e
    return datasets


def hf_documents(spec: str, text_field: str) -> Iterator[str]:
    parts = spec.split(":")
    name, config, split = (parts[0], None, parts[1]) if len(parts) == 2 else parts
    datasets = _import_datasets(spec)
    ds = datasets.load_dataset(name, config, split=split, streaming=True)
    for row in ds:
        if text_field not in row:
            raise CorpusError(f"dataset {spec}: no field {text_field!r} (use --text-field)")
        if isinstance(row[text_field], str):
            yield from _nonblank(split_document(row[text_field]))


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        found = folder_files(path)
        if not found:
            raise CorpusError(f"{path}: directory holds no files")
        return found
    return [path]


def iter_documents(spec: str, text_field: str = "text", progress: Progress | None = None,
                   force: bool = False) -> Iterator[str]:
    """Documents of one corpus source (see module docstring), none longer than MAX_DOC_CHARS."""
    if spec == "builtin:licenses":
        if progress is not None:
            progress.update(source=spec)
        yield from license_documents()
        return
    path = Path(spec)
    if not path.exists():
        if _is_dataset(spec):
            yield from hf_documents(spec, text_field)
            return
        raise CorpusError(f"corpus {spec!r} does not exist")
    for f in _files(path):
        if progress is not None:
            progress.update(source=str(f), done=0, total=0)
        yield from file_documents(f, text_field, progress, force, named=f == path)


# ---- the hook for folders of mixed files (Word, PDF, ...: documents.py) ------------------------

def folder_files(folder: Path) -> list[Path]:
    """Every file under `folder`, sorted; links to nothing, link loops, hidden and lock files
    included, so that they get an outcome too."""
    return [p for p, _ in documents.walk(folder)]


def _document_file(path: Path, named: bool = False) -> bool:
    """Read by documents.py: a document format, a link that leads nowhere, or (in a folder,
    not `named` by the user) anything that is not .txt/.jsonl, or is hidden or a lock file."""
    fmt, _ = _split_suffix(path)
    return (documents.is_document(path) or (path.is_symlink() and not path.exists())
            or (not named and (fmt not in TEXT_SUFFIXES + JSONL_SUFFIXES
                               or documents.not_read(path, also=(path.suffix.lower(),)) is not None)))


def file_documents(f: Path, text_field: str = "text", progress: Progress | None = None,
                   force: bool = False, named: bool = True) -> Iterator[str]:
    """The documents of one file, and its outcome recorded in the run's documents.Report:
    a document format is one document (or skipped with the reason), a text file's count of
    documents is recorded once it is read."""
    if _document_file(f, named):
        why = documents.not_read(f)
        if why is not None:
            documents.record(documents.Outcome(str(f), "skipped", reason=why))
            return
        ext, _ = documents.read_document(f)
        if ext is not None:
            yield from _nonblank(split_document(ext.text()))
        return
    fmt, _ = _split_suffix(f)
    read = (read_jsonl_documents(f, text_field, progress, force) if fmt in JSONL_SUFFIXES
            else read_text_documents(f, progress, force))
    count = 0
    for doc in read:
        count += 1
        yield doc
    documents.record(documents.Outcome(str(f), "read", paragraphs=count) if count
                     else documents.Outcome(str(f), "skipped", reason="an empty file (no text)"))


# ---- tokenising ----------------------------------------------------------------------

def text_batches(docs: Iterable[str], max_chars: int | None = None,
                 max_docs: int = BATCH_DOCS) -> Iterator[list[str]]:
    """Documents in batches of at most `max_docs` and about `max_chars` characters (default
    BATCH_CHARS; a longer document alone)."""
    max_chars = max_chars or BATCH_CHARS
    batch: list[str] = []
    size = 0
    for doc in docs:
        if batch and (len(batch) >= max_docs or size + len(doc) > max_chars):
            yield batch
            batch, size = [], 0
        batch.append(doc)
        size += len(doc)
    if batch:
        yield batch


def encode_texts(tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(every text's ids concatenated, uint32; each text's token count, int64)."""
    ids = tokenizer.encode_batch(texts)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    tokens = np.fromiter(chain.from_iterable(ids), dtype=np.uint32, count=int(lengths.sum()))
    return tokens, lengths


def doc_starts(lengths: np.ndarray) -> np.ndarray:
    """Offsets of the non-empty documents of these lengths in their concatenation (uint64)."""
    kept = lengths[lengths > 0]
    starts = np.zeros(kept.size, dtype=np.uint64)
    starts[1:] = np.cumsum(kept[:-1])
    return starts


def interrupts_to_the_main_thread() -> None:
    """Block SIGINT in the calling (worker) thread. The kernel hands a process's SIGINT to any
    thread that does not block it, and only the main thread runs Python's handler: one handed
    to a worker leaves a main thread blocked in a read (a corpus that is a pipe) asleep, and
    Ctrl-C does nothing. Threads the worker starts (the C builder's) inherit the mask."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def ordered_map(fn: Callable, items: Iterable, workers: int, ahead: int | None = None) -> Iterator:
    """fn(item) for every item, results in input order, computed on `workers` threads (0: in
    this thread, one after another). Items are drawn in this thread as room frees up, at most
    `ahead` in flight (default two per worker), so memory stays bounded and stopping early
    (break, an error, Ctrl-C) leaves little work behind. The threads are daemons: an
    interrupted process never waits for a call in progress."""
    if workers <= 0:
        yield from map(fn, items)
        return
    tasks: queue.SimpleQueue = queue.SimpleQueue()

    def work():
        interrupts_to_the_main_thread()
        while (task := tasks.get()) is not None:
            fut, item = task
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(item))
                except BaseException as e:  # handed to the consumer, who re-raises it
                    fut.set_exception(e)

    threads = [threading.Thread(target=work, daemon=True, name=f"olifant-map-{i}")
               for i in range(workers)]
    for t in threads:
        t.start()
    ahead = ahead or 2 * workers
    pending: deque = deque()
    try:
        for item in items:
            fut: Future = Future()
            tasks.put((fut, item))
            pending.append(fut)
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for fut in pending:
            fut.cancel()
        for _ in threads:
            tasks.put(None)


@dataclass
class Timing:
    """Where a pipeline's time goes: reading (the consuming thread, while it draws
    documents) and tokenising (summed over batches, whichever thread ran them)."""
    read_s: float = 0.0
    tokenize_s: float = 0.0

    def timed(self, items: Iterable) -> Iterator:
        """items, with the time spent producing each added to read_s."""
        it = iter(items)
        while True:
            t = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                self.read_s += time.perf_counter() - t
            yield item


def token_batches(docs: Iterable[str], tokenizer, workers: int = 0, timing: Timing | None = None,
                  max_chars: int | None = None, max_docs: int = BATCH_DOCS) -> Iterator:
    """(tokens uint32, lengths int64) per batch of documents, in corpus order, tokenised on
    `workers` threads (0: here): lengths has an entry per document, 0 for one without tokens,
    so the results do not depend on the number of workers."""
    timing = timing if timing is not None else Timing()

    def encode(texts):
        t = time.perf_counter()
        tokens, lengths = encode_texts(tokenizer, texts)
        return tokens, lengths, time.perf_counter() - t

    batches = timing.timed(text_batches(docs, max_chars, max_docs))
    for tokens, lengths, seconds in ordered_map(encode, batches, workers):
        timing.tokenize_s += seconds
        yield tokens, lengths


def tokenized_batches(docs: Iterable[str], tokenizer, batch_docs: int = BATCH_DOCS,
                      on_batch: Callable[[int, int], None] | None = None, workers: int = 0):
    """Yield (tokens uint32, doc_starts uint64) for batches of documents (see token_batches);
    empty documents are dropped."""
    for tokens, lengths in token_batches(docs, tokenizer, workers, max_docs=batch_docs):
        starts = doc_starts(lengths)
        if on_batch:
            on_batch(int(starts.size), int(tokens.size))
        yield tokens, starts


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

"""Opt-in memory of earlier sessions for the hybrid drafter, kept in one local file.

Off by default: nothing is written unless the user names a file (`generate --history FILE`);
the file is created readable by its owner only and never leaves the machine. Each session's
prompt and output are appended as token ids of the verifier's tokenizer, so later sessions
can draft from what earlier ones wrote (a contract's recurring clauses, a report's template).

File: a 64-byte header (magic "OLIFHST1", u32 format version, u32 vocabulary size, the
tokenizer's 32-byte vocabulary digest, 16 reserved bytes), then one record per session (u32
length, that many u32 ids), little-endian. Loading validates every length and id: a foreign
or corrupt file is a `HistoryError` (another tokenizer's a `TokenizerMismatch`); an incomplete
last record, left by a write that was killed or ran out of disk, is dropped with a warning
(`warnings`) and cut off by the next append. An empty file is a history with no sessions.

Several processes may share one file: appends (and the header of a new file) are written
under an exclusive lock (fcntl.flock), loads read under a shared one, so every record is whole.
A path that is not a regular file (a FIFO, a folder) or a symbolic link to nothing is refused:
the history is never created through a link someone left pointing elsewhere.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import struct

import numpy as np

from olifant_mlx.drafters.lookup import agreement, copy_signals
from olifant_mlx.draftmodel.igtree import TokenizerMismatch
from olifant_mlx.files import NotARegularFile, check_file_path, make_private, open_regular, write_all

MAGIC = b"OLIFHST1"
VERSION = 1
HEADER = struct.Struct("<8sII32s16x")
LENGTH = struct.Struct("<I")
KEY = 3   # a continuation is looked up after the context's last KEY tokens
OPEN_ATTEMPTS = 3   # open, else create; a second process may create it in between


class HistoryError(ValueError):
    """A history file that is not one, is damaged, or cannot be used."""


def record_spans(read, size: int):
    """(offset of the ids, count) of every complete record after the header of a file of
    `size` bytes, read through `read(offset, n)`; stops before an incomplete last record."""
    pos = HEADER.size
    while pos + LENGTH.size <= size:
        (n,) = LENGTH.unpack(read(pos, LENGTH.size))
        if pos + LENGTH.size + 4 * n > size:
            return
        yield pos + LENGTH.size, n
        pos += LENGTH.size + 4 * n


def records_end(spans) -> int:
    """Where the complete records end (the header's end when there are none)."""
    end = HEADER.size
    for offset, n in spans:
        end = offset + 4 * n
    return end


@contextlib.contextmanager
def locked(fd: int, kind: int):
    fcntl.flock(fd, kind)
    try:
        yield fd
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def check_path(path) -> None:
    """The checks that need no tokenizer, for surfaces to run before any model loads: the path
    is a regular file, or nothing yet in a folder that exists; never a FIFO or a dangling link."""
    try:
        check_file_path(path, "history")
    except NotARegularFile as e:
        raise HistoryError(str(e)) from None


class SessionHistory:
    """Earlier sessions' tokens and an index from every KEY-token context to the latest place
    it occurred; `continuation` drafts from there, `append` adds a session (to the file too)."""

    def __init__(self, path, tokenizer_digest: bytes, vocab_size: int, max_tokens: int = 4_000_000):
        self.path = os.fspath(path)
        self.digest = bytes(tokenizer_digest)
        self.vocab_size = int(vocab_size)
        self.max_tokens = max_tokens
        self.tokens = []           # sessions joined, each followed by -1 (never matched across)
        self.index = {}
        self.sessions = 0
        self.warnings = []         # what loading dropped (an incomplete last record), for the CLI
        if os.path.lexists(self.path):
            for record in self._read():
                self._add(record)

    @property
    def header(self) -> bytes:
        return HEADER.pack(MAGIC, VERSION, self.vocab_size, self.digest)

    def _open(self, flags: int) -> int:
        """An fd on the file, refused unless it is a regular file; never follows a dangling link.
        FileNotFoundError and FileExistsError are left to the caller (open, else create)."""
        try:
            return open_regular(self.path, flags)
        except NotARegularFile as e:
            raise HistoryError(f"history {e}") from None
        except FileNotFoundError:
            if os.path.islink(self.path):
                raise HistoryError(f"history {self.path} is a symbolic link to nothing: not "
                                   f"followed (remove it, or name another file)") from None
            raise
        except FileExistsError:
            raise
        except OSError as e:
            raise HistoryError(f"cannot open history {self.path}: {e.strerror}") from None

    def _read(self):
        try:
            fd = self._open(os.O_RDONLY)
        except FileNotFoundError:          # removed since we looked: no sessions
            return []
        with os.fdopen(fd, "rb") as f:
            make_private(fd)
            with locked(fd, fcntl.LOCK_SH):
                data = f.read()
        return self._parse(data)

    def _check_header(self, head: bytes) -> None:
        if head[:8] != MAGIC or len(head) < HEADER.size:
            raise HistoryError(f"{self.path} is not an olifant session history (bad magic)")
        _, version, vocab, digest = HEADER.unpack_from(head)
        if version != VERSION:
            raise HistoryError(f"{self.path}: history format version {version}, this build reads {VERSION}")
        if digest != self.digest or vocab != self.vocab_size:
            raise TokenizerMismatch(f"{self.path} holds another tokenizer's tokens (vocabulary "
                                    f"{vocab}, digest {digest.hex()[:12]}); use another file")

    def _parse(self, data: bytes):
        if self.header.startswith(data):   # empty, or a new file's header cut short
            if data:
                self.warnings.append(f"{self.path}: dropped an incomplete header ({len(data)} bytes), "
                                     f"left by an interrupted write; no sessions yet")
            return []
        self._check_header(data[:HEADER.size])
        records = []
        spans = list(record_spans(lambda pos, n: data[pos:pos + n], len(data)))
        for offset, n in spans:
            ids = np.frombuffer(data, dtype="<u4", count=n, offset=offset)
            if n and int(ids.max()) >= self.vocab_size:
                raise HistoryError(f"{self.path}: record at byte {offset - LENGTH.size} holds token id "
                                   f"{int(ids.max())} >= vocabulary size {self.vocab_size}")
            records.append(ids.tolist())
        end = records_end(spans)
        if end < len(data):
            self.warnings.append(f"{self.path}: dropped an incomplete last record ({len(data) - end} "
                                 f"bytes from byte {end}), left by an interrupted write; "
                                 f"{len(records)} complete sessions kept")
        return records[-self._records_within(records):] if records else records

    def _records_within(self, records):
        """How many of the newest records fit in max_tokens (at least one)."""
        total, n = 0, 0
        for r in reversed(records):
            total += len(r) + 1
            if n and total > self.max_tokens:
                break
            n += 1
        return n

    def _add(self, ids):
        start = len(self.tokens)
        self.tokens.extend(ids)
        self.tokens.append(-1)
        for i in range(start + KEY, len(self.tokens) - 1):
            self.index[tuple(self.tokens[i - KEY:i])] = i
        self.sessions += 1

    def append(self, ids):
        """Remember one session (prompt + output ids) here and at the end of the file, under
        an exclusive lock; a write that fails leaves the file as it was (HistoryError)."""
        ids = [int(t) for t in ids]
        if any(not 0 <= t < self.vocab_size for t in ids):
            raise HistoryError(f"token ids must be below the vocabulary size {self.vocab_size}")
        record = LENGTH.pack(len(ids)) + np.asarray(ids, dtype="<u4").tobytes()
        fd = self._open_or_create()
        try:
            make_private(fd)
            with locked(fd, fcntl.LOCK_EX):
                self._write_at_end(fd, record, self._ready_for_append(fd), "this session")
        finally:
            os.close(fd)
        self._add(ids)

    def _write_at_end(self, fd: int, data: bytes, end: int, what: str) -> None:
        """Append `data` at `end` (the file's size) durably; on failure cut the file back to
        `end` and raise a HistoryError saying why (a full disk, typically)."""
        try:
            write_all(fd, data)
            os.fsync(fd)
        except OSError as e:
            os.ftruncate(fd, end)
            raise HistoryError(f"could not write {what} to {self.path} ({e.strerror}); "
                               f"its earlier sessions are kept") from None

    def _open_or_create(self) -> int:
        """Open the file for appending, or create it (0600, exclusively: never through a link)."""
        flags = os.O_RDWR | os.O_APPEND
        for _ in range(OPEN_ATTEMPTS):
            try:
                return self._open(flags)
            except FileNotFoundError:
                pass
            try:
                return self._open(flags | os.O_CREAT | os.O_EXCL)
            except FileExistsError:        # another process created it first: open theirs
                continue
            except FileNotFoundError:
                raise HistoryError(f"cannot create history {self.path}: its folder does not exist") from None
        raise HistoryError(f"cannot open or create history {self.path}: it keeps appearing and vanishing")

    def _ready_for_append(self, fd: int) -> int:
        """Under the lock: write the header of a new (or empty) file, check an existing one's,
        cut an incomplete last record; returns where the next record goes."""
        size = os.fstat(fd).st_size
        head = os.pread(fd, HEADER.size, 0)
        if size < HEADER.size and self.header.startswith(head):   # new, or its header cut short
            os.ftruncate(fd, 0)
            self._write_at_end(fd, self.header, 0, "the header")
            return HEADER.size
        self._check_header(head)
        end = records_end(record_spans(lambda pos, n: os.pread(fd, n, pos), size))
        if end < size:
            os.ftruncate(fd, end)
        return end

    def continuation(self, context, k):
        """Up to k ids that followed the context's last KEY tokens the latest time they occurred,
        and their signals (olifant_mlx.drafters.lookup.copy_signals)."""
        if k <= 0 or len(context) < KEY:
            return [], []
        pos = self.index.get(tuple(context[-KEY:]))
        if pos is None:
            return [], []
        follow = []
        while len(follow) < k and self.tokens[pos + len(follow)] != -1:
            follow.append(self.tokens[pos + len(follow)])
        return follow, copy_signals("history", agreement(self.tokens, pos, context), len(follow))

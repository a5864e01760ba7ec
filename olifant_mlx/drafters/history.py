"""Opt-in memory of earlier sessions for the hybrid drafter, kept in one local file.

Off by default: nothing is written unless the user names a file (`generate --history FILE`);
the file is created readable by its owner only and never leaves the machine. Each session's
prompt and output are appended as token ids of the verifier's tokenizer, so later sessions
can draft from what earlier ones wrote (a contract's recurring clauses, a report's template).

File: a 64-byte header (magic "OLIFHST1", u32 format version, u32 vocabulary size, the
tokenizer's 32-byte vocabulary digest, 16 reserved bytes), then one record per session (u32
length, that many u32 ids), little-endian. Loading validates every length and id: a foreign,
corrupt or truncated file is a `HistoryError` (another tokenizer's a `TokenizerMismatch`).
"""
from __future__ import annotations

import os
import struct

import numpy as np

from olifant_mlx.drafters.lookup import agreement, copy_signals
from olifant_mlx.draftmodel.igtree import TokenizerMismatch

MAGIC = b"OLIFHST1"
VERSION = 1
HEADER = struct.Struct("<8sII32s16x")
KEY = 3   # a continuation is looked up after the context's last KEY tokens


class HistoryError(ValueError):
    """A history file that is not one, is damaged, or cannot be used."""


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
        if os.path.exists(self.path):
            for record in self._read():
                self._add(record)

    def _read(self):
        with open(self.path, "rb") as f:
            data = f.read()
        if len(data) < HEADER.size or data[:8] != MAGIC:
            raise HistoryError(f"{self.path} is not an olifant session history (bad magic)")
        _, version, vocab, digest = HEADER.unpack_from(data)
        if version != VERSION:
            raise HistoryError(f"{self.path}: history format version {version}, this build reads {VERSION}")
        if digest != self.digest or vocab != self.vocab_size:
            raise TokenizerMismatch(f"{self.path} holds another tokenizer's tokens (vocabulary "
                                    f"{vocab}, digest {digest.hex()[:12]}); use another file")
        records, pos = [], HEADER.size
        while pos < len(data):
            if pos + 4 > len(data):
                raise HistoryError(f"{self.path}: truncated record header at byte {pos}")
            (n,) = struct.unpack_from("<I", data, pos)
            if n > (len(data) - pos - 4) // 4:
                raise HistoryError(f"{self.path}: record at byte {pos} claims {n} tokens, "
                                   f"past the end of the file")
            ids = np.frombuffer(data, dtype="<u4", count=n, offset=pos + 4)
            if n and int(ids.max()) >= self.vocab_size:
                raise HistoryError(f"{self.path}: record at byte {pos} holds token id {int(ids.max())} "
                                   f">= vocabulary size {self.vocab_size}")
            records.append(ids.tolist())
            pos += 4 + 4 * n
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
        """Remember one session (prompt + output ids) here and at the end of the file."""
        ids = [int(t) for t in ids]
        if any(not 0 <= t < self.vocab_size for t in ids):
            raise HistoryError(f"token ids must be below the vocabulary size {self.vocab_size}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            if os.fstat(fd).st_size == 0:
                os.write(fd, HEADER.pack(MAGIC, VERSION, self.vocab_size, self.digest))
            os.write(fd, struct.pack("<I", len(ids)) + np.asarray(ids, dtype="<u4").tobytes())
        finally:
            os.close(fd)
        self._add(ids)

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

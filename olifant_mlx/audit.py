"""The audit log (`--audit-log FILE`): one JSON line per request or generation — when, which API
key (an id, never the key), the matter and the libraries, the citations of the passages given and
of the spans traced, token counts and the outcome — and never a word of a prompt or an output.

    log = open_log("audit.jsonl")          # one writer per file in a process (shared, locked)
    log.append({"key": None, "outcome": "ok", ...})     # seq, time and prev added; fsynced
    verify("audit.jsonl")                  # a Verdict: the lines, or the first one found wrong

The file is append-only and hash-chained: every line is `{"seq": N, "time": ..., FIELDS...,
"prev": H}`, where `seq` counts the lines from 1 and `prev` is the SHA-256 (hex) of the line
before it (its bytes without the newline), GENESIS (64 zeros) on the first. So a line changed,
removed, inserted or moved breaks the chain at the first place it touches, and `verify` names
that line. What a chain cannot show alone: lines cut off at the end, or a tail rewritten
whole (hashes recomputed); keep the last line's hash that `verify` prints somewhere else.

Written like every other file (olifant_mlx.files): created whole with its first line, 0600,
never through a link; each line is one write, fsynced, under an exclusive flock (writers in
this process take turns on a lock first). A file whose last line is cut short (a crash during
an append) is not appended to: `verify` says where, and the log is moved aside by hand.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time
from dataclasses import dataclass

from olifant_mlx.files import (NotARegularFile, appending, check_file_path, create_exclusive, open_regular_file,
                               write_all)

GENESIS = "0" * 64
TAIL_CHUNK = 1 << 16
MAX_LIST = 256                   # citations per list in a line (then "+N more")
KEY_ID_SALT = b"olifant_mlx audit key id"
# what a finished generation's stop reason says of the outcome
STOPPED = ("stopped", "disconnected", "deadline", "shutdown", "interrupted")


class AuditError(ValueError):
    """An audit log that cannot be written or read as one; the message names the file."""


def key_id(key: str) -> str:
    """The id an API key is logged by: a keyed hash (HMAC-SHA256, 64 bits of it), never the key."""
    return "key-" + hmac.new(KEY_ID_SALT, key.encode(), hashlib.sha256).hexdigest()[:16]


def line_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def encode(seq: int, prev: str, fields: dict) -> bytes:
    """One line: seq, time (UTC, ms), the fields, prev; ASCII JSON, so its bytes are stable."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
    body = {"seq": seq, "time": stamp, **{k: v for k, v in fields.items() if k not in ("seq", "time", "prev")},
            "prev": prev}
    return json.dumps(body, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def parse(line: bytes):
    """(seq, prev) of an audit line, None when it is not one."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    seq, prev = obj.get("seq"), obj.get("prev")
    if not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(prev, str):
        return None
    return seq, prev


def check_path(path) -> None:
    """For surfaces to run before any model loads: a regular file or nothing yet in a folder that
    exists (never a FIFO or a link to nothing), and an existing log whose last line is whole."""
    try:
        check_file_path(path, "audit log")
    except NotARegularFile as e:
        raise AuditError(str(e)) from None
    if os.path.exists(path):
        try:
            with appending(path) as fd:
                tail(fd, path)
        except OSError as e:
            raise AuditError(f"audit log {path} cannot be appended to ({e.strerror or e})") from None


def tail(fd: int, path) -> tuple[int, str]:
    """(seq, hash) of the last line of the file open on fd ((0, GENESIS) when it is empty);
    AuditError when that line is cut short or is not an audit line."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0, GENESIS
    if os.pread(fd, 1, size - 1) != b"\n":
        raise AuditError(f"audit log {path}: its last line is incomplete (an append was cut short); "
                         f"`python -m olifant_mlx audit verify {path}` says where: move the file aside "
                         f"to start a new log")
    data, pos = b"", size - 1            # the bytes before the final newline, read backwards
    while pos > 0 and b"\n" not in data:
        step = min(TAIL_CHUNK, pos)
        data = os.pread(fd, step, pos - step) + data
        pos -= step
    last = data[data.rfind(b"\n") + 1:]
    parsed = parse(last)
    if parsed is None:
        raise AuditError(f"audit log {path}: its last line is not an audit line: `python -m olifant_mlx "
                         f"audit verify {path}` says where the chain breaks")
    return parsed[0], line_hash(last)


class AuditLog:
    """The writer of one audit file (see `open_log`: one per file in a process)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.lock = threading.Lock()
        self.failed = None            # why the last append failed (None: it did not)

    def append(self, fields: dict) -> None:
        """Add one line (seq, time and prev added) at the end, durably; AuditError when it
        cannot be written (the file is then left as it was)."""
        with self.lock:
            try:
                self._append(fields)
            except (OSError, AuditError) as e:
                self.failed = str(e) if isinstance(e, AuditError) else \
                    f"audit log {self.path} cannot be appended to ({e.strerror or type(e).__name__})"
                raise AuditError(self.failed) from None
            self.failed = None

    def _append(self, fields: dict) -> None:
        try:
            with appending(self.path) as fd:
                self._write(fd, fields)
                return
        except FileNotFoundError:
            if os.path.islink(self.path):
                raise AuditError(f"audit log {self.path} is a symbolic link to nothing: not followed") from None
        except NotARegularFile as e:
            raise AuditError(f"audit log {e}") from None
        if create_exclusive(self.path, encode(1, GENESIS, fields)):
            return
        with appending(self.path) as fd:     # another writer created it meanwhile
            self._write(fd, fields)

    def _write(self, fd: int, fields: dict) -> None:
        seq, prev = tail(fd, self.path)
        end = os.fstat(fd).st_size
        try:
            write_all(fd, encode(seq + 1, prev, fields))
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, end)
            raise


_logs: dict[str, AuditLog] = {}
_logs_lock = threading.Lock()


def open_log(path) -> AuditLog:
    """The writer of the audit log at `path`, one per file in this process, so that every
    surface and thread writing to it takes turns on its lock."""
    real = os.path.realpath(path)
    with _logs_lock:
        if real not in _logs:
            _logs[real] = AuditLog(path)
        return _logs[real]


# ---- what a line says ------------------------------------------------------------------------

def place_citation(place) -> str:
    """A provenance Place cited as a passage is: path, page (where there are pages), paragraph."""
    page = f", page {place.page}" if place.page else ""
    return f"{place.path}{page}, paragraph {place.paragraph}"


def capped(items) -> list:
    items = list(dict.fromkeys(items))
    return items if len(items) <= MAX_LIST else items[:MAX_LIST] + [f"+{len(items) - MAX_LIST} more"]


def outcome_of(reason: str | None) -> str:
    """ok (the generation ran to its end: eos, stop, max_tokens, the verbatim guard), stopped
    (a client left, a deadline, a shutdown) or error."""
    if reason in STOPPED:
        return "stopped"
    return "error" if reason == "error" else "ok"


def fields(options, request=None, completion_tokens: int = 0, sources=(), outcome: str = "ok",
           reason: str | None = None) -> dict:
    """A line's fields of one generation, from its options (and its planned Request, when it got
    that far): the matter and the matters it could see, the libraries, the citations of the
    passages given and of the places of the spans traced, token counts, the outcome. Counts,
    names and citations only: never the prompt, the passages' text or the output."""
    used = request.precedents if request is not None else None
    library = request.library if request is not None else options.sources
    libraries = [n for n in (options.precedents, library) if n]
    return {"matter": options.matter,
            "matters": None if options.matters is None else sorted(options.matters),
            "libraries": list(dict.fromkeys(libraries)),
            "passages": capped(p.citation() for p in used.passages) if used is not None else [],
            "spans": capped(place_citation(p) for s in sources for p in s.places),
            "tokens": {"prompt": len(request.ids) if request is not None else 0,
                       "precedents": used.tokens if used is not None else 0, "completion": completion_tokens},
            "outcome": outcome, "reason": reason}


def audited(log: AuditLog, request, responses, **who):
    """The Responses of a generation, with its line written when the last one comes (before it
    is handed on), or when it ends otherwise: an error, or abandoned (`who`: the key, ...)."""
    found, tokens, written = [], 0, False
    try:
        for r in responses:
            if not hasattr(r, "finish_reason"):     # a batched stream's pass (engine.forward)
                yield r
                continue
            found += r.sources
            tokens += len(r.tokens)
            if r.finish_reason is not None:
                reason = r.stats.stop_reason or r.finish_reason
                log.append({**who, **fields(request.options, request, tokens, found, outcome_of(reason), reason)})
                written = True
            yield r
    except GeneratorExit:
        if not written:
            log.append({**who, **fields(request.options, request, tokens, found, "stopped", "abandoned")})
        raise
    except BaseException as e:
        if not written:
            stopped = isinstance(e, KeyboardInterrupt)
            log.append({**who, **fields(request.options, request, tokens, found, "stopped" if stopped else "error",
                                        "interrupted" if stopped else type(e).__name__)})
        raise


# ---- verify -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """What `verify` found: the lines, the last one's hash, and the first line found wrong
    (None: the chain is intact) with what happened there."""
    lines: int
    last: str
    broken: int | None = None
    what: str = ""

    @property
    def intact(self) -> bool:
        return self.broken is None

    def message(self, path) -> str:
        if self.intact:
            return f"{path}: {self.lines:,} lines, chain intact (last line's sha256 {self.last})"
        return f"{path}: line {self.broken}: {self.what}"


def verify(path) -> Verdict:
    """Check the chain of an audit log, reading it line by line: every line an audit line whose
    seq is its number and whose prev is the hash of the line before it. The first line where
    that fails is named, with the likeliest cause: a line changed, removed, inserted or moved,
    or cut short."""
    try:
        f = open_regular_file(path, "rb")
    except (OSError, NotARegularFile) as e:
        raise AuditError(f"audit log {path} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    with f:
        lines = ((raw[:-1], True) if raw.endswith(b"\n") else (raw, False) for raw in f)
        last, before, count = GENESIS, None, 0      # the hashes of the last two lines checked
        for n, (line, whole) in enumerate(lines, 1):
            if not whole:
                return Verdict(n, line_hash(line), n, "incomplete: the last line was cut short (an append "
                                                      "that did not finish, or a cut)")
            p = parse(line)
            if p is not None and p == (n, last):
                last, before, count = line_hash(line), last, n
                continue
            return Verdict(n, line_hash(line), *_broken(n, p, line, last, before, lines))
        return Verdict(count, last)


def _broken(n: int, p, line: bytes, last: str, before: str | None, rest) -> tuple[int, str]:
    """(the line to name, what happened) where the chain first breaks: at line n, parsed as p
    (None: not an audit line), after lines whose hashes are `last` and `before`; `rest`: the
    lines after it, (bytes, whole)."""
    if p is None:
        return n, "changed: it is not an audit line"
    seq, prev = p
    if prev == last:        # it follows the line before it: its own seq was changed
        return n, f"changed: it says it is line {seq}"
    if seq == n:            # in its place: the line before it, or its own prev, was changed
        after = next(rest, (b"", False))
        if n > 1 and (parse(after[0]) or (0, ""))[1] == line_hash(line):
            return n - 1, f"changed: its hash is not the one line {n} carries"
        return n, "changed: the hash it carries is not the previous line's"
    if seq > n:
        if any((parse(later) or (0,))[0] == n for later, _ in rest):
            return n, f"reordered: it was line {seq}"
        return n, f"{seq - n} line(s) removed before it (it was line {seq})"
    if before is not None and prev == before:
        return n - 1, f"inserted: line {n} carries the hash of the line before it"
    return n, f"inserted or reordered: it says it was line {seq}"

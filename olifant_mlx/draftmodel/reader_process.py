"""Documents read in child processes under hard limits: a reader library facing a hostile file
(a PDF whose page inflates to millions of lines, a zip bomb, quadratic markup) can take all
the memory or run for ever, and a C library (PDFium) aborts the whole process when an
allocation fails. So each file is read in a long-lived worker process that sets RLIMIT_AS
(memory) on itself and RLIMIT_CPU per file, while the parent gives it a wall-clock deadline.
A worker that goes past a limit dies alone (or is killed) and the file is skipped with the
reason; the next file starts a fresh worker. Workers are pooled (one per thread that reads at
once) and live as long as the process: a build of hundreds of small files starts one.

The protocol on the worker's stdin/stdout: an 8-byte length, a JSON header, the file's bytes;
the reply is an 8-byte length and JSON (never pickle: the worker parses hostile input). The
worker runs the readers' module (ENTRY, `python -m`), whose main calls `serve` with them: this
module knows no reader.
"""
from __future__ import annotations

import atexit
import json
import os
import resource
import select
import signal
import struct
import subprocess
import sys
import threading
import time

LENGTH = struct.Struct("<Q")
ENTRY = "olifant_mlx.draftmodel.documents"      # the worker's main: python -m ENTRY MEMORY_BYTES
_free: list[Worker] = []
_lock = threading.Lock()


class Worker:
    """One child process reading documents one at a time."""

    def __init__(self, memory_bytes: int):
        self.memory_bytes = memory_bytes
        self.proc = subprocess.Popen([sys.executable, "-m", ENTRY, str(memory_bytes)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)    # Ctrl-C goes to the parent, which ends it

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def read(self, suffix: str, data: bytes, limits: dict) -> dict:
        """The worker's reply for one file: {"paragraphs", "pages", "title"}, {"skip": why},
        or {"limit": why} when a limit stopped it. A worker that a limit stopped, or that says it
        is ending (past its memory limit), is closed here: it never reads another file."""
        head = json.dumps({"suffix": suffix, "size": len(data), "limits": limits}).encode()
        deadline = time.monotonic() + limits["seconds"]
        try:
            self.proc.stdin.write(LENGTH.pack(len(head)) + head)
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            size = LENGTH.unpack(self._read_exact(LENGTH.size, deadline))[0]
            if size > 8 * limits["text_chars"] + (1 << 20):
                raise OSError("a reply larger than the text limit")
            reply = json.loads(self._read_exact(size, deadline))
        except TimeoutError:
            self.close()
            return {"limit": f"took over {limits['seconds']:g} s to read (the limit: OLIFANT_DOC_SECONDS)"}
        except (OSError, ValueError, struct.error):
            self.close()
            return {"limit": self._death(limits)}
        if reply.pop("ended", False):     # it is on its way out: the next file must not meet its death
            self.close()
        return reply

    def _read_exact(self, n: int, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(n - got, 1 << 20))
            if not chunk:
                raise OSError("the reader process ended")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _death(self, limits: dict) -> str:
        """Why the worker died, as a skip reason."""
        code = self.proc.returncode
        mib = self.memory_bytes >> 20
        if code is not None and code < 0:
            sig = signal.Signals(-code).name
            if -code == signal.SIGXCPU:
                return f"used over {limits['seconds']:g} s of CPU time to read (the limit: OLIFANT_DOC_SECONDS)"
            return (f"the reader stopped ({sig}), most likely at the memory limit of {mib:,} MiB "
                    f"(OLIFANT_DOC_MEMORY_BYTES)")
        return f"the reader stopped (exit {code}), most likely at the memory limit of {mib:,} MiB"


def read(suffix: str, data: bytes, limits: dict) -> dict:
    """One file read by a pooled worker (see Worker.read)."""
    with _lock:
        worker = next((w for w in _free if w.memory_bytes == limits["memory_bytes"]), None)
        if worker is not None:
            _free.remove(worker)
    if worker is None or not worker.alive():
        worker = Worker(limits["memory_bytes"])
    try:
        reply = worker.read(suffix, data, limits)
    except BaseException:          # Ctrl-C mid-file: its reply would answer the next file
        worker.close()
        raise
    if worker.alive():
        with _lock:
            _free.append(worker)
    return reply


@atexit.register
def close_all() -> None:
    """End every pooled worker (they also end on their own when this process's pipe closes)."""
    with _lock:
        workers, _free[:] = list(_free), []
    for w in workers:
        w.close()


# ---- the worker's side -----------------------------------------------------------------------

def _take(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError
    return data


def _send(out, reply: dict) -> None:
    body = json.dumps(reply).encode()
    out.write(LENGTH.pack(len(body)) + body)
    out.flush()


def serve(memory_bytes: int, read) -> None:
    """Read files sent on stdin with read(suffix, data, limits) -> reply until it closes; each
    under a fresh CPU-time allowance. The worker's main (ENTRY) calls it with the readers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_bytes:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        except (ValueError, OSError):
            pass               # a system that does not take it (macOS): the deadline still holds
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)              # a reader library's print cannot corrupt the replies
    stdin = sys.stdin.buffer
    while True:
        try:
            head = json.loads(_take(stdin, LENGTH.unpack(_take(stdin, LENGTH.size))[0]))
            data = _take(stdin, head["size"])
        except EOFError:
            return
        limits = head["limits"]
        used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(used + limits["seconds"]) + 1
        if hard == resource.RLIM_INFINITY or soft <= hard:
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        try:
            reply = read(head["suffix"], data, limits)
        except MemoryError:
            mib = memory_bytes >> 20
            _send(out, {"limit": f"over the reader's memory limit of {mib:,} MiB (OLIFANT_DOC_MEMORY_BYTES)",
                        "ended": True})
            return             # a fresh worker for the next file (the parent waits for this one's end)
        _send(out, reply)


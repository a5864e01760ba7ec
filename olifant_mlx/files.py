"""Where olifant_mlx keeps files, and how it writes them.

Every file olifant_mlx creates is written atomically: a unique temporary file created
exclusively in the target's folder (never following a planted link), fsynced, renamed over
the target, and the folder fsynced — so a crash or a second writer never leaves a torn file.
Files that can hold a user's text (draft models, histories, exports) are created 0600.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

PRIVATE = 0o600


def cache_dir() -> Path:
    """Where olifant_mlx caches tokenizers, draft models and converted verifiers:
    $OLIFANT_CACHE, else $XDG_CACHE_HOME/olifant_mlx, else ~/.cache/olifant_mlx."""
    root = os.environ.get("OLIFANT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "olifant_mlx")
    return Path(root)


def fsync_dir(path) -> None:
    """Make a rename or a new entry in a folder durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path, mode: int = PRIVATE, binary: bool = True):
    """Write `path` all at once: yields a file object on a unique temporary file beside it;
    on success the file is fsynced and renamed over `path` (with `mode`), on error removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


def write_atomic(path, data: bytes | str, mode: int = PRIVATE) -> Path:
    """Write bytes or text to `path` atomically (see atomic_writer)."""
    binary = isinstance(data, bytes)
    with atomic_writer(path, mode, binary=binary) as f:
        f.write(data)
    return Path(path)


@contextlib.contextmanager
def private_output(path, mode: int = PRIVATE):
    """For writers that take a path rather than a file object (the C library's igt_save):
    yields a path inside a fresh folder (0700) beside `path`. On success the file written
    there is fsynced, given `mode` and renamed over `path`; on any error, Ctrl-C included,
    the folder goes — `path` is the old file or the whole new one, never readable by others."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(folder) / target.name
    try:
        yield tmp
        os.chmod(tmp, mode)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    fsync_dir(target.parent)

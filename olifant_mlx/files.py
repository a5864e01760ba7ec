"""Where olifant_mlx keeps files, and how it writes them.

Every file olifant_mlx creates is written atomically: a unique temporary file created
exclusively in the target's folder (never following a planted link), fsynced, renamed over
the target, and the folder fsynced — so a crash or a second writer never leaves a torn file.
Files that can hold a user's text (draft models, histories, exports) are created 0600.
A path the user names is opened without blocking and refused unless it is a regular file:
a FIFO would hang the open, or the first read, forever.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

PRIVATE = 0o600


class NotARegularFile(ValueError):
    """A path that names a FIFO, a device, a socket or a folder where a file was wanted."""


def file_kind(mode: int) -> str:
    """What a file of this st_mode is, in words: "a FIFO", "a folder", "a device", "a socket"."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path, flags: int = os.O_RDONLY, mode: int = PRIVATE) -> int:
    """A file descriptor on `path` (os.open flags), refused with NotARegularFile unless the
    path is a regular file. Opened with O_NONBLOCK, so a FIFO never blocks the open; the
    descriptor is made blocking again once fstat has shown a regular file."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as e:
        if e.errno == errno.ENXIO:          # a FIFO opened for writing with no reader
            raise NotARegularFile(f"{path} is a FIFO, not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(f"{path} is {file_kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_file_path(path, what: str = "file") -> None:
    """For a file that will be read or created, before any slow work: a regular file, or
    nothing yet in a folder that exists. A FIFO, device, folder or link to nothing is
    NotARegularFile, naming `what` and the path; nothing is opened, so nothing blocks."""
    path = os.fspath(path)
    if os.path.islink(path) and not os.path.exists(path):
        raise NotARegularFile(f"{what} {path} is a symbolic link to nothing: not followed "
                              f"(remove it, or name another file)")
    if os.path.exists(path):
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(f"{what} {path} is {file_kind(mode)}, not a regular file")
    elif not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise NotARegularFile(f"cannot create {what} {path}: its folder does not exist")


def probe_folder(path, what: str = "the file") -> None:
    """Before any slow work: a new file can really be made where `path` will be written — in its
    folder, or the nearest one above that exists (the writers make the rest). ValueError naming
    `what`, the path and the folder otherwise: a probe file is created (O_EXCL, O_NOFOLLOW, 0600)
    and removed at once, since /proc, an immutable folder or a read-only mount pass os.access (for
    root always) but refuse every new file, which write_atomic would find only at the end."""
    out = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {what} to {out}: {folder} is not a writable directory")
    probe = os.path.join(folder, f".olifant-probe-{os.getpid()}-{time.monotonic_ns()}")
    with sigint_deferred():    # a Ctrl-C between the create and the unlink would leave the probe
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE))
            os.unlink(probe)
        except OSError as e:
            raise ValueError(f"cannot write {what} to {out}: no file can be created in {folder} "
                             f"({e.strerror}); name a file in a writable folder") from None


def check_writable(path, what: str = "file") -> None:
    """For a file about to be written whole (write_atomic), before any slow work: check_file_path
    (a regular file or a new one in a folder that exists), then probe_folder."""
    check_file_path(path, what)
    probe_folder(path, what)


@contextlib.contextmanager
def sigint_deferred():
    """A Ctrl-C inside the block is held and raised once it ends. The handler is swapped rather
    than the thread's signal mask: a SIGINT sent to the process goes to any thread that does not
    block it (MLX's, the test runner's), and Python then raises in the main thread at once.
    Only the main thread gets KeyboardInterrupt, so elsewhere there is nothing to hold."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        # None: a handler not installed from Python, which cannot be put back from here
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
        if caught:
            signal.raise_signal(signal.SIGINT)


def open_regular_file(path, mode: str = "r", encoding: str | None = "utf-8", errors: str | None = None):
    """`open(path, mode)` for reading, but a FIFO, device or folder is NotARegularFile."""
    if "b" in mode:
        return os.fdopen(open_regular(path), "rb")
    return os.fdopen(open_regular(path), "r", encoding=encoding, errors=errors)


def read_regular(path) -> bytes:
    """All bytes of a regular file (see open_regular)."""
    with open_regular_file(path, "rb") as f:
        return f.read()


def make_private(fd: int) -> None:
    """Tighten a file we own to 0600 when others may read it (it can hold a user's text);
    where that is not possible (a read-only file system) the file is used as it is."""
    st = os.fstat(fd)
    if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.getuid():
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & PRIVATE)


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


def fsync_tree(root) -> None:
    """fsync every file and folder under `root` (a folder about to be renamed into place)."""
    for folder, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(folder)


@contextlib.contextmanager
def atomic_writer(path, mode: int = PRIVATE, binary: bool = True):
    """Write `path` all at once: yields a file object on a unique temporary file beside it;
    on success the file is fsynced and renamed over `path` (with `mode`), on error removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:       # named by the file asked for, not by a temporary name never made
        raise OSError(e.errno, f"cannot write {target}: {e.strerror}") from None
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


@contextlib.contextmanager
def private_files(folder, mode: int = PRIVATE):
    """For a library that writes several files itself (a tokenizer's save_pretrained): yields a
    fresh folder (0700) inside `folder`; on success each file written there is fsynced, given
    `mode` and renamed into `folder` (so each lands whole); on any error none does."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".files.", suffix=".tmp", dir=folder))
    try:
        yield tmp
        names = sorted(p.name for p in tmp.iterdir() if p.is_file() and not p.is_symlink())
        for name in names:
            os.chmod(tmp / name, mode)
        fsync_tree(tmp)
        for name in names:
            os.replace(tmp / name, folder / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    fsync_dir(folder)


@contextlib.contextmanager
def locked(path):
    """Hold an exclusive flock on the lock file `path` (created 0600, never through a link)
    while the block runs; another process waits. The file stays: removing it would race a
    process waiting on it."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), PRIVATE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)               # releases the lock


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written: a short write (a full disk) is not the end."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, "no byte could be written")
        view = view[n:]


def create_exclusive(path, data: bytes, mode: int = PRIVATE) -> bool:
    """Create `path` holding `data`, whole or not at all: written to a unique temporary file
    beside it, fsynced, then hard-linked to `path`, which fails when anything is there (a file,
    a link, even one to nothing), so a second creator never overwrites the first. False when
    the path was already there (nothing written)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        write_all(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = None
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
    finally:
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(target.parent)
    return True


@contextlib.contextmanager
def appending(path):
    """An fd on the regular file `path` opened for appending (a FIFO or device is refused:
    NotARegularFile), under an exclusive flock, tightened to 0600: a second appender, in this
    process or another, waits. FileNotFoundError when there is no file (create_exclusive makes
    one)."""
    fd = open_regular(path, os.O_RDWR | os.O_APPEND)
    try:
        make_private(fd)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)               # releases the lock


def exchange(a, b) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE, macOS renamex_np
    RENAME_SWAP); False where the system or the file system has no such call."""
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = os.fsencode(a), os.fsencode(b)
    if sys.platform == "darwin":
        call, args = getattr(libc, "renamex_np", None), (a, b, 2)
    else:
        call, args = getattr(libc, "renameat2", None), (-100, a, -100, b, 2)    # AT_FDCWD, RENAME_EXCHANGE
    if call is None:
        return False
    if call(*args) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), a.decode(errors="replace"))


def switch_link(link, target: str, step=lambda name: None) -> Path | None:
    """Make `link` a symbolic link to `target` (a path relative to its folder) with one
    rename, so a reader finds the old target or the new one and never nothing; return the old
    target (None when there was none). A real folder at `link` (the layout before links) is
    swapped with the new link in one exchange, and returned; where the file system cannot
    exchange it is renamed aside first (then a kill between the two renames leaves it beside,
    for the next switch's caller to take back). step(name) is called between the steps."""
    link = Path(link)
    tmp = link.with_name(f".{link.name}.{secrets.token_hex(4)}.link")
    os.symlink(target, tmp)
    try:
        step("linked")
        old = None
        if link.is_symlink():
            old = link.parent / os.readlink(link)
        elif link.exists():
            if exchange(tmp, link):
                old, tmp = tmp, None         # the old folder now sits at the temporary name
            else:
                old = link.with_name(f".{link.name}.{secrets.token_hex(4)}.old")
                os.rename(link, old)
        if tmp is not None:
            os.replace(tmp, link)
            tmp = None
        fsync_dir(link.parent)
        return old
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

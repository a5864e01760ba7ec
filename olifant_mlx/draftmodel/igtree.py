"""Python face of the IGTree C library (csrc/igtree.h): build, load, query, draft.

Everything that touches many tokens (building, batch prediction, drafting k
tokens) is one C call; Python only moves numpy buffers.
"""
from __future__ import annotations

import operator
import os
import threading
from dataclasses import dataclass

import numpy as np

try:
    from olifant_mlx.draftmodel._igtree import ffi, lib
except ImportError as _e:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        f"olifant_mlx's C extension (olifant_mlx.draftmodel._igtree) is missing from "
        f"{os.path.dirname(__file__)}. This usually means Python is importing the source tree "
        f"(the current directory) instead of the installed package: run from another "
        f"directory, or build in place with `pip install -e .`.") from _e

TOPK_ALL = 0xFFFFFFFF
ORDERS = {"gain_ratio": lib.IGT_ORDER_GAIN_RATIO, "info_gain": lib.IGT_ORDER_INFO_GAIN}
LIBRARY_VERSION = ffi.string(lib.igt_version()).decode()   # the C library's "MAJOR.MINOR.PATCH"
FORMAT_VERSION = lib.IGT_FORMAT_VERSION                     # what save() writes


def library_version() -> dict:
    """The C library's identity: its version, the model file format it writes, the widest window."""
    return {"version": LIBRARY_VERSION, "format_version": int(FORMAT_VERSION),
            "max_window": int(lib.IGT_MAX_WINDOW)}


ANSWER_DTYPE = np.dtype(
    [("token", "<u4"), ("depth", "<u4"), ("leaf", "<u4"), ("node", "<u4"),
     ("winner_count", "<u4"), ("total", "<u4"), ("distance", "<f8")]
)
assert ffi.sizeof("igt_answer") == ANSWER_DTYPE.itemsize
assert ffi.offsetof("igt_answer", "distance") == ANSWER_DTYPE.fields["distance"][1]


class LibraryError(Exception):
    """A failed call into a C library (csrc/): `code` is the one status code both libraries
    return (csrc/olif_file.h, OLIF_ERR_*), `message` what the library said."""

    def __init__(self, code: int, message: str):
        self.code = code
        self.message = message
        status = ffi.string(lib.olif_status_string(code)).decode()
        super().__init__(f"{message} ({status})" if message else status)


# the codes that say a file is missing, unreadable, foreign, of another version or damaged
FILE_ERRORS = frozenset({lib.OLIF_ERR_IO, lib.OLIF_ERR_FOREIGN, lib.OLIF_ERR_VERSION,
                         lib.OLIF_ERR_TRUNCATED, lib.OLIF_ERR_CORRUPT, lib.OLIF_ERR_CHECKSUM})


def raise_status(status: int, err, error: type, file_error: type, where: str | None = None) -> None:
    """Raise for a failed C call: `file_error` for the file codes, `error` for the rest, with
    the library's message (`where`, the file, in front unless the message names it)."""
    if status == lib.OLIF_OK:
        return
    message = ffi.string(err.message).decode("utf-8", "replace")
    if where and where not in message:
        message = f"{where}: {message}"
    raise (file_error if status in FILE_ERRORS else error)(status, message)


class IGTreeError(LibraryError):
    """A failed IGTree library call."""


class ModelFileError(IGTreeError):
    """A model file that is missing, truncated, corrupt, foreign or of another version."""


class TokenizerMismatch(ValueError):
    """A draft model used with a verifier whose tokenizer differs from its own."""


def _check(status: int, err) -> None:
    raise_status(status, err, IGTreeError, ModelFileError)


@ffi.def_extern()
def _igt_progress(user, phase, done, total):
    callback = ffi.from_handle(user)
    try:
        return 1 if callback(ffi.string(phase).decode(), int(done), int(total)) else 0
    except BaseException:  # never unwind through C; cancel the build instead
        return 1


@dataclass(frozen=True)
class Answer:
    token: int
    depth: int
    leaf: bool
    node: int
    winner_count: int
    total: int
    distance: float

    @property
    def share(self) -> float:
        """Fraction of the matched node's training instances that chose `token`."""
        return self.winner_count / self.total if self.total else 0.0


def _index(x, what: str) -> int:
    try:
        return operator.index(x)
    except TypeError:
        raise ValueError(f"{what} must be whole numbers, got {x!r}") from None


def _whole_numbers(a, what: str, dtype=np.uint32) -> np.ndarray:
    """`a` as a contiguous `dtype` array, refused (ValueError naming `what`) unless every value
    is a whole number that dtype holds. The one rule of every entry point: numpy's own cast
    would wrap -1 to 4294967295, alias id + 2**32 to id, truncate 1.7 and turn NaN into 0."""
    arr = np.asarray(a)
    if arr.dtype == object:                  # Python ints beyond int64, or not numbers at all
        arr = np.array([_index(x, what) for x in arr.ravel()], dtype=object).reshape(arr.shape)
    elif arr.dtype.kind == "f":              # whole floats (3.0) are exact; 1.7, NaN, inf are not
        not_whole = ~np.isfinite(arr) | (arr != np.floor(arr))
        if not_whole.any():
            raise ValueError(f"{what} must be whole numbers, got {float(arr[not_whole][0])!r}")
    elif arr.dtype.kind not in "iu" and arr.size:
        raise ValueError(f"{what} must be whole numbers, got {arr.dtype} values")
    top = int(np.iinfo(dtype).max)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > top):
        bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
        raise ValueError(f"{what} must be from 0 to {top}, got {bad}")
    return np.ascontiguousarray(arr, dtype=dtype)


def _u32(a, what: str = "token ids") -> np.ndarray:
    return _whole_numbers(a, what)


_U32_MAX = 0xFFFFFFFF
_per_thread = threading.local()


def _answer():
    """This thread's igt_answer for one query (a model is queried from many threads; a
    buffer per thread costs less than one per call)."""
    try:
        return _per_thread.answer
    except AttributeError:
        _per_thread.answer = ffi.new("igt_answer *")
        return _per_thread.answer


def _context(context, window: int) -> list:
    """The last `window` ids of a context (oldest first), checked like every other input."""
    tail = context[-window:]
    if type(tail) in (list, tuple) and all(type(x) is int and 0 <= x <= _U32_MAX for x in tail):
        return tail     # the common case, a list of ids, without numpy's per-call cost (~15 µs)
    ctx = _u32(tail, "context")
    if ctx.ndim != 1:
        raise ValueError(f"a context is a sequence of token ids, got shape {ctx.shape}")
    return ctx.tolist()


class Builder:
    """Collects training instances, then builds an IGTree.

    memory_limit (bytes, optional) bounds the memory for instances and their sorting:
    beyond it they go to temporary files in tmpdir (default $TMPDIR or /tmp), removed
    however the build ends; the model is the same as without a limit. threads: 1 (default),
    n, or 0 for one per CPU; the model does not depend on it."""

    def __init__(self, vocab_size: int, window: int = 4, order="gain_ratio", top_k: int = 0,
                 tokenizer_name: str = "", tokenizer_digest: bytes = b"",
                 memory_limit: int | None = None, tmpdir=None, threads: int = 1):
        cfg = ffi.new("igt_config *")
        lib.igt_config_init(cfg, vocab_size)
        cfg.window = window
        if isinstance(order, str):
            if order not in ORDERS:
                raise ValueError(f"order must be one of {sorted(ORDERS)} or a permutation, got {order!r}")
            cfg.order = ORDERS[order]
        else:
            perm = list(order)
            cfg.order = lib.IGT_ORDER_EXPLICIT
            if sorted(perm) != list(range(window)):
                raise ValueError(f"permutation {perm} is not a permutation of 0..{window - 1}")
            for i, p in enumerate(perm):
                cfg.permutation[i] = p
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        cfg.top_k = min(top_k, TOPK_ALL)
        name = tokenizer_name.encode()[: lib.IGT_TOKENIZER_NAME_MAX - 1]
        ffi.memmove(cfg.tokenizer_name, name, len(name))
        if len(tokenizer_digest) > lib.IGT_TOKENIZER_DIGEST_SIZE:
            raise ValueError("tokenizer digest longer than 32 bytes")
        ffi.memmove(cfg.tokenizer_digest, tokenizer_digest, len(tokenizer_digest))
        self.window = window
        self.vocab_size = vocab_size
        err = ffi.new("igt_error *")
        out = ffi.new("igt_builder **")
        _check(lib.igt_builder_new(cfg, out, err), err)
        self._b = ffi.gc(out[0], lib.igt_builder_free)
        if threads < 0:
            raise ValueError(f"threads must be >= 0, got {threads}")
        _check(lib.igt_builder_set_threads(self._b, threads, err), err)
        if memory_limit is not None:
            if memory_limit < 0:
                raise ValueError(f"memory_limit must be >= 0, got {memory_limit}")
            tmp = os.fsencode(tmpdir) if tmpdir is not None else ffi.NULL
            _check(lib.igt_builder_set_memory_limit(self._b, memory_limit, tmp, err), err)

    def __len__(self) -> int:
        return int(lib.igt_builder_count(self._b))

    def add_instances(self, rows) -> None:
        """rows: (n, window+1) ids — context oldest first, then the class."""
        rows = _u32(rows, "instances")
        if rows.ndim != 2 or rows.shape[1] != self.window + 1:
            raise ValueError(f"instances must have shape (n, {self.window + 1}), got {rows.shape}")
        err = ffi.new("igt_error *")
        _check(lib.igt_builder_add_instances(
            self._b, ffi.from_buffer("uint32_t[]", rows), rows.shape[0], err), err)

    def add_documents(self, tokens, doc_starts) -> None:
        """tokens: all documents' ids concatenated; doc_starts: offset of each document."""
        tokens = _u32(tokens, "document tokens")
        starts = _whole_numbers(doc_starts, "document starts", np.uint64)
        err = ffi.new("igt_error *")
        _check(lib.igt_builder_add_documents(
            self._b, ffi.from_buffer("uint32_t[]", tokens), tokens.size,
            ffi.from_buffer("uint64_t[]", starts), starts.size, err), err)

    def add_document(self, tokens) -> None:
        self.add_documents(tokens, [0] if len(tokens) else [])

    def build(self, progress=None) -> IGTree:
        """Build the pruned tree. progress(phase, done, total) -> truthy cancels."""
        err = ffi.new("igt_error *")
        out = ffi.new("igt_model **")
        if progress is None:
            status = lib.igt_builder_build(self._b, out, ffi.NULL, ffi.NULL, err)
        else:
            handle = ffi.new_handle(progress)
            status = lib.igt_builder_build(self._b, out, lib._igt_progress, handle, err)
        _check(status, err)
        return IGTree(out[0])


class IGTree:
    """A built or loaded IGTree model (immutable, thread-safe to query)."""

    def __init__(self, ptr):
        self._m = ffi.gc(ptr, lib.igt_free)
        info = ffi.new("igt_info *")
        lib.igt_get_info(self._m, info)
        self.window = int(info.window)
        self.vocab_size = int(info.vocab_size)
        self.padding_id = int(info.padding_id)
        self.top_k = int(info.top_k)
        self.permutation = [int(info.permutation[i]) for i in range(self.window)]
        self.gain_ratio = [float(info.gain_ratio[i]) for i in range(self.window)]
        self.info_gain = [float(info.info_gain[i]) for i in range(self.window)]
        self.n_instances = int(info.n_instances)
        self.n_nodes = int(info.n_nodes)
        self.n_classes = int(info.n_classes)
        self.n_dist_entries = int(info.n_dist_entries)
        self.file_size = int(info.file_size)
        self.default_class = int(info.default_class)
        self.memory_mapped = bool(info.memory_mapped)  # always False: loads are private copies
        self.format_version = int(info.format_version)
        self.order = {v: k for k, v in ORDERS.items()}.get(int(info.order), "explicit")
        self.tokenizer_name = ffi.string(info.tokenizer_name).decode("utf-8", "replace")
        self.tokenizer_digest = bytes(ffi.buffer(info.tokenizer_digest))

    # -- files -------------------------------------------------------------
    @classmethod
    def load(cls, path, verify_checksum: bool = True) -> IGTree:
        """Read a model file (format 1 or 2) into private memory and validate it; a bad
        file raises ModelFileError naming the problem. The model never reads the file
        again, so replacing or truncating it cannot affect the model."""
        err = ffi.new("igt_error *")
        out = ffi.new("igt_model **")
        flags = 0 if verify_checksum else lib.IGT_LOAD_SKIP_CHECKSUM
        try:
            _check(lib.igt_load(os.fsencode(path), flags, out, err), err)
        except IGTreeError as e:   # name the file once, whatever the C message says
            where = os.fspath(path)
            if where in e.message:
                raise
            raise type(e)(e.code, f"{where}: {e.message}") from None
        return cls(out[0])

    @classmethod
    def from_bytes(cls, data: bytes, verify_checksum: bool = True) -> IGTree:
        err = ffi.new("igt_error *")
        out = ffi.new("igt_model **")
        flags = 0 if verify_checksum else lib.IGT_LOAD_SKIP_CHECKSUM
        _check(lib.igt_load_buffer(data, len(data), flags, out, err), err)
        return cls(out[0])

    def save(self, path, format_version: int = FORMAT_VERSION) -> None:
        """Write atomically (mode 0600); format_version=1 for readers older than version 2."""
        err = ffi.new("igt_error *")
        _check(lib.igt_save_version(self._m, os.fsencode(path), format_version, err), err)

    # -- queries -----------------------------------------------------------
    def predict(self, context) -> Answer:
        """The answer for the ids after `context` (oldest first; last `window` used)."""
        ctx = _context(context, self.window)
        a = _answer()
        lib.igt_predict(self._m, ctx, len(ctx), a)       # cffi passes the list as a uint32_t[]
        return Answer(a.token, a.depth, bool(a.leaf), a.node, a.winner_count, a.total, a.distance)

    def predict_token(self, context) -> int:
        """Fast path: only the predicted id."""
        ctx = _context(context, self.window)
        a = _answer()
        lib.igt_predict(self._m, ctx, len(ctx), a)
        return a.token

    def predict_batch(self, rows) -> np.ndarray:
        """rows: (n, window) ids, oldest first. Returns a structured array (ANSWER_DTYPE)."""
        rows = _u32(rows, "queries")
        if rows.ndim != 2 or rows.shape[1] != self.window:
            raise ValueError(f"queries must have shape (n, {self.window}), got {rows.shape}")
        out = np.empty(rows.shape[0], dtype=ANSWER_DTYPE)
        lib.igt_predict_batch(self._m, ffi.from_buffer("uint32_t[]", rows), rows.shape[0],
                              ffi.cast("igt_answer *", ffi.from_buffer(out)))
        return out

    def draft(self, context, k: int, min_depth: int = 0, min_share: float = 0.0) -> list[int]:
        """Up to k ids, each prediction appended to the context for the next.

        Stops before a prediction whose match depth is below min_depth or whose
        winner share of its node is below min_share.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        ctx = _context(context, self.window)
        tokens = ffi.new("uint32_t[]", max(k, 1))
        n = lib.igt_draft(self._m, ffi.new("uint32_t[]", ctx), len(ctx), k, min_depth,
                          min_share, tokens, ffi.NULL)
        return list(tokens[0:n])

    def draft_answers(self, context, k: int, min_depth: int = 0, min_share: float = 0.0) -> np.ndarray:
        """Like draft, with the full answer (depth, counts) of every drafted id."""
        ctx = _context(context, self.window)
        tokens = ffi.new("uint32_t[]", max(k, 1))
        out = np.empty(max(k, 1), dtype=ANSWER_DTYPE)
        n = lib.igt_draft(self._m, ffi.new("uint32_t[]", ctx), len(ctx), k, min_depth,
                          min_share, tokens, ffi.cast("igt_answer *", ffi.from_buffer(out)))
        return out[:n]

    def node_classes(self, node: int) -> list[tuple[int, int]]:
        """(class, count) pairs stored for a node, best first (needs top_k > 0)."""
        n = lib.igt_node_classes(self._m, node, ffi.NULL, ffi.NULL, 0)
        cls, cnt = ffi.new("uint32_t[]", max(n, 1)), ffi.new("uint32_t[]", max(n, 1))
        lib.igt_node_classes(self._m, node, cls, cnt, n)
        return [(cls[i], cnt[i]) for i in range(n)]

    # -- identity ----------------------------------------------------------
    def check_tokenizer(self, name: str, vocab_size: int, digest: bytes, fix: str | None = None) -> None:
        """Raise TokenizerMismatch unless the model was trained with this tokenizer; the
        message ends with `fix` (default: retrain for the verifier `name`)."""
        if self.vocab_size != vocab_size or self.tokenizer_digest != digest[:32].ljust(32, b"\0"):
            fix = fix or f"retrain the draft model for this verifier: `train --model {name}`"
            raise TokenizerMismatch(
                f"draft model was trained for tokenizer {self.tokenizer_name!r} "
                f"(vocab {self.vocab_size}, digest {self.tokenizer_digest.hex()[:12]}) but the "
                f"verifier uses {name!r} (vocab {vocab_size}, digest {digest.hex()[:12]}); {fix}")

    def describe(self) -> dict:
        return {
            "format_version": self.format_version, "window": self.window,
            "vocab_size": self.vocab_size, "order": self.order,
            "permutation": self.permutation, "gain_ratio": self.gain_ratio,
            "info_gain": self.info_gain, "instances": self.n_instances,
            "nodes": self.n_nodes, "classes": self.n_classes, "top_k": self.top_k,
            "stored_class_counts": self.n_dist_entries, "file_size": self.file_size,
            "default_class": self.default_class, "tokenizer": self.tokenizer_name,
            "tokenizer_digest": self.tokenizer_digest.hex(),
        }

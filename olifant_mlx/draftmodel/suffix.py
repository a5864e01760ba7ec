"""Python face of the retrieval C library (csrc/suffix.h): a corpus suffix array for
REST-style drafting, and llama.cpp's static n-gram cache.

    corpus = Corpus(tok.vocab_size, tok.name, tok.digest)
    corpus.add_documents(tokens, starts)             # as corpus.tokenized_batches yields them
    index = corpus.build_index(); index.save("legal.sfx")
    cache = corpus.build_ngram(order=2); cache.save("legal.ngc")
    SuffixIndex.load("legal.sfx").draft(context, k=8)

Every call that touches many tokens (building, drafting k tokens) is one C call.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from olifant_mlx.draftmodel.igtree import LibraryError, TokenizerMismatch, raise_status
from olifant_mlx.files import open_regular

try:
    from olifant_mlx.draftmodel._suffix import ffi, lib
except ImportError as _e:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        f"olifant_mlx's C extension (olifant_mlx.draftmodel._suffix) is missing from "
        f"{os.path.dirname(__file__)}: reinstall with `pip install -e .`, or run from another "
        f"directory than the source tree.") from _e

INDEX_MAGIC = b"OLIFSFX\0"
NGRAM_MAGIC = b"OLIFNGC\0"
# llama.cpp's static tier: draft_min_sample_size_lax / draft_min_percent_lax at
# LLAMA_NGRAM_STATIC - 1 (common/ngram-cache.cpp)
LLAMA_STATIC_MIN_SAMPLES = 2
LLAMA_STATIC_MIN_PERCENT = 50

ANSWER_DTYPE = np.dtype([("token", "<u4"), ("match", "<u4"), ("count", "<u4"), ("total", "<u4")])
NGRAM_ANSWER_DTYPE = np.dtype([("token", "<u4"), ("count", "<u4"), ("total", "<u4"),
                               ("n_next", "<u4")])
STAT_DTYPE = np.dtype([("length", "<u4"), ("reserved", "<u4"), ("lo", "<u8"), ("hi", "<u8"),
                       ("position", "<u8")])
PLACE_DTYPE = np.dtype([("position", "<u8"), ("document", "<u8"), ("offset", "<u8")])
assert ffi.sizeof("sfx_stat") == STAT_DTYPE.itemsize
assert ffi.sizeof("sfx_place") == PLACE_DTYPE.itemsize
assert ffi.sizeof("sfx_answer") == ANSWER_DTYPE.itemsize
assert ffi.sizeof("sfx_ngram_answer") == NGRAM_ANSWER_DTYPE.itemsize


def library_version() -> dict:
    return {"format_version": int(lib.SFX_FORMAT_VERSION), "max_order": int(lib.SFX_MAX_ORDER)}


class SuffixError(LibraryError):
    """A failed retrieval library call."""


class RetrievalFileError(SuffixError):
    """A suffix-index or n-gram-cache file that is missing, truncated, corrupt, foreign or of
    another version."""


def _check(status: int, err, where: str | None = None) -> None:
    raise_status(status, err, SuffixError, RetrievalFileError, where)


@ffi.def_extern()
def _sfx_progress(user, phase, done, total):
    callback = ffi.from_handle(user)
    try:
        return 1 if callback(ffi.string(phase).decode(), int(done), int(total)) else 0
    except BaseException:  # never unwind through C; cancel the build instead
        return 1


def _u32(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.uint32)


def _context(context):
    """A C uint32 array of the context ids (ids beyond 2^32 - 1 are refused by numpy)."""
    ctx = _u32(context) if not isinstance(context, np.ndarray) or context.dtype != np.uint32 \
        else np.ascontiguousarray(context)
    return ctx, ffi.from_buffer("uint32_t[]", ctx) if ctx.size else ffi.NULL


class Corpus:
    """Documents of token ids, the input of both builds."""

    def __init__(self, vocab_size: int, tokenizer_name: str = "", tokenizer_digest: bytes = b""):
        cfg = ffi.new("sfx_config *")
        lib.sfx_config_init(cfg, vocab_size)
        name = tokenizer_name.encode()[: lib.SFX_TOKENIZER_NAME_MAX - 1]
        ffi.memmove(cfg.tokenizer_name, name, len(name))
        if len(tokenizer_digest) > lib.SFX_TOKENIZER_DIGEST_SIZE:
            raise ValueError("tokenizer digest longer than 32 bytes")
        ffi.memmove(cfg.tokenizer_digest, tokenizer_digest, len(tokenizer_digest))
        self.vocab_size = vocab_size
        err = ffi.new("sfx_error *")
        out = ffi.new("sfx_corpus **")
        _check(lib.sfx_corpus_new(cfg, out, err), err)
        self._c = ffi.gc(out[0], lib.sfx_corpus_free)

    def add_documents(self, tokens, doc_starts) -> None:
        """tokens: all documents' ids concatenated; doc_starts: offset of each document."""
        tokens = _u32(tokens)
        starts = np.ascontiguousarray(doc_starts, dtype=np.uint64)
        err = ffi.new("sfx_error *")
        _check(lib.sfx_corpus_add_documents(
            self._c, ffi.from_buffer("uint32_t[]", tokens), tokens.size,
            ffi.from_buffer("uint64_t[]", starts), starts.size, err), err)

    def add_document(self, tokens) -> None:
        self.add_documents(tokens, [0] if len(tokens) else [])

    @property
    def tokens(self) -> int:
        return int(lib.sfx_corpus_tokens(self._c))

    @property
    def documents(self) -> int:
        return int(lib.sfx_corpus_documents(self._c))

    def _build(self, fn, *args, progress=None):
        err = ffi.new("sfx_error *")
        if progress is None:
            status = fn(self._c, *args, ffi.NULL, ffi.NULL, err)
        else:
            handle = ffi.new_handle(progress)
            status = fn(self._c, *args, lib._sfx_progress, handle, err)
        _check(status, err)

    def build_index(self, progress=None) -> SuffixIndex:
        """The suffix array (SA-IS). progress(phase, done, total) -> truthy cancels."""
        out = ffi.new("sfx_index **")
        self._build(lib.sfx_index_build, out, progress=progress)
        return SuffixIndex(out[0])

    def build_ngram(self, order: int = 2, progress=None) -> NgramCache:
        """llama.cpp's static n-gram cache (order 2 is LLAMA_NGRAM_STATIC)."""
        out = ffi.new("sfx_ngram **")
        self._build(lib.sfx_ngram_build, order, out, progress=progress)
        return NgramCache(out[0])


class _RetrievalFile:
    """What both structures share: files (load, from_bytes, save) and the tokenizer check."""
    kind = "retrieval file"
    _ctype = ""               # "sfx_index" or "sfx_ngram": the C functions' prefix

    def __init__(self, ptr, path=None):
        self.path = os.fspath(path) if path is not None else None   # the file it was loaded from
        self._h = ffi.gc(ptr, getattr(lib, f"{self._ctype}_free"))
        info = ffi.new(f"{self._ctype}_info *")
        getattr(lib, f"{self._ctype}_get_info")(self._h, info)
        self.format_version = int(info.format_version)
        self.vocab_size = int(info.vocab_size)
        self.file_size = int(info.file_size)
        self.memory_mapped = bool(info.memory_mapped)
        self.tokenizer_name = ffi.string(info.tokenizer_name).decode("utf-8", "replace")
        self.tokenizer_digest = bytes(ffi.buffer(info.tokenizer_digest))
        self._facts(info)

    def _facts(self, info) -> None:
        raise NotImplementedError

    @classmethod
    def _open(cls, path=None, data=None, verify_checksum=True):
        err = ffi.new("sfx_error *")
        out = ffi.new(f"{cls._ctype} **")
        flags = 0 if verify_checksum else lib.SFX_LOAD_SKIP_CHECKSUM
        if path is not None:
            load = getattr(lib, f"{cls._ctype}_load")
            _check(load(os.fsencode(path), flags, out, err), err, os.fspath(path))
        else:
            load = getattr(lib, f"{cls._ctype}_load_buffer")
            _check(load(data, len(data), flags, out, err), err)
        return cls(out[0], path)

    @classmethod
    def load(cls, path, verify_checksum: bool = True):
        """Read a file into private memory (a later rewrite of the file cannot change or crash
        the loaded structure); a bad file raises RetrievalFileError naming the problem."""
        return cls._open(path=path, verify_checksum=verify_checksum)

    @classmethod
    def from_bytes(cls, data: bytes, verify_checksum: bool = True):
        return cls._open(data=data, verify_checksum=verify_checksum)

    def save(self, path) -> None:
        err = ffi.new("sfx_error *")
        _check(getattr(lib, f"{self._ctype}_save")(self._h, os.fsencode(path), err), err)

    def check_tokenizer(self, name: str, vocab_size: int, digest: bytes, fix: str | None = None) -> None:
        """Raise TokenizerMismatch unless built with this tokenizer (as IGTree.check_tokenizer).

        The same tokenizer (name and digest) with another vocabulary size is no mismatch but a
        damaged header (one whose checksums were recomputed): a RetrievalFileError naming the file."""
        where = f"{self.path}: " if self.path else ""
        same_tokenizer = (self.tokenizer_name == name and self.tokenizer_digest == digest[:32].ljust(32, b"\0"))
        if same_tokenizer and self.vocab_size != vocab_size:
            raise RetrievalFileError(lib.OLIF_ERR_CORRUPT, (
                f"{where}the header says tokenizer {name!r} (digest {digest.hex()[:12]}) with "
                f"vocab {self.vocab_size}, but that tokenizer has vocab {vocab_size}: the file is "
                f"damaged; rebuild it with `build-rest --tokenizer {name}`"))
        if not same_tokenizer or self.vocab_size != vocab_size:
            raise TokenizerMismatch(
                f"{where}{self.kind} was built for tokenizer {self.tokenizer_name!r} "
                f"(vocab {self.vocab_size}, digest {self.tokenizer_digest.hex()[:12]}) but the "
                f"verifier uses {name!r} (vocab {vocab_size}, digest {digest.hex()[:12]}); "
                f"{fix or f'build one for it with `build-rest --tokenizer {name}`'}")

    def _describe(self, **facts) -> dict:
        return {"kind": self.kind, "format_version": self.format_version,
                "vocab_size": self.vocab_size, **facts, "file_size": self.file_size,
                "tokenizer": self.tokenizer_name, "tokenizer_digest": self.tokenizer_digest.hex()}


@dataclass(frozen=True)
class Match:
    length: int       # ids of the context's longest suffix found in the corpus
    count: int        # its occurrences


class SuffixIndex(_RetrievalFile):
    """A suffix array over a corpus (immutable, thread-safe to query)."""
    kind = "suffix index"
    _ctype = "sfx_index"

    def _facts(self, info) -> None:
        self.separator = int(info.separator)
        self.token_bytes = int(info.token_bytes)
        self.n_text = int(info.n_text)
        self.n_tokens = int(info.n_tokens)
        self.n_documents = int(info.n_documents)

    def verify(self) -> None:
        """The full order check (slow on large corpora): RetrievalFileError if it fails."""
        err = ffi.new("sfx_error *")
        _check(lib.sfx_index_verify(self._h, err), err)

    def count(self, pattern) -> int:
        """Occurrences of the id sequence in the corpus."""
        arr, ptr = _context(pattern)
        return int(lib.sfx_index_count(self._h, ptr, arr.size))

    def match(self, context, max_match: int = 0) -> Match:
        """The longest suffix of context (at most max_match ids; 0: any) in the corpus."""
        arr, ptr = _context(context)
        count = ffi.new("uint64_t *")
        m = lib.sfx_index_match(self._h, ptr, arr.size, max_match, count)
        return Match(int(m), int(count[0]))

    def draft_answers(self, context, k: int, max_match: int = 0, min_match: int = 1,
                      min_count: int = 1, min_share: float = 0.0) -> np.ndarray:
        """Up to k ids continuing the longest suffix match, each the most frequent
        continuation, with match length, count and total (ANSWER_DTYPE)."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        arr, ptr = _context(context)
        out = np.empty(max(k, 1), dtype=ANSWER_DTYPE)
        tokens = np.empty(max(k, 1), dtype=np.uint32)
        n = lib.sfx_index_draft(self._h, ptr, arr.size, k, max_match, min_match, min_count,
                                min_share, ffi.from_buffer("uint32_t[]", tokens),
                                ffi.cast("sfx_answer *", ffi.from_buffer(out)))
        return out[:n]

    def draft_lists(self, context, k: int, max_match: int = 0, min_match: int = 1,
                    min_count: int = 1, min_share: float = 0.0) -> tuple:
        """draft_answers as plain lists (tokens, match, count, total): the drafters' fast path."""
        if k <= 0:
            return [], [], [], []
        ctx = ffi.new("uint32_t[]", list(context))
        tokens, answers = ffi.new("uint32_t[]", k), ffi.new("sfx_answer[]", k)
        n = lib.sfx_index_draft(self._h, ctx, len(ctx), k, max_match, min_match, min_count,
                                min_share, tokens, answers)
        a = answers[0:n]
        return (ffi.unpack(tokens, n), [x.match for x in a], [x.count for x in a],
                [x.total for x in a])

    def draft(self, context, k: int, **kw) -> list[int]:
        return self.draft_lists(context, k, **kw)[0]

    def matching_stats(self, ids, max_length: int = 0) -> np.ndarray:
        """For every position i of ids, the longest prefix of ids[i:] in the corpus (within one
        document): its length, its suffix-array interval [lo, hi) and one occurrence's text
        position (STAT_DTYPE), in one C pass."""
        arr, ptr = _context(ids)
        out = np.zeros(max(arr.size, 1), dtype=STAT_DTYPE)
        err = ffi.new("sfx_error *")
        _check(lib.sfx_index_matching_stats(self._h, ptr, arr.size, max_length,
                                            ffi.cast("sfx_stat *", ffi.from_buffer(out)), err), err)
        return out[:arr.size]

    def places(self, lo: int, hi: int, limit: int = 5) -> np.ndarray:
        """The places (text position, document, offset in it; PLACE_DTYPE) of suffixes
        lo .. hi-1, in suffix-array order, at most `limit` of them."""
        out = np.zeros(max(limit, 1), dtype=PLACE_DTYPE)
        n = ffi.new("size_t *")
        err = ffi.new("sfx_error *")
        _check(lib.sfx_index_places(self._h, lo, hi, max(limit, 0),
                                    ffi.cast("sfx_place *", ffi.from_buffer(out)), n, err), err)
        return out[:n[0]]

    def locate(self, position: int) -> tuple[int, int]:
        """(document, offset in it) of a text position."""
        place = ffi.new("sfx_place *")
        err = ffi.new("sfx_error *")
        _check(lib.sfx_index_locate(self._h, position, place, err), err)
        return int(place.document), int(place.offset)

    def describe(self) -> dict:
        return self._describe(tokens=self.n_tokens, documents=self.n_documents, text=self.n_text,
                              token_bytes=self.token_bytes,
                              bytes_per_token=round(self.file_size / self.n_tokens, 3))


@dataclass(frozen=True)
class NgramAnswer:
    token: int
    count: int
    total: int
    n_next: int

    @property
    def share(self) -> float:
        return self.count / self.total if self.total else 0.0


class NgramCache(_RetrievalFile):
    """llama.cpp's static n-gram cache over a corpus (immutable, thread-safe to query)."""
    kind = "n-gram cache"
    _ctype = "sfx_ngram"

    def _facts(self, info) -> None:
        self.order = int(info.order)
        self.n_contexts = int(info.n_contexts)
        self.n_pairs = int(info.n_pairs)
        self.n_instances = int(info.n_instances)

    def lookup(self, context) -> NgramAnswer | None:
        """The winner after the context's last `order` ids, or None (unseen or too short)."""
        arr, ptr = _context(context)
        a = ffi.new("sfx_ngram_answer *")
        if not lib.sfx_ngram_lookup(self._h, ptr, arr.size, a):
            return None
        return NgramAnswer(a.token, a.count, a.total, a.n_next)

    def next_counts(self, context) -> list[tuple[int, int]]:
        """(id, count) of everything seen after the context's last `order` ids, by id."""
        arr, ptr = _context(context)
        n = lib.sfx_ngram_next(self._h, ptr, arr.size, ffi.NULL, ffi.NULL, 0)
        toks, cnts = ffi.new("uint32_t[]", max(n, 1)), ffi.new("uint32_t[]", max(n, 1))
        lib.sfx_ngram_next(self._h, ptr, arr.size, toks, cnts, n)
        return [(toks[i], cnts[i]) for i in range(n)]

    def draft_answers(self, context, k: int, min_samples: int = LLAMA_STATIC_MIN_SAMPLES,
                      min_percent: int = LLAMA_STATIC_MIN_PERCENT) -> np.ndarray:
        """llama.cpp's static drafting: up to k winners, stopping below the thresholds."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        arr, ptr = _context(context)
        out = np.empty(max(k, 1), dtype=NGRAM_ANSWER_DTYPE)
        tokens = np.empty(max(k, 1), dtype=np.uint32)
        n = lib.sfx_ngram_draft(self._h, ptr, arr.size, k, min_samples, min_percent,
                                ffi.from_buffer("uint32_t[]", tokens),
                                ffi.cast("sfx_ngram_answer *", ffi.from_buffer(out)))
        return out[:n]

    def draft_lists(self, context, k: int, min_samples: int = LLAMA_STATIC_MIN_SAMPLES,
                    min_percent: int = LLAMA_STATIC_MIN_PERCENT) -> tuple:
        """draft_answers as plain lists (tokens, count, total): the drafters' fast path."""
        if k <= 0:
            return [], [], []
        ctx = ffi.new("uint32_t[]", list(context))
        tokens, answers = ffi.new("uint32_t[]", k), ffi.new("sfx_ngram_answer[]", k)
        n = lib.sfx_ngram_draft(self._h, ctx, len(ctx), k, min_samples, min_percent, tokens,
                                answers)
        a = answers[0:n]
        return ffi.unpack(tokens, n), [x.count for x in a], [x.total for x in a]

    def draft(self, context, k: int, **kw) -> list[int]:
        return self.draft_lists(context, k, **kw)[0]

    def describe(self) -> dict:
        return self._describe(order=self.order, contexts=self.n_contexts, pairs=self.n_pairs,
                              instances=self.n_instances,
                              bytes_per_instance=round(self.file_size / max(self.n_instances, 1), 3))


def load_retrieval(path, verify_checksum: bool = True):
    """A SuffixIndex or NgramCache, whichever the file's magic says."""
    fd = open_regular(path)         # a FIFO or device is refused, never waited on
    try:
        head = os.read(fd, 8)
    finally:
        os.close(fd)
    if head == NGRAM_MAGIC:
        return NgramCache.load(path, verify_checksum)
    return SuffixIndex.load(path, verify_checksum)

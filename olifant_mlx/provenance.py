"""Provenance: which spans of an output occur verbatim in a precedent library, and where.

    sources = find_sources(library.load("contracts"), ids, min_tokens=12, tokenizer=tok)
    tracker = SourceTracker(lib, max_verbatim=40, other_matters_of="acme")
    for chunk in stream: closed = tracker.feed(chunk); tripped = tracker.guard_tripped()
    rest = tracker.close()

Both rest on the suffix index's matching statistics (csrc/suffix.h, one C pass): for every
output position i, ms[i] is the length of the longest prefix of ids[i:] that occurs in one
document, with its suffix-array interval. A span [i, i + ms[i]) is maximal (in no longer
verbatim span) exactly when i == 0 or ms[i] >= ms[i - 1], since ms[i] >= ms[i - 1] - 1 always.
Every verbatim span of >= min_tokens ids lies in a reported one, and every reported one occurs
at each place given (docs/provenance.md).
"""
from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from olifant_mlx.draftmodel.suffix import SuffixIndex
from olifant_mlx.files import read_regular

MIN_TOKENS = 12
MAX_PLACES = 5
GUARD_SCAN = 10_000     # occurrences read to find one in another matter's document


@dataclass(frozen=True)
class Place:
    """One occurrence of a span in the library."""
    document: int           # the document's id in documents.json
    path: str               # relative to the library's folder
    title: str
    matter: str | None
    page: int               # from 1; 0 when the document has no pages
    paragraph: int          # from 1
    offset: int             # token offset of the span in the document
    char: int | None = None  # character offset in its paragraph's text (with a tokenizer)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Source:
    """A span of the output, ids [start, end), that occurs verbatim in the library."""
    start: int
    end: int
    tokens: int
    text: str | None
    places: tuple[Place, ...]
    count: int = 0          # occurrences in the library (places lists at most max_places)

    def as_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "tokens": self.tokens, "text": self.text,
                "count": self.count, "places": [p.as_dict() for p in self.places]}


class LibraryIndex:
    """A library's suffix index and document table, loaded once (see `index_of`)."""

    def __init__(self, lib):
        self.library = lib
        self.index = SuffixIndex.load(lib.index_path)
        self.rows = lib.table()
        # the index numbers non-empty documents only, in table order
        self.indexed = [r for r in self.rows if r["tokens"]]
        self._stream = None

    @classmethod
    def of_parts(cls, index: SuffixIndex, rows: list[dict], stream: np.ndarray, library=None) -> LibraryIndex:
        """An index over text that is no library's own: drafting's precedents (a row's
        `numbers`, when given, are its paragraphs' numbers in their document)."""
        li = cls.__new__(cls)
        li.library, li.index, li.rows, li._stream = library, index, rows, stream
        li.indexed = [r for r in rows if r["tokens"]]
        return li

    @property
    def stream(self) -> np.ndarray:
        """The library's token stream (tokens.u32), read when first needed."""
        if self._stream is None:
            self._stream = np.frombuffer(read_regular(Path(self.library.path) / "tokens.u32"), dtype="<u4")
        return self._stream

    def row(self, document: int) -> dict:
        return self.indexed[document]

    def place(self, document: int, offset: int, tokenizer=None) -> Place:
        row = self.indexed[document]
        i = max(bisect.bisect_right(row["paragraphs"], offset), 1)
        pages = row.get("pages") or []
        page = int(pages[i - 1]) if i - 1 < len(pages) else 0
        paragraph = int(row["numbers"][i - 1]) if "numbers" in row else i
        char = None
        if tokenizer is not None:
            begin = row["start"] + row["paragraphs"][i - 1]
            char = len(tokenizer.decode([int(t) for t in self.stream[begin:row["start"] + offset]]))
        return Place(int(row["id"]), row["path"], row.get("title", ""), row.get("matter"), page,
                     paragraph, int(offset), char)

    def places(self, lo: int, hi: int, max_places: int, tokenizer=None, keep=None) -> tuple[Place, ...]:
        """Places of suffixes [lo, hi), by document and offset: at most max_places of the
        first `GUARD_SCAN` (keep(row) -> bool filters the documents)."""
        found = self.index.places(lo, hi, limit=min(hi - lo, GUARD_SCAN if keep else max(max_places * 8, 64)))
        pairs = sorted({(int(p["document"]), int(p["offset"])) for p in found})
        if keep is not None:
            pairs = [(d, o) for d, o in pairs if keep(self.indexed[d])]
        return tuple(self.place(d, o, tokenizer) for d, o in pairs[:max_places])

    def passage(self, place: Place, tokens: int, tokenizer) -> str:
        """The library's text of `tokens` ids at a place (the source passage, on demand)."""
        row = self.rows[place.document]
        begin = row["start"] + place.offset
        return tokenizer.decode([int(t) for t in self.stream[begin:begin + tokens]])


_loaded: dict[tuple, LibraryIndex] = {}


def index_of(lib) -> LibraryIndex:
    """The LibraryIndex of a library (or a library name; a LibraryIndex passes through),
    loaded once per build of it."""
    if isinstance(lib, LibraryIndex):
        return lib
    if isinstance(lib, str):
        from olifant_mlx import library
        lib = library.load(lib)
    key = (str(lib.path), lib.meta.get("built_at"), lib.meta.get("tokens"))
    if key not in _loaded:
        _loaded[key] = LibraryIndex(lib)
    return _loaded[key]


_walled: dict[tuple, LibraryIndex] = {}


def walled_index(lib, matters) -> LibraryIndex:
    """The index of a library's documents of `matters` and of none alone (a server key's wall):
    its spans, places and counts are those of a library that holds nothing else, so nothing of
    another matter's documents shows, not even that they hold a span. Built once per build of
    the library and wall; the library's own index when the wall leaves out no document."""
    from olifant_mlx.draftmodel.suffix import Corpus

    li = index_of(lib)
    seen = frozenset(matters)
    rows = [r for r in li.rows if r.get("matter") is None or r["matter"] in seen]
    if len(rows) == len(li.rows):
        return li
    meta = li.library.meta
    key = (str(li.library.path), meta.get("built_at"), meta.get("tokens"), seen)
    if key not in _walled:
        kept, parts, start = [], [], 0
        for r in rows:
            kept.append({**r, "start": start})
            parts.append(li.stream[r["start"]:r["start"] + r["tokens"]])
            start += r["tokens"]
        stream = np.concatenate(parts) if parts else np.zeros(0, np.uint32)
        tok = meta["tokenizer"]
        corpus = Corpus(tok["vocab_size"], tok["name"], bytes.fromhex(tok["digest"]))
        corpus.add_documents(stream, np.asarray([r["start"] for r in kept if r["tokens"]], dtype=np.uint64))
        _walled[key] = LibraryIndex.of_parts(corpus.build_index(), kept, stream, li.library)
    return _walled[key]


def _source(li: LibraryIndex, ids, start: int, end: int, lo: int, hi: int, tokenizer,
            max_places: int, keep=None) -> Source:
    text = tokenizer.decode([int(t) for t in ids[start:end]]) if tokenizer is not None else None
    return Source(start, end, end - start, text, li.places(lo, hi, max_places, tokenizer, keep), hi - lo)


def token_ids(ids) -> np.ndarray:
    """The output's ids as uint32, by the IGTree binding's one rule for ids (ValueError for -5,
    1.5 or 2**32, where numpy's cast would wrap, truncate or alias them)."""
    from olifant_mlx.draftmodel.igtree import _u32

    return _u32(ids, "output token ids")


def find_sources(library, ids, min_tokens: int = MIN_TOKENS, tokenizer=None,
                 max_places: int = MAX_PLACES) -> list[Source]:
    """The maximal spans of >= min_tokens ids of `ids` that occur verbatim in the library,
    by start (a span inside a longer reported one is not reported again; spans may overlap)."""
    if min_tokens < 1:
        raise ValueError(f"min_tokens must be >= 1, got {min_tokens}")
    ids = token_ids(ids)
    li = index_of(library)
    ms = li.index.matching_stats(ids)
    length = ms["length"].astype(np.int64)
    prev = np.concatenate([[-1], length[:-1]])
    starts = np.flatnonzero((length >= min_tokens) & (length >= prev))
    return [_source(li, ids, int(i), int(i + length[i]), int(ms["lo"][i]), int(ms["hi"][i]),
                    tokenizer, max_places) for i in starts]


class SourceTracker:
    """Sources found while the output grows: feed(ids) as tokens are emitted returns the spans
    that can no longer grow; close() returns the rest. The open run (the longest suffix of the
    output found in the library) is what the verbatim guard watches.

    Every position whose match reaches the end of the output is still open; they form a
    suffix [open_start, n) of the output (i + ms[i] never decreases), and ms[i] = n - i there.
    Each feed recomputes the matching statistics of that window only."""

    def __init__(self, library, min_tokens: int = MIN_TOKENS, max_verbatim: int | None = None,
                 other_matters_of: str | None = None, tokenizer=None, max_places: int = MAX_PLACES):
        if min_tokens < 1:
            raise ValueError(f"min_tokens must be >= 1, got {min_tokens}")
        if max_verbatim is not None and max_verbatim < 1:
            raise ValueError(f"max_verbatim must be >= 1, got {max_verbatim}")
        self.li = index_of(library)
        self.min_tokens = min_tokens
        self.max_verbatim = max_verbatim
        self.matter = other_matters_of
        self.tokenizer = tokenizer
        self.max_places = max_places
        self.ids: list[int] = []
        self.sources: list[Source] = []     # every source closed so far
        self.open_start = 0
        self._last = -1                     # the final ms of the position before open_start
        self._window = None                 # the open window's matching statistics
        self._tripped = set()               # where runs the guard reported start: always listed

    @property
    def longest_open(self) -> int:
        """The current verbatim run: ids at the end of the output found in the library."""
        return len(self.ids) - self.open_start

    def feed(self, ids) -> list[Source]:
        """Add emitted ids; return the sources closed by them."""
        new = token_ids(ids).tolist()
        if not new:
            return []
        self.ids.extend(new)
        n = len(self.ids)
        window = np.asarray(self.ids[self.open_start:], dtype=np.uint32)
        ms = self.li.index.matching_stats(window)
        closed = []
        i = 0
        while i < len(window) and self.open_start + i + int(ms["length"][i]) < n:
            closed += self._finish(self.open_start + i, ms[i])
            i += 1
        self.open_start += i
        self._window = ms[i:]
        self.sources += closed
        return closed

    def _finish(self, pos: int, stat) -> list[Source]:
        length = int(stat["length"])
        out = []
        if (length >= self.min_tokens or pos in self._tripped) and length >= self._last:
            out.append(_source(self.li, self.ids, pos, pos + length, int(stat["lo"]), int(stat["hi"]),
                               self.tokenizer, self.max_places))
        self._last = length
        return out

    def close(self) -> list[Source]:
        """The sources still open at the end of the output (then the tracker starts afresh)."""
        rest = []
        if self._window is not None and len(self._window):
            rest = self._finish(self.open_start, self._window[0])
        self.sources += rest
        self.open_start = len(self.ids)
        self._window = None
        self._last = -1
        return rest

    def _keep(self, row) -> bool:
        return row.get("matter") != self.matter

    def guard_tripped(self) -> Source | None:
        """The open run when it is longer than max_verbatim ids (with other_matters_of, found
        in a document of another matter), else None. The Source's places are such documents;
        the run is then listed among the sources even when shorter than min_tokens."""
        m = self.max_verbatim
        if m is None or self._window is None or self.longest_open <= m:
            return None
        n = len(self.ids)
        keep = self._keep if self.matter is not None else None
        # the whole run first, then (if only this matter's documents hold all of it) its last m + 1 ids
        for j in (0, self.longest_open - m - 1):
            stat = self._window[j]
            src = _source(self.li, self.ids, self.open_start + j, n, int(stat["lo"]), int(stat["hi"]),
                          self.tokenizer, self.max_places, keep)
            if src.places:
                self._tripped.add(self.open_start)   # listed in the sources even under min_tokens
                return src
        return None

"""A library's passages as a ranked full-text index: what `library search` and drafting with
precedents (olifant_mlx.precedents) retrieve from.

    hits = search(library.load("contracts"), "confidentiality auditors three years", matter="acme", n=5)
    hits[0].citation()   # 'nda-2019.docx, page 2, paragraph 4'

`passages.sqlite` in the library folder is an SQLite FTS5 table, one row per paragraph of every
document (the library's paragraphs, as documents.json numbers them): the window of that
paragraph and the ones after it up to WINDOW_TOKENS tokens (so a heading is found with the text
under it), ranked by BM25 over the window's text (Porter-stemmed words) and, at half weight,
its document's title, both NFKC-normalised for searching (`words`, `heading`; fold). A paragraph's
text (`text`, `own`) is its tokens decoded, exactly what the verifier reads. The file is built
with the rest of the library in its temporary folder, from the token stream and the document
table alone, so an updated library's index equals a full build's.
"""
from __future__ import annotations

import contextlib
import re
import sqlite3
import unicodedata
from itertools import zip_longest
from dataclasses import asdict, dataclass
from pathlib import Path

FILE = "passages.sqlite"
FORMAT = 2               # 2: the text and title searched NFKC-normalised, in columns of their own
READS = (1, 2)           # 1: the text and title searched as they are (ligatures, full-width letters unfolded)
TITLE_WEIGHT = 0.5
PHRASE_WEIGHT = 3        # a quoted phrase counts as this many words
FIRST_STAGE = 200        # passages ranked to find the documents, with a quoted part
DOCUMENTS = 3            # documents whose passages the quoted part ranks
WINDOW_TOKENS = 200      # a passage: a paragraph and the ones after it, until this many tokens
MAX_PASSAGES = 100_000  # the most one search returns
MAX_QUERY_WORDS = 64     # a conversation as a query: its most recent words
# words that match nearly every passage: dropped from queries (BM25 weighs them low, but an
# OR of them would still rank a passage full of "the" and "of" above none)
STOPWORDS = frozenset("""a an and are as at be been by can could do does for from has have he her his
i if in into is it its me my no not of on or our shall she should so such than that the their them
then there these they this those to under up us was we were what when where which who will with would
you your please draft write using use above below following headed titled entitled called new based""".split())


class PassageError(ValueError):
    """A query or an index that cannot be used; the message says which and why."""


class UnusableIndex(PassageError):
    """A library's passage index that is missing, damaged or of another format (not the query's fault)."""


@dataclass(frozen=True)
class Passage:
    """A run of paragraphs of one document (one paragraph, or a retrieval window of them), as
    retrieved or pinned."""
    document: int            # its id in documents.json (-1: a pinned file outside any library)
    path: str                # relative to the library's folder (a pinned file: as given)
    title: str
    matter: str | None
    paragraph: int           # its first paragraph, from 1
    page: int                # that paragraph's page, from 1; 0 when the format has none
    tokens: int              # its ids in the library (with the blank line after each paragraph)
    text: str                # its paragraphs' text, joined by blank lines
    score: float = 0.0       # BM25 (higher is better); 0 for a pinned passage
    library: str | None = None
    pinned: bool = False
    last: int = 0            # its last paragraph (0: the first one alone)

    @property
    def end(self) -> int:
        return max(self.last, self.paragraph)

    def citation(self) -> str:
        page = f", page {self.page}" if self.page else ""
        one = self.end == self.paragraph
        return f"{self.path}{page}, " + (f"paragraph {self.paragraph}" if one else
                                         f"paragraphs {self.paragraph}-{self.end}")

    def paragraphs(self) -> list[str]:
        """Its paragraphs' texts (one text when they cannot be told apart)."""
        parts = self.text.split("\n\n")
        return parts if len(parts) == self.end - self.paragraph + 1 else [self.text]

    def as_dict(self) -> dict:
        return {**asdict(self), "last": self.end, "citation": self.citation()}


def path_of(lib) -> Path:
    return Path(lib.path) / FILE


COLUMNS = "document, path, title, matter, paragraph, page, tokens, text, last"


def write(path: Path, rows: list[dict], stream, tokenizer) -> int:
    """Write the index of the documents in `rows` (documents.json's table) whose ids are in
    `stream`, the library's token stream; return the number of passages (windows)."""
    path = Path(path)
    con = sqlite3.connect(path)
    try:
        con.executescript(f"""
            PRAGMA journal_mode = OFF;
            PRAGMA user_version = {FORMAT};
            CREATE VIRTUAL TABLE passages USING fts5(
                words, heading, text UNINDEXED, title UNINDEXED, path UNINDEXED, document UNINDEXED,
                matter UNINDEXED, paragraph UNINDEXED, page UNINDEXED, tokens UNINDEXED, last UNINDEXED,
                own UNINDEXED, own_tokens UNINDEXED, tokenize = 'porter unicode61');""")
        n = 0
        with con:
            for row in rows:
                paras = _paragraphs(row, stream, tokenizer)
                for i, (number, page, text, size) in enumerate(paras):
                    j, tokens = i, size
                    while tokens < WINDOW_TOKENS and j + 1 < len(paras) and paras[j + 1][0] == paras[j][0] + 1:
                        j += 1
                        tokens += paras[j][3]
                    window = "\n\n".join(p[2] for p in paras[i:j + 1])
                    title = row.get("title", "")
                    con.execute("INSERT INTO passages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (fold(window), fold(title), window, title, row["path"], int(row["id"]),
                                 row.get("matter"), number, page, tokens, paras[j][0], text, size))
                    n += 1
    finally:
        con.close()
    return n


def _paragraphs(row: dict, stream, tokenizer) -> list[tuple]:
    """(number from 1, page, text, tokens) of each paragraph of a document row with text."""
    start, offsets = int(row["start"]), [int(o) for o in row["paragraphs"]]
    ends = offsets[1:] + [int(row["tokens"])]
    pages = row.get("pages") or []
    out = []
    for i, (a, b) in enumerate(zip(offsets, ends)):
        text = tokenizer.decode([int(t) for t in stream[start + a:start + b]]).strip() if b > a else ""
        if text:
            out.append((i + 1, int(pages[i]) if i < len(pages) else 0, text, b - a))
    return out


def fold(text: str) -> str:
    """`text` as it is searched: NFKC-normalised, so that full-width letters (ＣＯＮＦＩＤＥＮＴＩＡＬ) and
    ligatures (ﬁnancial, common in PDFs) are the letters they stand for, in a query and in the index."""
    return unicodedata.normalize("NFKC", text)


def words_of(text: str) -> list[str]:
    """The words of a text as queries see them: folded (fold), lower-cased runs of letters and digits."""
    return re.findall(r"\w+", fold(text).lower())


def query_words(text: str) -> list[str]:
    """The words of a query that can match: lower-cased, stopwords and one-letter words out,
    each once, at most MAX_QUERY_WORDS (the last ones: in a conversation, the latest)."""
    seen, words = set(), []
    for w in reversed(words_of(text)):
        if len(w) > 1 and w not in STOPWORDS and w not in seen:
            seen.add(w)
            words.append(w)
    return list(reversed(words[:MAX_QUERY_WORDS]))


def searchable(query: str) -> list[str]:
    """query_words, or a PassageError when it has none (empty, or common words only)."""
    words = query_words(query)
    if not words:
        raise PassageError("the query has no words to search for" + (
            f" (only common words: {query.strip()[:60]!r})" if query.strip() else " (it is empty)"))
    return words


def rank(texts: list[str], query: str) -> list[tuple[int, float]]:
    """(index, BM25 score) of the `texts` that match any of the query's words, best first (an
    in-memory FTS5 table built as a library's: Porter stems): a document's own paragraphs
    searched (olifant_mlx.revise). PassageError for a query without words to search for."""
    words = searchable(query)
    con = sqlite3.connect(":memory:")
    try:
        con.execute("CREATE VIRTUAL TABLE texts USING fts5(text, tokenize = 'porter unicode61')")
        con.executemany("INSERT INTO texts (rowid, text) VALUES (?, ?)", ((i, fold(t)) for i, t in enumerate(texts)))
        rows = con.execute("SELECT rowid, -bm25(texts) FROM texts WHERE texts MATCH ? ORDER BY bm25(texts), rowid",
                           (" OR ".join(f'"{w}"' for w in words),)).fetchall()
    finally:
        con.close()
    return [(int(i), round(float(s), 4)) for i, s in rows]


def _fix(lib) -> str:
    return (f"rebuild it: `python -m olifant_mlx library build {lib.name} {lib.meta.get('folder', 'FOLDER')} "
            f"--tokenizer {lib.meta.get('tokenizer', {}).get('name', 'TOKENIZER')}`")


def open_index(lib) -> sqlite3.Connection:
    """The library's passage index, read-only; PassageError naming the rebuild when the
    library was built before passages were indexed (or the file is damaged)."""
    path = path_of(lib)
    if not path.is_file() or path.is_symlink():
        raise UnusableIndex(f"library {lib.name!r} has no passage index (built before libraries were "
                           f"searchable): {_fix(lib)}")
    con = None
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        version = con.execute("PRAGMA user_version").fetchone()[0]
        con.execute("SELECT count(*) FROM passages").fetchone()
    except (sqlite3.Error, ValueError) as e:    # a damaged schema's bytes can be a UnicodeDecodeError
        if con is not None:
            con.close()
        raise UnusableIndex(f"library {lib.name!r}: its passage index {path} cannot be read ({e}): "
                           f"{_fix(lib)}") from None
    if version not in READS:
        con.close()
        raise UnusableIndex(f"library {lib.name!r}: its passage index {path} is format {version}, "
                            f"this version reads {', '.join(map(str, READS))}: {_fix(lib)}")
    return con


@contextlib.contextmanager
def reading(lib):
    """The library's passage index (open_index) for the block's queries: whatever a damaged
    file makes them raise — an SQLite error, text that is not UTF-8, a value of the wrong type
    (Passage_of) — is a PassageError naming the file and the rebuild, never a traceback."""
    con = open_index(lib)
    try:
        yield con
    except PassageError:
        raise
    except (sqlite3.Error, ValueError, TypeError, OverflowError) as e:     # UnicodeDecodeError is a ValueError
        raise UnusableIndex(f"library {lib.name!r}: its passage index {path_of(lib)} is damaged "
                            f"({type(e).__name__}: {str(e)[:120]}): {_fix(lib)}") from None
    finally:
        con.close()


# what each column of a row must hold (bool is never a number)
KINDS = {"document": int, "path": str, "title": str, "matter": (str, type(None)), "paragraph": int, "page": int,
         "tokens": int, "text": str, "last": int, "score": float}


def passage_of(row, library: str, pinned: bool = False) -> Passage:
    """A Passage of a row of COLUMNS (and its score); TypeError naming the column whose value is
    of another type (a damaged index)."""
    values = dict(zip(("document", "path", "title", "matter", "paragraph", "page", "tokens", "text", "last",
                       "score"), row))
    for name, value in values.items():
        if not isinstance(value, KINDS[name]) or isinstance(value, bool):
            raise TypeError(f"column {name} holds {type(value).__name__}")
    score = round(values.pop("score", 0.0), 4)
    return Passage(**values, score=score, library=library, pinned=pinned)


def visible(matter: str | None = None, matters=None) -> tuple | None:
    """The matters whose documents may be reached, beside the documents of none: `matter`'s,
    within `matters` (a server key's wall) when given; None: every matter."""
    if matters is None:
        return None if matter is None else (matter,)
    return tuple(sorted(m for m in set(matters) if matter is None or m == matter))


def search(lib, query: str, matter: str | None = None, n: int = 10, matters=None) -> list[Passage]:
    """The `n` passages of the library that best match `query`, best first. With `matter`,
    only passages of documents of that matter or of none (the matter wall); with `matters`
    (a server key's wall), only those of these matters or of none.

    A quoted part of the query ("force majeure", 'Operating licence') names what is wanted
    (a heading, a defined term) and the rest where: then the whole query finds the best
    DOCUMENTS documents, and inside each of them the quoted words rank its passages (its
    phrase PHRASE_WEIGHT times a word; a passage that starts at a paragraph which is the
    phrase alone, a heading, first); those come first, each document's best in turn, then
    the rest."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PASSAGES:
        raise PassageError(f"the number of passages must be from 1 to {MAX_PASSAGES:,}, got {n}")
    words = searchable(query)
    phrases = query_phrases(query)
    wanted = [f'"{p}"' for p in phrases] * PHRASE_WEIGHT + [f'"{w}"' for p in phrases for w in p.split()]
    seen = visible(matter, matters)
    with reading(lib) as con:
        found = _ranked(con, [f'"{w}"' for w in words] + wanted, seen, max(n, FIRST_STAGE if phrases else n))
        per_document = [_headings_first(con, _ranked(con, wanted, seen, max(n, FIRST_STAGE), document=d), d,
                                        phrases)[:n]
                        for d in (list(dict.fromkeys(row[0] for row in found))[:DOCUMENTS] if phrases else ())]
        inside = [r for rank in zip_longest(*per_document) for r in rank if r is not None]   # round robin
        rows = list({(r[0], r[4]): r for r in inside + found}.values())[:n]     # the first of each, in order
        return [passage_of(row, lib.name) for row in rows]


def _headings_first(con, rows: list, document: int, phrases: list[str]) -> list:
    """`rows` of one document with the passages that start at a heading first: a paragraph
    whose words are exactly a quoted phrase's ('Outsourcing' asks for the article headed so)."""
    heads = {int(para) for para, own in con.execute(
        "SELECT paragraph, own FROM passages WHERE document = ? AND length(own) <= 200", (document,))
        if " ".join(words_of(str_of(own))) in phrases}
    return sorted(rows, key=lambda r: r[4] not in heads)


def str_of(value) -> str:
    """A text column's value; TypeError for any other (a damaged index)."""
    if not isinstance(value, str):
        raise TypeError(f"a text column holds {type(value).__name__}")
    return value


def wall_clause(seen) -> tuple[str, tuple]:
    """The SQL condition (and its arguments) of the documents of the matters `seen` (visible())
    or of none; every document for None."""
    if seen is None:
        return "", ()
    return f" AND (matter IN ({', '.join('?' * len(seen))}) OR matter IS NULL)", tuple(seen)


def _ranked(con, terms, seen, limit, document=None) -> list:
    """Rows (COLUMNS, BM25 score) matching any of the FTS5 `terms`, best first, of documents of
    the matters `seen` (visible()) or of none."""
    wall, walled = wall_clause(seen)
    where = wall + ("" if document is None else " AND document = ?")
    args = (" OR ".join(terms),) + walled + (() if document is None else (document,)) + (limit,)
    return con.execute(
        f"SELECT {COLUMNS}, -bm25(passages, 1.0, {TITLE_WEIGHT}) FROM passages WHERE passages MATCH ?{where} "
        f"ORDER BY bm25(passages, 1.0, {TITLE_WEIGHT}), document, paragraph LIMIT ?", args).fetchall()


def query_phrases(text: str) -> list[str]:
    """The quoted parts of a query, as FTS5 phrases (words lower-cased)."""
    out = []
    for quoted in re.findall(r"(?<!\w)[\"'‘“]([^\"'’”]{3,80})[\"'’”](?!\w)", text):
        words = words_of(quoted)
        if words:
            out.append(" ".join(words))
    return out


def document_passages(lib, path: str, matters=None) -> list[Passage]:
    """Every passage of the library's document at `path` (relative to its folder), in order;
    [] when the library has no such document (with `matters`, a server key's wall: none of
    those matters or of none)."""
    wall, walled = wall_clause(visible(None, matters))
    with reading(lib) as con:
        found = con.execute("SELECT document, path, title, matter, paragraph, page, own_tokens, own, paragraph "
                            f"FROM passages WHERE path = ?{wall} ORDER BY paragraph", (path, *walled)).fetchall()
        return [passage_of(row, lib.name, pinned=True) for row in found]

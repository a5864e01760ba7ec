"""A library's passages as a ranked full-text index: what `library search` and drafting with
precedents (olifant_mlx.precedents) retrieve from.

    hits = search(library.load("contracts"), "confidentiality auditors three years", matter="acme", n=5)
    hits[0].citation()   # 'nda-2019.docx, page 2, paragraphs 4-6'

`passages.sqlite` in the library folder is an SQLite FTS5 table with one row per region of every
document (the library's paragraphs, as documents.json numbers them): a heading and the paragraphs
under it until the next heading, or up to WINDOW_TOKENS tokens (a longer clause, or a document
without headings, is cut into consecutive passages that never overlap). Each row holds the
region's text, its heading (clause headings found in the text: "5. Force Majeure", "ARTICLE 6 -
FORCE MAJEURE", "Article 12" over "Outsourcing", "8. Termination. Either party ..."; the numbers
left out) and its document's title, each its own field (Porter-stemmed words, NFKC-normalised for
searching: fold; the text and title as they are kept beside them, `body` and `name`). A drafting
request is read as what it asks for (the words after "draft", "prepare", ...: "a force majeure
clause") and where (the parties, amounts and dates): a passage ranks by how well its heading
matches the kind of clause asked for, how well its document matches the whole request, and its
own text (search()). A paragraph's text is its tokens decoded, exactly what the verifier reads.
The file is built with the rest of the library in its temporary folder, from the token stream and
the document table alone, so an updated library's index equals a full build's.
"""
from __future__ import annotations

import contextlib
import re
import sqlite3
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path

FILE = "passages.sqlite"
FORMAT = 3               # 3: a row per region, its heading a field, a table of paragraphs, searched NFKC-normalised
#                          (2: one or the other; 1: a window per paragraph)
TITLE_WEIGHT = 0.5
FIRST_STAGE = 200        # passages ranked by the whole request, to rank the documents
WINDOW_TOKENS = 200      # a passage: a region of paragraphs, up to this many tokens (one longer paragraph alone)
MAX_PASSAGES = 100_000   # the most one search returns
MAX_QUERY_WORDS = 64     # a conversation as a query: its most recent words
# words that match nearly every passage: dropped from queries (BM25 weighs them low, but an
# OR of them would still rank a passage full of "the" and "of" above none)
STOPWORDS = frozenset("""a an and are as at be been by can could do does for from has have he her his
i if in into is it its me my no not of on or our shall she should so such than that the their them
then there these they this those to under up us was we were what when where which who will with would
you your please draft write using use above below following headed titled entitled called new based""".split())
# how a passage's score is made (search): the best-matching heading, document and text each count 1
# at most (their scores over the best one's); the text of the kind asked for, and the whole request's
HEADING_SHARE, DOCUMENT_SHARE, KIND_SHARE, TEXT_SHARE = 2.0, 1.0, 0.5, 0.5


class PassageError(ValueError):
    """A query or an index that cannot be used; the message says which and why."""


class UnusableIndex(PassageError):
    """A library's passage index that is missing, damaged or of another format (not the query's fault)."""


@dataclass(frozen=True)
class Passage:
    """A run of paragraphs of one document (one paragraph, or a region of them), as retrieved
    or pinned."""
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


# ---- headings and regions ---------------------------------------------------------------------

# a clause's number: "5.", "5.1", "12a", "IV.", "Article 12", "Clause 9:", "SCHEDULE 2", "Part II"
_LABEL_WORDS = r"(?:article|section|clause|part|chapter|schedule|annex|appendix|exhibit|title|paragraph)"
_NUMBER = (rf"(?:(?i:{_LABEL_WORDS})\s+(?:\d+[a-z]?(?:\.\d+)*|[IVXLCivxlc]+)\b[.):]?|\d+[a-z]?(?:\.\d+)*[.)]?"
           r"(?=\s)|[IVXLC]+[.)](?=\s))")
_NUMBERED = re.compile(rf"^#*\s*(?P<number>{_NUMBER})?\s*[-\u2013\u2014:.]?\s*(?P<rest>.*)$", re.S)
_RUN_IN = re.compile(rf"^#*\s*(?P<number>{_NUMBER})\s*[-\u2013\u2014:.]?\s*(?P<name>[^.\d\n]{{2,80}}?)\.\s+\S", re.S)
_SMALL = frozenset("a an and as at but by for from in into nor of on or per the to upon via with within without "
                   "under over".split())


@dataclass(frozen=True)
class Heading:
    name: str                # its words without the number ("Force Majeure"; "" for "Article 12" alone)
    run_in: bool = False     # the clause's first words ("8. Termination. Either party ...")
    sub: bool = False        # numbered as a sub-clause ("7.2"): under the section heading above it


def _title_like(words: list[str]) -> bool:
    """Words as a heading writes them: each capitalised (or all in capitals) but the small ones."""
    return bool(words) and words[0][:1].isupper() and all(w[:1].isupper() or w.lower() in _SMALL for w in words)


def heading_of(text: str) -> Heading | None:
    """The heading a paragraph is or begins with, else None: a line of at most 12 words, no
    digits but its number and no sentence in it, in title case, capitals or sentence case,
    numbered or not ("5. Force Majeure", "ARTICLE 6 - FORCE MAJEURE", "Rent Review", "Pilot
    studies", "## 4. Service Levels"); a clause's number alone ("Article 12", whose heading is
    the next line); or a numbered clause that begins with its heading in title case or capitals
    ("8. Termination. Either party ...")."""
    text = text.strip()
    m = _NUMBERED.match(text)
    number, rest = m.group("number"), m.group("rest").strip()
    if "\n" not in text and len(text) <= 120 and len(text.split()) <= 12 and not re.search(r"\d", rest) \
            and not re.search(r"[,;:]$|\.\s", rest) and (number or rest):
        words = re.findall(r"[^\W\d_][\w'\u2019-]*", rest)
        if not rest or _title_like(words) or (rest[:1].isupper() and not rest.endswith(".")):   # sentence case
            return Heading(" ".join(words), sub=bool(number and re.search(r"\d\.\d", number)))
    m = _RUN_IN.match(text)
    if m:
        words = re.findall(r"[^\W\d_][\w'\u2019-]*", m.group("name"))
        if len(words) <= 8 and _title_like(words):
            return Heading(" ".join(words), run_in=True, sub=bool(re.search(r"\d\.\d", m.group("number"))))
    return None


def _words(text: str) -> str:
    """A text's words, lower-cased, as one string: what a heading or a phrase is compared by."""
    return " ".join(words_of(text))


def regions(paras: list[tuple], title: str = "") -> list[tuple[int, int, str]]:
    """(first, last, heading) of each region of a document's paragraphs ((number, page, text,
    tokens) each, as _paragraphs gives them; first and last index them), in order. A heading
    starts a region (headings in a row, and a heading with the clause that begins with its own,
    start one together); a gap in the numbering or WINDOW_TOKENS start the next one, which keeps
    the heading it continues. A sub-clause's heading ("7.2 Exceptions.") follows the heading of
    the clause above it; a heading that is the document's `title` names no clause."""
    out: list[dict] = []
    section = ""                    # the last heading that is not a sub-clause's
    for i, (number, _, text, size) in enumerate(paras):
        h = heading_of(text)
        if h is not None and h.name and _words(h.name) == _words(title):
            h = Heading("", h.run_in, h.sub)
        cur = out[-1] if out else None
        follows = cur is not None and number == paras[cur["last"]][0] + 1
        if follows and (cur["headings"] if h is not None else cur["headings"] or cur["tokens"] + size <= WINDOW_TOKENS):
            cur["last"], cur["tokens"] = i, cur["tokens"] + size
            cur["names"] += [h.name] if h is not None else []
            cur["headings"] = cur["headings"] and h is not None and not h.run_in
        elif h is None:               # a continuation, or a document's first paragraph
            out.append({"first": i, "last": i, "tokens": size, "headings": False,
                        "names": list(cur["names"]) if cur is not None else []})
        else:
            out.append({"first": i, "last": i, "tokens": size, "headings": not h.run_in,
                        "names": ([section] if h.sub else []) + [h.name]})
        if h is not None and h.name and not h.sub:
            section = h.name
    return [(r["first"], r["last"], " ".join(dict.fromkeys(n for n in r["names"] if n))) for r in out]


def path_of(lib) -> Path:
    return Path(lib.path) / FILE


COLUMNS = "document, path, name, matter, paragraph, page, tokens, body, last"


def write(path: Path, rows: list[dict], stream, tokenizer) -> int:
    """Write the index of the documents in `rows` (documents.json's table) whose ids are in
    `stream`, the library's token stream; return the number of passages (regions)."""
    path = Path(path)
    con = sqlite3.connect(path)
    try:
        con.executescript(f"""
            PRAGMA journal_mode = OFF;
            PRAGMA user_version = {FORMAT};
            CREATE VIRTUAL TABLE passages USING fts5(
                text, title, heading, path UNINDEXED, document UNINDEXED, matter UNINDEXED,
                paragraph UNINDEXED, page UNINDEXED, tokens UNINDEXED, last UNINDEXED, body UNINDEXED,
                name UNINDEXED, tokenize = 'porter unicode61');
            CREATE TABLE paragraphs (document INTEGER, path TEXT, title TEXT, matter TEXT, paragraph INTEGER,
                                     page INTEGER, tokens INTEGER, text TEXT);""")
        n = 0
        with con:
            for row in rows:
                paras = _paragraphs(row, stream, tokenizer)
                head = (int(row["id"]), row["path"], row.get("title", ""), row.get("matter"))
                con.executemany("INSERT INTO paragraphs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                [(*head, number, page, size, text) for number, page, text, size in paras])
                for first, last, heading in regions(paras, head[2]):
                    part = paras[first:last + 1]
                    body = "\n\n".join(p[2] for p in part)
                    con.execute("INSERT INTO passages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (fold(body), fold(head[2]), fold(heading), head[1], head[0], head[3], part[0][0],
                                 part[0][1], sum(p[3] for p in part), part[-1][0], body, head[2]))
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


# the verbs of a drafting request, the words that end what it asks for ("a force majeure clause
# for ..."), and the words that say its form rather than its kind
_ASKING = re.compile(r"\b(?:(?:re)?draft(?:s|ed|ing)?|prepare|write|set out|produce|insert|propose|give me|provide|"
                     r"add|include|need|want|would like)\b", re.I)
# ... and where it ends: "for", "between", ..., or "of" before a name ("the audit rights of Beta Retail plc",
# not "the limitation of liability")
_ASKED_END = re.compile(r"[:;,.?!()\[\]\n]|\b(?:for|between|under|with|from|binding|requiring|by|as|at|to|in|"
                        r"that|which|who|where|so|within|including|whereby)\b|\bof\s+(?:the\s+)?(?-i:[A-Z])", re.I)
FORM_WORDS = frozenset("""clause clauses provision provisions wording language terms paragraph paragraphs section
sections article articles text sentence short simple standard suitable appropriate brief usual one""".split())


def asked_for(query: str) -> list[str]:
    """The words of what a drafting request asks for: after its last drafting verb, up to the
    first word that says for what or whom ("Draft a force majeure clause for the services
    agreement between ..." -> force, majeure), quoted parts ("the article headed 'Pilot
    studies'") as they are; [] when it has no such verb or asks for a form only ("Draft a clause:")."""
    phrases = query_phrases(query)
    if phrases:
        return query_words(" ".join(phrases))
    verbs = list(_ASKING.finditer(query))
    if not verbs:
        return []
    rest = query[verbs[-1].end():]
    end = _ASKED_END.search(rest)
    words = query_words(rest[:end.start()] if end else rest)
    return [w for w in words if w not in FORM_WORDS]


def _fix(lib) -> str:
    return (f"rebuild it: `python -m olifant_mlx library build {lib.name} {lib.meta.get('folder', 'FOLDER')} "
            f"--tokenizer {lib.meta.get('tokenizer', {}).get('name', 'TOKENIZER')}`")


def open_index(lib) -> sqlite3.Connection:
    """The library's passage index, read-only; UnusableIndex naming the rebuild when the
    library was built before passages were indexed (or by another format), or the file is damaged."""
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
    if version != FORMAT:
        con.close()
        raise UnusableIndex(f"library {lib.name!r}: its passage index {path} is format {version}, "
                            f"this version reads {FORMAT}: {_fix(lib)}")
    return con


@contextlib.contextmanager
def reading(lib):
    """The library's passage index (open_index) for the block's queries: whatever a damaged
    file makes them raise — an SQLite error, text that is not UTF-8, a value of the wrong type
    (passage_of) — is a PassageError naming the file and the rebuild, never a traceback."""
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


def wall_clause(seen) -> tuple[str, tuple]:
    """The SQL condition (and its arguments) of the documents of the matters `seen` (visible())
    or of none; every document for None."""
    if seen is None:
        return "", ()
    return f" AND (matter IN ({', '.join('?' * len(seen))}) OR matter IS NULL)", tuple(seen)


def search(lib, query: str, matter: str | None = None, n: int = 10, matters=None) -> list[Passage]:
    """The `n` passages of the library that best match `query`, best first. With `matter`,
    only passages of documents of that matter or of none (the matter wall); with `matters`
    (a server key's wall), only those of these matters or of none.

    A passage's score adds, each over the best one's among the candidates: how well its heading
    matches the kind of clause asked for (asked_for: the words of what a drafting request asks
    for, a quoted part of it, else every word; each word also finds longer ones of its stem,
    "indemnity" "Indemnification"), weighing HEADING_SHARE; how well its document matches the
    whole request (its best passage's BM25 over text, title and heading: the parties, amounts
    and dates), DOCUMENT_SHARE; its text's BM25 for the kind's words, KIND_SHARE; and for the
    whole request, TEXT_SHARE. A heading that is exactly a quoted phrase counts as the best
    heading. The passages of a document never overlap (one per region)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PASSAGES:
        raise PassageError(f"the number of passages must be from 1 to {MAX_PASSAGES:,}, got {n}")
    words = searchable(query)
    kind = asked_for(query) or words
    where = [w for w in words if w not in kind and w not in FORM_WORDS] or words   # parties, amounts, dates
    phrases = query_phrases(query)
    seen = visible(matter, matters)
    with reading(lib) as con:
        found = _ranked(con, _any(words), seen, FIRST_STAGE)
        places = _ranked(con, _any(where), seen, FIRST_STAGE)
        kinds = _any(kind, prefix=True)
        heads = _ranked(con, f"heading : ({kinds})", seen, FIRST_STAGE, weights=(0, 0, 1))
        texts = _ranked(con, f"text : ({kinds})", seen, FIRST_STAGE, weights=(1, 0, 0))
        rows = {r[0]: r for ranked in (found, heads, texts) for r in ranked}
        scores = _scores(rows, found, places, heads, texts, phrases)
        order = sorted(rows, key=lambda rowid: (-scores[rowid], rows[rowid][1], rows[rowid][5]))[:n]
        return [passage_of((*rows[rowid][1:10], float(scores[rowid])), lib.name) for rowid in order]


def _scores(rows: dict, found, places, heads, texts, phrases) -> dict:
    """{rowid: score} of search()'s candidates (see its docstring)."""
    heading = _shares(heads)
    for rowid, r in rows.items():     # a paragraph that is a quoted phrase alone: the best heading there is
        if phrases and set(phrases) & {_words(p) for p in str_of(r[8]).split("\n\n")}:
            heading[rowid] = 1.0
    documents: dict[int, float] = {}
    for r in places:                  # best first: each document's best passage
        documents.setdefault(r[1], r[-1])
    document = {d: s / (max(documents.values()) or 1.0) for d, s in documents.items()}
    text, kind_text = _shares(found), _shares(texts)
    return {rowid: HEADING_SHARE * heading.get(rowid, 0.0) + DOCUMENT_SHARE * document.get(r[1], 0.0)
            + KIND_SHARE * kind_text.get(rowid, 0.0) + TEXT_SHARE * text.get(rowid, 0.0)
            for rowid, r in rows.items()}


def str_of(value) -> str:
    """A text column's value; TypeError for any other (a damaged index)."""
    if not isinstance(value, str):
        raise TypeError(f"a text column holds {type(value).__name__}")
    return value


def _any(words: list[str], prefix: bool = False) -> str:
    """An FTS5 expression matching any of the words (`prefix`: a word of 6 letters or more also
    finds longer words of its stem: "indemnity" finds "indemnification")."""
    return " OR ".join(f'"{w}"' + ("*" if prefix and len(w) >= 6 else "") for w in words)


def _shares(ranked: list) -> dict:
    """{rowid: its score over the best one's} of ranked rows."""
    best = max((r[-1] for r in ranked), default=0) or 1.0
    return {r[0]: r[-1] / best for r in ranked}


def _ranked(con, match: str, seen, limit, weights=(1.0, TITLE_WEIGHT, 1.0)) -> list:
    """Rows (rowid, COLUMNS, heading, BM25 score with these column weights) matching the FTS5
    expression `match`, best first, of documents of the matters `seen` (visible()) or of none."""
    where, walled = wall_clause(seen)
    args = (match,) + walled + (limit,)
    bm25 = f"bm25(passages, {', '.join(str(w) for w in weights)})"
    return con.execute(
        f"SELECT rowid, {COLUMNS}, heading, -{bm25} FROM passages WHERE passages MATCH ?{where} "
        f"ORDER BY {bm25}, document, paragraph LIMIT ?", args).fetchall()


def query_phrases(text: str) -> list[str]:
    """The quoted parts of a query, as FTS5 phrases (words lower-cased)."""
    out = []
    for quoted in re.findall(r"(?<!\w)[\"'‘“]([^\"'’”]{3,80})[\"'’”](?!\w)", text):
        words = words_of(quoted)
        if words:
            out.append(" ".join(words))
    return out


def document_passages(lib, path: str, matters=None) -> list[Passage]:
    """Every paragraph of the library's document at `path` (relative to its folder), in order,
    each a passage; [] when the library has no such document (with `matters`, a server key's
    wall: none of those matters or of none)."""
    wall, walled = wall_clause(visible(None, matters))
    with reading(lib) as con:
        found = con.execute("SELECT document, path, title, matter, paragraph, page, tokens, text, paragraph "
                            f"FROM paragraphs WHERE path = ?{wall} ORDER BY paragraph", (path, *walled)).fetchall()
        return [passage_of(row, lib.name, pinned=True) for row in found]

"""Revising a document's clauses on instruction, returned as a redline (docs/revise.md).

    doc = read_document("msa.docx")                     # RevisionError: damaged, encrypted, ...
    chosen, skipped = select(doc, "make the notice period sixty (60) days")
    for paragraph in chosen:
        request = plan_revision(session, paragraph, instruction, options)
        text = "".join(r.text for r in (responses := list(session.stream(request))))
        revision = finish(paragraph, text, responses[-1])   # edits, status, flags, stats
    export(doc, revisions, "msa-redline.docx")             # Word tracked changes (redline.py)

A document is its paragraphs, numbered from 1 as `revise FILE --list` shows them; a clause is a
paragraph of body text (not a heading, at least MIN_WORDS words). Which clauses an instruction
concerns: those named (`--clause N` or a heading's or a clause label's text), those a search over
the document's own paragraphs finds (the instruction itself, or `--where QUERY`; SQLite FTS5,
BM25, as `library search`), or all of them. Every clause goes to the verifier alone, with the
instruction, through its chat template (a base model: a plain layout it continues), and the
clause itself is the request's prediction, so the drafter copies its unchanged runs
(drafters.prediction). A revision that comes back unchanged is "no change", never dropped; one
that deletes most of its clause or runs past it is flagged.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from olifant_mlx.engine.request import Chat
from olifant_mlx.passages import query_words

KEEP = ("Change only what the instruction asks: keep every other word, number and punctuation mark as "
        "it is, and reply with the revised clause alone.")
MOST_DELETED = 0.5      # a revision that keeps less than this share of the clause's words is flagged
MIN_WORDS = 4           # a paragraph with fewer words is no clause (a signature line, a page number)
MIN_SHARE = 0.5         # a paragraph the search scores under half the best one's is not chosen
READ = (".docx", ".txt", ".text", ".md", ".markdown", ".odt", ".rtf", ".html", ".htm", ".xhtml")
WRITE = (".docx", ".md", ".txt", ".json")
AUTHOR = "olifant_mlx"
# the words of an instruction that say what to do, not which clause: left out of its search
DOING = frozenset("""make makes change changes revise amend amended replace replaced delete remove add insert
rewrite reword restructure split move shorten lengthen increase decrease reduce raise lower double halve set
clause clauses paragraph paragraphs section sections wording words text so instead it them mutual reciprocal
plain language simpler clearer""".split())


class RevisionError(ValueError):
    """A document, a selection or an output that cannot be used; the message names it."""


@dataclass(frozen=True)
class Paragraph:
    """One paragraph of a document: its place (`index` from 0, as the redline numbers them),
    its text, its heading level (0: body text) and its own tracked changes (a .docx's)."""
    index: int
    text: str
    heading: int = 0
    tracked: int = 0

    @property
    def number(self) -> int:
        return self.index + 1

    @property
    def is_clause(self) -> bool:
        return not self.heading and len(self.text.split()) >= MIN_WORDS

    def label(self, width: int = 60) -> str:
        """Its number and first words, for a list or a progress line."""
        text = " ".join(self.text.split())
        return f"¶{self.number} " + (text if len(text) <= width else text[:width - 1] + "…")


@dataclass(frozen=True)
class Document:
    """A document read for revision: its paragraphs, and a .docx's bytes (the redline is
    written into them; None for the other formats)."""
    path: str
    paragraphs: tuple
    data: bytes | None = None

    @property
    def tracked(self) -> list:
        return [p for p in self.paragraphs if p.tracked]


def read_document(path) -> Document:
    """The document at `path` (.docx, or a format the libraries read); RevisionError naming the
    file and the problem (a format not read, damaged, encrypted, no text, past a size limit)."""
    from olifant_mlx.draftmodel import documents
    from olifant_mlx.files import NotARegularFile, check_file_path

    path = os.fspath(path)
    suffix = Path(path).suffix.lower()
    if suffix not in READ:
        raise RevisionError(f"{path}: revise reads {', '.join(READ)} (a .doc or .pdf: save it as .docx)")
    if not os.path.exists(path):
        raise RevisionError(f"{path}: no such file")
    try:
        check_file_path(path, "the document")
        data = documents.read_bytes(Path(path))
        if suffix == ".docx":
            return Document(path, tuple(_docx_paragraphs(data)), data)
        extracted, _, _ = documents.extract_data(Path(path), data)
    except (documents.Skip, NotARegularFile) as e:
        raise RevisionError(f"{path}: {e}") from None
    except RevisionError as e:
        raise RevisionError(f"{path}: {e}") from None
    paragraphs = tuple(Paragraph(i, text, _heading(text, suffix)) for i, text in enumerate(extracted.paragraphs))
    return Document(path, paragraphs)


def _docx_paragraphs(data: bytes) -> list:
    from olifant_mlx import redline

    try:
        found = redline.docx_paragraphs(data)
    except redline.RedlineError as e:
        raise RevisionError(str(e)) from None
    if not any(p.text.strip() for p in found):
        raise RevisionError("no text in it")
    return [Paragraph(p.index, p.text, p.heading, p.tracked) for p in found]


def _heading(text: str, suffix: str) -> int:
    """A paragraph's heading level where the format has no styles: Markdown's #s; elsewhere a
    short line without a sentence's end ("Article 5", "Limitation of Liability")."""
    if suffix in (".md", ".markdown"):
        m = re.match(r"(#{1,6})\s", text)
        return len(m.group(1)) if m else 0
    words = text.split()
    return 1 if 0 < len(words) <= 8 and "\n" not in text and not text.rstrip().endswith((".", ";", ":", ",")) else 0


# ---- which clauses ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Selection:
    """The clauses chosen (in document order), those passed over with the reason, and how."""
    chosen: tuple
    skipped: tuple          # (Paragraph, why)
    how: str


def select(doc: Document, instruction: str = "", clauses=(), where: str | None = None,
           everything: bool = False) -> Selection:
    """The clauses to revise: `clauses` (numbers as `--list` shows, or a heading's or a
    clause label's text: the paragraphs under that heading, or the one that starts so), the
    paragraphs the search finds for `where` (else the instruction), or with `everything` every
    clause. A paragraph with tracked changes of its own is refused when named and passed over
    otherwise. RevisionError when nothing is chosen."""
    if sum(map(bool, (clauses, where, everything))) > 1:
        raise RevisionError("choose the clauses one way: --clause, --where or --all")
    if clauses:
        chosen, how = _named(doc, clauses), "named"
        for p in chosen:
            if p.tracked:
                raise RevisionError(f"{doc.path}: ¶{p.number} has tracked changes of its own ({p.tracked}): "
                                    f"accept or reject them in Word first (revise leaves them as they are)")
    elif everything:
        chosen, how = [p for p in doc.paragraphs if p.is_clause], "all"
    else:
        query = where or " ".join(w for w in instruction.split() if w.lower().strip(".,;:") not in DOING)
        how = f"search: {where or instruction}"
        chosen = sorted((p for p, _ in search(doc, query)), key=lambda p: p.index) if query_words(query) else []
    skipped = tuple((p, f"tracked changes of its own ({p.tracked})") for p in chosen if p.tracked)
    chosen = tuple(p for p in chosen if not p.tracked)
    if not chosen:
        raise RevisionError(_nothing_chosen(doc, how, skipped))
    return Selection(chosen, skipped, how)


def _nothing_chosen(doc, how: str, skipped) -> str:
    if skipped:
        return (f"{doc.path}: every clause chosen ({how}) has tracked changes of its own: accept or "
                f"reject them in Word first")
    if how == "all":
        return f"{doc.path}: no clause in it (no paragraph of body text with {MIN_WORDS} words or more)"
    return (f"{doc.path}: the instruction selects no clause ({how}): name them with --clause N (numbers as "
            f"`revise {doc.path} --list` shows them) or a heading, search with --where WORDS, or --all")


def _named(doc: Document, names) -> list:
    """The paragraphs named: numbers, or texts (a heading's: its section; a paragraph's start)."""
    found = {}
    for name in names:
        name = str(name).strip()
        if re.fullmatch(r"\d+", name):
            n = int(name)
            if not 1 <= n <= len(doc.paragraphs):
                raise RevisionError(f"{doc.path}: --clause {n}: it has paragraphs 1 to {len(doc.paragraphs)}")
            found.setdefault(n - 1, doc.paragraphs[n - 1])
            continue
        hits = _by_text(doc, name)
        if not hits:
            raise RevisionError(f"{doc.path}: --clause {name!r}: no heading or clause starts so (see "
                                f"`revise {doc.path} --list`)")
        for p in hits:
            found.setdefault(p.index, p)
    return [found[i] for i in sorted(found)]


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+(?:\.\w+)*", text.lower()))


def _by_text(doc: Document, name: str) -> list:
    """A heading whose words are (or start with) the name's: the clauses under it, up to the next
    heading of its level or above; else the clauses whose text starts with the name."""
    want = _words(name)
    paragraphs = doc.paragraphs
    for i, p in enumerate(paragraphs):
        if p.heading and want and (_words(p.text) == want or _words(p.text).startswith(want + " ")
                                   or _words(re.sub(r"^[\d.()a-z]+\s+", "", p.text)) == want):
            section = []
            for q in paragraphs[i + 1:]:
                if q.heading and q.heading <= p.heading:
                    break
                if q.is_clause:
                    section.append(q)
            if section:
                return section
    return [p for p in paragraphs if p.is_clause and want and
            (_words(p.text) + " ").startswith(want + " ")]


def search(doc: Document, query: str) -> list:
    """(paragraph, BM25 score) of the clauses matching the query's words, best first, those
    under MIN_SHARE of the best left out (passages.rank: SQLite FTS5, Porter stems)."""
    from olifant_mlx.passages import PassageError, rank

    clauses = [p for p in doc.paragraphs if p.is_clause]
    try:
        ranked = rank([p.text for p in clauses], query)
    except PassageError as e:
        raise RevisionError(f"{doc.path}: searching its paragraphs: {e}") from None
    best = ranked[0][1] if ranked else 0.0
    return [(clauses[i], score) for i, score in ranked if score >= MIN_SHARE * best]


# ---- one clause's revision ------------------------------------------------------------------------

def revision_prompt(session, instruction: str, clause: str, system_prompt: str | None = None,
                    chat_template: bool = True, template_kwargs=None):
    """What the verifier revises `clause` from: a Chat for an instruct model (unless
    `chat_template` is off), else the plain layout (instruction, clause, then "Revised clause:")."""
    instruction = " ".join(instruction.split())
    if chat_template and session.verifier.has_chat_template:
        return Chat.of(f"Revise the clause below. Instruction: {instruction}\n{KEEP}\n\n{clause}", system_prompt,
                       template_kwargs)
    return f"Instruction: {instruction}\n{KEEP}\n\nClause:\n{clause}\n\nRevised clause:\n"


def max_tokens_for(clause_tokens: int) -> int:
    """Room for a revision of a clause of this many tokens: twice it and a proviso's worth."""
    return 2 * clause_tokens + 64


def plan_revision(session, paragraph: Paragraph, instruction: str, options, max_tokens: int | None = None,
                  drafter=None, cache=None, **prompt_choices):
    """The Request that revises one paragraph (engine.request.plan): the prompt above
    (`prompt_choices`: revision_prompt's system_prompt, chat_template, template_kwargs), the
    paragraph as the prediction, `max_tokens` (None: max_tokens_for the paragraph). `drafter`:
    the session's unless given; the previous clause's `request.drafting` carries what its
    drafter learnt (how often each kind of draft is right, the verifier's pass cost) to the next.
    `cache` (engine.cache.PromptCache): the previous clause's KV cache, so that the prompt's
    start, the same for every clause of an instruction, is not read again."""
    if max_tokens is None:
        max_tokens = max_tokens_for(len(session.verifier.identity.encode(paragraph.text)))
    prompt = revision_prompt(session, instruction, paragraph.text, **prompt_choices)
    return session.plan(prompt, options.replace(max_tokens=max_tokens), drafter, cache, prediction=paragraph.text)


@dataclass(frozen=True)
class Revision:
    """A paragraph's revision: the text, its word-level edits (redline.Edit), what it is
    ("changed" or "no change"), its flags, the generation's stats (as `generate --json`) and
    finish reason."""
    paragraph: Paragraph
    after: str
    edits: tuple
    flags: tuple = ()
    stats: dict | None = None
    finish_reason: str = ""

    @property
    def changed(self) -> bool:
        return self.after != self.paragraph.text

    @property
    def status(self) -> str:
        return "changed" if self.changed else "no change"

    @property
    def changes(self) -> list:
        return [e for e in self.edits if e.before != e.after]

    def as_dict(self) -> dict:
        return {"paragraph": self.paragraph.number, "status": self.status, "flags": list(self.flags),
                "before": self.paragraph.text, "after": self.after,
                "changes": [{"before": e.before, "after": e.after} for e in self.changes],
                "finish_reason": self.finish_reason, "stats": self.stats}


def clean_answer(text: str, clause: str) -> str:
    """The revised clause out of a model's answer: a "Revised clause:" label, a code fence or
    quotes around it (where the clause has none) taken off, the ends trimmed."""
    t = text.strip()
    t = re.sub(r"^(?:\*\*)?revised clause:?(?:\*\*)?:?\s*", "", t, flags=re.I)
    fence = re.fullmatch(r"```[\w-]*\n(.*?)\n?```", t, flags=re.S)
    if fence and "```" not in clause:
        t = fence.group(1).strip()
    for a, b in (('"', '"'), ("“", "”"), ("'", "'")):
        if len(t) > 1 and t[0] == a and t[-1] == b and not clause.strip().startswith(a):
            t = t[1:-1].strip()
    return t


def finish(paragraph: Paragraph, text: str, last=None) -> Revision:
    """The Revision of `paragraph` from the model's answer `text` and its last Response (stats,
    finish reason; None: neither): edits, status and flags."""
    from olifant_mlx.redline import word_edits

    after = clean_answer(text, paragraph.text)
    edits = tuple(word_edits(paragraph.text, after))
    reason = getattr(last, "finish_reason", "") or ""
    stats = last.stats.as_dict() if last is not None and getattr(last, "stats", None) is not None else None
    return Revision(paragraph, after, edits, flags_of(paragraph.text, after, edits, reason), stats, reason)


def flags_of(before: str, after: str, edits, finish_reason: str) -> tuple:
    """What a reader should check: a revision that deletes most of its clause, or runs past it
    (stopped at the token limit, or more paragraphs than the clause had)."""
    flags = []
    words = len(before.split())
    kept = sum(len(e.before.split()) for e in edits if e.before == e.after)
    if words and kept < MOST_DELETED * words:
        flags.append(f"deleted most of the clause (kept {kept} of its {words} words)")
    if finish_reason == "max_tokens":
        flags.append("ran past the clause (stopped at the token limit)")
    elif len(re.split(r"\n\s*\n", after.strip())) > len(re.split(r"\n\s*\n", before.strip())):
        flags.append("ran past the clause (more paragraphs than it had)")
    return tuple(flags)


# ---- the redline out ----------------------------------------------------------------------------

def check_output(path, document_path) -> str:
    """--output's format (its suffix) after checking, before any slow work, that the file can be
    written: a regular file or a new one in a folder that exists and takes a new file (probed),
    not the document itself. RevisionError otherwise."""
    from olifant_mlx.files import check_writable

    path = os.fspath(path)
    suffix = Path(path).suffix.lower()
    if suffix not in WRITE:
        raise RevisionError(f"--output {path}: the file's suffix picks the format: {', '.join(WRITE)}")
    if os.path.exists(path) and os.path.samefile(path, document_path):
        raise RevisionError(f"--output {path} is the document itself: write the redline to another file")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise RevisionError(f"--output {path}: cannot be written here (permission denied)")
    try:
        check_writable(path, "--output file")       # a probe file made and removed: /proc, read-only mounts
    except ValueError as e:
        raise RevisionError(str(e)) from None
    if suffix == ".docx":
        from olifant_mlx.exports import need_docx

        need_docx()
    return suffix[1:]


def export(doc: Document, revisions, fmt: str, author: str = AUTHOR, date=None, keep=None,
           report: dict | None = None) -> bytes:
    """The redline in `fmt`: "docx" (the document with Word tracked changes; another format's
    paragraphs in a new Word document), "md" (CriticMarkup), "txt" (word diff), "json" (`report`).
    `keep`: {paragraph index: the change numbers to write} (None: every change)."""
    import json

    from olifant_mlx import redline

    edits = {r.paragraph.index: list(r.edits) for r in revisions if r.changed}
    texts = [p.text for p in doc.paragraphs]
    if fmt == "docx":
        data = doc.data if doc.data is not None else redline.docx_from_paragraphs(texts)
        return redline.docx_redline(data, edits, author=author, date=date, keep=keep)
    if fmt == "md":
        return redline.markdown_redline(texts, edits, keep=keep).encode()
    if fmt == "txt":
        return redline.text_redline(texts, edits, keep=keep).encode()
    return (json.dumps(report, indent=1) + "\n").encode()

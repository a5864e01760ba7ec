"""Word, PDF, OpenDocument, RTF, HTML, e-mail and Markdown files as corpus documents.

Each file becomes one document: its paragraphs in reading order, joined by blank lines
(`.docx`: headers, body with tables cell by cell, footnotes, endnotes, footers; `.pdf`: the
text layer page by page, paragraphs found from the gaps between lines, a header or footer
repeated on the pages kept once). Every file gets an `Outcome`: read (paragraphs, pages) or
skipped with the reason — a binary `.doc`, a scanned PDF without a text layer, an encrypted
or damaged file, an empty one, a link loop, a format we do not read — and never raises.

The readers are well-kept libraries, installed with `pip install 'olifant_mlx[documents]'`:
docx2python (.docx), pypdfium2 (.pdf), odfpy (.odt), striprtf (.rtf); .html, .eml, .md and
.txt need only the standard library. Extractions of the formats that
need a library are cached (0600) in cache_dir()/documents, keyed by the file's content hash and
EXTRACTOR_VERSION, so a re-run re-reads only the files that changed (`Report.extracted` counts
the ones read afresh); the others are parsed again, which costs less than a cache entry.
"""
from __future__ import annotations

import contextlib
import email
import email.policy
import hashlib
import html.parser
import io
import json
import os
import re
import threading
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from olifant_mlx.files import cache_dir, read_regular, write_atomic

EXTRACTOR_VERSION = 1        # bump when any reader's output changes: old cache entries are ignored
INSTALL_HINT = "pip install 'olifant_mlx[documents]'"
# suffix -> (reader library's import name, its PyPI name); None: standard library only
NEEDS = {".docx": ("docx2python", "docx2python"), ".pdf": ("pypdfium2", "pypdfium2"),
         ".odt": ("odf", "odfpy"), ".rtf": ("striprtf", "striprtf")}
STDLIB = (".html", ".htm", ".xhtml", ".eml", ".md", ".markdown")
DOCUMENT_SUFFIXES = tuple(NEEDS) + STDLIB
# formats people keep beside their documents that we do not read: why, and what to do
UNREAD = {".doc": "binary Word (.doc) is not read: save it as .docx",
          ".xls": "a spreadsheet is not read", ".xlsx": "a spreadsheet is not read",
          ".ppt": "a presentation is not read", ".pptx": "a presentation is not read",
          ".pages": "Apple Pages is not read: export it as .docx or PDF"}
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


class Skip(Exception):
    """A file that gives no document; the message says why."""


@dataclass
class Extracted:
    """A file's text: paragraphs in reading order, and the page (from 1) of each (0: no pages)."""
    paragraphs: list[str]
    pages: list[int]

    @property
    def page_count(self) -> int:
        return max(self.pages, default=0)

    def text(self) -> str:
        return "\n\n".join(self.paragraphs)


@dataclass
class Outcome:
    path: str
    status: str                  # "read" or "skipped"
    reason: str = ""
    paragraphs: int = 0
    pages: int = 0
    cached: bool = False


@dataclass
class Report:
    """The outcome of every file of a corpus, in the order they were met."""
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    @property
    def read(self) -> int:
        return sum(o.status == "read" for o in self.outcomes)

    @property
    def skipped(self) -> int:
        return sum(o.status == "skipped" for o in self.outcomes)

    @property
    def extracted(self) -> int:
        """Files read afresh (not from the cache)."""
        return sum(o.status == "read" and not o.cached for o in self.outcomes)

    def as_dict(self) -> dict:
        return {"read": self.read, "skipped": self.skipped, "extracted": self.extracted,
                "files": [asdict(o) for o in self.outcomes]}

    def rows(self) -> list[tuple[str, str]]:
        """(file, outcome) for a table."""
        rows = []
        for o in self.outcomes:
            if o.status == "read":
                what = f"read: {o.paragraphs:,} paragraphs" + (f", {o.pages:,} pages" if o.pages else "")
                rows.append((o.path, what + (" (cached)" if o.cached else "")))
            else:
                rows.append((o.path, f"skipped: {o.reason}"))
        return rows


# ---- the report of the run in progress ------------------------------------------------------

_REPORTS: list[Report] = []


@contextlib.contextmanager
def reporting():
    """Collect the outcome of every file read while the block runs (train, build-rest)."""
    report = Report()
    _REPORTS.append(report)
    try:
        yield report
    finally:
        _REPORTS.remove(report)


def record(outcome: Outcome) -> None:
    for report in _REPORTS:
        report.add(outcome)


# ---- finding the files ----------------------------------------------------------------------

def walk(folder: Path) -> list[tuple[Path, str | None]]:
    """Every file under `folder`, sorted, with None or the reason it is not read (a link loop,
    a link to nothing, a hidden file, a Word lock file). Links to folders are followed once
    each, a loop is reported; hidden folders are not entered."""
    found: list[tuple[Path, str | None]] = []
    seen = {os.path.realpath(folder)}

    def visit(d: Path) -> None:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as e:
            found.append((d, f"cannot list the folder ({e.strerror})"))
            return
        for e in entries:
            p = Path(e.path)
            if e.name.startswith(".") and e.is_dir():
                continue                      # hidden folders (.git, our own temporary folders)
            if e.name.startswith("."):
                found.append((p, "a hidden file"))
            elif e.name.startswith("~$"):
                found.append((p, "a Word lock file (its document is open in Word)"))
            elif e.is_symlink() and not os.path.exists(p):
                found.append((p, _dead_link_reason(p)))
            elif e.is_dir():
                real = os.path.realpath(p)
                if real in seen:
                    found.append((p, "a symbolic link loop (a folder that links back to one already read)"))
                    continue
                seen.add(real)
                visit(p)
            elif e.is_file():
                found.append((p, None))
            else:
                found.append((p, "not a regular file (a FIFO, device or socket): not opened"))

    visit(Path(folder))
    return found


def _dead_link_reason(path: Path) -> str:
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == 40 or "loop" in (e.strerror or "").lower():      # ELOOP
            return "a symbolic link loop"
    return "a symbolic link to nothing"


def is_document(path: Path) -> bool:
    """Read by this module rather than as plain text."""
    suffix = path.suffix.lower()
    return suffix in DOCUMENT_SUFFIXES or suffix in UNREAD


def not_read(path: Path, also: tuple = ()) -> str | None:
    """Why a file met in a folder is passed over (hidden, a lock file, a format we do not read;
    suffixes in `also` are read by the caller), or None when read_document is to tell."""
    if path.name.startswith("."):
        return "a hidden file"
    if path.name.startswith("~$"):
        return "a Word lock file (its document is open in Word)"
    if path.exists() and not path.is_file():
        return "not a regular file (a FIFO, device or socket): not opened"
    if is_document(path) or path.suffix.lower() in also or (path.is_symlink() and not path.exists()):
        return None
    return f"not a format we read ({path.suffix or 'no suffix'})"


def missing_reader(path: Path) -> str | None:
    """The message for a file whose reader library is not installed, else None."""
    need = NEEDS.get(path.suffix.lower())
    if need is None:
        return None
    try:
        __import__(need[0])
    except ImportError:
        return f"reading {path.suffix.lower()} needs {need[1]}: {INSTALL_HINT}"
    return None


# ---- extraction, cached ---------------------------------------------------------------------

def _cache_path(digest: str) -> Path:
    return cache_dir() / "documents" / f"{digest}.v{EXTRACTOR_VERSION}.json"


def digest(data: bytes, suffix: str) -> str:
    """What identifies a file's extraction: its bytes and the reader its suffix picks."""
    return hashlib.sha256(data + suffix.lower().encode()).hexdigest()


def extract_file(path: Path) -> tuple[Extracted, str, bool]:
    """(text, content hash, whether it came from the cache); Skip says why there is none."""
    if path.is_symlink() and not path.exists():
        raise Skip(_dead_link_reason(path))
    try:
        data = read_regular(path)
    except (OSError, ValueError) as e:
        raise Skip(f"cannot read it ({getattr(e, 'strerror', None) or e})") from None
    suffix = path.suffix.lower()
    if not data.strip():
        raise Skip("an empty file")
    if suffix in UNREAD or data.startswith(OLE_MAGIC):
        raise Skip(UNREAD.get(suffix, "an OLE2 file (binary Word .doc or Excel): save it as .docx"))
    missing = missing_reader(path)
    if missing:
        raise Skip(missing)
    key = digest(data, suffix)
    if suffix not in NEEDS:      # HTML, e-mail, Markdown, text: parsing is cheaper than caching
        return _extract_or_skip(suffix, data), key, False
    cached = _cache_path(key)
    try:
        entry = json.loads(cached.read_text(encoding="utf-8"))
        if "skip" in entry:
            raise Skip(entry["skip"])
        return Extracted(entry["paragraphs"], entry["pages"]), key, True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        ext = _extract_or_skip(suffix, data)
    except Skip as e:
        write_atomic(cached, json.dumps({"skip": str(e)}))
        raise
    write_atomic(cached, json.dumps({"paragraphs": ext.paragraphs, "pages": ext.pages}))
    return ext, key, False


def _extract_or_skip(suffix: str, data: bytes) -> Extracted:
    """The reader's text; Skip for a file it finds damaged or without text."""
    try:
        ext = _extract(suffix, data)
    except Skip:
        raise
    except Exception as e:  # a reader library's error on a damaged file: an outcome, not a traceback
        raise Skip(f"damaged or truncated ({type(e).__name__}: {str(e)[:120]})") from None
    if not ext.paragraphs:
        raise Skip("no text in it")
    return ext


def read_document(path: Path) -> tuple[Extracted | None, Outcome]:
    """A file's text (None when skipped) and its outcome, which is also recorded."""
    try:
        ext, _, cached = extract_file(path)
        outcome = Outcome(str(path), "read", paragraphs=len(ext.paragraphs), pages=ext.page_count,
                          cached=cached)
    except Skip as e:
        ext, outcome = None, Outcome(str(path), "skipped", reason=str(e))
    record(outcome)
    return ext, outcome


def _extract(suffix: str, data: bytes) -> Extracted:
    if suffix == ".docx":
        return _flat(docx_paragraphs(data))
    if suffix == ".pdf":
        return pdf_paragraphs(data)
    if suffix == ".odt":
        return _flat(odt_paragraphs(data))
    if suffix == ".rtf":
        return _flat(rtf_paragraphs(data))
    if suffix in STDLIB + (".txt", ".text"):
        _check_text(data)
    if suffix in (".html", ".htm", ".xhtml"):
        return _flat(html_paragraphs(_decode(data)))
    if suffix == ".eml":
        return _flat(eml_paragraphs(data))
    return _flat(text_paragraphs(_decode(data)))


def _check_text(data: bytes) -> None:
    """Skip a file of a text format whose bytes are binary (the test train applies to .txt)."""
    from olifant_mlx.draftmodel.sniff import SNIFF_BYTES, binary_reason

    head = data[:SNIFF_BYTES]
    reason = binary_reason(head)
    if reason and "not valid UTF-8" in reason:   # another encoding is read (as cp1252), binary is not
        controls = sum(head.count(bytes([c])) for c in range(32) if chr(c) not in "\t\n\r\f\v\x1b")
        reason = "control characters in it (binary data)" if controls > 0.01 * len(head) else None
    if reason:
        raise Skip(f"not text: {reason}")


def _flat(paragraphs) -> Extracted:
    kept = [p for p in paragraphs if p.strip()]
    return Extracted(kept, [0] * len(kept))


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _clean(text: str) -> str:
    """A paragraph on one line of single spaces (the line breaks of the source's layout go)."""
    return re.sub(r"[ \t\r\n\u00a0]+", " ", text).strip()


def text_paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs (Markdown, plain text); lines inside keep their breaks."""
    return [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n")) if p.strip()]


# ---- the readers ----------------------------------------------------------------------------

def docx_paragraphs(data: bytes) -> list[str]:
    """Headers, then the body (a table cell by cell, row by row), footnotes, endnotes, footers.
    Each part once: a header on every page of Word's layout is one part of the file."""
    from docx2python import docx2python

    try:
        zipfile.ZipFile(io.BytesIO(data)).testzip()
    except zipfile.BadZipFile as e:
        raise Skip(f"damaged or truncated (not a complete ZIP file: {e})") from None
    with docx2python(io.BytesIO(_moves_accepted(data)), html=False) as doc:
        parts = [doc.header, doc.body, doc.footnotes, doc.endnotes, doc.footer]
        out: list[str] = []
        seen_headers = set()
        for n, part in enumerate(parts):
            for para in _leaves(part):
                text = _clean(re.sub(r"-{4}(?:foot|end)note\d+-{4}|^(?:foot|end)note\d+\)", "", para))  # its marks
                if not text:
                    continue
                if n in (0, 4):                # the same header in several sections: once
                    if text in seen_headers:
                        continue
                    seen_headers.add(text)
                out.append(text)
        return out


def _moves_accepted(data: bytes) -> bytes:
    """The .docx with text moved away under tracked changes (w:moveFrom) taken out: docx2python
    reads the rest of the tracked changes as accepted (insertions and moved-to text in,
    deletions out; comments stay out of the body), but keeps a move's old place too."""
    from lxml import etree

    w = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    changed = False
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            part = src.read(info)
            if info.filename.startswith("word/") and info.filename.endswith(".xml") and b"moveFrom>" in part:
                root = etree.fromstring(part, etree.XMLParser(resolve_entities=False, no_network=True))
                for moved in list(root.iter(f"{w}moveFrom")):
                    moved.getparent().remove(moved)
                part, changed = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True), True
            dst.writestr(info, part)
    return out.getvalue() if changed else data


def _leaves(tree):
    """The strings of docx2python's nested lists (tables, rows, cells, paragraphs), in order."""
    if isinstance(tree, str):
        yield tree
        return
    for item in tree:
        yield from _leaves(item)


def pdf_paragraphs(data: bytes, gap: float = 1.6) -> Extracted:
    """The text layer, page by page; a new paragraph where the gap to the previous line is more
    than `gap` times the page's usual line spacing; a first or last line repeated on most pages
    (a running header or footer) is kept once, and one that differs only in its digits (a
    page number) not at all."""
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        msg = str(e)
        if "password" in msg.lower():
            raise Skip("encrypted (it needs a password)") from None
        raise Skip(f"damaged or truncated ({msg})") from None
    try:
        pages = [_pdf_lines(pdf[i]) for i in range(len(pdf))]
    finally:
        pdf.close()
    if not any(pages):
        raise Skip(f"no text layer on its {len(pages)} page(s): a scanned PDF (run OCR on it first)")
    repeated = _running_lines(pages)
    paragraphs: list[str] = []
    page_of: list[int] = []
    kept_once = set()
    for number, lines in enumerate(pages, 1):
        current: list[str] = []
        for i, (text, new_paragraph) in enumerate(_paragraph_marks(lines, gap)):
            key = _running_key(text)
            if i in (0, len(lines) - 1) and key in repeated:
                if key in kept_once or len(repeated[key]) > 1:    # once; a page number never
                    continue
                kept_once.add(key)
                new_paragraph = True
            if new_paragraph and current:
                paragraphs.append(" ".join(current))
                page_of.append(number)
                current = []
            current.append(text)
        if current:
            paragraphs.append(" ".join(current))
            page_of.append(number)
    return Extracted(paragraphs, page_of)


def _pdf_lines(page, sample: int = 24) -> list[tuple[str, float, float]]:
    """(text, top, bottom) of each line of a page's text layer, in its reading order: the
    height of a line is that of its tallest character among the first `sample`."""
    textpage = page.get_textpage()
    try:
        text = textpage.get_text_range()       # one character per character index; lines end in CR LF
        lines = []
        start = 0
        for raw in text.split("\r\n"):
            boxes = [textpage.get_charbox(start + i) for i, c in enumerate(raw[:sample]) if not c.isspace()]
            start += len(raw) + 2
            line = _clean(raw)
            if line and boxes:
                lines.append((line, max(b[3] for b in boxes), min(b[1] for b in boxes)))
        return lines
    finally:
        textpage.close()
        page.close()


def _paragraph_marks(lines, gap: float):
    """(text, starts a paragraph) per line: a line further below the one before than `gap`
    times the page's usual line step (its low fifth), or than 2.2 line heights, starts one."""
    steps = sorted(a[1] - b[1] for a, b in zip(lines, lines[1:]) if a[1] > b[1])
    usual = steps[len(steps) // 5] if steps else 0
    for i, (text, top, bottom) in enumerate(lines):
        step = lines[i - 1][1] - top if i else 0
        yield text, i == 0 or step < 0 or step > gap * usual or step > 2.2 * (top - bottom)


def _running_key(text: str) -> str:
    return re.sub(r"\d+", "#", text)


def _running_lines(pages) -> dict[str, set[str]]:
    """First or last lines of at least 60% of the pages (2 or more), digits aside: each with
    the texts it has (more than one: a page number)."""
    if len(pages) < 2:
        return {}
    counts: Counter = Counter()
    texts: dict[str, set[str]] = {}
    for lines in pages:
        ends = {t for t, _, _ in lines[:1] + lines[-1:]}
        counts.update({_running_key(t) for t in ends})
        for t in ends:
            texts.setdefault(_running_key(t), set()).add(t)
    need = max(2, int(0.6 * len(pages) + 0.999))
    return {k: texts[k] for k, n in counts.items() if n >= need}


def odt_paragraphs(data: bytes) -> list[str]:
    """Headings and paragraphs (table cells included) in document order."""
    from odf import teletype
    from odf.opendocument import load

    try:
        zipfile.ZipFile(io.BytesIO(data)).testzip()
    except zipfile.BadZipFile as e:
        raise Skip(f"damaged or truncated (not a complete ZIP file: {e})") from None
    doc = load(io.BytesIO(data))
    out: list[str] = []

    def visit(node) -> None:
        for child in node.childNodes:
            if getattr(child, "qname", (None, None))[1] in ("p", "h"):
                out.append(_clean(teletype.extractText(child)))
            elif child.nodeType == child.ELEMENT_NODE:
                visit(child)

    visit(doc.text)
    return out


def rtf_paragraphs(data: bytes) -> list[str]:
    from striprtf.striprtf import rtf_to_text

    text = data.decode("latin-1")
    if not text.lstrip().startswith("{\\rtf"):
        raise Skip("damaged (it does not start as RTF does)")
    return [_clean(line) for line in rtf_to_text(text, errors="ignore").split("\n")]


class _HTMLText(html.parser.HTMLParser):
    BLOCKS = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "td", "th",
              "blockquote", "pre", "section", "article", "header", "footer", "table", "ul", "ol", "hr"}
    HIDDEN = {"script", "style", "head", "title", "noscript", "template"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self.current: list[str] = []
        self.hidden = 0

    def flush(self) -> None:
        text = _clean("".join(self.current))
        if text:
            self.paragraphs.append(text)
        self.current = []

    def handle_starttag(self, tag, attrs):
        if tag in self.HIDDEN:
            self.hidden += 1
        elif tag in self.BLOCKS:
            self.flush()

    def handle_endtag(self, tag):
        if tag in self.HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in self.BLOCKS:
            self.flush()

    def handle_data(self, data):
        if not self.hidden:
            self.current.append(data)


def html_paragraphs(text: str) -> list[str]:
    parser = _HTMLText()
    parser.feed(text)
    parser.close()
    parser.flush()
    return parser.paragraphs


def eml_paragraphs(data: bytes) -> list[str]:
    """The subject, then the plain-text body (else the HTML one); attachments are not read."""
    msg = email.message_from_bytes(data, policy=email.policy.default)
    if not msg.keys():
        raise Skip("damaged (no e-mail headers)")
    out = [_clean(str(msg["subject"]))] if msg["subject"] else []
    body = msg.get_body(preferencelist=("plain", "html"))
    if body is not None:
        content = body.get_content()
        out += html_paragraphs(content) if body.get_content_subtype() == "html" else text_paragraphs(content)
    return out

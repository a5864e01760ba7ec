"""Word, PDF, OpenDocument, RTF, HTML, e-mail and Markdown files as corpus documents.

Each file becomes one document: its paragraphs in reading order, joined by blank lines
(`.docx`: headers, body with tables cell by cell, footnotes, endnotes, footers; `.pdf`: the
text layer page by page, paragraphs found from the gaps between lines, a header or footer
repeated on the pages kept once). Every file gets an `Outcome`: read (paragraphs, pages) or
skipped with the reason — a binary `.doc`, a scanned PDF without a text layer, an encrypted
or damaged file, an empty one, a link loop or a link out of the folder, a format we do not
read, a file past a limit — and never raises.

Reading documents is reading hostile input, so every reader is bounded (LIMITS, each
overridable with an OLIFANT_DOC_* variable): the file's size, the XML a .docx/.odt unpacks to,
the text a document gives, a paragraph's length (longer ones are split), and — for every format
but plain text and Markdown, which are read in process in linear time — memory, CPU and wall
time, by reading in a child process (reader_process.py). A file past a limit is skipped with
the limit named, and that skip is not cached: it is not a damaged file.

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
import email.errors
import email.header
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

from olifant_mlx.files import cache_dir, file_kind, open_regular, write_atomic

EXTRACTOR_VERSION = 2        # bump when any reader's output changes: old cache entries are ignored
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
ENCRYPTED_OOXML = "EncryptedPackage".encode("utf-16-le")   # a stream of a password-protected .docx
IN_PROCESS = (".txt", ".text", ".md", ".markdown")         # linear readers: no child process
# the bounds on reading one file; OLIFANT_DOC_<NAME> overrides each (a whole number)
LIMITS = {"file_bytes": 256 << 20,        # the file itself
          "unpacked_bytes": 64 << 20,     # the XML parts of a .docx / .odt (a ZIP bomb)
          "text_chars": 32_000_000,       # the text one document gives
          "paragraph_chars": 20_000,      # longer paragraphs are split (the tokenizer's bound)
          "memory_bytes": 1 << 30,        # the reader process's address space
          "seconds": 60}                  # its CPU time and wall time per file


class Skip(Exception):
    """A file that gives no document; the message says why."""


class LimitSkip(Skip):
    """A file stopped by one of LIMITS: skipped, but not cached (it is not a damaged file)."""


def limits() -> dict:
    """LIMITS with the OLIFANT_DOC_<NAME> overrides in the environment."""
    out = dict(LIMITS)
    for name in LIMITS:
        raw = os.environ.get(f"OLIFANT_DOC_{name.upper()}")
        if raw:
            try:
                out[name] = int(float(raw))
            except ValueError:
                raise ValueError(f"OLIFANT_DOC_{name.upper()}={raw!r} is not a number") from None
    return out


@dataclass
class Extracted:
    """A file's text: paragraphs in reading order, and the page (from 1) of each (0: no pages)."""
    paragraphs: list[str]
    pages: list[int]
    title: str = ""              # the document's own title or first heading; "" if it has none

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

    @property
    def documents_extracted(self) -> int:
        """Of those, the documents whose text a reader extracted: Word, PDF, OpenDocument, RTF,
        HTML and e-mail files (a plain text or Markdown file is read, not extracted)."""
        return sum(o.status == "read" and not o.cached and extracted_format(o.path) for o in self.outcomes)

    def as_dict(self) -> dict:
        return {"read": self.read, "skipped": self.skipped, "extracted": self.extracted,
                "files": [asdict(o) for o in self.outcomes]}

    def rows(self) -> list[tuple[str, str]]:
        """(file, outcome) for a table."""
        rows = []
        for o in self.outcomes:
            if o.status == "read":
                pages = f", {plural(o.pages, 'page')}" if o.pages else ""
                what = f"read: {plural(o.paragraphs, 'paragraph')}{pages}"
                rows.append((o.path, what + (" (cached)" if o.cached else "")))
            else:
                rows.append((o.path, f"skipped: {o.reason}"))
        return rows


def extracted_format(path) -> bool:
    """A format whose text is extracted by a reader (not a plain text or Markdown file)."""
    suffix = Path(path).suffix.lower()
    return suffix in DOCUMENT_SUFFIXES and suffix not in IN_PROCESS


def plural(n: int, word: str) -> str:
    """"1 page", "2 pages" (the numbers with thousands separators)."""
    return f"{n:,} {word}{'s' * (n != 1)}"


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

def outside(path, root: str) -> str | None:
    """Where `path` really is when that is outside the folder `root` (a real path), else None."""
    real = os.path.realpath(path)
    return None if real == root or real.startswith(root.rstrip(os.sep) + os.sep) else real


def _outside_reason(kind: str, real: str) -> str:
    return (f"a link to a {kind} outside the folder ({real}): not read "
            f"(name that folder itself to read it)")


def walk(folder: Path) -> list[tuple[Path, str | None]]:
    """Every file under `folder`, sorted, with None or the reason it is not read (a link loop,
    a link to nothing, a link out of the folder, a hidden file, a Word lock file). Links to
    folders inside it are followed once each, a loop is reported; hidden folders are not
    entered. Whatever resolves outside `folder` (a link, or a link inside a linked folder) is
    reported, not read: a document library holds only what the folder holds."""
    found: list[tuple[Path, str | None]] = []
    root = os.path.realpath(folder)
    seen = {root}

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
                if outside(p, root):
                    found.append((p, _outside_reason("folder", real)))
                    continue
                if real in seen:
                    found.append((p, "a symbolic link loop (a folder that links back to one already read)"))
                    continue
                seen.add(real)
                visit(p)
            elif e.is_file():
                real = outside(p, root)
                found.append((p, _outside_reason("file", real) if real else None))
            else:
                found.append((p, f"{kind_of(p)}, not a regular file: not opened"))

    visit(Path(folder))
    return found


def kind_of(path) -> str:
    """What a path that is not a regular file is: a folder, a FIFO, a device or a socket."""
    try:
        return file_kind(os.stat(path).st_mode)
    except OSError:
        return "not readable"


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
        return f"{kind_of(path)}, not a regular file: not opened"
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
    h = hashlib.sha256(data)                 # no copy of a large file's bytes
    h.update(suffix.lower().encode())
    return h.hexdigest()


def read_bytes(path: Path, root: str | None = None, lim: dict | None = None) -> bytes:
    """The file's bytes, read once (its hash and its text come from them); Skip for a link to
    nothing, a file that cannot be read, one larger than the limit (told by fstat, before a
    byte is read), or — with `root`, the folder's real path — one that now resolves outside it."""
    lim = lim or limits()
    if path.is_symlink() and not path.exists():
        raise Skip(_dead_link_reason(path))
    real = os.path.realpath(path)
    if root is not None and outside(real, root):
        raise Skip(_outside_reason("file", real))
    try:
        fd = open_regular(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > lim["file_bytes"]:
                raise LimitSkip(f"too large: {size:,} bytes (the limit: {lim['file_bytes']:,}, "
                                f"OLIFANT_DOC_FILE_BYTES)")
            return f.read(lim["file_bytes"] + 1)
    except (OSError, ValueError) as e:
        raise Skip(f"cannot read it ({getattr(e, 'strerror', None) or e})") from None
    except MemoryError:
        raise LimitSkip(_NO_MEMORY) from None


def extract_file(path: Path) -> tuple[Extracted, str, bool]:
    """(text, content hash, whether it came from the cache); Skip says why there is none."""
    return extract_data(path, read_bytes(path))


def extract_data(path: Path, data: bytes, lim: dict | None = None) -> tuple[Extracted, str, bool]:
    """extract_file for bytes already read."""
    lim = lim or limits()
    suffix = path.suffix.lower()
    if len(data) > lim["file_bytes"]:
        raise LimitSkip(f"too large: over {lim['file_bytes']:,} bytes (OLIFANT_DOC_FILE_BYTES)")
    if not re.search(rb"\S", data):
        raise Skip("an empty file")
    if data.startswith(OLE_MAGIC) and ENCRYPTED_OOXML in data:
        raise Skip("encrypted (saved with a password): save it again without one")
    if suffix in UNREAD or data.startswith(OLE_MAGIC):
        raise Skip(UNREAD.get(suffix, "an OLE2 file (binary Word .doc or Excel): save it as .docx"))
    missing = missing_reader(path)
    if missing:
        raise Skip(missing)
    key = digest(data, suffix)
    if suffix not in NEEDS:      # HTML, e-mail, Markdown, text: parsing is cheaper than caching
        return _extract_or_skip(suffix, data, lim), key, False
    cached = _cache_path(key)
    try:
        entry = json.loads(cached.read_text(encoding="utf-8"))
        if "skip" in entry:
            raise Skip(entry["skip"])
        return Extracted(entry["paragraphs"], entry["pages"], entry.get("title", "")), key, True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        ext = _extract_or_skip(suffix, data, lim)
    except LimitSkip:
        raise                    # not damaged: read again next time (perhaps under other limits)
    except Skip as e:
        write_atomic(cached, json.dumps({"skip": str(e)}))
        raise
    write_atomic(cached, json.dumps({"paragraphs": ext.paragraphs, "pages": ext.pages, "title": ext.title}))
    return ext, key, False


def _extract_or_skip(suffix: str, data: bytes, lim: dict) -> Extracted:
    """The reader's text, in process for plain text and Markdown, else in a child process
    under the memory and time limits; Skip for a file it finds damaged or without text."""
    from olifant_mlx.draftmodel import reader_process

    try:
        reply = read_in_worker(suffix, data, lim) if suffix in IN_PROCESS else reader_process.read(suffix, data, lim)
    except MemoryError:        # plain text in this process, under a memory cap the user set
        raise LimitSkip(_NO_MEMORY) from None
    if "limit" in reply:
        raise LimitSkip(reply["limit"])
    if "skip" in reply:
        raise Skip(reply["skip"])
    return Extracted(reply["paragraphs"], reply["pages"], reply.get("title", ""))


_NO_MEMORY = "out of memory reading it in this process (lower OLIFANT_DOC_FILE_BYTES or OLIFANT_DOC_TEXT_CHARS)"


def read_in_worker(suffix: str, data: bytes, lim: dict) -> dict:
    """What the reader makes of one file, as the reader process replies it: paragraphs (split
    to at most paragraph_chars), pages and title; or {"skip": why}; or {"limit": why}."""
    try:
        ext = _extract(suffix, data, lim)
    except LimitSkip as e:
        return {"limit": str(e)}
    except Skip as e:
        return {"skip": str(e)}
    except MemoryError:
        raise
    except Exception as e:  # a reader library's error on a damaged file: an outcome, not a traceback
        return {"skip": f"damaged or truncated ({type(e).__name__}: {str(e)[:120]})"}
    if not ext.paragraphs:
        return {"skip": "no text in it"}
    _check_chars(sum(map(len, ext.paragraphs)), lim)
    ext = split_long(ext, lim["paragraph_chars"])
    return {"paragraphs": ext.paragraphs, "pages": ext.pages, "title": _clean(ext.title)[:200]}


def _check_chars(chars: int, lim: dict) -> None:
    if chars > lim["text_chars"]:
        raise LimitSkip(f"too much text: over {lim['text_chars']:,} characters (OLIFANT_DOC_TEXT_CHARS)")


def split_long(ext: Extracted, limit: int) -> Extracted:
    """Paragraphs longer than `limit` characters cut into pieces of at most `limit` (at the
    last space in the second half of each piece, where there is one): a tokenizer given one
    108 MB paragraph asks for gigabytes at once."""
    if all(len(p) <= limit for p in ext.paragraphs):
        return ext
    paragraphs, pages = [], []
    for text, page in zip(ext.paragraphs, ext.pages):
        while len(text) > limit:
            cut = text.rfind(" ", limit // 2, limit)
            cut = cut if cut > 0 else limit
            paragraphs.append(text[:cut])
            pages.append(page)
            text = text[cut:].lstrip()
        if text:
            paragraphs.append(text)
            pages.append(page)
    return Extracted(paragraphs, pages, ext.title)


def read_document(path: Path, data: bytes | None = None, root: str | None = None
                  ) -> tuple[Extracted | None, Outcome]:
    """A file's text (None when skipped) and its outcome, which is also recorded. `data`: its
    bytes when the caller has read them already (so both see the same file)."""
    try:
        ext, _, cached = extract_data(path, read_bytes(path, root) if data is None else data)
        outcome = Outcome(str(path), "read", paragraphs=len(ext.paragraphs), pages=ext.page_count,
                          cached=cached)
    except Skip as e:
        ext, outcome = None, Outcome(str(path), "skipped", reason=str(e))
    except MemoryError:
        ext, outcome = None, Outcome(str(path), "skipped", reason=_NO_MEMORY)
    record(outcome)
    return ext, outcome


def _extract(suffix: str, data: bytes, lim: dict) -> Extracted:
    if suffix == ".docx":
        return docx_paragraphs(data, lim)
    if suffix == ".pdf":
        return pdf_paragraphs(data, lim=lim)
    if suffix == ".odt":
        return odt_paragraphs(data, lim)
    if suffix == ".rtf":
        return _flat(rtf_paragraphs(data))
    if suffix in STDLIB + (".txt", ".text"):
        _check_text(data)
    if suffix == ".eml":
        return eml_paragraphs(data)
    text = _decode(data)
    _check_chars(len(text), lim)
    if suffix in (".html", ".htm", ".xhtml"):
        return html_document(text)
    paragraphs = text_paragraphs(text)
    heading = next((m.group(1) for m in re.finditer(r"(?m)^#{1,6}[ \t]+(\S.*)$", text[:65536])), "")
    return _flat(paragraphs, heading if suffix in (".md", ".markdown") else "")


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


def _flat(paragraphs, title: str = "") -> Extracted:
    kept = [p for p in paragraphs if p.strip()]
    return Extracted(kept, [0] * len(kept), title)


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

def check_zip(data: bytes, lim: dict) -> None:
    """Skip unless `data` is a complete ZIP file whose XML parts unpack to at most unpacked_bytes
    (zipfile never gives more than an entry's declared size, so the sum of those is a true
    bound). Shared by the .docx/.odt readers and olifant_mlx.redline."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        xml = sum(i.file_size for i in archive.infolist() if i.filename.endswith((".xml", ".rels")))
        if xml > lim["unpacked_bytes"]:
            raise LimitSkip(f"its XML unpacks to {xml:,} bytes (a ZIP bomb?; the limit: "
                            f"{lim['unpacked_bytes']:,}, OLIFANT_DOC_UNPACKED_BYTES)")
        archive.testzip()
    except zipfile.BadZipFile as e:
        raise Skip(f"damaged or truncated (not a complete ZIP file: {e})") from None


def docx_paragraphs(data: bytes, lim: dict | None = None) -> Extracted:
    """Headers, then the body (a table cell by cell, row by row), footnotes, endnotes, footers.
    Each part once: a header on every page of Word's layout is one part of the file. The title:
    the document's core property, else its first Title or Heading paragraph."""
    from docx2python import docx2python
    from docx2python.iterators import iter_paragraphs

    check_zip(data, lim or limits())
    with docx2python(io.BytesIO(_moves_accepted(data)), html=False) as doc:
        title = (doc.core_properties or {}).get("title") or next(
            ("".join(p.run_strings) for p in iter_paragraphs(doc.body_pars)
             if (p.style or "").lower().startswith(("title", "heading")) and "".join(p.run_strings).strip()), "")
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
        return _flat(out, title)


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


def pdf_paragraphs(data: bytes, gap: float = 1.6, lim: dict | None = None) -> Extracted:
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
        if len(pdf) == 0:
            raise Skip("damaged: no pages found (a page tree that is broken, loops or nests too deeply)")
        title = pdf.get_metadata_value("Title")
        pages, chars = [], 0
        for i in range(len(pdf)):
            try:
                page = pdf[i]
            except pdfium.PdfiumError:
                raise Skip(f"damaged: page {i + 1} cannot be loaded (a page tree that is broken, "
                           f"loops or nests too deeply)") from None
            pages.append(_pdf_lines(page))
            chars += sum(len(t) for t, _, _ in pages[-1])
            _check_chars(chars, lim or limits())
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
    return Extracted(paragraphs, page_of, title)


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


def odt_paragraphs(data: bytes, lim: dict | None = None) -> Extracted:
    """Headings and paragraphs (table cells included) in document order; the title: the
    document's dc:title, else its first heading."""
    from odf import dc, teletype
    from odf.opendocument import load

    check_zip(data, lim or limits())
    doc = load(io.BytesIO(data))
    out: list[str] = []
    headings: list[str] = []

    def visit(node) -> None:
        for child in node.childNodes:
            kind = getattr(child, "qname", (None, None))[1]
            if kind in ("p", "h"):
                out.append(_clean(teletype.extractText(child)))
                if kind == "h" and out[-1]:
                    headings.append(out[-1])
            elif child.nodeType == child.ELEMENT_NODE:
                visit(child)

    visit(doc.text)
    titles = [teletype.extractText(t) for t in doc.meta.getElementsByType(dc.Title)]
    return _flat(out, next((t for t in titles if t.strip()), headings[0] if headings else ""))


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

    HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self.current: list[str] = []
        self.hidden = 0
        self.title: list[str] = []
        self.in_title = False
        self.heading = ""

    def flush(self, tag: str = "") -> None:
        text = _clean("".join(self.current))
        if text:
            self.paragraphs.append(text)
            if tag in self.HEADINGS and not self.heading:
                self.heading = text
        self.current = []

    def handle_starttag(self, tag, attrs):
        self.in_title = tag == "title" or self.in_title
        if tag in self.HIDDEN:
            self.hidden += 1
        elif tag in self.BLOCKS:
            self.flush()

    def handle_endtag(self, tag):
        self.in_title = self.in_title and tag != "title"
        if tag in self.HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in self.BLOCKS:
            self.flush(tag)

    def handle_data(self, data):
        if self.in_title:
            self.title.append(data)
        if not self.hidden:
            self.current.append(data)


def html_document(text: str) -> Extracted:
    """Block elements as paragraphs; the title: <title>, else the first heading. A `</` that
    opens no end tag is text: html.parser searches the rest of the file for each one, which
    made 1 MB of them take minutes."""
    parser = _HTMLText()
    parser.feed(re.sub(r"</(?![A-Za-z])", "&lt;/", text))
    parser.close()
    parser.flush()
    return _flat(parser.paragraphs, _clean("".join(parser.title)) or parser.heading)


def html_paragraphs(text: str) -> list[str]:
    return html_document(text).paragraphs


def eml_paragraphs(data: bytes) -> Extracted:
    """The subject (also the title), then the plain-text body (else the HTML one); attachments
    are not read. Parsed with the compat32 policy and the subject decoded by email.header:
    the default policy's header parser took gigabytes for a subject of 20,000 encoded words
    and quadratic time for a long plain one."""
    msg = email.message_from_bytes(data, policy=email.policy.compat32)
    if not msg.keys():
        raise Skip("damaged (no e-mail headers)")
    subject = _header_text(msg["subject"]) if msg["subject"] else ""
    out = [subject] if subject else []
    texts = [p for p in msg.walk() if p.get_content_maintype() == "text"
             and not str(p.get("content-disposition", "")).lower().startswith("attachment")]
    body = next((p for kind in ("plain", "html") for p in texts if p.get_content_subtype() == kind), None)
    if body is not None:
        content = _payload_text(body)
        out += html_paragraphs(content) if body.get_content_subtype() == "html" else text_paragraphs(content)
    return _flat(out, subject)


def _header_text(raw) -> str:
    try:
        return _clean(str(email.header.make_header(email.header.decode_header(str(raw)))))
    except (ValueError, LookupError, email.errors.HeaderParseError):
        return _clean(str(raw))


def _payload_text(part) -> str:
    data = part.get_payload(decode=True) or b""
    try:
        return data.decode(part.get_content_charset() or "utf-8", errors="replace")
    except LookupError:                  # a charset Python does not know
        return _decode(data)


if __name__ == "__main__":          # a reader process's worker (reader_process.Worker)
    import sys

    from olifant_mlx.draftmodel import reader_process

    reader_process.serve(int(sys.argv[1]), read_in_worker)

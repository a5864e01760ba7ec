"""What an export of generated text carries besides the text: the sources appendix (Markdown,
plain text) and the Word (.docx) file, with the spans copied from a library highlighted.

Used by the conversations' exports (olifant_mlx/conversation.py: the TUI's export dialog and
`generate`/`chat --output`). Nothing here touches the disk: the callers write the bytes with
files.write_atomic (0600)."""
from __future__ import annotations

import io
import re

COPIED_STYLE = "Copied from library"     # the Word character style of a copied span
TITLE_CHARS = 255                          # what Word's core properties hold of a title (python-docx's bound)
# characters XML 1.0 cannot hold (a .docx is XML): each becomes U+FFFD, so offsets keep
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def where(place: dict) -> str:
    """A place in a library, as a reader names it: the file, then page and paragraph."""
    parts = [str(place.get("path") or place.get("title") or f"document {place.get('document', '?')}")]
    for key in ("page", "paragraph"):
        if place.get(key):          # 0: a document without pages (text, HTML, e-mail)
            parts.append(f"{key} {place[key]}")
    if place.get("matter"):
        parts.append(f"matter {place['matter']}")
    return ", ".join(parts)


def _source_head(i: int, s: dict, markdown: bool = False) -> str:
    lib = s.get("library")
    head = f"{i}. {s.get('tokens', s.get('end', 0) - s.get('start', 0))} tokens copied"
    head += f" from library {'*' + lib + '*' if markdown and lib else lib}" if lib else ""
    text = " ".join((s.get("text") or "").split())
    return head + (f": \"{text}\"" if text else "")


def appendix(sources, markdown: bool) -> str:
    """An export's sources appendix: each copied span, its length and where it is from."""
    if not sources:
        return ""
    out = ["## Sources\n" if markdown else "Sources:\n"]
    for i, s in enumerate(sources, 1):
        out.append(_source_head(i, s, markdown))
        for p in s.get("places") or []:
            out.append(f"   - {'`' + where(p) + '`' if markdown else where(p)}")
        out.append("")
    return "\n".join(out)


def need_docx() -> None:
    """A clear ValueError where python-docx (the Word writer) is not installed."""
    import importlib.util

    if importlib.util.find_spec("docx") is None:
        raise ValueError("writing Word (.docx) needs python-docx: pip install 'olifant_mlx[documents]'")


def docx_bytes(title: str, blocks, sources, precedents=()) -> bytes:
    """A Word document: `title`, then `blocks` [(kind, text, marks)] in order (kind "heading",
    "text" or "note"; marks: [(start, end)] character ranges of `text` copied from a library,
    highlighted and in the character style COPIED_STYLE; each line of a text a paragraph),
    then the sources appendix and the precedents one ([(what, passages)]: each answer's or
    continuation's passages, Precedents.as_list()) (python-docx). Linear in the text and the
    marks: paragraphs go in before the section properties directly (python-docx's add_paragraph
    searches the whole body for them each time), styles are set by their ids (its setters scan
    every style each time), each line meets only the marks that reach it."""
    need_docx()
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.enum.text import WD_COLOR_INDEX

    doc = docx.Document()
    props = doc.core_properties       # the template's author and dates say nothing true
    props.title, props.author, props.last_modified_by, props.comments = (
        xml_safe(title)[:TITLE_CHARS], "", "", "")
    copied = doc.styles.add_style(COPIED_STYLE, WD_STYLE_TYPE.CHARACTER)
    copied.font.highlight_color = WD_COLOR_INDEX.YELLOW
    doc.add_heading(xml_safe(title), 0)
    add = _paragraphs(doc)
    for kind, text, marks in blocks:
        if kind == "heading":
            add(xml_safe(text), "Heading 1")
            continue
        spans, pos = _Marks(marks), 0
        for line in text.split("\n"):
            para = add()
            for piece, mark in spans.pieces(line, pos):
                run = para.add_run(xml_safe(piece))
                run.italic = kind == "note" or None
                if mark:       # by its id: Run.style's setter scans every style for the default, per run
                    run._r.style = copied.style_id
                    run.font.highlight_color = WD_COLOR_INDEX.YELLOW   # shown where styles are not
            pos += len(line) + 1
    if sources:
        add("Sources", "Heading 1")
        for i, s in enumerate(sources, 1):
            add(xml_safe(_source_head(i, s)))
            for p in s.get("places") or []:
                add(xml_safe(where(p)), "List Bullet")
    if precedents:
        add("Precedents", "Heading 1")
        for what, passages in precedents:
            add(xml_safe(f"{what[0].upper()}{what[1:]}:"))
            for p in passages:
                pinned = ", pinned" if p.get("pinned") else ""
                add(xml_safe(f"[{p.get('number', '?')}] {p.get('citation', '')}{pinned}"), "List Bullet")
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def _paragraphs(doc):
    """add(text="", style=None) -> a new last paragraph of `doc`'s body, in constant time: put
    before the body's section properties directly, each style looked up once."""
    from docx.oxml import OxmlElement
    from docx.text.paragraph import Paragraph

    body = doc.element.body
    end = body.sectPr
    styles: dict = {}

    def add(text: str = "", style: str | None = None):
        p = OxmlElement("w:p")
        if end is not None:
            end.addprevious(p)
        else:
            body.append(p)
        para = Paragraph(p, doc._body)
        if style is not None:      # by its id, looked up once (as for the copied runs)
            if style not in styles:
                styles[style] = doc.styles[style].style_id
            p.style = styles[style]
        if text:
            para.add_run(text)
        return para

    return add


class _Marks:
    """A text's copied marks, for cutting its lines in order: overlapping marks merged, sorted;
    the lines asked for in order, so each mark is passed over once."""

    def __init__(self, marks):
        merged: list[list[int]] = []
        for a, b in sorted((int(a), int(b)) for a, b in marks if b > a):
            if merged and a < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.marks, self.next = merged, 0

    def pieces(self, line: str, start: int):
        """(text, copied) pieces of `line`, which starts at `start` of its text (at or after the
        previous line asked for), cut at the marks."""
        end = start + len(line)
        while self.next < len(self.marks) and self.marks[self.next][1] <= start:
            self.next += 1
        at = start
        for a, b in self.marks[self.next:]:
            if a >= end:
                break
            a, b = max(a, start), min(b, end)
            if at < a:
                yield line[at - start:a - start], False
            if a < b:
                yield line[a - start:b - start], True
            at = max(at, b)
        if at < end:
            yield line[at - start:], False


def xml_safe(text: str) -> str:
    """`text` with each character XML 1.0 cannot hold replaced by U+FFFD (offsets keep)."""
    return NOT_XML.sub("\ufffd", text)



def cited(groups, markdown: bool) -> str:
    """An export's precedents appendix: for each answer or continuation given precedents
    ([(what, passages)], Conversation.precedents()), each passage's number and citation."""
    if not groups:
        return ""
    out = ["## Precedents\n" if markdown else "Precedents:\n"]
    for what, passages in groups:
        out.append(f"{what[0].upper()}{what[1:]}:" + ("\n" if markdown else ""))
        for p in passages:
            lib = p.get("library")
            notes = ", ".join(x for x in (lib and (f"library *{lib}*" if markdown else f"library {lib}"),
                                          p.get("pinned") and "pinned") if x)
            citation = f"`{p['citation']}`" if markdown else p["citation"]
            out.append(f"{'- ' if markdown else '  '}[{p.get('number', '?')}] {citation}"
                       + (f" ({notes})" if notes else ""))
        out.append("")
    return "\n".join(out)

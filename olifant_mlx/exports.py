"""What an export of generated text carries besides the text: the sources appendix (Markdown,
plain text) and the Word (.docx) file, with the spans copied from a library highlighted.

Used by the TUI's export dialog (tui/conversation.py) and `generate`/`chat --output`. Nothing
here touches the disk: the callers write the bytes with files.write_atomic (0600)."""
from __future__ import annotations

import io
import re

COPIED_STYLE = "Copied from library"     # the Word character style of a copied span
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
    continuation's passages, Precedents.as_list()) (python-docx)."""
    need_docx()
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.enum.text import WD_COLOR_INDEX

    doc = docx.Document()
    props = doc.core_properties       # the template's author and dates say nothing true
    props.title, props.author, props.last_modified_by, props.comments = xml_safe(title), "", "", ""
    copied = doc.styles.add_style(COPIED_STYLE, WD_STYLE_TYPE.CHARACTER)
    copied.font.highlight_color = WD_COLOR_INDEX.YELLOW
    doc.add_heading(xml_safe(title), 0)
    for kind, text, marks in blocks:
        if kind == "heading":
            doc.add_heading(xml_safe(text), 1)
            continue
        pos = 0
        for line in text.split("\n"):
            para = doc.add_paragraph()
            for piece, mark in _pieces(line, pos, marks):
                run = para.add_run(xml_safe(piece))
                run.italic = kind == "note" or None
                if mark:
                    run.style = copied
                    run.font.highlight_color = WD_COLOR_INDEX.YELLOW   # shown where styles are not
            pos += len(line) + 1
    if sources:
        doc.add_heading("Sources", 1)
        for i, s in enumerate(sources, 1):
            doc.add_paragraph(xml_safe(_source_head(i, s)))
            for p in s.get("places") or []:
                doc.add_paragraph(xml_safe(where(p)), style="List Bullet")
    if precedents:
        doc.add_heading("Precedents", 1)
        for what, passages in precedents:
            doc.add_paragraph(xml_safe(f"{what[0].upper()}{what[1:]}:"))
            for p in passages:
                pinned = ", pinned" if p.get("pinned") else ""
                doc.add_paragraph(xml_safe(f"[{p.get('number', '?')}] {p.get('citation', '')}{pinned}"),
                                  style="List Bullet")
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def _pieces(line: str, start: int, marks):
    """(text, copied) pieces of `line`, which starts at `start` of its text, cut at the marks."""
    cuts = {0, len(line)}
    for a, b in marks:
        cuts.update(min(max(x - start, 0), len(line)) for x in (a, b))
    cuts = sorted(cuts)
    for a, b in zip(cuts, cuts[1:]):
        if a < b:
            yield line[a:b], any(m0 <= start + a and start + b <= m1 for m0, m1 in marks)


def xml_safe(text: str) -> str:
    """`text` with each character XML 1.0 cannot hold replaced by U+FFFD (offsets keep)."""
    return NOT_XML.sub("\ufffd", text)

"""A paragraph's revision as a redline: word-level edits, Word tracked changes, readable diffs.

The `revise` command (issue 44) sends clauses to a model and gets their revised text back; this
module, which has no model in it, turns each (before, after) pair into the redline a lawyer
reads:

- `word_edits(before, after)`: the edits, word by word (difflib over words, spaces and
  punctuation), with nearby changes joined into one replacement; `changes(edits)` numbers the
  changes 0..n-1 and `apply_edits(edits, keep)` applies any subset of them.
- `docx_paragraphs(data)`: a .docx's body paragraphs (table cells included, text boxes not) with
  their text, style, heading level, numbering and count of tracked changes of their own; the
  `index` of each is the number the caller's revisions use.
- `docx_redline(data, revisions, ...)`: the same .docx with each revision written as Word tracked
  changes (w:del / w:ins), every other ZIP member and every other paragraph byte for byte as it
  was; `keep` writes only the changes the user accepted. `accepted_text` / `original_text` read a
  .docx's paragraphs with every tracked change accepted / rejected.
- `docx_from_paragraphs(texts)`: a plain .docx for inputs that are not Word, so they can be
  redlined the same way; `markdown_redline` (CriticMarkup) and `text_redline` (git's word-diff
  style) for .md/.txt output.

Choices. Paragraphs are w:p elements under w:body, in tables and content controls included, in
document order; those in text boxes, headers, footers and notes are not enumerated and never
changed. A paragraph's text is its runs' w:t, w:tab/w:ptab as "\\t", w:br/w:cr as "\\n" and
w:noBreakHyphen as U+2011, hyperlinks, fields' results and content controls included (field
codes, drawings, footnote marks and equations are not text). A paragraph with tracked changes
of its own is reported (`tracked`) and refused by `docx_redline`: the caller accepts or rejects
them first. Text inside a hyperlink is changed inside it (the w:del/w:ins go in the w:hyperlink,
which the schema allows); an insertion on a hyperlink's edge goes on the side nearer the
paragraph (outside the link) unless the link starts or ends the paragraph; a replacement's new
text goes right after its deleted text, in the link if that was. Inserted text takes the
formatting of the run before it (else after it); deleted text keeps its own. Zero-width elements
(bookmarks, proofErr, comment ranges, drawings, field marks) stay where they were and are never
deleted.

Documents are hostile input: the ZIP is checked by draftmodel.documents.check_zip (the XML it
unpacks to is bounded, OLIFANT_DOC_UNPACKED_BYTES), XML is parsed without entities or network
and refused with a DOCTYPE, and every problem is a RedlineError that says what is wrong. Nothing
here touches the disk: callers write the bytes with files.write_atomic (0600).
"""
from __future__ import annotations

import difflib
import io
import re
import zipfile
import zlib
from copy import deepcopy
from dataclasses import dataclass
from datetime import datetime, timezone

from olifant_mlx.draftmodel.documents import ENCRYPTED_OOXML, OLE_MAGIC, Skip, check_zip, limits
from olifant_mlx.exports import NOT_XML, need_docx, xml_safe

DOCUMENT = "word/document.xml"
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


def _w(name: str) -> str:
    return f"{{{W}}}{name}"


P, R, T, DEL_TEXT, RPR, PPR = _w("p"), _w("r"), _w("t"), _w("delText"), _w("rPr"), _w("pPr")
INS, DEL, MOVE_FROM, MOVE_TO = _w("ins"), _w("del"), _w("moveFrom"), _w("moveTo")
WID, VAL = _w("id"), _w("val")
# run content that a reader sees as characters; every other child of a run is zero-width
RUN_TEXT = {_w("tab"): "\t", _w("ptab"): "\t", _w("br"): "\n", _w("cr"): "\n", _w("noBreakHyphen"): "\u2011"}
# what holds the body's paragraphs besides the body itself (tables, content controls)
BLOCK_CONTAINERS = {_w(n) for n in ("tbl", "tr", "tc", "sdt", "sdtContent", "customXml")}
# what holds a paragraph's runs besides the paragraph itself
RUN_CONTAINERS = {_w(n) for n in ("hyperlink", "smartTag", "customXml", "sdt", "sdtContent", "fldSimple",
                                  "dir", "bdo")}
TRACKED = (INS, DEL, MOVE_FROM, MOVE_TO, _w("rPrChange"), _w("pPrChange"))
VIEWS = {"accepted": {INS, MOVE_TO}, "original": {DEL, MOVE_FROM}}   # the tracked runs each view reads


class RedlineError(ValueError):
    """A document or revision that cannot be redlined; the message says what is wrong."""


# ---- word-level edits -------------------------------------------------------------------------

@dataclass(frozen=True)
class Edit:
    """A stretch of the text: equal where before == after, else a change (a deletion has
    after "", an insertion before "")."""
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after


# a word (with inner apostrophes, hyphens, points and commas: "don't", "co-operate", "1,000.50"),
# a run of white space, or one other character
TOKEN = re.compile(r"\w+(?:['\u2019.,\-]\w+)*|\s+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Words, white-space runs and punctuation; they join to `text` again."""
    return TOKEN.findall(text)


def word_edits(before: str, after: str) -> list[Edit]:
    """The edits that turn `before` into `after`, word by word, read as a lawyer's redline: a
    change never splits a word, white space at a change's edge moves to its end, and changes
    apart by one token (a space, a comma) become one replacement."""
    a, b = tokenize(before), tokenize(after)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    segments = [(a[i1:i2], b[j1:j2]) for _, i1, i2, j1, j2 in matcher.get_opcodes()]
    segments = _join_close_changes(_slide_spaces(segments))
    return [Edit("".join(x), "".join(y)) for x, y in segments if x or y]


def _slide_spaces(segments: list[tuple[list, list]]) -> list[tuple[list, list]]:
    """A pure insertion or deletion that starts with the space the equal text after it starts
    with is shifted one token right ("deliver{+ the+} goods" -> "deliver {+the +}goods"): the
    same text, but the change holds a word and its following space, as a redline shows it."""
    out = [[list(x), list(y)] for x, y in segments]
    k = 0
    while k < len(out) - 1:
        (x, y), nxt = out[k], out[k + 1]
        moved = x or y
        if ((x and y) or len(moved) < 2 or not moved[0].isspace() or nxt[0] != nxt[1]
                or not nxt[0] or nxt[0][0] != moved[0]):
            k += 1
            continue
        space = moved[0]
        if k > 0 and out[k - 1][0] == out[k - 1][1]:
            out[k - 1][0].append(space)
            out[k - 1][1].append(space)
        else:
            out.insert(k, [[space], [space]])
            k += 1
        shifted = moved[1:] + [space]
        out[k] = [shifted, []] if x else [[], shifted]
        out[k + 1] = [nxt[0][1:], nxt[1][1:]]
        k += 1
    return [(x, y) for x, y in out]


def _join_close_changes(segments: list[tuple[list, list]]) -> list[tuple[list, list]]:
    """Changes separated by nothing or by a single equal token joined into one change."""
    out: list[tuple[list, list]] = []
    for x, y in segments:
        if not x and not y:
            continue
        if x != y and out and out[-1][0] != out[-1][1]:          # two changes side by side
            px, py = out.pop()
            x, y = px + x, py + y
        elif (x != y and len(out) >= 2 and len(out[-1][0]) == 1 and out[-1][0] == out[-1][1]
              and out[-2][0] != out[-2][1]):
            (ex, ey), (px, py) = out.pop(), out.pop()
            x, y = px + ex + x, py + ey + y
        out.append((x, y))
    return out


def changes(edits: list[Edit]) -> list[Edit]:
    """The changes among `edits`, in order: change n (the number `keep` uses) is element n."""
    return [e for e in edits if e.changed]


def apply_edits(edits: list[Edit], keep: set[int] | None = None) -> str:
    """The text with the kept changes (numbered as `changes` numbers them) made and the others
    left as they were: keep None gives the revised text, keep set() the original."""
    out, n = [], 0
    for e in edits:
        if e.changed:
            out.append(e.after if keep is None or n in keep else e.before)
            n += 1
        else:
            out.append(e.before)
    return "".join(out)


def _kept_spans(edits: list[Edit], keep: set[int] | None) -> list[tuple[int, int, str]]:
    """(start, end, new text) in the original text of each kept change."""
    spans, pos, n = [], 0, 0
    for e in edits:
        if e.changed:
            if keep is None or n in keep:
                spans.append((pos, pos + len(e.before), e.after))
            n += 1
        pos += len(e.before)
    return spans


def _check_revision(index: int, text: str, edits: list[Edit], keep: set[int] | None) -> None:
    """RedlineError unless the edits start from the paragraph's text and `keep` names only
    changes they have."""
    if "".join(e.before for e in edits) != text:
        raise RedlineError(f"the revision of paragraph {index} does not start from its text "
                           f"(its edits' `before` differ from the paragraph)")
    count = len(changes(edits))
    unknown = sorted(n for n in (keep or ()) if not 0 <= n < count)
    if unknown:
        raise RedlineError(f"keep names change {unknown[0]} of paragraph {index}, which has {count} changes")


def _check_indices(revisions: dict, count: int) -> None:
    for index in revisions:
        if not isinstance(index, int) or not 0 <= index < count:
            raise RedlineError(f"paragraph {index} does not exist (the document has {count} paragraphs)")


def _kept(keep: dict[int, set[int]] | None, index: int) -> set[int] | None:
    """The changes of paragraph `index` to write: None (all) where keep or its entry is None."""
    return None if keep is None else keep.get(index)


# ---- readable diffs (.md, .txt) ---------------------------------------------------------------

# the CriticMarkup delimiters; each found in the text gets a backslash before its second
# character, which a CriticMarkup reader does not match and Markdown shows as the character
CRITIC = re.compile(r"\{\+\+|\{--|\{~~|\{==|\{>>|\+\+\}|--\}|~~\}|==\}|<<\}|~>")


def _critic_escape(text: str) -> str:
    return CRITIC.sub(lambda m: m.group()[0] + "\\" + m.group()[1:], text)


def _critic_mark(before: str, after: str) -> str:
    old, new = _critic_escape(before), _critic_escape(after)
    if not before:
        return f"{{++{new}++}}"
    if not after:
        return f"{{--{old}--}}"
    return f"{{~~{old}~>{new}~~}}"


def _word_diff_mark(before: str, after: str) -> str:
    return (f"[-{before}-]" if before else "") + (f"{{+{after}+}}" if after else "")


def _render(paragraphs: list[str], revisions: dict[int, list[Edit]], keep, mark, escape) -> str:
    """The paragraphs separated by blank lines, each revised one with its kept changes marked
    by `mark(before, after)` and its other text passed through `escape`."""
    _check_indices(revisions, len(paragraphs))
    out = []
    for index, text in enumerate(paragraphs):
        edits = revisions.get(index)
        if edits is None:
            out.append(text)
            continue
        kept = _kept(keep, index)
        _check_revision(index, text, edits, kept)
        pieces, n = [], 0
        for e in edits:
            if e.changed and (kept is None or n in kept):
                pieces.append(mark(e.before, e.after))
            else:
                pieces.append(escape(e.before))
            n += e.changed
        out.append("".join(pieces))
    return "\n\n".join(out)


def markdown_redline(paragraphs: list[str], revisions: dict[int, list[Edit]],
                     keep: dict[int, set[int]] | None = None) -> str:
    """The paragraphs in CriticMarkup: {--deleted--}, {++inserted++}, {~~old~>new~~}; a
    delimiter in a revised paragraph's own text is escaped, unrevised paragraphs are as they were."""
    return _render(paragraphs, revisions, keep, _critic_mark, _critic_escape)


def text_redline(paragraphs: list[str], revisions: dict[int, list[Edit]],
                 keep: dict[int, set[int]] | None = None) -> str:
    """The paragraphs in git's word-diff style: [-deleted-]{+inserted+} (no escaping, as git)."""
    return _render(paragraphs, revisions, keep, _word_diff_mark, str)


# ---- reading a .docx ------------------------------------------------------------------------

@dataclass(frozen=True)
class DocxParagraph:
    """A body paragraph of a .docx: `index` is its place among them (what revisions name)."""
    index: int
    text: str              # what a reader sees, its own tracked changes accepted
    style: str             # the paragraph style's name ("Normal", "Heading 1", "List Number")
    heading: int           # 1-9 for a heading (Title is 1), 0 for body text
    numbered: bool         # in a numbered or bulleted list (directly or by its style)
    in_table: bool
    tracked: int           # its own tracked changes (w:ins, w:del, moves, formatting changes)


def _open_docx(data: bytes) -> tuple[zipfile.ZipFile, bytes]:
    """The checked ZIP and its word/document.xml; RedlineError for anything else."""
    try:
        need_docx()                 # python-docx brings lxml, which reads and writes the XML
    except ValueError as e:
        raise RedlineError(str(e)) from None
    if data.startswith(OLE_MAGIC):
        if ENCRYPTED_OOXML in data:
            raise RedlineError("encrypted (saved with a password): save it again without one")
        raise RedlineError("a binary Word (.doc) or other OLE2 file, not a .docx: save it as .docx")
    if not data.startswith(b"PK"):
        raise RedlineError("not a Word (.docx) file: not a ZIP archive" + (" (it is empty)" if not data else ""))
    lim = limits()
    if len(data) > lim["file_bytes"]:
        raise RedlineError(f"too large: {len(data):,} bytes (the limit: {lim['file_bytes']:,}, "
                           f"OLIFANT_DOC_FILE_BYTES)")
    try:
        check_zip(data, lim)
        archive = zipfile.ZipFile(io.BytesIO(data))
        return archive, archive.read(DOCUMENT)
    except Skip as e:
        raise RedlineError(str(e)) from None
    except KeyError:
        raise RedlineError(f"no {DOCUMENT} in it: not a Word document") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError) as e:
        raise RedlineError(f"damaged ({type(e).__name__}: {e})") from None


def _parse(xml: bytes, name: str):
    """The root of an XML part, parsed as hostile input: no entities, no network, no DOCTYPE."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    try:
        root = etree.fromstring(xml, parser)
    except etree.XMLSyntaxError as e:
        raise RedlineError(f"{name} does not parse as XML ({e})") from None
    if root.getroottree().docinfo.doctype:
        raise RedlineError(f"{name} has a DOCTYPE, which Word never writes: not read")
    return root


def _body(root):
    """The w:body of word/document.xml."""
    body = root.find(_w("body"))
    if root.tag != _w("document") or body is None:
        raise RedlineError(f"{DOCUMENT} holds no WordprocessingML body (a Strict Open XML file? "
                           f"save it as a Word Document .docx)")
    return body


def _body_paragraphs(root) -> list[tuple[object, bool]]:
    """(w:p, in a table) of every body paragraph in document order: the body's own, table
    cells' and content controls' (not text boxes', which sit inside runs)."""
    out = []

    def visit(element, in_table: bool) -> None:
        for child in element:
            if child.tag == P:
                out.append((child, in_table))
            elif child.tag in BLOCK_CONTAINERS:
                visit(child, in_table or child.tag == _w("tbl"))

    visit(_body(root), False)
    return out


def _runs(element, view: str = "accepted"):
    """The w:r of a paragraph in reading order, through hyperlinks, fields and content
    controls, and through the tracked changes that `view` ("accepted"/"original") reads."""
    for child in element:
        if child.tag == R:
            yield child
        elif child.tag in RUN_CONTAINERS or child.tag in VIEWS[view]:
            yield from _runs(child, view)


def _item_text(child) -> str | None:
    """The characters a run's child shows; None for a zero-width one (rPr, drawing, field mark)."""
    if child.tag in (T, DEL_TEXT):
        return child.text or ""
    return RUN_TEXT.get(child.tag)


def _paragraph_text(p, view: str = "accepted") -> str:
    return "".join(t for r in _runs(p, view) for c in r if (t := _item_text(c)) is not None)


def _tracked(p) -> int:
    """The paragraph's own tracked changes (not those of a text box's paragraphs inside it)."""
    return sum(1 for el in p.iter(*TRACKED) if next(el.iterancestors(P), None) is p)


def _styles(archive: zipfile.ZipFile) -> tuple[dict, str | None]:
    """{style id: (name, based on, numbered or None, outline level or None)} of the paragraph
    styles, and the default paragraph style's id."""
    from docx.styles import BabelFish

    try:
        xml = archive.read("word/styles.xml")
    except KeyError:
        return {}, None
    styles, default = {}, None
    for style in _parse(xml, "word/styles.xml").iter(_w("style")):
        if style.get(_w("type")) != "paragraph":
            continue
        sid = style.get(_w("styleId"))
        name = style.find(_w("name"))
        based = style.find(_w("basedOn"))
        ppr = style.find(PPR)
        styles[sid] = (BabelFish.internal2ui(name.get(VAL, sid)) if name is not None else sid,
                       based.get(VAL) if based is not None else None, *_numbering_and_outline(ppr))
        if style.get(_w("default")) in ("1", "true", "on"):
            default = sid
    return styles, default


def _numbering_and_outline(ppr) -> tuple[bool | None, int | None]:
    """What a w:pPr says itself: numbered (numId 0 turns a style's numbering off; None: it
    does not say) and outline level 0-9 (None: it does not say)."""
    if ppr is None:
        return None, None
    num_id = ppr.find(f"{_w('numPr')}/{_w('numId')}")
    outline = ppr.find(_w("outlineLvl"))
    level = outline.get(VAL, "") if outline is not None else ""
    return (None if num_id is None else num_id.get(VAL) != "0",
            int(level) if level.isdigit() else None)


def _style_facts(p, styles: dict, default: str | None) -> tuple[str, int, bool]:
    """(style name, heading level, numbered) of a paragraph, its own w:pPr first, then its
    style and the styles that style is based on."""
    ppr = p.find(PPR)
    pstyle = ppr.find(_w("pStyle")) if ppr is not None else None
    sid = pstyle.get(VAL) if pstyle is not None else default
    numbered, outline = _numbering_and_outline(ppr)
    name = styles.get(sid, (sid or "",))[0]
    seen = set()
    while sid in styles and sid not in seen:         # basedOn chains can loop in hostile files
        seen.add(sid)
        _, based, style_numbered, style_outline = styles[sid]
        numbered = style_numbered if numbered is None else numbered
        outline = style_outline if outline is None else outline
        sid = based
    heading = outline + 1 if outline is not None and outline < 9 else 0
    match = re.fullmatch(r"heading ([1-9])", name.lower())
    if not heading and (match or name.lower() == "title"):
        heading = int(match.group(1)) if match else 1
    return name, heading, bool(numbered)


def docx_paragraphs(data: bytes) -> list[DocxParagraph]:
    """Every body paragraph of a .docx (table cells included, text boxes not), in document
    order; RedlineError for a file that is not a readable .docx."""
    archive, xml = _open_docx(data)
    styles, default = _styles(archive)
    out = []
    for index, (p, in_table) in enumerate(_body_paragraphs(_parse(xml, DOCUMENT))):
        style, heading, numbered = _style_facts(p, styles, default)
        out.append(DocxParagraph(index, _paragraph_text(p), style, heading, numbered, in_table, _tracked(p)))
    return out


def accepted_text(data: bytes) -> list[str]:
    """Each body paragraph's text with every tracked change accepted (one string a paragraph
    as docx_paragraphs counts them: a tracked paragraph mark is not merged)."""
    _, xml = _open_docx(data)
    return [_paragraph_text(p, "accepted") for p, _ in _body_paragraphs(_parse(xml, DOCUMENT))]


def original_text(data: bytes) -> list[str]:
    """Each body paragraph's text with every tracked change rejected."""
    _, xml = _open_docx(data)
    return [_paragraph_text(p, "original") for p, _ in _body_paragraphs(_parse(xml, DOCUMENT))]


# ---- writing tracked changes ----------------------------------------------------------------

@dataclass
class _Piece:
    """A stretch of one run between two cuts (change edges) or around a zero-width child."""
    run: object            # the original w:r: its attributes, w:rPr and parent
    children: list         # its content elements
    start: int             # its place in the paragraph's text
    end: int
    depth: int             # how many containers (hyperlinks, fields, content controls) hold the run
    deleted: int | None = None     # the kept change whose deletion covers it
    element: object = None         # what stands for it in the paragraph now


def _split_run(run, start: int, cuts: set[int], depth: int) -> list[_Piece]:
    """The run's content cut at every cut inside its text; each zero-width child a piece of
    its own (so it is never inside a deletion)."""
    pieces, pos, current = [], start, None
    for child in run:
        if child.tag == RPR:
            continue
        text = _item_text(child)
        if text is None:
            pieces.append(_Piece(run, [child], pos, pos, depth))
            current = None
            continue
        for element, length in _cut_text(child, text, pos, cuts):
            if current is None or (pos in cuts and current.end > current.start):
                current = _Piece(run, [], pos, pos, depth)
                pieces.append(current)
            current.children.append(element)
            pos += length
            current.end = pos
    return pieces


def _cut_text(child, text: str, start: int, cuts: set[int]) -> list[tuple[object, int]]:
    """(element, length) parts of a w:t cut at the cuts inside it; other children whole."""
    inside = sorted(c - start for c in cuts if start < c < start + len(text))
    if child.tag != T or not inside:
        return [(child, len(text))]
    parts = []
    for a, b in zip([0, *inside], [*inside, len(text)]):
        t = child.makeelement(T, child.attrib)
        t.text = text[a:b]
        t.set(XML_SPACE, "preserve")
        parts.append((t, b - a))
    return parts


def _new_run(run, children: list):
    """A run with `run`'s attributes and formatting holding `children`."""
    new = run.makeelement(R, run.attrib)
    rpr = run.find(RPR)
    if rpr is not None:
        new.append(deepcopy(rpr))
    for child in children:
        new.append(child)
    return new


def _mark(tag: str, stamp: dict, *runs):
    """A w:ins or w:del (its w:id set later) holding `runs`, listed in stamp["made"]."""
    mark = runs[0].makeelement(tag, {_w("author"): stamp["author"], _w("date"): stamp["date"]})
    stamp["made"].add(mark)
    for run in runs:
        mark.append(run)
    return mark


def _deleted_run(piece: _Piece):
    """The piece as a deleted run: its text in w:delText, its formatting kept."""
    run = _new_run(piece.run, piece.children)
    for t in run.iter(T):
        t.tag = DEL_TEXT
        t.set(XML_SPACE, "preserve")
    return run


def _inserted_run(text: str, rpr, maker):
    """A run of new text with formatting `rpr` (copied): tabs and line breaks as w:tab and w:br."""
    run = maker.makeelement(R, {})
    if rpr is not None:
        run.append(deepcopy(rpr))
    for part in re.split(r"([\t\n])", text):
        if part in ("\t", "\n"):
            run.append(run.makeelement(_w("tab") if part == "\t" else _w("br"), {}))
        elif part:
            t = run.makeelement(T, {XML_SPACE: "preserve"})
            t.text = part
            run.append(t)
    return run


def _place_pieces(pieces: list[_Piece], cuts: set[int], stamp: dict) -> None:
    """Each run that a cut falls inside, or a deletion covers, replaced by its pieces (the
    deleted ones in w:del); the others stay the very same element."""
    by_run: dict = {}
    for piece in pieces:
        by_run.setdefault(piece.run, []).append(piece)
    for run, parts in by_run.items():
        start, end = parts[0].start, parts[-1].end
        if all(q.deleted is None for q in parts) and not any(start < c < end for c in cuts):
            for q in parts:
                q.element = run
            continue
        for q in parts:
            q.element = _mark(DEL, stamp, _deleted_run(q)) if q.deleted is not None else _new_run(run, q.children)
            run.addprevious(q.element)
        run.getparent().remove(run)
    for prev, piece in zip(pieces, pieces[1:]):     # one w:del for a deletion across adjacent runs
        if (piece.deleted is not None and prev.deleted == piece.deleted
                and prev.element is not piece.element and prev.element.getnext() is piece.element):
            for run in list(piece.element):
                prev.element.append(run)
            piece.element.getparent().remove(piece.element)
            for q in pieces:
                if q.element is piece.element:
                    q.element = prev.element


def _depth(run, p) -> int:
    """How many containers (hyperlinks, fields, content controls) hold the run inside `p`."""
    depth = 0
    for ancestor in run.iterancestors():
        if ancestor is p:
            break
        depth += 1
    return depth


def _place_insertion(p, pieces: list[_Piece], span: tuple[int, int, str], change: int, stamp: dict) -> None:
    """The new text of one change in a w:ins: after its deletion, else at its place between the
    runs, with the formatting of the run before it (else after it)."""
    start, end, new = span
    texts = [q for q in pieces if q.end > q.start]
    if start < end:
        anchor = max((q for q in texts if q.deleted == change), key=lambda q: q.end)
        after = True
    else:
        before = next((q for q in reversed(texts) if q.end == start), None)
        behind = next((q for q in texts if q.start == start), None)
        after = before is not None and (behind is None or before.depth <= behind.depth)
        anchor = before if after else behind
    if anchor is None:                               # an empty paragraph: the paragraph mark's formatting
        rpr = p.find(f"{PPR}/{RPR}")
        p.append(_mark(INS, stamp, _inserted_run(new, rpr, p)))
        return
    ins = _mark(INS, stamp, _inserted_run(new, anchor.run.find(RPR), p))
    anchor.element.addnext(ins) if after else anchor.element.addprevious(ins)


def _redline_paragraph(p, spans: list[tuple[int, int, str]], stamp: dict) -> None:
    """Write the kept changes `spans` (start, end, new text) into paragraph `p`."""
    cuts = {x for a, b, _ in spans for x in (a, b)}
    pieces, pos = [], 0
    for run in list(_runs(p)):
        parts = _split_run(run, pos, cuts, _depth(run, p))
        pos = parts[-1].end if parts else pos
        pieces += parts
    for change, (a, b, _) in enumerate(spans):
        for q in pieces:
            if q.end > q.start and a <= q.start and q.end <= b:
                q.deleted = change
    _place_pieces(pieces, cuts, stamp)
    for change in reversed(range(len(spans))):       # right to left: two at one place keep their order
        if spans[change][2]:
            _place_insertion(p, pieces, spans[change], change, stamp)


def _stamp(author: str, date: datetime | None) -> dict:
    """The w:author and w:date (ISO 8601, UTC, Z) of every change written."""
    if NOT_XML.search(author):
        raise RedlineError("the author's name holds a character XML cannot hold")
    date = date or datetime.now(timezone.utc)
    if date.tzinfo is None:
        date = date.replace(tzinfo=timezone.utc)
    return {"author": author, "date": date.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "made": set()}


def _number_marks(root, marks: list) -> None:
    """Give the new w:ins/w:del ids above every w:id already in the part."""
    ids = [int(v) for el in root.iter() if (v := el.get(WID)) is not None and v.lstrip("-").isdigit()]
    for n, mark in enumerate(marks, max(ids, default=0) + 1):
        mark.set(WID, str(n))


def _serialize(xml: bytes, root, original: bytes) -> bytes:
    """The part with the changed tree: the original bytes around the root element kept (its XML
    declaration as written) when lxml's serialization of the untouched tree reproduces them."""
    from lxml import etree

    at = xml.find(original)
    if at < 0:
        return etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
    return xml[:at] + etree.tostring(root) + xml[at + len(original):]


def _replace_member(archive: zipfile.ZipFile, name: str, data: bytes) -> bytes:
    """The ZIP with member `name` replaced: every other member's content, name, order, date and
    compression as they were."""
    members = [(info, data if info.filename == name else archive.read(info)) for info in archive.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        dst.comment = archive.comment
        for info, content in members:
            dst.writestr(info, content)
    return out.getvalue()


def docx_redline(data: bytes, revisions: dict[int, list[Edit]], author: str = "olifant_mlx",
                 date: datetime | None = None, keep: dict[int, set[int]] | None = None) -> bytes:
    """The .docx with each revised paragraph's kept changes (`keep`: {paragraph: change
    numbers}; None, or a paragraph missing from it, keeps all) as Word tracked changes, by
    `author` at `date` (now); everything else as it was. RedlineError, and nothing made, for a
    paragraph that does not exist, has tracked changes of its own, or whose edits do not start
    from its text."""
    from lxml import etree

    archive, xml = _open_docx(data)
    root = _parse(xml, DOCUMENT)
    paragraphs = _body_paragraphs(root)
    _check_indices(revisions, len(paragraphs))
    stamp = _stamp(author, date)
    todo = []
    for index, edits in sorted(revisions.items()):
        p = paragraphs[index][0]
        if _tracked(p):
            raise RedlineError(f"paragraph {index} has tracked changes of its own ({_tracked(p)}): "
                               f"accept or reject them first")
        kept = _kept(keep, index)
        _check_revision(index, _paragraph_text(p), edits, kept)
        if any(NOT_XML.search(e.after) for e in edits if e.changed):
            raise RedlineError(f"the revision of paragraph {index} holds a character XML cannot hold")
        spans = _kept_spans(edits, kept)
        if spans:
            todo.append((p, spans))
    original = etree.tostring(root)
    for p, spans in todo:
        _redline_paragraph(p, spans, stamp)
    # ours only: a text box inside a paragraph may hold tracked changes with ids of their own
    _number_marks(root, [m for p, _ in todo for m in p.iter(INS, DEL) if m in stamp["made"]])
    return _replace_member(archive, DOCUMENT, _serialize(xml, root, original))


def docx_from_paragraphs(paragraphs: list[str], title: str = "") -> bytes:
    """A plain .docx with one Normal paragraph per text ("\\t" a tab, "\\n" a line break) and
    `title` as its title property, so that a file that is not Word can be redlined too.
    Characters XML cannot hold become U+FFFD: diff against docx_paragraphs() of the result."""
    need_docx()
    import docx

    doc = docx.Document()
    props = doc.core_properties       # the template's author and dates say nothing true
    props.title, props.author, props.last_modified_by, props.comments = xml_safe(title), "", "", ""
    for text in paragraphs:
        doc.add_paragraph(xml_safe(text))
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()

"""The redline layer of `revise` (issue 44, olifant_mlx/redline.py): word-level edits that read like
a lawyer's redline and apply in any subset; a real python-docx document read paragraph by paragraph
and one clause written back as Word tracked changes with everything else byte for byte as it was;
keep= subsets; bad and hostile files refused with a clear message; CriticMarkup and word-diff text;
and LibreOffice reading the redline (slow; it skips without soffice)."""
import io
import random
import re
import zipfile
from datetime import datetime, timezone
from itertools import combinations

import pytest
from word_files import libreoffice_convert, write_tracked_docx

pytest.importorskip("docx")
from lxml import etree  # noqa: E402

from olifant_mlx.draftmodel.documents import ENCRYPTED_OOXML, OLE_MAGIC  # noqa: E402
from olifant_mlx.redline import (  # noqa: E402
    Edit,
    RedlineError,
    accepted_text,
    apply_edits,
    changes,
    docx_from_paragraphs,
    docx_paragraphs,
    docx_redline,
    markdown_redline,
    original_text,
    text_redline,
    tokenize,
    word_edits,
)

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
NS = {"w": W}
DOCUMENT = "word/document.xml"
WHEN = datetime(2026, 12, 6, 9, 30, tzinfo=timezone.utc)

# the clause: (text, bold, italic) runs; a bookmark around the italic one
CLAUSE_RUNS = [("The Customer", True, False), (" shall pay ", False, False), ("all", True, False),
               (" undisputed invoices within 30 days of ", False, False), ("receipt of the invoice", False, True),
               (" by bank transfer.", False, False)]
CLAUSE = "".join(t for t, _, _ in CLAUSE_RUNS)
REVISED = ("The Customer shall pay undisputed invoices within 45 business days of receipt of a valid invoice "
           "by bank transfer to the Supplier's account.")
LINKED = "Terms are published at our website for customers."
PARAGRAPHS = ["Services Agreement", "1. Payment", CLAUSE, "Interest: 8% a year.\tSee the schedule.\nSecond line.",
              LINKED, "2. Parties", "Party", "Role", "Acme B.V.", "Supplier", "Signed in Amsterdam."]
CLAUSE_AT, LINK_AT, CELL_AT = 2, 4, 9


def fixture_docx() -> bytes:
    """Title, headings, a numbered clause with bold and italic runs and a bookmark, a tab and a
    line break, a hyperlink (raw XML: python-docx cannot write one), a table, a closing line."""
    import docx
    from docx.opc.constants import RELATIONSHIP_TYPE as RT
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    d = docx.Document()
    d.add_heading(PARAGRAPHS[0], 0)
    d.add_heading(PARAGRAPHS[1], 1)
    clause = d.add_paragraph(style="List Number")
    for text, bold, italic in CLAUSE_RUNS:
        run = clause.add_run(text)
        run.bold, run.italic = bold or None, italic or None
        if italic:
            run._r.addprevious(parse_xml(f'<w:bookmarkStart {nsdecls("w")} w:id="41" w:name="receipt"/>'))
            run._r.addnext(parse_xml(f'<w:bookmarkEnd {nsdecls("w")} w:id="41"/>'))
    d.add_paragraph(PARAGRAPHS[3])
    linked = d.add_paragraph("Terms are published at ")
    rid = d.part.relate_to("https://example.com/terms", RT.HYPERLINK, is_external=True)
    linked._p.append(parse_xml(f'<w:hyperlink {nsdecls("w", "r")} r:id="{rid}"><w:r><w:rPr><w:u w:val="single"/>'
                               f'</w:rPr><w:t>our website for customers</w:t></w:r></w:hyperlink>'))
    linked.add_run(".")
    d.add_heading(PARAGRAPHS[5], 1)
    table = d.add_table(rows=2, cols=2)
    for i, text in enumerate(PARAGRAPHS[6:10]):
        table.cell(i // 2, i % 2).text = text
    d.add_paragraph(PARAGRAPHS[10])
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


@pytest.fixture(scope="module")
def original() -> bytes:
    return fixture_docx()


def body_paragraphs(data: bytes) -> list:
    """The body's w:p elements, table cells included, as lxml reads them (independent of the module)."""
    root = etree.fromstring(zipfile.ZipFile(io.BytesIO(data)).read(DOCUMENT))
    return [p for p in root.find("w:body", NS).iter(f"{{{W}}}p")]


def marks(p) -> list:
    return p.findall(".//w:ins", NS) + p.findall(".//w:del", NS)


def texts_in(p, path: str) -> list[str]:
    """The text of each run `path` finds in `p` (w:t and w:delText)."""
    return ["".join(r.itertext()) for r in p.xpath(path, namespaces=NS)]


# ---- word-level edits -------------------------------------------------------------------------

def test_word_edits_read_like_a_lawyers_redline():
    assert word_edits("the Supplier shall pay", "each party shall pay") == [
        Edit("the Supplier", "each party"), Edit(" shall pay", " shall pay")]       # one replacement, no confetti
    assert word_edits("deliver goods", "deliver the goods") == [
        Edit("deliver ", "deliver "), Edit("", "the "), Edit("goods", "goods")]     # a word and its space
    assert word_edits("the very good deal", "the good deal") == [
        Edit("the ", "the "), Edit("very ", ""), Edit("good deal", "good deal")]
    assert word_edits("pay 1,000.00 euros", "pay 2,000.00 euros")[1] == Edit("1,000.00", "2,000.00")
    assert word_edits("the Supplier", "the Suppliers")[1] == Edit("Supplier", "Suppliers")   # whole words
    assert word_edits("a b c d", "w x y z") == [Edit("a b c d", "w x y z")]
    assert word_edits("", "New text") == [Edit("", "New text")] and word_edits("Same", "Same") == [Edit("Same", "Same")]
    edits = word_edits(CLAUSE, REVISED)
    assert [(e.before, e.after) for e in changes(edits)] == [
        ("all ", ""), ("30", "45 business"), ("the", "a valid"), ("", " to the Supplier's account")]


def random_text(rng: random.Random, n: int) -> str:
    pieces = ["the", "Supplier", "shall", "deliver", "goods", "30", "1,000.00", "don't", "co-operate", "Müller",
              "a", "of", ".", ",", ";", "(", ")", "'", "\u2019", "-", " ", " ", " ", " ", "  ", "\n", "\t", "é"]
    return "".join(rng.choice(pieces) for _ in range(n))


def mutate(rng: random.Random, text: str) -> str:
    if rng.random() < 0.1:
        return random_text(rng, rng.randrange(0, 30))
    out = []
    for token in tokenize(text):
        roll = rng.random()
        if roll < 0.08:
            continue
        out.append(random_text(rng, 2) if roll < 0.16 else token)
        if rng.random() < 0.06:
            out.append(random_text(rng, rng.randrange(1, 4)))
    return "".join(out)


def boundaries(text: str) -> set[int]:
    cuts, pos = {0}, 0
    for token in tokenize(text):
        pos += len(token)
        cuts.add(pos)
    return cuts


def test_any_subset_of_changes_mixes_the_texts_consistently():
    """Seeded random texts (hypothesis is not a dependency): all changes give `after`, none
    `before`; edits are whole tokens; no two changes touch or stand one token apart; a subset and
    its complement share the equal text and split each change between them."""
    rng = random.Random(44)
    for case in range(400):
        before = random_text(rng, rng.randrange(0, 40))
        after = mutate(rng, before)
        edits = word_edits(before, after)
        assert apply_edits(edits) == after and apply_edits(edits, set()) == before, (before, after)
        assert all(e.before or e.after for e in edits)
        for edit_side, text in (("before", before), ("after", after)):
            pos, cuts = 0, boundaries(text)
            for e in edits:
                pos += len(getattr(e, edit_side))
                assert pos in cuts, (case, before, after, edits)
        kinds = [e.changed for e in edits]
        assert not any(a and b for a, b in zip(kinds, kinds[1:])), edits
        assert not any(a.changed and c.changed and not b.changed and len(tokenize(b.before)) == 1
                       for a, b, c in zip(edits, edits[1:], edits[2:])), edits
        count = len(changes(edits))
        chosen = {n for n in range(count) if rng.random() < 0.5}
        mixed, rest = apply_edits(edits, chosen), apply_edits(edits, set(range(count)) - chosen)
        assert len(mixed) + len(rest) == len(before) + len(after)
        pos, n = 0, 0
        for e in edits:               # each stretch stands where the ones before it put it
            piece = e.after if e.changed and n in chosen else e.before
            assert mixed[pos:pos + len(piece)] == piece
            pos, n = pos + len(piece), n + e.changed
        assert pos == len(mixed)


# ---- Word in ----------------------------------------------------------------------------------

def test_docx_paragraphs_reads_the_body_in_order(original):
    got = docx_paragraphs(original)
    assert [p.text for p in got] == PARAGRAPHS
    assert [p.index for p in got] == list(range(len(PARAGRAPHS)))
    assert [p.heading for p in got] == [1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert got[0].style == "Title" and got[1].style == "Heading 1" and got[10].style == "Normal"
    assert got[CLAUSE_AT].style == "List Number" and got[CLAUSE_AT].numbered
    assert [p.numbered for p in got].count(True) == 1
    assert [p.in_table for p in got] == [False] * 6 + [True] * 4 + [False]
    assert not any(p.tracked for p in got)


def test_tracked_changes_of_a_paragraph_are_counted_and_read_accepted_or_rejected(tmp_path):
    path = tmp_path / "tracked.docx"
    write_tracked_docx(path)
    data = path.read_bytes()
    got = docx_paragraphs(data)
    assert [p.tracked for p in got] == [2, 0, 1, 2]
    assert [p.text for p in got] == accepted_text(data) == [
        "The Supplier shall promptly deliver the goods.", "A paragraph before a deleted one.", "",
        "Moved: to its new place."]
    assert original_text(data) == ["The Supplier shall never deliver the goods.", "A paragraph before a deleted one.",
                                   "Gone entirely.", "Moved: from its old place."]
    with pytest.raises(RedlineError, match="paragraph 0 has tracked changes of its own"):
        docx_redline(data, {0: word_edits(got[0].text, "The Supplier shall deliver.")})
    out = docx_redline(data, {1: word_edits(got[1].text, "A paragraph after a deleted one.")})
    assert accepted_text(out)[1] == "A paragraph after a deleted one." and original_text(out) == original_text(data)


def test_formatting_changes_count_as_tracked_changes():
    import docx
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    d = docx.Document()
    stamp = f'{nsdecls("w")} w:id="7" w:author="Counsel" w:date="2026-12-01T00:00:00Z"'
    d.add_paragraph("Restyled.")._p.get_or_add_pPr().append(parse_xml(f"<w:pPrChange {stamp}><w:pPr/></w:pPrChange>"))
    d.add_paragraph().add_run("Made bold.")._r.get_or_add_rPr().append(
        parse_xml(f"<w:rPrChange {stamp}><w:rPr/></w:rPrChange>"))
    d.add_paragraph("Plain.")
    out = io.BytesIO()
    d.save(out)
    got = docx_paragraphs(out.getvalue())
    assert [(p.text, p.tracked) for p in got] == [("Restyled.", 1), ("Made bold.", 1), ("Plain.", 0)]
    with pytest.raises(RedlineError, match="paragraph 1 has tracked changes of its own"):
        docx_redline(out.getvalue(), {1: word_edits("Made bold.", "Made italic.")})


# ---- Word out ---------------------------------------------------------------------------------

def test_one_clause_becomes_tracked_changes_and_nothing_else_changes(original):
    edits = word_edits(CLAUSE, REVISED)
    out = docx_redline(original, {CLAUSE_AT: edits}, author="Counsel", date=WHEN)
    zin, zout = zipfile.ZipFile(io.BytesIO(original)), zipfile.ZipFile(io.BytesIO(out))
    assert [(i.filename, i.compress_type) for i in zin.infolist()] == [
        (i.filename, i.compress_type) for i in zout.infolist()]
    for info in zin.infolist():
        if info.filename != DOCUMENT:
            assert zout.read(info.filename) == zin.read(info), info.filename
    before, after = body_paragraphs(original), body_paragraphs(out)
    assert len(before) == len(after) == len(PARAGRAPHS)
    for i, (a, b) in enumerate(zip(before, after)):
        if i != CLAUSE_AT:
            assert etree.tostring(a) == etree.tostring(b), i
    doc_in, doc_out = zin.read(DOCUMENT), zout.read(DOCUMENT)        # and the bytes around the clause
    start = [m.start() for m in re.finditer(rb"<w:p[ >]", doc_in)][CLAUSE_AT]
    end_in = doc_in.index(b"</w:p>", start)
    end_out = doc_out.index(b"</w:p>", start)
    assert doc_out[:start] == doc_in[:start] and doc_out[end_out:] == doc_in[end_in:]

    assert accepted_text(out) == PARAGRAPHS[:CLAUSE_AT] + [REVISED] + PARAGRAPHS[CLAUSE_AT + 1:]
    assert original_text(out) == PARAGRAPHS
    clause, old = after[CLAUSE_AT], before[CLAUSE_AT]
    assert etree.tostring(clause.find("w:pPr", NS)) == etree.tostring(old.find("w:pPr", NS))
    read = docx_paragraphs(out)[CLAUSE_AT]
    assert (read.style, read.numbered, read.text) == ("List Number", True, REVISED)
    assert read.tracked == len(marks(clause)) == 6        # 3 deletions ("all " one across two runs), 3 insertions
    assert [len(d) for d in clause.findall("w:del", NS)] == [2, 1, 1]

    assert texts_in(clause, "w:del/w:r") == ["all", " ", "30", "the"]
    assert texts_in(clause, "w:ins/w:r") == ["45 business", "a valid", " to the Supplier's account"]
    assert texts_in(clause, "w:del/w:r[w:rPr/w:b]") == ["all"]               # deleted text keeps its format
    assert texts_in(clause, "w:del/w:r[w:rPr/w:i]") == ["the"]
    assert texts_in(clause, "w:ins/w:r[w:rPr/w:i]") == ["a valid"]            # the run it is inserted into
    assert texts_in(clause, "w:r[w:rPr/w:b]") == ["The Customer"]           # unchanged runs keep theirs
    assert texts_in(clause, "w:r[w:rPr/w:i]") == ["receipt of ", " invoice"]
    assert not clause.findall("w:del//w:t", NS) and not clause.findall("w:ins//w:delText", NS)
    ids = [int(m.get(f"{{{W}}}id")) for m in marks(clause)]
    assert len(set(ids)) == len(ids) and min(ids) > 41                       # above the bookmark's
    assert {(m.get(f"{{{W}}}author"), m.get(f"{{{W}}}date")) for m in marks(clause)} == {
        ("Counsel", "2026-12-06T09:30:00Z")}
    order = [c.tag.split("}")[1] + ":" + "".join(c.itertext()) for c in clause]
    assert order[order.index("bookmarkStart:") + 1] == "r:receipt of "        # the bookmark stays around
    assert order[order.index("bookmarkEnd:") - 1] == "r: invoice"              # the italic text


def test_keep_writes_only_the_chosen_changes(original):
    edits = word_edits(CLAUSE, REVISED)
    count = len(changes(edits))
    for size in range(count + 1):
        for chosen in combinations(range(count), size):
            out = docx_redline(original, {CLAUSE_AT: edits}, date=WHEN, keep={CLAUSE_AT: set(chosen)})
            assert accepted_text(out)[CLAUSE_AT] == apply_edits(edits, set(chosen)), chosen
            assert original_text(out) == PARAGRAPHS
            if not chosen:            # nothing kept: the document as it was
                assert zipfile.ZipFile(io.BytesIO(out)).read(DOCUMENT) == zipfile.ZipFile(
                    io.BytesIO(original)).read(DOCUMENT)
    everything = docx_redline(original, {CLAUSE_AT: edits}, keep={})        # a paragraph not in keep: all
    assert accepted_text(everything)[CLAUSE_AT] == REVISED
    with pytest.raises(RedlineError, match="keep names change 9 of paragraph 2, which has 4 changes"):
        docx_redline(original, {CLAUSE_AT: edits}, keep={CLAUSE_AT: {9}})


def test_hyperlinks_and_table_cells_are_revised_in_place(original):
    linked = "Terms are published at our public website for customers, in English."
    cell = "Service Provider"
    out = docx_redline(original, {LINK_AT: word_edits(LINKED, linked), CELL_AT: word_edits("Supplier", cell)})
    assert accepted_text(out) == [linked if i == LINK_AT else cell if i == CELL_AT else t
                                  for i, t in enumerate(PARAGRAPHS)]
    assert original_text(out) == PARAGRAPHS
    p = body_paragraphs(out)[LINK_AT]
    assert texts_in(p, "w:hyperlink/w:ins/w:r") == ["public "]          # inside the link: part of it
    assert texts_in(p, "w:ins/w:r") == [", in English"]                  # on its edge: outside it
    assert "".join(p.find("w:hyperlink", NS).itertext()) == "our public website for customers"
    read = docx_paragraphs(out)[CELL_AT]
    assert read.in_table and read.text == cell


def test_a_revision_that_does_not_fit_is_refused(original):
    edits = word_edits(CLAUSE, REVISED)
    for revisions, said in (({99: edits}, "paragraph 99 does not exist (the document has 11 paragraphs)"),
                            ({CLAUSE_AT + 1: edits}, "revision of paragraph 3 does not start from its text"),
                            ({CLAUSE_AT: word_edits(CLAUSE, "Pay\x01 now.")}, "character XML cannot hold")):
        with pytest.raises(RedlineError, match=re.escape(said)):
            docx_redline(original, revisions)


def test_text_that_is_not_word_becomes_a_document_to_redline():
    texts = ["# Terms", "Pay within 30 days.\tNet.\nSecond line.", "A form\x0cfeed."]
    data = docx_from_paragraphs(texts, title="Terms")
    got = docx_paragraphs(data)
    assert [p.text for p in got] == ["# Terms", texts[1], "A form\ufffdfeed."]
    assert {p.style for p in got} == {"Normal"}
    import docx
    assert docx.Document(io.BytesIO(data)).core_properties.title == "Terms"
    revised = "Pay within 45 days.\tNet.\nThird line."
    out = docx_redline(data, {1: word_edits(texts[1], revised)})
    assert accepted_text(out)[1] == revised and original_text(out)[1] == texts[1]
    assert body_paragraphs(out)[1].findall("w:r/w:tab", NS) and body_paragraphs(out)[1].findall("w:r/w:br", NS)


def random_docx(rng: random.Random, texts: list[str]) -> bytes:
    """Each text a paragraph of 1-4 runs cut at random places (bold or not), some runs in a
    hyperlink, bookmarks and proofErr marks between runs, some paragraphs in a table."""
    import docx
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    d = docx.Document()
    table = d.add_table(rows=len(texts) // 4, cols=1)
    for n, text in enumerate(texts):
        p = table.cell(n // 2, 0).paragraphs[0] if n % 2 and n // 2 < len(table.rows) else d.add_paragraph()
        cuts = sorted(rng.sample(range(1, len(text)), min(3, len(text) - 1))) if len(text) > 1 else []
        for a, b in zip([0, *cuts], [*cuts, len(text)]):
            run = p.add_run(text[a:b])
            run.bold = rng.random() < 0.3 or None
            if rng.random() < 0.2:
                link = parse_xml(f'<w:hyperlink {nsdecls("w")} w:anchor="here"/>')
                run._r.addprevious(link)
                link.append(run._r)
            if rng.random() < 0.3:
                p._p.append(parse_xml(f'<w:bookmarkStart {nsdecls("w")} w:id="{n}" w:name="b{n}"/>'
                                      if rng.random() < 0.5 else f'<w:proofErr {nsdecls("w")} w:type="spellStart"/>'))
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def test_random_revisions_of_random_runs_accept_and_reject_exactly():
    """Seeded: random paragraphs cut into runs at random, each revised at random with a random
    subset kept; accept-all gives each kept subset's text, reject-all the original."""
    rng = random.Random(4444)
    for _ in range(4):
        texts = [random_text(rng, rng.randrange(0, 30)) for _ in range(24)]
        data = random_docx(rng, texts)
        read = docx_paragraphs(data)
        order = [p.text for p in read]
        assert sorted(order) == sorted(texts)
        revisions, keep, want = {}, {}, []
        for p in read:
            edits = word_edits(p.text, mutate(rng, p.text))
            revisions[p.index] = edits
            keep[p.index] = {n for n in range(len(changes(edits))) if rng.random() < 0.6}
            want.append(apply_edits(edits, keep[p.index]))
        out = docx_redline(data, revisions, keep=keep)
        assert accepted_text(out) == want
        assert original_text(out) == order
        assert [p.tracked for p in docx_paragraphs(out)] == [len(marks(p)) for p in body_paragraphs(out)]


# ---- bad and hostile files --------------------------------------------------------------------

def with_member(data: bytes, name: str, content: bytes | None) -> bytes:
    """The ZIP with member `name` replaced (None: left out)."""
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename != name:
                dst.writestr(info, src.read(info))
            elif content is not None:
                dst.writestr(info, content)
    return out.getvalue()


def claiming_huge_xml(data: bytes) -> bytes:
    """The ZIP with word/document.xml's central directory entry claiming 2 GB unpacked."""
    buf = bytearray(data)
    at = buf.index(b"PK\x01\x02")
    while buf[at + 46:at + 46 + len(DOCUMENT)] != DOCUMENT.encode():
        at = buf.index(b"PK\x01\x02", at + 4)
    buf[at + 24:at + 28] = (0x7FFFFFF0).to_bytes(4, "little")
    return bytes(buf)


def bad_files(original: bytes) -> dict[str, tuple[bytes, str]]:
    xxe = (b'<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
           b'<w:document xmlns:w="' + W.encode() + b'"><w:body><w:p><w:r><w:t>&x;</w:t></w:r></w:p></w:body>'
           b'</w:document>')
    return {"truncated": (original[:len(original) // 2], "damaged or truncated (not a complete ZIP file"),
            "not a zip": (b"The Customer shall pay.", "not a Word (.docx) file: not a ZIP archive"),
            "empty": (b"", "not a ZIP archive (it is empty)"),
            "encrypted": (OLE_MAGIC + bytes(504) + ENCRYPTED_OOXML + bytes(64), "encrypted (saved with a password)"),
            "binary doc": (OLE_MAGIC + bytes(600), "a binary Word (.doc) or other OLE2 file"),
            "no document": (with_member(original, DOCUMENT, None), "no word/document.xml in it"),
            "unparsable": (with_member(original, DOCUMENT, b"<w:document><w:body>"),
                           "word/document.xml does not parse as XML"),
            "entities": (with_member(original, DOCUMENT, xxe), "word/document.xml has a DOCTYPE"),
            "not wordml": (with_member(original, DOCUMENT, b"<document><body/></document>"),
                           "holds no WordprocessingML body"),
            "bomb": (claiming_huge_xml(original), "its XML unpacks to 2,14"),
            "bad styles": (with_member(original, "word/styles.xml", b"<w:styles"), "word/styles.xml does not parse")}


@pytest.mark.parametrize("kind", ["truncated", "not a zip", "empty", "encrypted", "binary doc", "no document",
                                  "unparsable", "entities", "not wordml", "bomb", "bad styles"])
def test_bad_files_get_a_clear_error(original, kind):
    data, said = bad_files(original)[kind]
    readers = [docx_paragraphs] if kind == "bad styles" else [
        docx_paragraphs, accepted_text, original_text, lambda d: docx_redline(d, {})]
    for read in readers:
        with pytest.raises(RedlineError) as caught:
            read(data)
        assert said in str(caught.value), (kind, str(caught.value))
        assert "Traceback" not in str(caught.value) and "/etc/passwd" not in str(caught.value)


# ---- readable diffs ---------------------------------------------------------------------------

def test_markdown_and_text_redlines():
    paragraphs = ["# Terms", "The Supplier shall pay within 30 days.", "Odd {++text++} here.", "Keep ~> as is."]
    revisions = {1: word_edits(paragraphs[1], "Each party shall pay within 45 days."),
                 2: word_edits(paragraphs[2], "Odd {++text++} there, now.")}
    assert markdown_redline(paragraphs, revisions) == (
        "# Terms\n\n{~~The Supplier~>Each party~~} shall pay within {~~30~>45~~} days.\n\n"
        "Odd {\\++text+\\+} {~~here~>there, now~~}.\n\nKeep ~> as is.")
    assert text_redline(paragraphs, revisions) == (
        "# Terms\n\n[-The Supplier-]{+Each party+} shall pay within [-30-]{+45+} days.\n\n"
        "Odd {++text++} [-here-]{+there, now+}.\n\nKeep ~> as is.")
    assert markdown_redline(paragraphs, revisions, keep={1: {1}, 2: set()}) == (
        "# Terms\n\nThe Supplier shall pay within {~~30~>45~~} days.\n\nOdd {\\++text+\\+} here.\n\nKeep ~> as is.")
    only = {0: word_edits("# Terms", "# Terms of payment"), 3: word_edits("Keep ~> as is.", "Keep as is.")}
    assert markdown_redline(paragraphs, only).split("\n\n")[::3] == ["# Terms{++ of payment++}",
                                                                     "Keep {--~\\> --}as is."]
    with pytest.raises(RedlineError, match="paragraph 7 does not exist"):
        text_redline(paragraphs, {7: []})


# ---- LibreOffice (slow) -----------------------------------------------------------------------

ODF = {"text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
       "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0", "dc": "http://purl.org/dc/elements/1.1/"}


def odt_paragraphs(content: bytes) -> list[str]:
    """The text of an ODT's body paragraphs and headings, tracked deletions (kept in
    text:tracked-changes, not in the body) left out: the accepted view."""
    t = f"{{{ODF['text']}}}"
    root = etree.fromstring(content)
    out = []

    def text_of(el) -> str:
        parts = [el.text or ""]
        for child in el:
            if child.tag == t + "s":
                parts.append(" " * int(child.get(t + "c", "1")))
            elif child.tag == t + "tab":
                parts.append("\t")
            elif child.tag == t + "line-break":
                parts.append("\n")
            elif child.tag not in (t + "tracked-changes", t + "note"):
                parts.append(text_of(child))
            parts.append(child.tail or "")
        return "".join(parts)

    def visit(el) -> None:
        for child in el:
            if child.tag == t + "tracked-changes":
                continue
            if child.tag in (t + "p", t + "h"):
                out.append(text_of(child))
            else:
                visit(child)

    visit(root.find("office:body/office:text", ODF))
    return out


@pytest.mark.slow
def test_libreoffice_reads_the_redline(original, tmp_path):
    out = tmp_path / "redline.docx"
    out.write_bytes(docx_redline(original, {CLAUSE_AT: word_edits(CLAUSE, REVISED)}, author="Counsel", date=WHEN))
    odt = libreoffice_convert(out, tmp_path, "odt")
    if odt is None:
        pytest.skip("no soffice (apt-get install libreoffice-writer-nogui)")
    pdf = libreoffice_convert(out, tmp_path, "pdf")
    assert pdf.read_bytes().startswith(b"%PDF")
    content = zipfile.ZipFile(odt).read("content.xml")
    root = etree.fromstring(content)
    regions = root.findall(".//text:tracked-changes/text:changed-region", ODF)
    kinds = [child.tag.split("}")[1] for region in regions for child in region]
    assert kinds.count("insertion") == 3 and kinds.count("deletion") == 3, kinds
    assert {c.text for c in root.findall(".//text:changed-region//office:change-info/dc:creator", ODF)} == {"Counsel"}
    deleted = ["".join(p.itertext()) for r in regions for p in r.findall("text:deletion//text:p", ODF)]
    assert deleted == ["all ", "30", "the"]
    assert odt_paragraphs(content) == PARAGRAPHS[:CLAUSE_AT] + [REVISED] + PARAGRAPHS[CLAUSE_AT + 1:]

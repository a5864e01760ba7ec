"""A mixed folder of real documents, written with the format libraries themselves (python-docx,
fpdf2, pypdf, odfpy, the standard library), plus the files a real folder also holds: a binary
.doc, a scanned PDF, an encrypted PDF, a truncated .docx, an empty file and a link loop."""
from __future__ import annotations

import email.message
import io
import os
from pathlib import Path

DOCX_PARAS = ["The lessee shall keep the premises in good repair.",
              "Rent is due on the first day of each month.",
              "This agreement is governed by the laws of the Netherlands."]
DOCX_HEADER = "Lease agreement - confidential"
DOCX_FOOTNOTE = "As amended by the addendum of 1 March."
DOCX_CELLS = [["Party", "Role"], ["Acme B.V.", "Lessor"], ["J. Jansen", "Lessee"]]
PDF_HEADER = "Smith & Partners - Precedent 17"
PDF_PARAS = [f"Clause {n}. The parties agree that paragraph {n} of the schedule applies to every "
             f"delivery made under this contract, and that notice is given in writing." for n in range(1, 9)]
ODT_PARAS = ["Minutes of the board meeting.", "The board approved the annual accounts."]
RTF_PARAS = ["The seller warrants title to the goods.", "Risk passes on delivery."]
HTML_PARAS = ["Privacy notice", "We process your data only to provide the service."]
EML_SUBJECT = "Draft settlement offer"
EML_PARAS = ["Dear colleague,", "Please find our draft offer below."]
MD_PARAS = ["# Checklist", "Confirm the identity of the client."]
TXT_PARAS = ["A plain text precedent.", "Its second paragraph."]

GOOD = ["contract.docx", "precedent.pdf", "minutes.odt", "sale.rtf", "notice.html", "offer.eml",
        "checklist.md", "plain.txt"]
BAD = {"old.doc": "binary Word", "scanned.pdf": "no text layer", "locked.pdf": "encrypted",
       "broken.docx": "damaged", "empty.docx": "empty", "loop.txt": "link loop",
       "~$contract.docx": "lock file", ".notes.txt": "hidden", "sheet.xlsx": "not read",
       "pipe.txt": "not a regular file", "garbage.html": "not text"}


def write_docx(path: Path) -> None:
    """A header, paragraphs, a table and a footnote (python-docx writes all but the footnote,
    which goes in through its package API: a footnotes part and a reference in the text)."""
    import docx
    from docx.opc.constants import RELATIONSHIP_TYPE as RT
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    d = docx.Document()
    d.sections[0].header.paragraphs[0].text = DOCX_HEADER
    for text in DOCX_PARAS[:2]:
        d.add_paragraph(text)
    table = d.add_table(rows=len(DOCX_CELLS), cols=2)
    for r, row in enumerate(DOCX_CELLS):
        for c, cell in enumerate(row):
            table.cell(r, c).text = cell
    p = d.add_paragraph(DOCX_PARAS[2])
    p._p.append(parse_xml(f'<w:r {nsdecls("w")}><w:rPr><w:vertAlign w:val="superscript"/></w:rPr>'
                          f'<w:footnoteReference w:id="1"/></w:r>'))
    w = nsdecls("w", "r")    # Word declares both namespaces in every part
    xml = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:footnotes {w}>'
           f'<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>'
           f'<w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:r><w:continuationSeparator/>'
           f'</w:r></w:p></w:footnote><w:footnote w:id="1"><w:p><w:r><w:t>{DOCX_FOOTNOTE}</w:t></w:r>'
           f'</w:p></w:footnote></w:footnotes>').encode()
    ct = "application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml"
    part = Part(PackURI("/word/footnotes.xml"), ct, xml, d.part.package)
    d.part.relate_to(part, RT.FOOTNOTES)
    d.save(path)


def write_pdf(path: Path, paragraphs=PDF_PARAS, header=PDF_HEADER, per_page=3) -> None:
    """A text PDF with a running header and a page number on every page (fpdf2)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=11)
    for start in range(0, len(paragraphs), per_page):
        pdf.add_page()
        pdf.cell(0, 8, header, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(10)
        for text in paragraphs[start:start + per_page]:
            pdf.multi_cell(0, 6, text, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(8)
        pdf.set_y(-20)
        pdf.cell(0, 8, f"Page {pdf.page_no()}")
    pdf.output(str(path))


def write_scanned_pdf(path: Path) -> None:
    """An image-only PDF: what a scanner makes."""
    from fpdf import FPDF
    from PIL import Image, ImageDraw

    img = Image.new("L", (400, 200), 255)
    ImageDraw.Draw(img).text((20, 80), "scanned text, no text layer", fill=0)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    pdf = FPDF()
    pdf.add_page()
    pdf.image(buf, x=10, y=10, w=180)
    pdf.output(str(path))


def write_encrypted_pdf(path: Path, source: Path) -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(source))
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    with open(path, "wb") as f:
        writer.write(f)


def write_odt(path: Path) -> None:
    from odf.opendocument import OpenDocumentText
    from odf.text import P

    doc = OpenDocumentText()
    for text in ODT_PARAS:
        doc.text.addElement(P(text=text))
    doc.save(str(path))


def rtf_text(paragraphs) -> str:
    body = "".join(f"{{\\pard {p}\\par}}\n" for p in paragraphs)
    return "{\\rtf1\\ansi\\deff0{\\fonttbl{\\f0 Times New Roman;}}\n" + body + "}"


def write_eml(path: Path) -> None:
    msg = email.message.EmailMessage()
    msg["From"] = "a@example.org"
    msg["To"] = "b@example.org"
    msg["Subject"] = EML_SUBJECT
    msg.set_content("\n\n".join(EML_PARAS) + "\n")
    path.write_bytes(bytes(msg))


def cache_with_models(root: Path) -> Path:
    """A fresh cache folder where the shared cache's verifiers are found by links (so that a
    tokenizer loads without fetching), for tests that write documents or libraries."""
    from olifant_mlx.files import cache_dir

    root.mkdir(parents=True)
    for kind in ("models", "gguf"):
        if (cache_dir() / kind).is_dir():
            (root / kind).symlink_to(cache_dir() / kind)
    return root


def make_mixed_folder(folder: Path) -> Path:
    """The good files of GOOD and the bad ones of BAD, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    write_docx(folder / "contract.docx")
    write_pdf(folder / "precedent.pdf")
    write_odt(folder / "minutes.odt")
    (folder / "sale.rtf").write_text(rtf_text(RTF_PARAS))
    (folder / "notice.html").write_text(
        "<html><head><title>x</title><style>p{}</style></head><body>"
        + "".join(f"<p>{p}</p>" for p in HTML_PARAS) + "<script>var a=1;</script></body></html>")
    write_eml(folder / "offer.eml")
    (folder / "checklist.md").write_text("\n\n".join(MD_PARAS) + "\n")
    (folder / "plain.txt").write_text("\n\n".join(TXT_PARAS) + "\n")
    (folder / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))
    write_scanned_pdf(folder / "scanned.pdf")
    write_encrypted_pdf(folder / "locked.pdf", folder / "precedent.pdf")
    whole = (folder / "contract.docx").read_bytes()
    (folder / "broken.docx").write_bytes(whole[: len(whole) // 2])
    (folder / "empty.docx").write_bytes(b"")
    os.symlink("loop.txt", folder / "loop.txt")
    (folder / "~$contract.docx").write_bytes(b"\x05J. Jansen" + bytes(150))   # Word's lock file
    (folder / ".notes.txt").write_text("a hidden note\n")
    (folder / "sheet.xlsx").write_bytes(whole[:200])
    os.mkfifo(folder / "pipe.txt")                                        # never opened: it would block
    (folder / "garbage.html").write_bytes(bytes(range(256)) * 4)
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")       # a hidden folder: not entered
    return folder


def smollm2_library(tmp_path: Path, monkeypatch, name: str = "deeds") -> Path:
    """A library `name` for SmolLM2's tokenizer from one short document, in a cache of its own
    ($OLIFANT_CACHE, finding the verifiers by links); the folder it was built from."""
    from olifant_mlx import library
    from olifant_mlx.verifier import load_tokenizer

    monkeypatch.setenv("OLIFANT_CACHE", str(cache_with_models(tmp_path / "cache")))
    folder = tmp_path / "precedents"
    folder.mkdir()
    (folder / "deed.txt").write_text("The Licensee shall keep the Software confidential. " * 20)
    library.build(name, folder, load_tokenizer("smollm2-135m"))
    return folder

"""What the Word tests share: a .docx with tracked changes and a comment (python-docx, plus raw
XML for w:ins, w:del, w:moveFrom/w:moveTo, which python-docx cannot write), what a .docx holds as
python-docx reads it (its text, the highlighted text), a file converted by LibreOffice (soffice
--headless --convert-to) and its text as LibreOffice lays it out (to PDF, then pypdf)."""
import os
import shutil
import subprocess
from pathlib import Path

TRACKED_ACCEPTED = ["The Supplier shall promptly deliver the goods.", "A paragraph before a deleted one.",
                    "Moved: to its new place."]
TRACKED_GONE = ("never", "Gone entirely", "old place", "SECRET-COMMENT")


def write_tracked_docx(path: Path) -> None:
    """Insertions, deletions (inside a paragraph and a whole one), a move and a comment."""
    import docx
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    def change(tag, text, n):
        t = "w:delText" if tag == "del" else "w:t"        # Word keeps moved-away text in w:t
        return parse_xml(f'<w:{tag} {nsdecls("w")} w:id="{n}" w:author="Counsel" w:date="2026-12-01T00:00:00Z">'
                         f'<w:r><{t} xml:space="preserve">{text}</{t}></w:r></w:{tag}>')

    d = docx.Document()
    p = d.add_paragraph("The Supplier shall ")
    p._p.append(change("ins", "promptly ", 1))
    p._p.append(change("del", "never ", 2))
    run = p.add_run("deliver the goods.")
    d.add_comment(run, text="Check with the client: SECRET-COMMENT", author="Counsel", initials="C")
    d.add_paragraph("A paragraph before a deleted one.")
    d.add_paragraph()._p.append(change("del", "Gone entirely.", 3))
    p = d.add_paragraph("Moved: ")
    p._p.append(change("moveFrom", "from its old place.", 4))
    p._p.append(change("moveTo", "to its new place.", 5))
    d.save(path)


def docx_contents(path: Path) -> tuple[str, list[str]]:
    """(the paragraphs' text, one a line; the highlighted runs' text, adjacent runs joined)."""
    import docx

    d = docx.Document(str(path))
    marked, last = [], None
    for i, p in enumerate(d.paragraphs):
        for j, r in enumerate(p.runs):
            if r.font.highlight_color is not None:
                if last == (i, j - 1):
                    marked[-1] += r.text
                else:
                    marked.append(r.text)
                last = (i, j)
    return "\n".join(p.text for p in d.paragraphs), marked


def libreoffice_convert(path: Path, tmp: Path, fmt: str) -> Path | None:
    """`path` converted by LibreOffice to `fmt` (pdf, odt, ...) in a folder under `tmp`, with a
    profile of its own (never the user's; parallel runs do not collide); None without soffice."""
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        return None
    out = tmp / fmt
    profile = (tmp / "lo-profile").as_uri()
    r = subprocess.run([soffice, f"-env:UserInstallation={profile}", "--headless", "--convert-to", fmt,
                        "--outdir", str(out), str(path)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HOME": str(tmp)})
    converted = out / f"{path.stem}.{fmt}"
    assert r.returncode == 0 and converted.is_file(), r.stdout + r.stderr
    return converted


def libreoffice_text(path: Path, tmp: Path) -> str | None:
    """The text of `path` as LibreOffice converts it to PDF; None without soffice."""
    pdf = libreoffice_convert(path, tmp, "pdf")
    if pdf is None:
        return None
    from pypdf import PdfReader

    return "\n".join(page.extract_text() for page in PdfReader(str(pdf)).pages)

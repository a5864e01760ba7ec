"""Hostile documents (issue 37), written at any size: for the tests (small ones, under lowered
limits) and benchmarks/hostile_library.py (the sizes of the issue's reports)."""
from __future__ import annotations

import io
import os
import zipfile
import zlib
from pathlib import Path

from olifant_mlx.files import atomic_writer, write_atomic


def write_raw_pdf(path: Path, objects: list[bytes]) -> None:
    """A PDF of these objects (1 0 obj is the catalog), with a correct xref table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % n + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    write_atomic(path, out.getvalue(), 0o644)


FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def write_pdf_bomb(path: Path, lines: int) -> None:
    """Item 1: one page whose FlateDecode content stream inflates to `lines` text lines."""
    content = zlib.compress(b"BT /F1 1 Tf 0 0 Td " + b"(a) Tj T* " * lines + b"ET", 9)
    write_raw_pdf(path, [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content) + content + b"\nendstream",
        FONT])


def write_page_tree_loop(path: Path) -> None:
    """Item 16: a page tree whose Pages node lists itself as its kid."""
    write_raw_pdf(path, [b"<< /Type /Catalog /Pages 2 0 R >>",
                         b"<< /Type /Pages /Kids [2 0 R] /Count 1 >>"])


def write_deep_page_tree(path: Path, depth: int = 2000) -> None:
    """Item 16: Pages nodes nested `depth` deep above one page."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for n in range(2, depth + 2):
        objs.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % (n + 1))
    objs.append(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] >>" % (depth + 1))
    write_raw_pdf(path, objs)


def write_eml_bomb(path: Path, words: int) -> None:
    """Item 2: a Subject of `words` RFC 2047 encoded words."""
    subject = " ".join(["=?utf-8?q?Gr=C3=BC=C3=9Fe?="] * words)
    write_atomic(path, f"From: a@example.org\nSubject: {subject}\n\nThe body of the message.\n".encode(), 0o644)


def write_long_subject_eml(path: Path, chars: int) -> None:
    """Item 2: a plain Subject of `chars` characters (quadratic in the default policy)."""
    write_atomic(path, b"From: a@example.org\nSubject: " + b"word " * (chars // 5) + b"\n\nThe body.\n", 0o644)


def _zip(path: Path, members: dict[str, bytes]) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, data in members.items():
            z.writestr(name, data)
    write_atomic(path, buf.getvalue(), 0o644)


def write_docx_bomb(path: Path, megabytes: float) -> None:
    """Item 3: a real .docx (python-docx's) whose word/document.xml holds `megabytes` MB of
    paragraphs (a few hundred KB zipped)."""
    import docx

    buf = io.BytesIO()
    docx.Document().save(buf)
    with zipfile.ZipFile(buf) as z:
        members = {name: z.read(name) for name in z.namelist()}
    xml = members["word/document.xml"]
    body = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>" * int(megabytes * (1 << 20) / 34)
    cut = xml.index(b"<w:body>") + len(b"<w:body>")
    members["word/document.xml"] = xml[:cut] + body + xml[cut:]
    _zip(path, members)


def write_docx_runs(path: Path, runs: int) -> None:
    """Issue 45 item 3: a real .docx of one paragraph of `runs` one-letter runs (1.5 million:
    120 KB zipped, 35 MB of XML, under the unpacked limit, but past the reader's memory)."""
    import docx

    buf = io.BytesIO()
    docx.Document().save(buf)
    with zipfile.ZipFile(buf) as z:
        members = {name: z.read(name) for name in z.namelist()}
    xml = members["word/document.xml"]
    cut = xml.index(b"<w:body>") + len(b"<w:body>")
    members["word/document.xml"] = xml[:cut] + b"<w:p>" + b"<w:r><w:t>x</w:t></w:r>" * runs + b"</w:p>" + xml[cut:]
    _zip(path, members)


def write_odt_bomb(path: Path, megabytes: int) -> None:
    """Item 3: content.xml of `megabytes` MB of paragraphs."""
    ns = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
          'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"')
    body = b"<text:p>x</text:p>" * (megabytes * (1 << 20) // 18)
    _zip(path, {"mimetype": b"application/vnd.oasis.opendocument.text",
                "content.xml": f'<?xml version="1.0"?><office:document-content {ns}><office:body><office:text>'.encode()
                               + body + b"</office:text></office:body></office:document-content>"})


def write_html_bomb(path: Path, pairs: int) -> None:
    """Item 4: '<p>' and `pairs` stray '</' (quadratic in html.parser)."""
    write_atomic(path, "<p>" + "</" * pairs, 0o644)


def write_one_paragraph(path: Path, megabytes: float) -> None:
    """Item 10: one paragraph of words, no blank line."""
    write_atomic(path, b"lorem ipsum dolor sit amet " * int(megabytes * (1 << 20) / 27), 0o644)


def write_sparse(path: Path, gigabytes: int) -> None:
    """Item 10: a sparse file of `gigabytes` GB (no disk used)."""
    write_sparse_bytes(path, gigabytes << 30)


def write_sparse_bytes(path: Path, size: int) -> None:
    """A sparse file of `size` bytes, all zeros (no disk used): a `.matter` bomb (issue 45 item 2)."""
    with atomic_writer(path, 0o644) as f:
        f.truncate(size)


def write_encrypted_docx(path: Path) -> None:
    """Item 16: what Word saves for a .docx with a password: an OLE2 file holding the
    EncryptedPackage and EncryptionInfo streams (their directory names, UTF-16)."""
    sector = bytearray(512)
    for i, name in enumerate(("EncryptionInfo", "EncryptedPackage")):
        raw = name.encode("utf-16-le")
        sector[i * 128:i * 128 + len(raw)] = raw
    write_atomic(path, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504) + bytes(sector) + os.urandom(2048), 0o644)

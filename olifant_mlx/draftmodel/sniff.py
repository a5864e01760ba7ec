"""Is a file UTF-8 text? The sniff every corpus reader applies to a file's first bytes."""

from __future__ import annotations

import codecs

SNIFF_BYTES = 1 << 16       # what decides whether a file is text
BAD_SHARE = 0.01            # undecodable or control characters tolerated in text

# (prefix, what it is): formats people mistake for corpora
MAGIC = (
    (b"\x7fELF", "an ELF executable or shared library"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O binary"), (b"\xce\xfa\xed\xfe", "a Mach-O binary"),
    (b"\xca\xfe\xba\xbe", "a Mach-O universal binary or Java class"),
    (b"%PDF-", "a PDF document (extract its text first, e.g. with pdftotext)"),
    (b"PK\x03\x04", "a ZIP archive (also .docx, .odt, .epub: export its text first)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an OLE2 document (.doc, .xls: export its text first)"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"\x1f\x8b", "gzip data (name the file .gz)"), (b"\xfd7zXZ\x00", "xz data (name the file .xz)"),
    (b"BZh", "bzip2 data (name the file .bz2)"), (b"(\xb5/\xfd", "zstd data"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"), (b"SQLite format 3\x00", "an SQLite database"),
    (b"\x00asm", "a WebAssembly module"),
)
_CONTROLS = bytes(c for c in range(32) if chr(c) not in "\t\n\r\f\v\x1b")


def binary_reason(head: bytes) -> str | None:
    """Why a file starting with `head` is not UTF-8 text, or None if it is."""
    for magic, what in MAGIC:
        if head.startswith(magic) and (magic != b"BZh" or head[4:10] == b"1AY&SY"):
            return f"it is {what}"
    if head[257:262] == b"ustar":
        return "it is a tar archive"
    if b"\0" in head:
        return "it holds NUL bytes (binary data, or UTF-16 text: convert it to UTF-8)"
    bad = _invalid_utf8(head)
    if bad > BAD_SHARE * len(head):
        return (f"{bad / len(head):.0%} of its first bytes are not valid UTF-8 (binary data, "
                f"or text in another encoding: convert it, e.g. iconv -f latin1 -t utf-8)")
    controls = len(head) - len(head.translate(None, _CONTROLS))
    if controls > BAD_SHARE * len(head):
        return f"{controls / len(head):.0%} of its first bytes are control characters (binary data)"
    return None


def _invalid_utf8(head: bytes) -> int:
    """Bytes of head that are not UTF-8 (a character cut at its end is not counted; a U+FFFD
    in the text is valid UTF-8, as a corpus may hold)."""
    decoder = codecs.getincrementaldecoder("utf-8")("ignore")
    valid = decoder.decode(head, final=False)
    pending = decoder.getstate()[0]       # the start of a character cut at the end
    return len(head) - len(valid.encode("utf-8", "surrogatepass")) - len(pending)

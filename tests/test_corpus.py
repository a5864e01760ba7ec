"""Corpus readers, document boundaries and windows."""
import gzip
import json
import lzma
import os

import numpy as np
import pytest

from olifant_mlx.draftmodel.corpus import CorpusError, iter_documents, tokenized_batches, windows

TEXT = "Article 1\nThe Commission shall,  within 3 months,\n\tact.\n\nArticle 2\nDone.\n\n\nThird doc\n"
DOCS = ["Article 1\nThe Commission shall,  within 3 months,\n\tact.", "Article 2\nDone.", "Third doc"]


@pytest.mark.parametrize("name,opener", [("c.txt", open), ("c.txt.gz", gzip.open), ("c.txt.xz", lzma.open)])
def test_text_documents_keep_spacing_and_line_breaks(tmp_path, name, opener):
    with opener(tmp_path / name, "wt", encoding="utf-8") as f:
        f.write(TEXT)
    assert list(iter_documents(str(tmp_path / name))) == DOCS


def test_jsonl_and_directory(tmp_path):
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as f:
        for d in DOCS:
            f.write(json.dumps({"text": d, "id": 1}) + "\n")
    (tmp_path / "b.txt").write_text("x y\n\nz\n")
    (tmp_path / "ignored.bin").write_bytes(b"\0\1")
    assert list(iter_documents(str(tmp_path / "a.jsonl.gz"))) == DOCS
    assert list(iter_documents(str(tmp_path))) == DOCS + ["x y", "z"]
    (tmp_path / "c.jsonl").write_text(json.dumps({"body": "t"}) + "\n")
    with pytest.raises(CorpusError, match="no field 'text'"):
        list(iter_documents(str(tmp_path / "c.jsonl")))
    assert list(iter_documents(str(tmp_path / "c.jsonl"), text_field="body")) == ["t"]
    (tmp_path / "d.jsonl").write_text("{not json\n")
    with pytest.raises(CorpusError, match="not JSON"):
        list(iter_documents(str(tmp_path / "d.jsonl")))


def test_bad_sources(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        list(iter_documents(str(tmp_path / "nope.txt")))
    (tmp_path / "bad.txt.xz").write_bytes(b"not xz at all")
    with pytest.raises(CorpusError, match="decompress"):
        list(iter_documents(str(tmp_path / "bad.txt.xz")))


def test_hf_dataset_spec_needs_datasets(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_datasets(name, *a, **kw):
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(CorpusError, match="datasets"):
        list(iter_documents("coastalcph/lex_glue:eurlex:train"))


def test_builtin_licenses_is_legal_text():
    docs = list(iter_documents("builtin:licenses"))
    assert len(docs) >= 3
    assert any("permission" in d.lower() or "license" in d.lower() for d in docs)


class CharTokenizer:
    vocab_size = 256

    def encode_batch(self, texts):
        return [list(t.encode()) for t in texts]


def test_batches_and_windows():
    batches = list(tokenized_batches(iter(["ab", "", "cde"]), CharTokenizer(), batch_docs=2))
    tokens = np.concatenate([t for t, _ in batches])
    assert bytes(tokens.astype(np.uint8)) == b"abcde"
    assert [list(s) for _, s in batches] == [[0], [0]]  # the empty document is dropped
    ctx, tgt = windows(np.array([1, 2, 3, 7, 8], np.uint32), np.array([0, 3]), 2, 99)
    assert ctx.tolist() == [[99, 99], [99, 1], [1, 2], [99, 99], [99, 7]]
    assert tgt.tolist() == [1, 2, 3, 7, 8]


# ---- only text (issue 12) -------------------------------------------------------------------

def _random(n, lo=0, hi=256, seed=1):
    import random

    r = random.Random(seed)
    return bytes(r.randrange(lo, hi) for _ in range(n))


def _extension_so():
    import olifant_mlx.draftmodel._igtree as ext

    return open(ext.__file__, "rb").read()


BINARIES = {
    "lib.so": _extension_so,
    "noise.txt": lambda: _random(100_000),
    "noise.txt.xz": lambda: lzma.compress(_random(100_000)),
    "nul.txt": lambda: b"Article 1\0\0\0The Commission\n" * 500,
    "latin.txt": lambda: ("Die Mitgliedstaaten \u00fcbermitteln der Kommission die \u00c4nderungen "
                          "gem\u00e4\u00df \u00a7 4.\n" * 500).encode("latin-1"),
    "mostly-invalid.txt": lambda: _random(100_000, 0x80, 0x100),
    "doc.pdf.txt": lambda: b"%PDF-1.7\n" + b"1 0 obj << /Type /Catalog >> endobj\n" * 500,
    "report.txt": lambda: b"PK\x03\x04" + b"word/document.xml plain looking bytes\n" * 500,
    "image.txt": lambda: b"\x89PNG\r\n\x1a\n" + b"IHDR" * 1000,
    "controls.txt": lambda: bytes([1, 2, 3, 4, 5, 6, 65]) * 5000,
}


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_binary_files_are_refused_naming_the_file(tmp_path, name):
    from olifant_mlx.draftmodel.corpus import NotTextError, check_corpora

    path = tmp_path / name
    path.write_bytes(BINARIES[name]())
    with pytest.raises(NotTextError, match=f"{path} is not a text corpus: .*--force"):
        check_corpora([str(path)])
    with pytest.raises(NotTextError, match=str(path)):
        list(iter_documents(str(path)))          # the reader refuses it on its own too
    check_corpora([str(path)], force=True)
    assert all(isinstance(d, str) for d in iter_documents(str(path), force=True))


def test_a_file_that_turns_binary_is_refused_where_it_does(tmp_path):
    from olifant_mlx.draftmodel.corpus import NotTextError, check_corpora

    path = tmp_path / "c.txt"
    path.write_bytes(TEXT.encode() * 20_000 + _random(200_000))
    check_corpora([str(path)])                   # its first bytes are text
    with pytest.raises(NotTextError, match=f"{path} is not a text corpus: .* before byte"):
        list(iter_documents(str(path)))


def test_replacement_characters_are_valid_utf8_text(tmp_path):
    """EUR-Lex-Sum's train split holds a JPEG that became U+FFFD characters: valid UTF-8, text."""
    from olifant_mlx.draftmodel.corpus import check_corpora

    path = tmp_path / "c.txt"
    path.write_text("\ufffd\ufffdJFIF\ufffd" * 30_000 + "\n\n" + TEXT * 2000)
    check_corpora([str(path)])
    docs = list(iter_documents(str(path)))
    assert docs[0].startswith("\ufffd\ufffdJFIF") and docs[-1] == "Third doc"


def test_undecodable_text_later_on_is_refused(tmp_path):
    from olifant_mlx.draftmodel.corpus import NotTextError

    path = tmp_path / "c.txt"
    path.write_bytes(TEXT.encode() * 20_000 + ("\u00e9t\u00e9 \u00e0 " * 50_000).encode("latin-1"))
    with pytest.raises(NotTextError, match="not valid UTF-8"):
        list(iter_documents(str(path)))


def test_text_with_a_stray_bad_byte_and_utf8_is_text(tmp_path):
    from olifant_mlx.draftmodel.corpus import check_corpora

    path = tmp_path / "c.txt"
    path.write_bytes(("Die \u00c4nderung \u2014 \u00e9t\u00e9 \u4e2d\u6587\n" * 2000).encode() + b"\xff\n")
    check_corpora([str(path)])
    assert len(list(iter_documents(str(path)))) == 1


def test_jsonl_head_is_checked_before_reading(tmp_path):
    from olifant_mlx.draftmodel.corpus import check_corpora

    (tmp_path / "a.jsonl").write_text(json.dumps({"body": "t"}) + "\n")
    with pytest.raises(CorpusError, match="a.jsonl:1: no field 'text'"):
        check_corpora([str(tmp_path / "a.jsonl")])
    check_corpora([str(tmp_path / "a.jsonl")], text_field="body")


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_corrupt_archives_are_corpus_errors_naming_the_file(tmp_path, suffix):
    import bz2

    compress = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}[suffix]
    data = bytearray(compress((TEXT * 5000).encode()))
    data[20:-20:7] = _random(len(data[20:-20:7]), seed=3)      # gzip: a zlib.error inside
    path = tmp_path / f"c.txt{suffix}"
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=f"{path}: cannot decompress"):
        list(iter_documents(str(path)))
    path.write_bytes(compress((TEXT * 5000).encode())[:200])     # cut short
    with pytest.raises(CorpusError, match=f"{path}: cannot decompress"):
        list(iter_documents(str(path)))


# ---- bounded memory: long documents and lines are split (issue 17) ----------------------------

def test_split_document_prefers_line_breaks_then_spaces():
    from olifant_mlx.draftmodel.corpus import split_document

    assert split_document("aaaa\nbbbb cccc", 10) == ["aaaa", "bbbb cccc"]
    assert split_document("aaaa bbbb cccc", 10) == ["aaaa bbbb", "cccc"]
    assert split_document("abcdefghijkl", 5) == ["abcde", "fghij", "kl"]
    assert split_document("short", 10) == ["short"]
    text = " ".join(f"w{i}" for i in range(5000))
    parts = split_document(text, 100)
    assert all(len(p) <= 100 for p in parts) and " ".join(parts) == text


def test_a_huge_line_is_read_in_bounded_parts(tmp_path, monkeypatch):
    from olifant_mlx.draftmodel import corpus

    monkeypatch.setattr(corpus, "MAX_DOC_CHARS", 1000)
    line = " ".join(f"word{i}" for i in range(20_000))      # ~170k characters, no line break
    (tmp_path / "c.txt").write_text("first doc\n\n" + line + "\nlast line\n\nthird\n")
    docs = list(iter_documents(str(tmp_path / "c.txt")))
    assert docs[0] == "first doc" and docs[-1] == "third"
    assert all(len(d) <= 1000 for d in docs)
    assert " ".join(docs[1:-1]).split() == (line + " last line").split()   # only separators dropped


def test_text_batches_bound_characters():
    from olifant_mlx.draftmodel.corpus import text_batches

    batches = list(text_batches(["a" * 40, "b" * 40, "c" * 40, "d" * 200, "e"], max_chars=100, max_docs=10))
    assert [len(b) for b in batches] == [2, 1, 1, 1]
    assert [len(b) for b in text_batches(["x"] * 7, max_chars=100, max_docs=3)] == [3, 3, 1]


def test_ordered_map_keeps_order_and_stops_early():
    import threading
    import time

    from olifant_mlx.draftmodel.corpus import ordered_map

    drawn = []

    def items():
        for i in range(1000):
            drawn.append(i)
            yield i

    def slow_square(x):
        time.sleep(0.001 * (x % 3))
        return x * x

    assert list(ordered_map(slow_square, range(50), workers=3)) == [x * x for x in range(50)]
    it = ordered_map(slow_square, items(), workers=2, ahead=4)
    assert [next(it) for _ in range(5)] == [0, 1, 4, 9, 16]
    it.close()
    assert len(drawn) <= 5 + 4, "items are drawn only as room frees up"
    with pytest.raises(ZeroDivisionError):
        list(ordered_map(lambda x: 1 // (x - 3), range(10), workers=2))
    assert not [t for t in threading.enumerate() if t.name.startswith("olifant-map") and t.is_alive()
                and time.sleep(0.2) is None and t.is_alive()]


@pytest.mark.slow
def test_every_shared_corpus_is_text(shared):
    """The text check never refuses the real corpora (EUR-Lex-Sum holds a stretch of U+FFFD)."""
    from olifant_mlx.draftmodel.corpus import check_corpora

    files = sorted((shared / "corpora").glob("*/*.txt.xz"))
    check_corpora([str(f) for f in files])
    for f in files:
        assert sum(1 for _ in iter_documents(str(f))) > 10, f


@pytest.mark.parametrize("how", ["truncate", "append"])
def test_a_corpus_that_changes_while_it_is_read_is_an_error(tmp_path, how):
    """Issue 24: a corpus cut while it was read trained on part of it with rc 0 and no word."""
    p = tmp_path / "big.txt"
    p.write_text("".join(f"line {i} of a corpus that is long enough to be read in pieces\n\n" for i in range(60000)))
    docs = iter_documents(str(p))
    for _ in range(10):
        next(docs)
    if how == "truncate":
        os.truncate(p, 100000)
    else:
        with open(p, "a") as f:
            f.write("more text\n")
    with pytest.raises(CorpusError, match=r"big.txt changed while it was read"):
        for _ in docs:
            pass
    assert sum(1 for _ in iter_documents(str(p))) > 0       # unchanged now: read whole, no error

"""Corpus readers, document boundaries and windows."""
import gzip
import json
import lzma

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

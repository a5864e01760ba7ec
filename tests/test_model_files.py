"""open_model_file: one dispatcher on the file's magic for every olifant file a user names, and
the FIFO/device refusal every command that takes such a file shares (issue 24 item 5, issue 25)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from olifant_mlx.draftmodel.igtree import Builder, IGTree, ModelFileError
from olifant_mlx.draftmodel.open import check_model_tokenizer, open_model_file
from olifant_mlx.draftmodel.suffix import Corpus, NgramCache, RetrievalFileError, SuffixIndex
from olifant_mlx.files import NotARegularFile

DIGEST = bytes(range(32))


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("files")
    ids = np.tile(np.arange(20, dtype=np.uint32), 10)
    c = Corpus(20, "test", DIGEST)
    c.add_documents(ids, [0])
    c.build_index().save(d / "m.sfx")
    c.build_ngram(2).save(d / "m.ngc")
    b = Builder(vocab_size=20, window=2, tokenizer_name="test", tokenizer_digest=DIGEST)
    b.add_document(ids.tolist())
    b.build().save(d / "m.olif")
    return d


def test_open_model_file_dispatches_on_the_magic(model_files, tmp_path):
    for name, cls in (("m.olif", IGTree), ("m.sfx", SuffixIndex), ("m.ngc", NgramCache)):
        # the magic decides, not the name
        os.link(model_files / name, tmp_path / f"renamed-{name}.bin")
        assert type(open_model_file(tmp_path / f"renamed-{name}.bin")) is cls
        check_model_tokenizer(model_files / name, "test", 20, DIGEST)
    (tmp_path / "notes.txt").write_text("hello, not a model")
    with pytest.raises(ModelFileError, match=r"notes\.txt: not an olifant model file \(bad magic\)"):
        open_model_file(tmp_path / "notes.txt")
    with pytest.raises(RetrievalFileError, match="m.sfx.*damaged"):
        check_model_tokenizer(model_files / "m.sfx", "test", 21, DIGEST)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.sfx"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(NotARegularFile, match="FIFO"):
        open_model_file(fifo)
    with pytest.raises(NotARegularFile, match="FIFO"):
        from olifant_mlx.draftmodel.suffix import load_retrieval
        load_retrieval(fifo)
    for cls in (SuffixIndex, NgramCache, IGTree):     # the C file layer refuses it too
        with pytest.raises((RetrievalFileError, ModelFileError), match="FIFO"):
            cls.load(fifo)
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("argv", [["rest-info", "{fifo}"], ["info", "{fifo}"],
                                  ["generate", "--draft", "rest:{fifo}", "-p", "hi"],
                                  ["generate", "--draft", "ngram-cache:{fifo}", "-p", "hi"],
                                  ["generate", "--draft", "olifant:{fifo}", "-p", "hi"]],
                         ids=["rest-info", "info", "rest", "ngram-cache", "olifant"])
def test_every_command_refuses_a_fifo_before_blocking(argv, tmp_path):
    """`rest-info FIFO` blocked in open() forever on fa4fc7f; the timeout makes that a failure."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    args = [a.format(fifo=fifo) for a in argv]
    run = subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "OLIFANT_OFFLINE": "1"}, stdin=subprocess.DEVNULL)
    assert run.returncode in (1, 2), (run.returncode, run.stderr[-1500:])
    said = run.stderr
    assert ("FIFO" in said or "not a regular file" in said) and str(fifo) in said, said[-1500:]
    assert "Traceback" not in run.stderr


def test_a_file_of_another_kind_is_named_for_what_it_is(model_files, tmp_path):
    """info, the drafter builders and the catalog take model paths through open_model_file: a
    suffix index where a draft model is wanted says what it is, not only 'bad magic'."""
    from olifant_mlx.catalog import draft_models
    from olifant_mlx.drafters.registry import DrafterSpec, build_drafter

    with pytest.raises(ModelFileError, match=r"m\.sfx is a suffix index \(\.sfx.*not a draft model"):
        open_model_file(model_files / "m.sfx", want=IGTree)
    with pytest.raises(ModelFileError, match=r"m\.olif is a draft model.*not an n-gram cache"):
        build_drafter(DrafterSpec("ngram-cache", str(model_files / "m.olif")), None)
    with pytest.raises(ModelFileError, match=r"m\.ngc is an n-gram cache.*not a suffix index"):
        build_drafter(DrafterSpec("rest", str(model_files / "m.ngc")), None)
    assert type(build_drafter(DrafterSpec("rest", str(model_files / "m.sfx")), None)).__name__ == "RestDrafter"
    os.link(model_files / "m.sfx", tmp_path / "index-named-like-a-model.olif")
    os.link(model_files / "m.olif", tmp_path / "real.olif")
    assert [e.path.name for e in draft_models([tmp_path])] == ["real.olif"]
    run = subprocess.run([sys.executable, "-m", "olifant_mlx", "info", str(model_files / "m.sfx")],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert run.returncode != 0 and "is a suffix index" in run.stderr and "Traceback" not in run.stderr, run.stderr

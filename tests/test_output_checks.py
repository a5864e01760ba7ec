"""Issue 24 item 7: `build-rest` and `train` refuse an output they cannot write (a folder, a
place like /proc where os.access says yes but no file can be made) and a binary corpus with the
right fix, before the tokenizer loads or the corpus is read."""
import os

import pytest

from olifant_mlx.cli import main


@pytest.fixture
def no_tokenizer(monkeypatch):
    """Loading a tokenizer (the first slow step) fails the test."""
    import olifant_mlx.cli.train as cli_train
    import olifant_mlx.verifier as verifier

    def refuse(*a, **kw):
        raise AssertionError("the tokenizer was loaded before the arguments were checked")

    monkeypatch.setattr(verifier, "load_tokenizer", refuse)
    monkeypatch.setattr(cli_train, "train_tokenizer", refuse)


def run_main(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr().err


def test_unwritable_outputs_are_refused_before_any_work(no_tokenizer, capsys, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text to read\n" * 10)
    cases = [(["build-rest", "--corpus", str(corpus), "--out", str(tmp_path)], "it is a directory"),
             (["build-rest", "--corpus", str(corpus), "--ngram-cache", str(tmp_path)], "n-gram cache"),
             (["train", "--corpus", str(corpus), "--out", str(tmp_path)], "it is a directory")]
    if os.path.isdir("/proc/self"):
        cases += [(["build-rest", "--corpus", str(corpus), "--out", "/proc/x.sfx"], "no file can be created in /proc"),
                  (["train", "--corpus", str(corpus), "--out", "/proc/x.olif"], "no file can be created in /proc")]
    for argv, why in cases:
        code, err = run_main(argv, capsys)
        assert code == 1 and why in err and "Traceback" not in err and ".tmp" not in err, (argv, err)
        assert str(argv[-1]) in err


def test_build_rest_on_a_binary_corpus_names_its_own_fix(no_tokenizer, capsys, tmp_path):
    blob = tmp_path / "blob.txt"
    blob.write_bytes(bytes(range(256)) * 64)
    code, err = run_main(["build-rest", "--corpus", str(blob), "--out", str(tmp_path / "x.sfx")], capsys)
    assert code == 1 and str(blob) in err and "--force" in err
    with pytest.raises(AssertionError, match="tokenizer was loaded"):      # --force: past the check
        main(["build-rest", "--corpus", str(blob), "--out", str(tmp_path / "x.sfx"), "--force"])

"""End to end with the real pieces: Mistral tokenizer, C library, CLI, model files."""
import json
import os
import subprocess
import sys

import pytest

from olifant_mlx.draftmodel.igtree import IGTree
from olifant_mlx.verifier import load_tokenizer
from olifant_mlx.verifier.tokenizers import MISTRAL_NAME, sentencepiece_tokenizer

CORPUS = ("The Member States shall bring into force the laws, regulations and administrative "
          "provisions necessary to comply with this Directive.\nThey shall forthwith inform the "
          "Commission thereof.\n\n") * 30


def run(*args, check=True):
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "120"})
    if check and r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr}")
    return r


@pytest.fixture(scope="module")
def mistral():
    return load_tokenizer("mistral")


def test_mistral_tokenizer_identity(mistral):
    assert mistral.name == MISTRAL_NAME and mistral.vocab_size == 32000
    ids = mistral.encode("Article 1\n\tThe Commission")
    assert 13 in ids and 12 in ids, "line break and tab must survive tokenisation"
    assert mistral.decode(ids) == "Article 1\n\tThe Commission"


def test_train_info_draft(tmp_path, mistral):
    (tmp_path / "c.txt").write_text(CORPUS)
    out = tmp_path / "m.olif"
    r = run("train", "--corpus", str(tmp_path / "c.txt"), "--out", str(out), "--eval",
            str(tmp_path / "c.txt"), "--json", "--quiet")
    s = json.loads(r.stdout)
    assert s["documents"] == 30 and s["instances"] == 30 * len(mistral.encode(CORPUS.split("\n\n")[0]))
    (e,) = s["eval"].values()
    assert e["accuracy"] > 0.9  # evaluated on its own (repetitive) training text
    m = IGTree.load(out)
    assert m.tokenizer_name == MISTRAL_NAME and m.tokenizer_digest == mistral.digest
    info = json.loads(run("info", str(out), "--json").stdout)
    assert info["nodes"] == s["nodes"]
    d = json.loads(run("draft", "-m", str(out), "-p", "The Member States shall bring into", "-k", "6",
                       "--json").stdout)
    assert d["text"].startswith(" force the laws"), d
    table = run("train", "--corpus", str(tmp_path / "c.txt"), "--out", str(out), "--holdout", "0.2").stdout
    assert "instances" in table and "accuracy on holdout" in table


def test_wrong_tokenizer_is_an_error(tmp_path):
    import sentencepiece as spm

    (tmp_path / "c.txt").write_text(CORPUS)
    spm.SentencePieceTrainer.train(input=str(tmp_path / "c.txt"), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=50, minloglevel=2)
    own = sentencepiece_tokenizer(tmp_path / "sp.model")
    assert own.vocab_size == 50
    out = tmp_path / "m.olif"
    run("train", "--corpus", str(tmp_path / "c.txt"), "--tokenizer", str(tmp_path / "sp.model"),
        "--out", str(out), "--quiet")
    r = run("draft", "-m", str(out), "-p", "The Member", check=False)  # default: Mistral
    assert r.returncode == 1 and "trained for tokenizer 'sp'" in r.stderr


def test_cli_errors(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n\n")
    r = run("train", "--corpus", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "m"), "--quiet",
            check=False)
    assert r.returncode == 1 and "holds no text" in r.stderr
    r = run("info", str(tmp_path / "empty.txt"), check=False)
    assert r.returncode == 1 and "not an olifant model" in r.stderr
    r = run("draft", "-m", "x", "-p", "y", "-k", "-3", check=False)
    assert r.returncode == 2 and "k must be" in r.stderr


@pytest.mark.slow
def test_real_legal_corpus(shared, mistral, tmp_path):
    """A draft model from 2M tokens of EU legislation scores on held-out acts."""
    from olifant_mlx.draftmodel.train import train

    s = train([str(shared / "corpora/legal/eurlexsum.train.txt.xz")], mistral, tmp_path / "legal.olif",
              max_tokens=2_000_000, eval_specs=[str(shared / "corpora/legal/eurlexsum.valid.txt.xz")],
              eval_max=100_000, show_progress=False)
    (e,) = s["eval"].values()
    assert s["instances"] == 2_000_000 and e["instances"] == 100_000
    assert 0.15 < e["accuracy"] < 0.6  # measured: 22.9 %
    assert s["permutation"] == [3, 2, 1, 0]


def test_hugging_face_tokenizer_directory(tmp_path):
    """A local HF tokenizer (as mlx-lm model folders carry) trains and identifies a model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from olifant_mlx.verifier import load_tokenizer

    words = sorted(set(CORPUS.replace(",", " ,").replace(".", " .").split()))
    vocab = {"<unk>": 0, **{w: i + 1 for i, w in enumerate(words)}}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>").save_pretrained(tmp_path / "hf")
    tok = load_tokenizer(str(tmp_path / "hf"))
    assert tok.name == "hf" and tok.vocab_size == len(vocab)
    assert tok.encode("They shall forthwith") == [vocab["They"], vocab["shall"], vocab["forthwith"]]
    (tmp_path / "c.txt").write_text(CORPUS)
    run("train", "--corpus", str(tmp_path / "c.txt"), "--tokenizer", str(tmp_path / "hf"),
        "--out", str(tmp_path / "m.olif"), "--quiet")
    d = json.loads(run("draft", "-m", str(tmp_path / "m.olif"), "--tokenizer", str(tmp_path / "hf"),
                       "-p", "They shall", "-k", "2", "--json").stdout)
    assert d["draft"] == [vocab["forthwith"], vocab["inform"]]


def test_train_reports_progress(tmp_path, mistral):
    from olifant_mlx.draftmodel.train import train

    (tmp_path / "c.txt").write_text(CORPUS)
    seen = []
    train([str(tmp_path / "c.txt")], mistral, tmp_path / "m.olif", show_progress=False,
          on_progress=lambda phase, done, total: seen.append((phase, done, total)))
    phases = [p for p, _, _ in seen]
    assert "reading c.txt" in phases and any(p.startswith("building: ") for p in phases)
    size = (tmp_path / "c.txt").stat().st_size
    assert ("reading c.txt", size, size) in seen    # the reading phase completes

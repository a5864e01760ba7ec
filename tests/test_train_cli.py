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


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_train_info_draft(tmp_path, mistral):
    (tmp_path / "c.txt").write_text(CORPUS)
    out = tmp_path / "m.olif"
    r = run("train", "--tokenizer", "mistral", "--corpus", str(tmp_path / "c.txt"), "--out", str(out),
            "--eval", str(tmp_path / "c.txt"), "--json", "--quiet")
    s = json.loads(r.stdout)
    assert s["documents"] == 30 and s["instances"] == 30 * len(mistral.encode(CORPUS.split("\n\n")[0]))
    (e,) = s["eval"].values()
    assert e["accuracy"] > 0.9  # evaluated on its own (repetitive) training text
    m = IGTree.load(out)
    assert m.tokenizer_name == MISTRAL_NAME and m.tokenizer_digest == mistral.digest
    assert out.stat().st_mode & 0o777 == 0o600, "a model holds corpus n-grams: private"
    info = json.loads(run("info", str(out), "--json").stdout)
    assert info["nodes"] == s["nodes"] and info["tokenizer"] == MISTRAL_NAME
    assert info["verifier"] == "mistralai/Mistral-7B-v0.1"
    # draft reads the tokenizer from the model file
    d = json.loads(run("draft", "-m", str(out), "-p", "The Member States shall bring into", "-k", "6",
                       "--json").stdout)
    assert d["text"].startswith(" force the laws"), d
    table = run("train", "--tokenizer", "mistral", "--corpus", str(tmp_path / "c.txt"), "--out", str(out),
                "--holdout", "0.2").stdout
    assert "instances" in table and "accuracy on holdout" in table
    assert out.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "m.olif"], "no temporary files left"


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
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
    # the file names a tokenizer that cannot be loaded by name: say which flag fixes it
    r = run("draft", "-m", str(out), "-p", "The Member", check=False)
    assert r.returncode == 1 and "tokenizer 'sp'" in r.stderr and "pass --tokenizer" in r.stderr
    r = run("draft", "-m", str(out), "-p", "The Member", "--tokenizer", "mistral", check=False)
    assert r.returncode == 1 and "trained for tokenizer 'sp'" in r.stderr and "--tokenizer" in r.stderr
    d = json.loads(run("draft", "-m", str(out), "-p", "The Member", "--tokenizer", str(tmp_path / "sp.model"),
                       "--json").stdout)
    assert d["prompt_tokens"] > 0
    info = json.loads(run("info", str(out), "--json").stdout)
    assert info["tokenizer"] == "sp" and info["vocab_size"] == 50 and info["verifier"] is None


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
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


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
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
    assert (tmp_path / "m.olif").stat().st_mode & 0o777 == 0o600
    phases = [p for p, _, _ in seen]
    assert "reading c.txt" in phases and any(p.startswith("building: ") for p in phases)
    size = (tmp_path / "c.txt").stat().st_size
    assert ("reading c.txt", size, size) in seen    # the reading phase completes


# ---- tokenizers that just match (issue 12) ---------------------------------------------------

@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
def test_train_defaults_to_the_default_verifiers_tokenizer(tmp_path):
    """The first model a user trains is for the verifier `generate` uses by default, and `draft`
    and `info` take its tokenizer from the file."""
    from olifant_mlx.verifier import EMBEDDED_DEFAULT

    (tmp_path / "c.txt").write_text(CORPUS)
    out = tmp_path / "m.olif"
    env = {"OLIFANT_MODEL": EMBEDDED_DEFAULT}     # the default verifier where Mistral is not cached
    r = run_env(env, "train", "--corpus", str(tmp_path / "c.txt"), "--out", str(out), "--json")
    assert f"tokenizer {EMBEDDED_DEFAULT}" in r.stderr and "default verifier" in r.stderr
    verifier = load_tokenizer(EMBEDDED_DEFAULT)
    m = IGTree.load(out)
    assert m.tokenizer_digest == verifier.digest and m.vocab_size == verifier.vocab_size
    m.check_tokenizer(verifier.name, verifier.vocab_size, verifier.digest)  # what generate checks
    d = json.loads(run("draft", "-m", str(out), "-p", "The Member States shall", "-k", "3", "--json").stdout)
    assert len(d["draft"]) == 3
    assert json.loads(run("info", str(out), "--json").stdout)["verifier"] == EMBEDDED_DEFAULT
    # --model trains for a named verifier
    run("train", "--model", "smollm2-135m", "--corpus", str(tmp_path / "c.txt"), "--out", str(out), "--quiet")
    assert IGTree.load(out).tokenizer_digest == verifier.digest


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_a_mismatch_names_the_flag_that_fixes_it(tmp_path, mistral):
    from olifant_mlx.draftmodel.igtree import TokenizerMismatch
    from olifant_mlx.draftmodel.train import train

    (tmp_path / "c.txt").write_text(CORPUS)
    train([str(tmp_path / "c.txt")], mistral, tmp_path / "m.olif", show_progress=False)
    m = IGTree.load(tmp_path / "m.olif")
    small = load_tokenizer("smollm2-135m")
    with pytest.raises(TokenizerMismatch, match="retrain .*`train --model smollm2-135m`"):
        m.check_tokenizer("smollm2-135m", small.vocab_size, small.digest)   # as generate calls it
    r = run("draft", "-m", str(tmp_path / "m.olif"), "-p", "x", "--tokenizer", "smollm2-135m", check=False)
    assert r.returncode == 1 and "omit --tokenizer" in r.stderr


@pytest.mark.slow
def test_generate_accepts_the_first_model_a_user_trains(tmp_path):
    """train with no tokenizer flag, then generate with no verifier flag: they agree."""
    (tmp_path / "c.txt").write_text(CORPUS)
    env = {"OLIFANT_MODEL": "smollm2-135m"}
    run_env(env, "train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "m.olif"), "--quiet")
    r = run_env(env, "generate", "--draft", f"olifant:{tmp_path / 'm.olif'}", "-p", "The Member States",
                "--max-tokens", "4", "--json")
    assert json.loads(r.stdout)["tokens"]


def run_env(env, *args, check=True):
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "120", **env})
    if check and r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr}")
    return r


# ---- arguments and inputs refused before slow work (issues 12, 17) ---------------------------

@pytest.mark.parametrize("args,named", [
    (["--max-tokens", "-5"], "--max-tokens"), (["--max-tokens", "0"], "--max-tokens"),
    (["--holdout", "0.99"], "--holdout"), (["--holdout", "1"], "--holdout"), (["--holdout", "-0.1"], "--holdout"),
    (["--eval-max", "-3"], "--eval-max"), (["--window", "0"], "--window"), (["--window", "17"], "--window"),
    (["--top-k", "-1"], "--top-k"), (["--workers", "-2"], "--workers"), (["--window", "four"], "--window"),
    (["--memory-limit", "lots"], "--memory-limit"), (["--memory-limit", "-1G"], "--memory-limit"),
    (["--memory-limit", "1K"], "--memory-limit"), (["--memory-limit", "12X"], "--memory-limit"),
    (["--memory-limit", "nan"], "--memory-limit"), (["--memory-limit", "1e30G"], "--memory-limit"),
    (["--threads", "-1"], "--threads"),
    (["--threads", "65"], "--threads"), (["--tmpdir", "/nonexistent/folder"], "--tmpdir"),
])
def test_bad_arguments_are_usage_errors_naming_the_argument(tmp_path, args, named):
    (tmp_path / "c.txt").write_text(CORPUS)
    r = run("train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "m.olif"), *args, check=False)
    assert r.returncode == 2 and f"argument {named}:" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "m.olif").exists()


def test_bad_permutation_and_output_are_named(tmp_path):
    (tmp_path / "c.txt").write_text(CORPUS)
    r = run("train", "--tokenizer", "mistral", "--corpus", str(tmp_path / "c.txt"), "--out",
            str(tmp_path / "m.olif"), "--permutation", "3,2,1", check=False)
    assert r.returncode == 1 and "--permutation 3,2,1" in r.stderr
    r = run("train", "--tokenizer", "mistral", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path),
            "--quiet", check=False)
    assert r.returncode == 1 and "is a directory" in r.stderr


def test_binary_corpus_is_refused_naming_the_file_unless_forced(tmp_path):
    import random

    bad = tmp_path / "noise.txt"
    bad.write_bytes(random.Random(1).randbytes(50_000))
    out = tmp_path / "m.olif"
    r = run("train", "--tokenizer", "mistral", "--corpus", str(bad), "--out", str(out), "--quiet", check=False)
    assert r.returncode == 1 and f"{bad} is not a text corpus" in r.stderr and "--force" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
    assert "training for tokenizer" not in r.stderr, "refused before the tokenizer loads"
    run("train", "--tokenizer", "mistral", "--corpus", str(bad), "--out", str(out), "--quiet", "--force")
    assert out.exists()


def test_corrupt_archive_is_an_error_naming_the_file(tmp_path):
    import gzip

    import random

    data = bytearray(gzip.compress(CORPUS.encode() * 20))
    data[20:-20:7] = random.Random(3).randbytes(len(data[20:-20:7]))   # a zlib.error inside
    bad = tmp_path / "c.txt.gz"
    bad.write_bytes(bytes(data))
    r = run("train", "--tokenizer", "mistral", "--corpus", str(bad), "--out", str(tmp_path / "m.olif"),
            "--quiet", check=False)
    assert r.returncode == 1 and str(bad) in r.stderr and "cannot decompress" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "m.olif").exists()


# ---- bounded memory and build threads (issue 18) ---------------------------------------------

LEGAL = "\n\n".join(f"Article {n}\nThe Member States shall bring into force by {n} June the laws "
                     f"necessary to comply with Directive {n * 7 % 1000}/EC.\nThey shall inform the "
                     f"Commission of measure {n * 13 % 997}." for n in range(600)) + "\n"


@pytest.mark.parametrize("text,size", [("4G", 4 << 30), ("512M", 512 << 20), ("512m", 512 << 20),
                                       ("64K", 65536), ("1.5G", 3 << 29), ("4GiB", 4 << 30),
                                       ("2GB", 2 << 30), ("65536", 65536), ("0", 0), ("1e9", 10**9)])
def test_memory_limit_sizes(text, size):
    from olifant_mlx.cli.train import byte_size

    assert byte_size(text) == size


def test_an_unusable_tmpdir_is_named_with_the_fix(tmp_path):
    (tmp_path / "c.txt").write_text(CORPUS)
    r = run_env({"TMPDIR": str(tmp_path / "gone")}, "train", "--tokenizer", "mistral", "--corpus",
                str(tmp_path / "c.txt"), "--out", str(tmp_path / "m.olif"), "--quiet", check=False)
    assert r.returncode == 1 and f"$TMPDIR ({tmp_path / 'gone'})" in r.stderr and "--tmpdir" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "m.olif").exists()
    run_env({"TMPDIR": str(tmp_path / "gone")}, "train", "--tokenizer", "mistral", "--corpus",
            str(tmp_path / "c.txt"), "--out", str(tmp_path / "m.olif"), "--quiet", "--tmpdir", str(tmp_path))
    assert (tmp_path / "m.olif").exists()


def test_a_tiny_memory_limit_gives_the_same_model_byte_for_byte(tmp_path):
    (tmp_path / "c.txt").write_text(LEGAL)
    common = ["train", "--tokenizer", "mistral", "--corpus", str(tmp_path / "c.txt"), "--quiet", "--json"]
    bounded = json.loads(run(*common, "--out", str(tmp_path / "bounded.olif"), "--memory-limit", "64K",
                             "--threads", "2").stdout)
    whole = json.loads(run(*common, "--out", str(tmp_path / "whole.olif"), "--memory-limit", "0",
                           "--threads", "1").stdout)
    assert bounded["memory_limit"] == 65536 and whole["memory_limit"] == 0
    assert bounded["threads"] == 2 and whole["threads"] == 1
    assert bounded["instances"] * 20 > 4 * 65536, "the instances (20 bytes each) must not fit in the limit"
    assert (tmp_path / "bounded.olif").read_bytes() == (tmp_path / "whole.olif").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bounded.olif", "c.txt", "whole.olif"]

"""Issue 24 item 7: `build-rest` and `train` refuse an output they cannot write (a folder, a
place like /proc where os.access says yes but no file can be made) and a binary corpus with the
right fix, before the tokenizer loads or the corpus is read; a lone surrogate in a prompt is a
clear error naming where, on the CLI and in the server (400)."""
import os
import subprocess
import sys

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


def immutable_folder(path):
    """`path` made immutable (chattr +i), or None where this machine cannot."""
    path.mkdir()
    try:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
    except OSError:
        done = False
    return path if done else None


# issue 45 item 7: an output that cannot be written (/proc, an immutable folder) is refused before the
# model loads, naming the file asked for, on every command that writes one (was: found after the whole
# generation, with a message naming a temporary file)
def test_an_output_that_cannot_be_written_is_refused_before_the_model_loads(no_tokenizer, capsys, tmp_path,
                                                                            monkeypatch):
    from olifant_mlx.files import write_atomic

    monkeypatch.setattr("olifant_mlx.verifier.load_verifier", lambda *a, **k: pytest.fail("the model loaded"))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    places = ["/proc"] if os.path.isdir("/proc/self") else []
    frozen = immutable_folder(tmp_path / "frozen")
    places += [str(frozen)] if frozen is not None else []
    try:
        for place in places:
            for argv in (["generate", "--model", "smollm2-135m", "-p", "x", "--output", f"{place}/x.docx"],
                         ["chat", "--model", "smollm2-135m", "--output", f"{place}/x.md"],
                         ["cache-prompt", "--model", "smollm2-135m", "-p", "x", "--prompt-cache-file",
                          f"{place}/x.safetensors"],
                         ["bench", "--model", "smollm2-135m", "--prompts", f"t={prompts}", "--results",
                          str(tmp_path / "r.jsonl"), "--transcripts-out", f"{place}/x.json"]):
                code, err = run_main(argv, capsys)
                assert code == 1 and argv[-1] in err and "cannot" in err, (argv, err)
                assert ".tmp" not in err and "Traceback" not in err, (argv, err)
            with pytest.raises(OSError, match=f"cannot write {place}/x.docx"):     # a late failure too
                write_atomic(f"{place}/x.docx", b"x")
    finally:
        if frozen is not None:
            subprocess.run(["chattr", "-i", str(frozen)])
    assert places or pytest.skip("no /proc and no chattr here")


def test_build_rest_on_a_binary_corpus_names_its_own_fix(no_tokenizer, capsys, tmp_path):
    blob = tmp_path / "blob.txt"
    blob.write_bytes(bytes(range(256)) * 64)
    code, err = run_main(["build-rest", "--corpus", str(blob), "--out", str(tmp_path / "x.sfx")], capsys)
    assert code == 1 and str(blob) in err and "--force" in err
    with pytest.raises(AssertionError, match="tokenizer was loaded"):      # --force: past the check
        main(["build-rest", "--corpus", str(blob), "--out", str(tmp_path / "x.sfx"), "--force"])


# ---- lone surrogates (issue 24 item 7): a clear error on every surface --------------------

def test_a_lone_surrogate_in_generate_p_is_named_before_the_model_loads(tmp_path):
    """An undecodable byte in argv arrives as a lone surrogate (surrogateescape)."""
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "generate", "--model", "no-such-model",
                        "-p", b"ab\xffc"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "the prompt (-p) is not valid Unicode text: character 3 is a lone surrogate U+DCFF" in r.stderr
    assert "no-such-model" not in r.stderr          # refused before the model was looked up


def test_a_lone_surrogate_in_a_server_request_is_a_400_naming_it():
    from server_helpers import DEFAULTS, LIMITS
    from tiny_models import tiny_chat_verifier

    from olifant_mlx.server.app import start
    from olifant_mlx.server.config import DrafterChoice

    httpx = pytest.importorskip("httpx")
    run = start(tiny_chat_verifier(), DrafterChoice({}, "none"), DEFAULTS, LIMITS)
    try:
        with httpx.Client(base_url=run.url, timeout=60) as c:
            for path, body, where in (
                    ("/v1/completions", '{"model":"tiny","prompt":"ab\\ud800","max_tokens":2}',
                     "the prompt is not valid Unicode text: character 3 is a lone surrogate U+D800"),
                    ("/v1/chat/completions", '{"model":"tiny","max_tokens":2,"messages":[{"role":"user",'
                                             '"content":"hi"},{"role":"user","content":"x\\udc80"}]}',
                     "message 2 (user) is not valid Unicode text: character 2")):
                r = c.post(path, content=body, headers={"Content-Type": "application/json"})
                assert r.status_code == 400 and r.headers["content-type"] == "application/json", r.text
                err = r.json()["error"]
                assert where in err["message"] and "TextEncodeInput" not in err["message"], err
            assert c.post("/v1/completions", json={"model": "tiny", "prompt": "ab", "max_tokens": 2}).status_code == 200
    finally:
        run.stop()

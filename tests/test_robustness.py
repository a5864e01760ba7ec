"""Bad input at every surface: a clear error naming the argument or the file, before any slow
work; never a crash, a hang or a traceback (docs/robustness.md lists what each case gets)."""
import os
import subprocess
import sys

import pytest

from olifant_mlx.cli import main

MISSING_MODEL = "/nonexistent/verifier.gguf"      # loading it would fail: errors must come first


def run_main(capsys, *argv):
    """(exit code, stderr) of the CLI, argparse's usage errors included."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, flag", [
    (["generate", "--max-kv-size", "-5"], "--max-kv-size"),
    (["generate", "--max-kv-size", "0"], "--max-kv-size"),
    (["generate", "--max-tokens", "-1"], "--max-tokens"),
    (["generate", "--temperature", "-1"], "--temperature"),
    (["generate", "--temperature", "nan"], "--temperature"),
    (["generate", "--top-p", "1.5"], "--top-p"),
    (["demo", "--max-tokens", "-3"], "--max-tokens"),
    (["tui", "--max-tokens", "-3"], "--max-tokens"),
    (["bench", "--prompts", "t=x.txt", "--max-tokens", "-1"], "--max-tokens"),
    (["bench", "--prompts", "t=x.txt", "--n-prompts", "0"], "--n-prompts"),
    (["generate", "-k", "65"], "-k"),
])
def test_options_out_of_range_name_their_flag(capsys, argv, flag):
    if argv[0] == "generate":
        argv = argv + ["--model", MISSING_MODEL, "-p", "x"]
    elif argv[0] == "demo":
        argv = argv + ["--model", MISSING_MODEL]
    code, err = run_main(capsys, *argv)
    assert code == 2, err
    assert flag in err and "Traceback" not in err and "cannot load verifier" not in err


def test_generate_checks_its_history_before_loading_the_verifier(capsys, tmp_path):
    from olifant_mlx.draftmodel.igtree import Builder

    b = Builder(vocab_size=64)
    b.add_document(list(range(1, 40)))
    model = tmp_path / "d.olif"
    b.build().save(model)
    fifo = tmp_path / "sessions.bin"
    os.mkfifo(fifo)
    code, err = run_main(capsys, "generate", "--model", MISSING_MODEL, "-p", "x", "--draft",
                         f"hybrid:{model}", "--history", str(fifo))
    assert code == 1 and str(fifo) in err and "not a regular file" in err, err


FIFO_EVERYWHERE = """
import sys
from pathlib import Path

fifo = sys.argv[1]


def attempt(what, call):
    try:
        call()
    except Exception as e:                       # any clear error will do: it must not hang
        print(what, "|", type(e).__name__, "|", e, flush=True)
    else:
        print(what, "| accepted", flush=True)


def history():
    from olifant_mlx.drafters.history import SessionHistory
    SessionHistory(fifo, bytes(32), 100)


def prompts():
    from olifant_mlx.measure.bench import read_prompts
    read_prompts(fifo)


def results():
    from olifant_mlx.measure.bench import open_results
    open_results(fifo)


def config():
    from olifant_mlx.cli.bench import _read_config
    _read_config(fifo)


def trace():
    from olifant_mlx.energy import open_meter
    open_meter("replay:" + fifo)


def gguf_path():
    from olifant_mlx.verifier import resolve_model
    resolve_model(fifo + ".gguf")


def gguf_convert():
    from olifant_mlx.verifier.gguf_import import convert_gguf
    convert_gguf(fifo + ".gguf", Path(fifo).parent / "out")


for case in (history, prompts, results, config, trace, gguf_path, gguf_convert):
    attempt(case.__name__, case)
"""


def test_no_path_a_user_gives_hangs_on_a_fifo(tmp_path):
    """History, prompt, results and config files, energy traces and GGUF files: each one a
    FIFO (nobody writing) is refused by name. One child process with a generous timeout: a
    hang fails the test, not the run."""
    fifo = tmp_path / "input"
    os.mkfifo(fifo)
    os.mkfifo(str(fifo) + ".gguf")
    try:
        r = subprocess.run([sys.executable, "-c", FIFO_EVERYWHERE, str(fifo)], capture_output=True,
                           text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung on a FIFO after: {e.stdout!r}")
    lines = [line.split(" | ") for line in r.stdout.splitlines()]
    assert r.returncode == 0 and len(lines) == 7, r.stderr[-2000:]
    for what, kind, *message in lines:
        assert kind != "accepted", what
        assert "FIFO" in message[0] or "not a regular file" in message[0], (what, message)
        assert str(fifo) in message[0], (what, message)

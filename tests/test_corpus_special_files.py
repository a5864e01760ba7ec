"""`train --corpus` and `build-rest --corpus` on what is not a plain file: a device (/dev/zero,
/dev/urandom) is refused by name before it is read (with --force /dev/zero was read forever);
a FIFO inside a folder is skipped, never opened; a FIFO named alone is read (a corpus still being
written, docs/draft-model.md). Real devices, real FIFOs, the real CLI; the timeouts turn a hang
into a failure."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from train_helpers import legal_text

from olifant_mlx.draftmodel import corpus
from olifant_mlx.draftmodel.corpus import CorpusError

TOKENIZER = "smollm2-135m"     # offline, in the shared cache


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OLIFANT_OFFLINE": "1"}, stdin=subprocess.DEVNULL)


COMMANDS = {"train": lambda src, out: ["train", "--tokenizer", TOKENIZER, "--corpus", src, "--out", out, "--quiet"],
            "train-force": lambda src, out: ["train", "--tokenizer", TOKENIZER, "--corpus", src, "--out", out,
                                             "--quiet", "--force"],
            "build-rest": lambda src, out: ["build-rest", "--tokenizer", TOKENIZER, "--corpus", src, "--out", out,
                                            "--quiet"]}


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_device_is_refused_by_name_before_it_is_read(command, device, tmp_path):
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    out = tmp_path / "out.bin"
    run = cli(*COMMANDS[command](device, str(out)), timeout=120)
    assert run.returncode == 1, (run.returncode, run.stderr[-1500:])
    assert f"corpus {device} is a device, not a file" in run.stderr, run.stderr[-1500:]
    assert "Traceback" not in run.stderr and not out.exists()


def test_the_reader_refuses_a_device_without_opening_it():
    """iter_documents (what read_corpus and the trainer's feed use) refuses it too, whoever
    skipped check_corpora."""
    with pytest.raises(CorpusError, match="/dev/zero is a device"):
        next(corpus.iter_documents("/dev/zero", force=True))


@pytest.mark.parametrize("command", ["train", "build-rest"])
def test_a_fifo_in_a_folder_is_skipped_not_opened(command, tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text(legal_text(30))
    os.mkfifo(folder / "pipe.txt")           # opening it would block: nobody writes to it
    out = tmp_path / "out.bin"
    run = cli(*COMMANDS[command](str(folder), str(out))[:-1], "--json")
    assert run.returncode == 0, run.stderr[-1500:]
    files = {os.path.basename(f["path"]): f for f in json.loads(run.stdout)["files"]["files"]}
    assert files["a.txt"]["status"] == "read"
    assert files["pipe.txt"]["status"] == "skipped" and "not a regular file" in files["pipe.txt"]["reason"]
    assert out.is_file()


@pytest.mark.parametrize("command", ["train", "build-rest"])
def test_a_fifo_named_alone_is_read(command, tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    out = tmp_path / "out.bin"

    def write():
        with open(fifo, "w") as w:        # blocks until the command opens the pipe to read it
            w.write(legal_text(30))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    run = cli(*COMMANDS[command](str(fifo), str(out))[:-1], "--json")
    writer.join(timeout=10)
    assert run.returncode == 0, run.stderr[-1500:]
    assert out.is_file() and not writer.is_alive()

"""The training pipeline: streaming, parallel tokenising, bounded memory, Ctrl-C, private files."""
import os
import signal
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from olifant_mlx.draftmodel import corpus
from olifant_mlx.draftmodel.igtree import Builder, IGTree
from olifant_mlx.draftmodel.train import TrainingCancelled, held_out_mask, train, truncate
from olifant_mlx.verifier import load_tokenizer
from train_helpers import DOC, leftovers, legal_text, write_old_model

HERE = Path(__file__).resolve().parent
@pytest.fixture(scope="module")
def mistral():
    return load_tokenizer("mistral")


# ---- same model, whatever the number of workers (issue 18) ------------------------------------

def reference_model(docs, tokenizer, path, holdout, max_tokens):
    """The simplest pipeline: one document at a time, in order, on this thread."""
    b = Builder(vocab_size=tokenizer.vocab_size, tokenizer_name=tokenizer.name,
                tokenizer_digest=tokenizer.digest)
    share, fed = Fraction(holdout), 0
    for n, doc in enumerate(docs, 1):
        if (n * share).__floor__() > ((n - 1) * share).__floor__():
            continue
        ids = tokenizer.encode(doc)[: max_tokens - fed]
        if ids:
            b.add_document(ids)
        fed += len(ids)
        if fed >= max_tokens:
            break
    b.build().save(path)


def test_model_is_byte_identical_for_any_number_of_workers(tmp_path, mistral, monkeypatch):
    monkeypatch.setattr(corpus, "BATCH_CHARS", 20_000)   # many batches in flight
    spec = "builtin:licenses"
    common = dict(max_tokens=100_000, holdout=0.1, eval_max=5_000, show_progress=False)
    files = {}
    for workers in (0, 1, 2, 3):
        out = tmp_path / f"w{workers}.olif"
        s = train([spec], mistral, out, workers=workers, **common)
        assert s["tokens"] == 100_000 and s["workers"] == workers
        files[workers] = out.read_bytes()
    assert len(set(files.values())) == 1
    reference_model(corpus.iter_documents(spec), mistral, tmp_path / "ref.olif", 0.1, 100_000)
    assert (tmp_path / "ref.olif").read_bytes() == files[0]


def test_holdout_picks_exactly_its_share():
    mask = held_out_mask(0, 10, Fraction(1, 5))
    assert np.flatnonzero(mask).tolist() == [4, 9]            # documents 5 and 10
    assert held_out_mask(0, 10, Fraction(3, 10)).sum() == 3
    whole = held_out_mask(0, 1000, Fraction(1, 3))
    assert np.array_equal(np.concatenate([held_out_mask(0, 7, Fraction(1, 3)),
                                          held_out_mask(7, 993, Fraction(1, 3))]), whole)
    assert not held_out_mask(0, 1, Fraction(1, 2))[0], "the first document always trains"


def test_truncate_cuts_the_document_at_the_limit():
    tokens, lengths = np.arange(10, dtype=np.uint32), np.array([3, 0, 4, 3])
    t, n = truncate(tokens, lengths, 5)
    assert t.tolist() == [0, 1, 2, 3, 4] and n.tolist() == [3, 0, 2, 0]
    assert truncate(tokens, lengths, 10)[1].tolist() == [3, 0, 4, 3]


# ---- bounded memory (issue 17) ----------------------------------------------------------------

def test_one_huge_line_is_tokenised_in_bounded_memory(tmp_path, mistral):
    """A 30 MB corpus without a line break, trained to 200k tokens: Python never holds more than
    a few batches, and reading stops once the tokens are in."""
    import tracemalloc

    path = tmp_path / "line.txt"
    path.write_bytes(b"the member states shall comply with this directive " * 600_000)
    seen = []
    tracemalloc.start()
    try:
        s = train([str(path)], mistral, tmp_path / "m.olif", max_tokens=200_000, workers=2,
                  show_progress=False, on_progress=lambda phase, done, total: seen.append(done))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert s["tokens"] == 200_000
    assert peak < 64e6, f"Python held {peak / 1e6:.0f} MB for a {path.stat().st_size / 1e6:.0f} MB line"
    assert max(d for d in seen if d < path.stat().st_size) < path.stat().st_size / 4, "read on"


# ---- people can watch it (issue 12) -------------------------------------------------------------

class RecordingBar:
    """Stands in for the rich progress bar; records what it was told."""

    def __init__(self):
        self.updates = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, description, total=None, **fields):
        return len(self.updates)

    def update(self, task, **kw):
        self.updates.append(kw)


def test_document_and_token_counters_move_while_reading(tmp_path, mistral, monkeypatch):
    from olifant_mlx.draftmodel import train as train_module

    long_docs = ("\n".join(DOC.format(n=f"{d}.{i}") for i in range(60)) for d in range(200))
    (tmp_path / "c.txt").write_text("\n\n".join(long_docs))   # acts of ~13 kB, 2.6 MB in all
    bar = RecordingBar()
    monkeypatch.setattr(train_module, "_progress_bar", lambda enabled: bar)
    train([str(tmp_path / "c.txt")], mistral, tmp_path / "m.olif", show_progress=True)
    size = (tmp_path / "c.txt").stat().st_size
    while_reading = {u["detail"] for u in bar.updates
                     if "detail" in u and u.get("completed", 0) < size and u["detail"] != "0 docs, 0 tokens"}
    assert len(while_reading) >= 3, "the counters must move before reading ends"
    assert bar.updates[-1]["description"] == "building: done"


# ---- cancelling and Ctrl-C leave nothing behind (issue 12) ----------------------------------------

@pytest.mark.parametrize("phase", ["reading", "building"])
def test_cancel_event_stops_the_real_pipeline(tmp_path, mistral, phase):
    (tmp_path / "c.txt").write_text(legal_text(3000))
    cancel = threading.Event()

    def on_progress(name, done, total):
        if name.startswith(phase):
            cancel.set()

    with pytest.raises(TrainingCancelled):
        train([str(tmp_path / "c.txt")], mistral, tmp_path / "m.olif", show_progress=False,
              on_progress=on_progress, cancel=cancel)
    assert leftovers(tmp_path, "c.txt") == []


def wait_for_marker(p, marker):
    lines = []
    while True:
        line = p.stderr.readline()
        if not line:
            p.wait()
            pytest.fail(f"exited {p.returncode} before {marker!r}:\n{''.join(lines)}")
        lines.append(line)
        if line.startswith(marker):
            return


def interrupt(p) -> str:
    """SIGINT; the outcome (exit status, stderr). A child that ignores it is killed after a
    minute, long past any honest reaction: the test fails on its exit status."""
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    return err


@pytest.mark.parametrize("phase", ["tokenising", "building"])
def test_ctrl_c_while_a_c_call_runs(tmp_path, phase):
    """Ctrl-C while the tokenizer or the builder is deep in C: exit 130, no model, no temporary."""
    (tmp_path / "c.txt").write_text(legal_text(500))
    out = tmp_path / "m.olif"
    p = subprocess.Popen([sys.executable, str(HERE / "interrupt_child.py"), phase, "train", "--tokenizer",
                          "mistral", "--corpus", str(tmp_path / "c.txt"), "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_marker(p, f"STALLED {phase}")
    err = interrupt(p)
    assert p.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert leftovers(tmp_path, "c.txt") == []


@pytest.mark.parametrize("phase", ["tokenising", "building", "saving"])
def test_kill_9_during_train_keeps_the_previous_model(tmp_path, phase):
    """kill -9 (no handler runs) while reading, building, or with the new model written but
    not yet renamed: the model already at --out is untouched and still loads; what is left is
    at most the private temporary folder, never a file at --out's name."""
    (tmp_path / "c.txt").write_text(legal_text(200))
    out = tmp_path / "m.olif"
    before = write_old_model(out)
    p = subprocess.Popen([sys.executable, str(HERE / "interrupt_child.py"), phase, "train", "--tokenizer",
                          "mistral", "--corpus", str(tmp_path / "c.txt"), "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_marker(p, f"STALLED {phase}")
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    assert out.read_bytes() == before and IGTree.load(out).tokenizer_name == "old"
    for name in leftovers(tmp_path, "c.txt", "m.olif"):
        left = tmp_path / name
        assert left.is_dir() and left.stat().st_mode & 0o077 == 0, name   # private, unnamed as --out


def test_worker_threads_leave_ctrl_c_to_the_main_thread():
    """A SIGINT the kernel hands to a tokenising worker would leave the main thread asleep in
    a read (test_ctrl_c_while_reading saw it under load: no reaction for 60 s). Workers block
    SIGINT, so it always reaches the main thread."""
    masks = list(corpus.ordered_map(lambda _: signal.pthread_sigmask(signal.SIG_BLOCK, []), range(6), 2))
    assert all(signal.SIGINT in m for m in masks)
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])   # not this thread's


PIPE_READER = """
import signal, sys, threading, time
from olifant_mlx.draftmodel import corpus
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()   # a thread open to SIGINT
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})   # the main one is not: the kernel
try:                                                         # must hand Ctrl-C to the other
    for doc in corpus.iter_documents(sys.argv[1]):
        print("DOC", len(doc), file=sys.stderr, flush=True)
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_a_pipe_is_read_so_that_ctrl_c_taken_by_another_thread_is_seen(tmp_path):
    """The race test_ctrl_c_while_reading used to lose 1 run in 3, made certain: SIGINT goes
    to a thread other than the main one, which sleeps reading a pipe nobody writes to. Reading
    in timed waits, the main thread still sees Ctrl-C (a plain read() would sleep forever)."""
    fifo = tmp_path / "c.txt"
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-c", PIPE_READER, str(fifo)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    with open(fifo, "w") as w:                 # held open: the reader waits for more, not EOF
        w.write(legal_text(400) + "\n\n")    # more than the first bytes looked at
        w.flush()
        wait_for_marker(p, "DOC")
        time.sleep(0.5)                        # the reader is asleep on the empty pipe
        err = interrupt(p)
    assert p.returncode == 130, err


def test_a_pipe_is_read_whole(tmp_path):
    """The same documents through a pipe as from the file, however the writer splits them."""
    text = legal_text(40)
    (tmp_path / "c.txt").write_text(text)
    fifo = tmp_path / "p.txt"
    os.mkfifo(fifo)

    def write_slowly():
        with open(fifo, "w") as w:
            for i in range(0, len(text), 3001):
                w.write(text[i:i + 3001])
                w.flush()
                time.sleep(0.001)

    writer = threading.Thread(target=write_slowly)
    writer.start()
    got = list(corpus.iter_documents(str(fifo)))
    writer.join()
    assert got == list(corpus.iter_documents(str(tmp_path / "c.txt"))) and len(got) > 1


def test_ctrl_c_while_reading(tmp_path):
    """A corpus that is still being written (a pipe): Ctrl-C while the reader waits on it."""
    fifo = tmp_path / "c.txt"
    os.mkfifo(fifo)
    out = tmp_path / "m.olif"
    p = subprocess.Popen([sys.executable, "-m", "olifant_mlx", "train", "--tokenizer", "mistral",
                          "--corpus", str(fifo), "--out", str(out), "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fd = None
    while fd is None:                    # the child opens the pipe once it is reading
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            if p.poll() is not None:
                pytest.fail(f"exited {p.returncode}: {p.stderr.read()}")
            time.sleep(0.05)
    try:
        os.write(fd, legal_text(50).encode())
        err = interrupt(p)
    finally:
        os.close(fd)
    assert p.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert leftovers(tmp_path, "c.txt") == []


# ---- bounded-memory builds spill beside the model and leave nothing (issue 18) -----------------

def spill_files(folder, fds="/proc/self/fd") -> list:
    """A process's open files in `folder`: a bounded build's temporary files (unnamed, so only
    /proc shows them, as 'folder/#inode (deleted)' or 'folder/name (deleted)')."""
    found = []
    for fd in os.listdir(fds):
        try:
            target = os.readlink(f"{fds}/{fd}")
        except OSError:
            continue
        if os.path.dirname(target) == str(folder):
            found.append(target)
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to see unnamed files")
def test_a_bounded_build_spills_beside_the_model_and_leaves_nothing(tmp_path, mistral, monkeypatch):
    monkeypatch.delenv("TMPDIR", raising=False)
    (tmp_path / "c.txt").write_text(legal_text(600))
    (tmp_path / "models").mkdir()
    seen = set()
    s = train([str(tmp_path / "c.txt")], mistral, tmp_path / "models" / "m.olif", show_progress=False,
              memory_limit=65536, threads=2,
              on_progress=lambda phase, done, total: seen.update(spill_files(tmp_path / "models")))
    assert s["memory_limit"] == 65536
    assert seen and all(t.endswith("(deleted)") for t in seen), seen
    assert spill_files(tmp_path / "models") == []
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["m.olif"]
    # --tmpdir (here: the API's tmpdir) puts them elsewhere
    (tmp_path / "spill").mkdir()
    seen.clear()
    train([str(tmp_path / "c.txt")], mistral, tmp_path / "models" / "m2.olif", show_progress=False,
          memory_limit=65536, tmpdir=tmp_path / "spill",
          on_progress=lambda phase, done, total: seen.update(spill_files(tmp_path / "spill")))
    assert seen and list((tmp_path / "spill").iterdir()) == []
    assert (tmp_path / "models" / "m.olif").read_bytes() == (tmp_path / "models" / "m2.olif").read_bytes()


@pytest.mark.parametrize("phase", ["reading", "sorting", "building"])
def test_cancelling_a_bounded_build_leaves_no_temporary_files(tmp_path, mistral, phase):
    (tmp_path / "c.txt").write_text(legal_text(600))
    cancel, seen = threading.Event(), []

    def on_progress(name, done, total):
        seen.append(name)
        if phase in name:
            cancel.set()

    with pytest.raises(TrainingCancelled):
        train([str(tmp_path / "c.txt")], mistral, tmp_path / "m.olif", show_progress=False,
              memory_limit=65536, threads=2, tmpdir=tmp_path, on_progress=on_progress, cancel=cancel)
    assert any(phase in name for name in seen)
    assert leftovers(tmp_path, "c.txt") == []
    if os.path.isdir("/proc/self/fd"):
        assert spill_files(tmp_path) == [], "the temporary files are closed, not just unnamed"


def test_ctrl_c_during_a_bounded_build_leaves_no_temporary_files(tmp_path):
    """Ctrl-C while the builder holds spilled instances on disk: exit 130, nothing left."""
    (tmp_path / "c.txt").write_text(legal_text(600))
    p = subprocess.Popen([sys.executable, str(HERE / "interrupt_child.py"), "building", "train", "--tokenizer",
                          "mistral", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "m.olif"),
                          "--memory-limit", "64K"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_marker(p, "STALLED building")
    try:
        spilled = spill_files(tmp_path, f"/proc/{p.pid}/fd") if os.path.isdir(f"/proc/{p.pid}/fd") else [1]
    finally:
        err = interrupt(p)      # never leave the stalled child behind, whatever the check found
    assert spilled, "it had spilled beside the model"
    assert p.returncode == 130, err
    assert leftovers(tmp_path, "c.txt") == []


# ---- private files (model files hold the corpus's n-grams) -------------------------------------

def test_model_is_private_whatever_the_umask(tmp_path, mistral):
    (tmp_path / "c.txt").write_text(legal_text(20))
    out = tmp_path / "m.olif"
    out.write_bytes(b"old")
    os.chmod(out, 0o644)
    old = os.umask(0)
    try:
        train([str(tmp_path / "c.txt")], mistral, out, show_progress=False)
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o600
    assert IGTree.load(out).n_instances > 0
    assert leftovers(tmp_path, "c.txt", "m.olif") == []


def test_private_output_keeps_the_old_file_on_error(tmp_path):
    from olifant_mlx.files import private_output

    target = tmp_path / "m.olif"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), private_output(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"old" and leftovers(tmp_path, "m.olif") == []
    with private_output(target) as tmp:
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o600


def test_bad_options_fail_before_any_reading(tmp_path, mistral):
    with pytest.raises(ValueError, match="holdout"):
        train(["/nonexistent"], mistral, tmp_path / "m.olif", holdout=0.99)
    with pytest.raises(ValueError, match="window"):
        train(["/nonexistent"], mistral, tmp_path / "m.olif", window=17)
    (tmp_path / "c.txt").write_text(legal_text(20))
    with pytest.raises(corpus.CorpusError, match="does not exist"):
        train([str(tmp_path / "c.txt")], mistral, tmp_path / "m.olif", eval_specs=["/nonexistent"])

"""Issue 24 item 8: Ctrl-C at many points of a real `train` run (reading, building, writing,
the window after building and around the final rename, the summary): either exit 130,
"interrupted", the old model untouched at --out and no temporary left; or (the rename had
happened) exit 0 and the whole new model — never death by the signal, never a silent exit.
An interrupted run exits within the issue's 1 s of the signal (measured by this process, on
whatever load the machine has)."""
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from train_helpers import leftovers, legal_text, write_old_model

from olifant_mlx.draftmodel.igtree import IGTree

BOUND_S = 1.0


def start(corpus, out):
    return subprocess.Popen([sys.executable, "-m", "olifant_mlx", "train", "--tokenizer", "mistral",
                             "--corpus", str(corpus), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ready(p):
    """Block until the run is past its setup (its handler is in place, the tokenizer loaded)."""
    line = p.stderr.readline()
    assert line.startswith("training for tokenizer"), line


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_ctrl_c_at_any_point_of_train_is_130_and_the_old_model_or_0_and_the_new(tmp_path):
    (tmp_path / "c.txt").write_text(legal_text(12000))
    out = tmp_path / "m.olif"
    old = write_old_model(out)
    p = start(tmp_path / "c.txt", out)              # one whole run: how long the work takes
    ready(p)
    t0 = time.monotonic()
    _, err = p.communicate(timeout=300)
    whole = time.monotonic() - t0
    assert p.returncode == 0, err
    new = out.read_bytes()
    outcomes, worst = [], 0.0
    for delay in np.linspace(0.0, whole * 1.1, 14):
        out.write_bytes(old)
        p = start(tmp_path / "c.txt", out)
        ready(p)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        took = time.monotonic() - sent
        if p.returncode == 130:
            assert "interrupted" in err and "Traceback" not in err, err
            assert out.read_bytes() == old, delay
            worst = max(worst, took)
        else:
            assert p.returncode == 0, (delay, p.returncode, err)     # never -2 (killed by the signal)
            assert "interrupted" not in err and out.read_bytes() == new, delay
            assert IGTree.load(out).tokenizer_name != "old"
        assert leftovers(tmp_path, "c.txt", "m.olif") == [], delay
        outcomes.append(p.returncode)
    assert 130 in outcomes, outcomes                 # the signal landed inside the work
    assert worst < BOUND_S, worst


def test_a_ctrl_c_inside_the_write_probe_leaves_no_probe(tmp_path, monkeypatch):
    """The probe of check_output (run again inside train()) is created and removed with SIGINT
    held back: a Ctrl-C that lands between the two arrives after the unlink (a full-suite run
    once found a .olifant-probe-* left by a Ctrl-C at that point)."""
    import os

    import pytest

    from olifant_mlx.draftmodel import train as train_module
    real_open = os.open

    def open_then_ctrl_c(path, *a, **k):
        fd = real_open(path, *a, **k)
        os.kill(os.getpid(), signal.SIGINT)         # lands while the probe exists
        time.sleep(0.2)     # time for another thread to take it, even on a loaded machine
        return fd

    # other threads live, as in a full run (MLX's pools): a SIGINT to the process may go to any
    # of them, so masking the main thread alone did not hold it back (CI once found the probe)
    import threading
    stop = threading.Event()
    others = [threading.Thread(target=stop.wait) for _ in range(4)]
    for t in others:
        t.start()
    monkeypatch.setattr(train_module.os, "open", open_then_ctrl_c)
    try:
        for _ in range(5):
            with pytest.raises(KeyboardInterrupt):
                train_module.check_output(tmp_path / "m.olif")
            assert list(tmp_path.iterdir()) == []
    finally:
        stop.set()
        for t in others:
            t.join()

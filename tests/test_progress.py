"""Long waits say what they are doing (issue 38, item 5): stderr_progress draws on a real
pseudo-terminal, moves as it is advanced, and writes nothing when stderr is not a terminal (a
log, a pipe), so stdout and --json are never touched. The demo's rounds, in a real terminal."""
import os
import pty
import re
import sys
import threading
import time

import pytest
import terminal

from olifant_mlx.verifier.aliases import stderr_progress


def test_nothing_is_drawn_when_stderr_is_not_a_terminal(capsys):
    with stderr_progress("fetching x", 3) as advance:
        advance()
        advance(0, "round 1/3: plain")
    assert capsys.readouterr() == ("", "")


def test_the_bar_draws_and_renames_on_a_terminal(monkeypatch):
    master, slave = pty.openpty()
    drawn = bytearray()

    def read():                          # drained as it is written: a full pty would block rich
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            drawn.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    with os.fdopen(slave, "w") as tty:
        monkeypatch.setattr(sys, "stderr", tty)
        with stderr_progress("fetching x", 2) as advance:
            advance()
            advance(0, "round 1/3: plain, 7 verifier passes")
    reader.join(timeout=30)
    os.close(master)
    text = drawn.decode(errors="replace")
    assert "round 1/3: plain, 7 verifier passes" in text and "1/2" in text, text


@pytest.mark.slow        # the real demo on the offline verifier, in a real 80x24 terminal
def test_the_demo_shows_its_runs_on_a_terminal(tmux_server, tmp_path):
    status, out = tmp_path / "status", tmp_path / "out"
    terminal.start("demo", f"cd {tmp_path} && {sys.executable} -m olifant_mlx demo --rounds 2 > {out}; "
                           f"echo $? > {status}; sleep 60")
    seen = set()

    def look(screen):
        seen.update(re.findall(r"(warm-up|round \d/2): (plain|speculative), \d+ verifier passes", screen))
        return status.exists() and status.read_text().strip()

    try:
        terminal.wait_for("demo", look, time.monotonic() + 600, poll=0.1)
    finally:
        terminal.kill("demo")
    assert status.read_text().strip() == "0"
    assert len(seen) >= 2, seen                   # it moved: at least two runs were seen going
    stdout = " ".join(out.read_text().split())
    assert "verifier passes" not in stdout and "outputs identical: yes" in stdout   # the bar stays off stdout
    assert "stand-in for a real verifier: its text is not legal advice" in stdout
    assert "models pull mistral --default" in stdout

"""The opt-in session history: file format, validation, and drafting from earlier sessions."""
import os
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from olifant_mlx.drafters import HybridDrafter, OlifantDrafter, Signal
from olifant_mlx.drafters.history import HEADER, HistoryError, SessionHistory
from olifant_mlx.draftmodel.igtree import Builder, TokenizerMismatch
from olifant_mlx.engine import generate

DIGEST = bytes(range(32))


def test_sessions_round_trip_and_draft(tmp_path):
    path = tmp_path / "h.bin"
    h = SessionHistory(path, DIGEST, 100)
    assert not path.exists() and h.continuation([1, 2, 3], 4) == ([], [])   # nothing written yet
    h.append([1, 2, 3, 4, 5, 6])
    h.append([9, 1, 2, 3, 7, 8])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_bytes()[:8] == b"OLIFHST1"
    again = SessionHistory(path, DIGEST, 100)
    assert again.sessions == 2 and again.tokens == h.tokens
    # the latest occurrence wins; a continuation stops at the end of its session
    # signals: the agreement with the context grows along the draft (3, then 4 once 7 is in)
    assert again.continuation([0, 1, 2, 3], 5) == ([7, 8], [Signal("history", 3), Signal("history", 4)])
    assert again.continuation([9, 1, 2, 3], 1) == ([7], [Signal("history", 4)])
    assert again.continuation([5, 6, 9], 3) == ([], [])       # never across sessions
    assert again.continuation([2, 3], 3) == ([], [])          # too short to look up
    with pytest.raises(HistoryError, match="vocabulary"):
        again.append([100])


def test_bad_files_are_clear_errors(tmp_path):
    good = tmp_path / "good.bin"
    SessionHistory(good, DIGEST, 100).append([1, 2, 3, 4])
    data = good.read_bytes()
    cases = {
        "magic": b"not a history file at all" * 4,
        "version": data[:8] + (7).to_bytes(4, "little") + data[12:],
        ">= vocabulary": data[:HEADER.size] + (1).to_bytes(4, "little") + (500).to_bytes(4, "little"),
    }
    for why, blob in cases.items():
        p = tmp_path / "bad.bin"
        p.write_bytes(blob)
        with pytest.raises(HistoryError, match=why):
            SessionHistory(p, DIGEST, 100)
    with pytest.raises(TokenizerMismatch, match="another tokenizer"):
        SessionHistory(good, bytes(32), 100)
    with pytest.raises(TokenizerMismatch):
        SessionHistory(good, DIGEST, 101)


def test_keeps_the_newest_sessions_within_max_tokens(tmp_path):
    path = tmp_path / "h.bin"
    h = SessionHistory(path, DIGEST, 100)
    for i in range(10):
        h.append([i, 50, 51, 52, i])
    small = SessionHistory(path, DIGEST, 100, max_tokens=12)
    assert small.sessions == 2 and small.continuation([50, 51, 52], 1)[0] == [9]


def test_hybrid_drafts_from_history_and_output_stays_plain(tmp_path):
    from tiny_models import tiny_llama

    model = tiny_llama(0)
    rng = np.random.default_rng(3)
    prompt = rng.integers(1, 64, size=6).tolist()
    ref, _ = generate(model, prompt, max_tokens=40)
    b = Builder(vocab_size=64)
    b.add_document(rng.integers(1, 64, size=50).tolist())   # an IGTree that knows nothing useful
    olifant = OlifantDrafter(b.build())
    h = SessionHistory(tmp_path / "h.bin", DIGEST, 64)
    _, before = generate(model, prompt, HybridDrafter(olifant), k=5, max_tokens=40)
    h.append(prompt + ref)                                   # an earlier session wrote this
    hybrid = HybridDrafter(olifant, history=h)
    for kv in (True, False):
        out, after = generate(model, prompt, hybrid, k=5, max_tokens=40, kv_cache=kv)
        assert out == ref
        assert after.accepted > before.accepted and after.steps < before.steps


# --- damage, privacy, odd paths ------------------------------------------------------------

def two_sessions(path):
    h = SessionHistory(path, DIGEST, 100)
    h.append([1, 2, 3, 4])
    h.append([5, 6, 7])
    return path.read_bytes()


@pytest.mark.parametrize("tail", [b"\x01", b"\x01\x00", (3).to_bytes(4, "little"),
                                  (3).to_bytes(4, "little") + (9).to_bytes(4, "little")],
                         ids=["1 byte", "half a length", "a length alone", "a record cut short"])
def test_an_incomplete_last_record_is_dropped_with_a_warning(tmp_path, tail):
    """A write killed mid-record (or cut by a full disk) loses that record only: every complete
    one is kept, the loss is reported, and the next append cuts the torn bytes first."""
    path = tmp_path / "h.bin"
    whole = two_sessions(path)
    path.write_bytes(whole + tail)
    h = SessionHistory(path, DIGEST, 100)
    assert h.sessions == 2 and h.tokens == [1, 2, 3, 4, -1, 5, 6, 7, -1]
    assert len(h.warnings) == 1 and "incomplete last record" in h.warnings[0] and str(path) in h.warnings[0]
    h.append([8, 9])
    again = SessionHistory(path, DIGEST, 100)
    assert again.sessions == 3 and again.warnings == []
    assert path.read_bytes() == whole + (2).to_bytes(4, "little") + np.array([8, 9], "<u4").tobytes()


def test_an_empty_file_is_a_history_with_no_sessions(tmp_path):
    path = tmp_path / "h.bin"
    path.touch(mode=0o600)
    h = SessionHistory(path, DIGEST, 100)
    assert h.sessions == 0 and h.warnings == []
    h.append([1, 2, 3])
    assert path.read_bytes()[:8] == b"OLIFHST1" and SessionHistory(path, DIGEST, 100).sessions == 1


def test_an_existing_file_is_made_private(tmp_path):
    path = tmp_path / "h.bin"
    two_sessions(path)
    os.chmod(path, 0o644)
    SessionHistory(path, DIGEST, 100)                       # loading already tightens it
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.chmod(path, 0o666)
    h = SessionHistory(tmp_path / "other.bin", DIGEST, 100)
    h.path = str(path)                                      # and so does an append alone
    h.append([1, 2, 3])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_dangling_link_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere" / "planted.bin"
    target.parent.mkdir()
    link = tmp_path / "h.bin"
    link.symlink_to(target)
    with pytest.raises(HistoryError, match="symbolic link to nothing"):
        SessionHistory(link, DIGEST, 100)
    h = SessionHistory(tmp_path / "fine.bin", DIGEST, 100)
    h.path = str(link)                                      # an append never creates the target
    with pytest.raises(HistoryError, match="symbolic link to nothing"):
        h.append([1, 2, 3])
    assert not target.exists()


FIFO_CHILD = """
import sys
from olifant_mlx.drafters.history import HistoryError, SessionHistory
try:
    SessionHistory(sys.argv[1], bytes(range(32)), 100)
except HistoryError as e:
    print("refused:", e)
h = SessionHistory(sys.argv[2], bytes(range(32)), 100)
h.path = sys.argv[1]
try:
    h.append([1, 2])
except HistoryError as e:
    print("refused:", e)
"""


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    """Opening a FIFO blocks until a writer comes: a history path that is one is refused. In
    a child process with a generous timeout, so a hang fails the test instead of the run."""
    fifo = tmp_path / "h.bin"
    os.mkfifo(fifo)
    try:
        r = subprocess.run([sys.executable, "-c", FIFO_CHILD, str(fifo), str(tmp_path / "x.bin")],
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a FIFO as history file hangs")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 2, r.stderr
    assert all(line.startswith("refused:") and "FIFO" in line and str(fifo) in line for line in lines)


def history_fd_writes(monkeypatch, path, fake):
    """os.write replaced by `fake(fd, data, real_write)` for the history file's descriptors only."""
    real = os.write

    def write(fd, data):
        try:
            ours = os.path.samestat(os.fstat(fd), os.stat(path))
        except OSError:
            ours = False
        return fake(fd, data, real) if ours else real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_short_writes_are_finished(tmp_path, monkeypatch):
    path = tmp_path / "h.bin"
    whole = two_sessions(path)
    history_fd_writes(monkeypatch, path, lambda fd, data, real: real(fd, bytes(data[:5])))
    SessionHistory(path, DIGEST, 100).append(list(range(40)))
    monkeypatch.undo()
    again = SessionHistory(path, DIGEST, 100)
    assert again.sessions == 3 and again.warnings == [] and path.read_bytes().startswith(whole)
    assert again.tokens[-41:] == list(range(40)) + [-1]


def test_a_full_disk_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    import errno

    path = tmp_path / "h.bin"
    whole = two_sessions(path)
    h = SessionHistory(path, DIGEST, 100)

    def full(fd, data, real):
        if len(data) > 8:
            return real(fd, bytes(data[:8]))                # some bytes land, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    history_fd_writes(monkeypatch, path, full)
    with pytest.raises(HistoryError, match="No space left on device.*earlier sessions are kept"):
        h.append(list(range(40)))
    monkeypatch.undo()
    assert path.read_bytes() == whole and h.sessions == 2   # neither the file nor memory took it half
    assert SessionHistory(path, DIGEST, 100).warnings == []


# --- several processes -----------------------------------------------------------------------

APPENDER = """
import os, sys, time
import numpy as np
from olifant_mlx.drafters.history import SessionHistory

path, who, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pause = sys.argv[4] if len(sys.argv) > 4 else ""


def session(who, i):
    # every record different and some large (12 kB), so interleaved or cut records would show
    return [who, i] + [(who * 31 + i * 7 + j) % 100 for j in range(1 + (who * 997 + i * 131) % 3000)]


if pause:
    # the first write to the history (a new file's header) waits until the other writer has
    # finished (or a few seconds pass): without a lock, both see an empty file and both write
    # a header. The bound only limits how long a correct build waits, blocked on our lock.
    real, paused = os.write, []

    def write(fd, data):
        if not paused and os.path.exists(path) and os.path.samestat(os.fstat(fd), os.stat(path)):
            paused.append(1)
            open(pause + ".paused", "w").close()
            for _ in range(300):
                if os.path.exists(pause + ".done"):
                    break
                time.sleep(0.01)
        return real(fd, data)

    os.write = write
print("ready", flush=True)
sys.stdin.readline()                       # every process starts appending at once
h = SessionHistory(path, bytes(range(32)), 100)
for i in range(count):
    h.append(session(who, i))
print("done", flush=True)
"""


def appender(path, who, count, pause=""):
    p = subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(who), str(count), pause],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def expected_session(who, i):
    return [who, i] + [(who * 31 + i * 7 + j) % 100 for j in range(1 + (who * 997 + i * 131) % 3000)]


def records_of(path):
    h = SessionHistory(path, DIGEST, 100, max_tokens=10**9)
    assert not getattr(h, "warnings", None)
    records, current = [], []
    for t in h.tokens:
        if t == -1:
            records.append(current)
            current = []
        else:
            current.append(t)
    return records


def finish(procs):
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "done"


def test_processes_appending_at_once_keep_every_record(tmp_path):
    """Several real processes create and append to one new history file at the same moment:
    the file holds every record whole, each once."""
    path = tmp_path / "shared.bin"
    procs = [appender(path, who, 15) for who in range(5)]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    finish(procs)
    got = records_of(path)
    want = [expected_session(who, i) for who in range(5) for i in range(15)]
    assert len(got) == len(want) and sorted(got) == sorted(want)
    for who in range(5):                                    # each process's records in its order
        assert [r for r in got if r[0] == who] == [expected_session(who, i) for i in range(15)]


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_two_first_appends_write_one_header(tmp_path):
    """The creation race made deterministic: the first process stops just before writing the
    new file's header; the second one appends meanwhile. With the lock the second waits."""
    path, marker = tmp_path / "new.bin", str(tmp_path / "first")
    first = appender(path, 1, 1, pause=marker)
    second = appender(path, 2, 1)
    first.stdin.write("go\n")
    first.stdin.flush()
    for _ in range(6000):                                  # until the first one is paused
        if os.path.exists(marker + ".paused"):
            break
        first.poll()
        assert first.returncode is None
        time.sleep(0.01)
    second.stdin.write("go\n")
    second.stdin.flush()
    second_out = threading.Thread(target=finish, args=([second],))
    second_out.start()
    for _ in range(1000):                                  # tell the first one when the second is done
        if not second_out.is_alive():
            open(marker + ".done", "w").close()
            break
        time.sleep(0.01)
    finish([first])
    second_out.join()
    assert sorted(records_of(path)) == [expected_session(1, 0), expected_session(2, 0)]
    assert path.read_bytes().count(b"OLIFHST1") == 1


KILLED_MID_WRITE = """
import os, sys, time
from olifant_mlx.drafters.history import SessionHistory

path, marker = sys.argv[1], sys.argv[2]
real = os.write


def write(fd, data):
    # half the record reaches the file; then the process is killed (kill -9) before the rest
    real(fd, bytes(data[:len(data) // 2]))
    open(marker, "w").close()
    time.sleep(600)


os.write = write
SessionHistory(path, bytes(range(32)), 100).append(list(range(100)) * 30)
"""


def test_kill_9_during_an_append_keeps_the_earlier_file(tmp_path):
    import signal

    path, marker = tmp_path / "h.bin", tmp_path / "torn"
    before = two_sessions(path)
    child = subprocess.Popen([sys.executable, "-c", KILLED_MID_WRITE, str(path), str(marker)])
    for _ in range(6000):
        if marker.exists():
            break
        assert child.poll() is None
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=60)
    torn = path.read_bytes()
    assert len(torn) > len(before) and torn.startswith(before)      # half a record landed
    h = SessionHistory(path, DIGEST, 100)
    assert h.sessions == 2 and h.tokens == [1, 2, 3, 4, -1, 5, 6, 7, -1]
    assert any("incomplete last record" in w for w in h.warnings)
    h.append([9, 9, 9])
    assert path.read_bytes() == before + (3).to_bytes(4, "little") + np.array([9, 9, 9], "<u4").tobytes()


def test_check_path_needs_no_tokenizer(tmp_path):
    from olifant_mlx.drafters.history import check_path

    check_path(tmp_path / "new.bin")                         # nothing yet: fine
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for bad, why in ((tmp_path / "fifo", "not a regular file"), (tmp_path / "dangling", "link to nothing"),
                     (tmp_path / "no" / "h.bin", "folder does not exist"), (tmp_path, "not a regular file")):
        with pytest.raises(HistoryError, match=why):
            check_path(bad)

"""A real terminal for the tests that drive a program by keys: tmux on its own server socket, so a
test's sessions never meet a user's tmux. `tmux_server` (in conftest.py) ends the server."""
import os
import subprocess
import time

# one server per pytest-xdist worker: a worker ending its server must not end another's sessions
SOCKET = f"olifant-test-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def tmux(*args):
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True, check=True)


def start(name, command, cols=80, rows=24):
    """`command` (a shell line) in a new detached session of cols x rows. The server exits when
    the previous test kills its last session; a new session asked for while it is exiting fails
    (CI at 351fac1: exit status 1), so that is tried again a few times."""
    for attempt in range(5):
        try:
            tmux("new-session", "-d", "-s", name, "-x", str(cols), "-y", str(rows), command)
            return
        except subprocess.CalledProcessError as e:
            if attempt == 4:
                raise AssertionError(f"tmux new-session {name}: {e.stderr.strip()}") from None
            time.sleep(0.5)


def screen(name):
    return tmux("capture-pane", "-p", "-t", name).stdout


def wait_for(name, done, deadline, poll=0.25):
    """Polls the screen until `done(screen)` holds; fails with the screen at `deadline` (monotonic)."""
    while not done(shown := screen(name)):
        assert time.monotonic() < deadline, shown
        time.sleep(poll)
    return shown


def keys(name, *keys):
    tmux("send-keys", "-t", name, *keys)


def kill(name):
    subprocess.run(["tmux", "-L", SOCKET, "kill-session", "-t", name], capture_output=True)


def kill_server():
    subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)

"""Run a command in a child process and measure it: exit status, wall, CPU and peak RSS.

A process's peak RSS (ru_maxrss) starts at its parent's: fork copies the parent's resident
pages and vfork (what subprocess uses) hands the child the parent's high-water mark at exec.
A benchmark that holds gigabytes (a fitted sampler, prepared instances) would report them as
every child's peak. So the command runs under a tiny launcher, a fresh interpreter that forks
it from a few megabytes and reports the command's own rusage.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

LAUNCHER = """
import json, os, sys
fd, args = int(sys.argv[1]), sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.close(fd)
    os.execvp(args[0], args)
_, status, ru = os.wait4(pid, 0)
rss = ru.ru_maxrss / (1024 * 1024) if sys.platform == "darwin" else ru.ru_maxrss / 1024
os.write(fd, json.dumps([os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime, rss]).encode())
"""


def run_measured(cmd, env=None, cwd=None, stdout=subprocess.PIPE) -> dict:
    """cmd's exit status, wall s, CPU s (user + sys), peak RSS MB, stdout and stderr (bytes;
    stdout None where `stdout` is a file given by the caller)."""
    r, w = os.pipe()
    t = time.perf_counter()
    try:
        p = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, str(w), *map(str, cmd)],
                             stdout=stdout, stderr=subprocess.PIPE, env=env, cwd=cwd, pass_fds=(w,))
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as result:
        out, err = p.communicate()
        wall = time.perf_counter() - t
        measured = result.read()
    if not measured:
        raise RuntimeError(f"the launcher of {list(cmd)[:4]} failed: {err.decode()[-2000:]}")
    code, cpu, rss = json.loads(measured)
    return {"code": code, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "stdout": out, "stderr": err}


def load1() -> float:
    """The 1-minute load average, to print beside a timing."""
    return round(os.getloadavg()[0], 2)


def run_child(argv, tree=None) -> tuple:
    """Run argv in a fresh process (importing olifant_mlx from the checkout `tree` if given, to
    compare against another version): its stdout and its own wall, CPU and peak RSS."""
    env = dict(os.environ)
    cwd = None
    if tree:
        env["PYTHONPATH"] = str(tree)
        cwd = tempfile.gettempdir()        # not the checkout: -m would import it first
    m = run_measured(argv, env=env, cwd=cwd)
    if m["code"]:
        raise RuntimeError(f"{argv[:4]} failed: {m['stderr'].decode()[-2000:]}")
    return m["stdout"].decode(), {"wall_s": round(m["wall_s"], 2), "cpu_s": round(m["cpu_s"], 2),
                                  "peak_rss_mb": round(m["peak_rss_mb"])}

"""Import MLX the way this machine needs it.

On Linux the mlx-cpu wheel links the reference (netlib) BLAS: fp32 GEMM runs
10-50x slower than with OpenBLAS, and a multi-token verification pass costs
nearly k single steps, so speculation cannot pay off. Loading OpenBLAS with
global symbols before MLX makes MLX's BLAS calls resolve to it.
"""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import sys
import threading
import warnings

from olifant_mlx.teardown import release_streams

OPENBLAS_CANDIDATES = (
    "libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
)

_state = {"blas": None}


def ranks_here(env=None) -> int:
    """How many ranks of this process's `mlx.launch --backend ring` run share its machine: the
    hostfile's ranks at this rank's address (1 when started alone or the file is unreadable)."""
    env = os.environ if env is None else env
    try:
        hosts = json.loads(open(env["MLX_HOSTFILE"], encoding="utf-8").read() or "[]")
        mine = hosts[int(env["MLX_RANK"])][0].rpartition(":")[0]
        return max(1, sum(1 for h in hosts if h and h[0].rpartition(":")[0] == mine))
    except (KeyError, OSError, ValueError, IndexError, TypeError, AttributeError):
        return 1


def blas_threads(env=None) -> int | None:
    """OpenBLAS's thread count for ranks that share a machine: its CPUs split between them. Each
    pool otherwise takes every CPU, and ranks that wait on one another in every collective then
    wait on the scheduler too: SmolLM2 over 3 ranks on 2 cores ran at 0.41 tokens/s, at 0.87
    with one thread each. None (OpenBLAS decides) for a rank alone on its machine or when the
    user has set OPENBLAS_NUM_THREADS."""
    env = os.environ if env is None else env
    n = ranks_here(env)
    if n == 1 or env.get("OPENBLAS_NUM_THREADS"):
        return None
    from olifant_mlx.machine import cpus

    return max(1, cpus() // n)


def ensure_blas() -> str:
    """Load OpenBLAS before MLX on Linux; returns what was loaded ('' if nothing)."""
    if _state["blas"] is not None:
        return _state["blas"]
    loaded = ""
    if sys.platform.startswith("linux") and os.environ.get("OLIFANT_NO_OPENBLAS") != "1":
        threads = blas_threads()
        if threads is not None:                  # read by OpenBLAS as it loads
            os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
        if "mlx.core" in sys.modules:
            warnings.warn("mlx was imported before olifant_mlx could load OpenBLAS; "
                          "MLX may run on the slow reference BLAS", RuntimeWarning, stacklevel=2)
        for name in OPENBLAS_CANDIDATES:
            try:
                ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
                loaded = name
                break
            except OSError:
                continue
        if not loaded:
            warnings.warn(
                "OpenBLAS not found: MLX on a Linux CPU then runs 10-50x slower and speculative "
                "decoding cannot pay off. Install it: apt-get install libopenblas0-pthread",
                RuntimeWarning, stacklevel=2)
    _state["blas"] = loaded
    return loaded


# OpenBLAS and MLX start their thread pools as they load. The kernel hands a process's SIGINT
# to any thread that does not block it, and only the main thread runs Python's handler: one
# handed to a pool thread leaves a main thread blocked in a read (a corpus that is a pipe)
# asleep, and Ctrl-C does nothing. So their threads are born with SIGINT blocked.
_interrupts = (signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
               if hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
               else None)
try:
    ensure_blas()
    import mlx.core as mx  # noqa: E402  (after OpenBLAS, on purpose)
finally:
    if _interrupts is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _interrupts)



# The main thread's MLX streams are released at exit, before the interpreter finalizes (atexit
# runs after it has joined its non-daemon threads, while Python still runs): see teardown.py.
atexit.register(release_streams)

__all__ = ["mx", "ensure_blas"]

"""A clean exit after MLX ran on threads: each thread releases its own MLX streams.

MLX keeps each thread's streams (on the CPU, command encoders holding the buffers of the work
in flight) in thread-local storage. Left there, they are destroyed by the C runtime after the
thread's Python code has ended (`__call_tls_dtors`), and releasing a buffer that came from
Python takes the GIL. If the main thread is finalizing the interpreter by then, `take_gil()`
ends that thread with a forced unwind, which crosses a noexcept destructor: `std::terminate`,
"terminate called without an active exception", status 134. `Thread.join()` does not prevent
it, as it returns before those destructors run. So every thread that ran MLX waits for its
work and destroys its streams itself, as its last act, while Python is alive (the MLX
maintainers' rule: `mx.clear_streams()` at the end of every thread, the main one included).

A thread cannot run MLX again once its streams are gone ("There is no Stream(cpu, 0) in
current thread"), so a pool's thread, which lives on to run other tasks, never runs MLX
itself: `on_own_thread` gives such a task a thread of its own, which ends with it.
"""
from __future__ import annotations

import contextvars
import functools
import sys
import threading


def release_streams() -> None:
    """Wait for this thread's MLX work, then destroy its streams (a no-op where MLX never loaded)."""
    mx = sys.modules.get("mlx.core")
    if mx is None:
        return
    mx.synchronize()
    mx.clear_streams()


def on_own_thread(fn):
    """Decorate a task that runs MLX from a pool's thread (Textual's thread workers): each call
    runs on a new thread, in the caller's context (contextvars: Textual's current worker), that
    releases its MLX streams as it ends; the caller waits for it and gets its result or error.
    Not a daemon: the interpreter joins it before it finalizes."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        context, out = contextvars.copy_context(), {}

        def body():
            try:
                out["value"] = context.run(fn, *args, **kwargs)
            except BaseException as e:   # noqa: B036 - raised again on the caller's thread
                out["error"] = e
            finally:
                release_streams()

        thread = threading.Thread(target=body, name=f"olifant-mlx-{fn.__name__}")
        thread.start()
        thread.join()
        if "error" in out:
            raise out["error"]
        return out.get("value")
    return run

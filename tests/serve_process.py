"""A `serve` command in a subprocess, as the tests that start one need it: a free loopback port,
and a wait until it answers /health (failing at once, with its stderr, if it exits first)."""
import socket
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(proc, url: str, timeout: float = 600.0) -> None:
    """Poll url/health until it answers 200 (a generous bound for a loaded machine, not a timing
    claim); AssertionError with the server's stderr if the process ends first."""
    import httpx

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.stderr.read()
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    raise AssertionError("timed out waiting for the server to start")


def stop(proc, sig=None) -> tuple[int, str]:
    """Stop the server as a service manager does (SIGTERM by default), killing it if it does
    not end within 120 s; (its exit status, its stderr)."""
    import signal

    proc.send_signal(sig or signal.SIGTERM)
    try:
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return code, proc.stderr.read()

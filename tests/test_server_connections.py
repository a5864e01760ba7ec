"""The connection layer on the real server (tiny model, loopback, raw sockets): idle and
slow-header sockets do not starve real requests (the issue's 2 s bound, measured over ~10 s),
on an open and on a keyed bind; header, body and keep-alive deadlines; the cap on waiting
connections; every error uvicorn/h11 would answer in plain text is OpenAI's JSON."""
import json
import select
import socket
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from server_helpers import DEFAULTS, LIMITS  # noqa: E402
from tiny_models import tiny_chat_verifier  # noqa: E402

from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import DrafterChoice  # noqa: E402
from olifant_mlx.server.connections import ConnectionLimits  # noqa: E402

KEY = "sk-test-connections-0123456789"

# A separate process (no GIL shared with the server) that keeps IDLE silent sockets and SLOW
# sockets sending a request's headers a byte a second open, reopening any the server closes; it
# prints how many the server closed.
ATTACKER = textwrap.dedent("""
    import select, socket, sys, time
    port, idle, slow, extra = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[5]
    seconds = float(sys.argv[4])
    head = b"GET /v1/models HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nX-Slow: " + b"a" * 100000
    def new(kind):
        s = socket.create_connection(("127.0.0.1", port)); s.setblocking(False); return [s, kind, 0]
    socks = [new("idle") for _ in range(idle)] + [new("slow") for _ in range(slow)]
    closed, end, tick = 0, time.monotonic() + seconds, 0.0
    print("ready", flush=True)
    while time.monotonic() < end:
        readable, _, _ = select.select([x[0] for x in socks], [], [], 0.2)
        for i, x in enumerate(socks):
            if x[0] in readable:
                try:
                    data = x[0].recv(65536)
                except OSError:
                    data = b""
                if not data:
                    x[0].close(); closed += 1; socks[i] = new(x[1])
        if time.monotonic() - tick >= 1.0:
            tick = time.monotonic()
            for i, x in enumerate(socks):
                if x[1] == "slow":
                    try:
                        x[0].send(head[x[2]:x[2] + 1]); x[2] += 1
                    except OSError:
                        x[0].close(); closed += 1; socks[i] = new("slow")
                elif extra == "unauthenticated" and i % 4 == 0:
                    try:   # a request without the key: answered 401, its connection closed
                        x[0].send(b"GET /v1/models HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n")
                    except OSError:
                        pass
    print("closed", closed, flush=True)
""")


@pytest.fixture(scope="module")
def verifier():
    return tiny_chat_verifier()


def serve(verifier, **kw):
    return start(verifier, DrafterChoice({}, "none"), DEFAULTS, LIMITS, **kw)


def attack(port, idle, slow, seconds, extra="-"):
    p = subprocess.Popen([sys.executable, "-c", ATTACKER, str(port), str(idle), str(slow), str(seconds), extra],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def answered_throughout(run, seconds, headers=None):
    """Real requests (a new connection each, as a fresh client makes) for `seconds`: the slowest
    time to a whole 200 answer."""
    worst, n, end = 0.0, 0, time.monotonic() + seconds
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 4}
    while time.monotonic() < end:
        t0 = time.monotonic()
        with httpx.Client(base_url=run.url, timeout=30, headers=headers) as c:
            r = c.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        worst, n = max(worst, time.monotonic() - t0), n + 1
        time.sleep(0.25)
    return worst, n


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
def test_idle_and_slow_header_sockets_do_not_starve_real_requests(verifier):
    """200 silent sockets + 50 sending headers a byte a second, for ~10 s (a 4 s header deadline,
    the default's 10 s made shorter for CI's time, closes them twice over; the attacker reopens
    them): every real request is answered within 2 s. On fa4fc7f every one was a plain-text 503
    (uvicorn counted idle connections)."""
    run = serve(verifier, connections=ConnectionLimits(header_timeout_s=4))
    try:
        p = attack(run.port, 200, 50, 11)
        try:
            worst, n = answered_throughout(run, 9.5)
        finally:
            out, _ = p.communicate(timeout=60)
        assert n >= 9 and worst < 2.0, (n, worst)
        closed = int(out.split()[-1])
        assert closed >= 250, out          # the deadline really closed them (and they came back)
    finally:
        run.stop()


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
def test_unauthenticated_sockets_hold_no_capacity_on_a_keyed_bind(verifier):
    """80 sockets without the key (silent, or asking without it: 401 and closed) for ~12 s: a
    request with the key is answered within 2 s throughout; a 401 closes its connection."""
    run = serve(verifier, api_key=KEY)
    try:
        s = socket.create_connection(("127.0.0.1", run.port))
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head, body = read_all(s).split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 401") and json.loads(body)["error"]["code"] == "invalid_api_key"
        p = attack(run.port, 80, 0, 14, "unauthenticated")
        try:
            worst, n = answered_throughout(run, 12, {"Authorization": f"Bearer {KEY}"})
        finally:
            p.communicate(timeout=60)
        assert n >= 10 and worst < 2.0, (n, worst)
    finally:
        run.stop()


def read_all(s, timeout=20.0):
    """Everything until the server closes (bounded: a test must not hang)."""
    s.settimeout(timeout)
    out = b""
    while True:
        data = s.recv(65536)
        if not data:
            return out
        out += data


def error_of(raw):
    head, body = raw.split(b"\r\n\r\n", 1)
    assert b"content-type: application/json" in head.lower(), head
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return int(head.split()[1]), err["code"]


@pytest.fixture(scope="module")
def strict(verifier):
    run = serve(verifier, connections=ConnectionLimits(header_timeout_s=1, body_timeout_s=1, max_waiting=5,
                                                         max_in_flight=1))
    yield run
    run.stop()


def connect(run, data=b""):
    s = socket.create_connection(("127.0.0.1", run.port))
    s.sendall(data)
    return s


def test_bad_http_is_a_json_400(strict):
    assert error_of(read_all(connect(strict, b"HELLO\r\n\r\n"))) == (400, "bad_http")
    big = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"a" * 40000      # headers over 16 KiB
    assert error_of(read_all(connect(strict, big))) == (400, "bad_http")


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_header_body_and_keep_alive_deadlines(strict):
    t0 = time.monotonic()
    assert read_all(connect(strict)) == b""                                   # silent: closed
    assert time.monotonic() - t0 < 10
    assert error_of(read_all(connect(strict, b"GET /hea"))) == (408, "header_timeout")
    post = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{")
    assert error_of(read_all(connect(strict, post))) == (408, "body_timeout")
    # a kept-alive connection that then trickles its next request's headers
    s = connect(strict, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    s.settimeout(20)
    assert s.recv(65536).startswith(b"HTTP/1.1 200")
    t0 = time.monotonic()
    try:
        for c in b"GET /health HTTP/1.1\r\n":
            s.sendall(bytes([c]))
            time.sleep(0.2)
    except OSError:
        pass
    assert error_of(read_all(s)) == (408, "header_timeout")
    assert time.monotonic() - t0 < 10


def test_the_oldest_waiting_connection_goes_and_capacity_is_a_json_503(strict):
    idle = [connect(strict) for _ in range(8)]
    time.sleep(0.3)                                      # well inside the 1 s header deadline
    readable, _, _ = select.select(idle, [], [], 0)
    assert [s in readable and s.recv(10) == b"" for s in idle] == [True] * 3 + [False] * 5   # cap 5: 3 oldest go
    for s in idle:
        s.close()
    held = connect(strict, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                           b"application/json\r\nContent-Length: 100\r\n\r\n{")
    time.sleep(0.2)                                      # the one request allowed in flight
    assert error_of(read_all(connect(strict, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))) == \
        (503, "over_capacity")
    held.close()

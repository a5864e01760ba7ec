"""The connection layer under the app: uvicorn's h11 protocol with deadlines, and OpenAI-shaped
errors for what uvicorn and h11 answer themselves.

uvicorn times out nothing before a connection's first request, and its `limit_concurrency`
counts every open connection: a few dozen sockets that send nothing made every real request a
plain-text 503. Here a connection must finish its request's headers within `header_timeout_s`
(from its opening, or from the end of its previous answer) and its body within `body_timeout_s`
of the headers; at most `max_waiting` connections may wait for headers at once (a new one closes
the oldest waiting one); and capacity is counted in requests being handled (`InFlight`), never in
connections. A request that already has its headers never waits behind sockets that have not.
"""
from __future__ import annotations

import collections
import json
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from olifant_mlx.server.schemas import error_body

PHRASES = {400: "Bad Request", 408: "Request Timeout", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take, and how many may wait; the defaults suit a local server."""
    header_timeout_s: float = 10.0      # request line and headers, from connect / the last answer
    body_timeout_s: float = 60.0        # the whole body, from the end of the headers
    keep_alive_s: int = 5               # an idle kept-alive connection is closed after this
    max_waiting: int = 512              # connections waiting for their headers (oldest closed)
    max_in_flight: int = 80             # requests being handled at once (then 503)


def error_json(status: int, message: str, code: str) -> bytes:
    return json.dumps(error_body(status, message, None, code), separators=(",", ":")).encode()


def raw_error(status: int, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection: for a client whose request h11 cannot
    (or can no longer) answer in order, just before the socket is closed."""
    body = error_json(status, message, code)
    head = (f"HTTP/1.1 {status} {PHRASES[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode() + body


def waiting_set(server_state) -> collections.OrderedDict:
    """The connections of one server that wait for headers, oldest first."""
    registry = getattr(server_state, "olifant_waiting", None)
    if registry is None:
        registry = server_state.olifant_waiting = collections.OrderedDict()
    return registry


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a header deadline, a body deadline, a cap on waiting
    connections and JSON error bodies. It follows h11's state of the client (IDLE: waiting for a
    request's headers; SEND_BODY: sending a body) after every event, so uvicorn's own code is
    not copied."""

    limits = ConnectionLimits()

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.limit_concurrency = None        # capacity is InFlight's, counted in requests
        self.deadline = None                 # (phase, TimerHandle) of the running deadline
        self.waiting = waiting_set(self.server_state)

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.follow_state()
        while len(self.waiting) > self.limits.max_waiting:
            oldest, _ = self.waiting.popitem(last=False)
            oldest.drop(None)

    def connection_lost(self, exc) -> None:
        self.stop_deadline()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if not self.transport.is_closing():
            self.follow_state()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self.follow_state()

    def follow_state(self) -> None:
        """Arm the deadline of the phase the client is in (none once its request is in)."""
        state = self.conn.their_state
        phase = "headers" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if self.deadline is not None and self.deadline[0] == phase:
            return
        self.stop_deadline()
        if phase is None:
            return
        seconds = self.limits.header_timeout_s if phase == "headers" else self.limits.body_timeout_s
        self.deadline = (phase, self.loop.call_later(seconds, self.expired, phase))
        if phase == "headers":
            self.waiting[self] = None

    def stop_deadline(self) -> None:
        if self.deadline is not None:
            self.deadline[1].cancel()
            self.deadline = None
        self.waiting.pop(self, None)

    def expired(self, phase: str) -> None:
        self.deadline = None
        self.waiting.pop(self, None)
        if phase == "body":
            seconds = self.limits.body_timeout_s
            self.drop((408, f"the request body did not arrive within {seconds:g} s", "body_timeout"))
        elif self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
            seconds = self.limits.header_timeout_s
            self.drop((408, f"the request's headers did not arrive within {seconds:g} s", "header_timeout"))
        else:
            self.drop(None)      # nothing was sent (or the last answer's keep-alive ran out): just close

    def drop(self, error) -> None:
        """Close the connection, first writing `error` (status, message, code) unless an answer
        to this request has begun."""
        self.stop_deadline()
        if self.transport.is_closing():
            return
        started = self.cycle is not None and self.cycle.response_started and self.conn.their_state is not h11.IDLE
        if error is not None and not started:
            self.transport.write(raw_error(*error))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        limit = self.config.h11_max_incomplete_event_size or h11._connection.DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        self.drop((400, f"not a valid HTTP/1.1 request (a bad request line or header, or headers "
                        f"over {limit // 1024} KiB)", "bad_http"))


class InFlight:
    """ASGI middleware: at most `limit` requests handled at once; more get a 503 in OpenAI's shape
    (uvicorn's own would be plain text, and would count idle connections)."""

    def __init__(self, app, limit: int):
        self.app, self.limit, self.count = app, limit, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.count >= self.limit:
            body = error_json(503, f"the server is handling {self.count} requests: retry in 1 s", "over_capacity")
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode()),
                                    (b"retry-after", b"1"), (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
            return
        self.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.count -= 1


def protocol_for(limits: ConnectionLimits) -> type:
    """GuardedH11 with these limits (uvicorn makes one protocol object per connection)."""
    return type("GuardedH11", (GuardedH11,), {"limits": limits})

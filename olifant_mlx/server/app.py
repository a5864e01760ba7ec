"""The HTTP side: an ASGI app (Starlette) in front of a GenerationQueue, served by uvicorn.

Endpoints: GET /health, GET /v1/models[/ID], POST /v1/completions, POST /v1/chat/completions,
answered as OpenAI answers them (JSON, or server-sent events `data: {...}` then `data: [DONE]`).
Every request passes the `Guard` first: the Host header (a loopback bind answers only to
loopback names, which stops DNS rebinding), the API key (Bearer, compared in constant time), the
body size; it also writes the access log (method, path, status, milliseconds: never a body) and
turns any unexpected exception into a 500 in OpenAI's shape whose log line names only the
exception's type and place. A request's body is read with a byte cap, parsed and checked
(`schemas`), then queued; a task watches the connection, so a client that leaves stops its
generation within one verifier pass.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import hmac
import json
import logging
import socket
import sys
import threading
import time
import traceback

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from olifant_mlx.server.config import Limits
from olifant_mlx.server.connections import ConnectionLimits, InFlight, protocol_for
from olifant_mlx.server.queue import Delta, Failed, Finished, GenerationQueue, Job, QueueClosed, QueueFull
from olifant_mlx.server.schemas import (ApiError, ChatBody, CompletionBody, Responder, error_body,
                                        new_id, parse_body, plan_chat, plan_completion, with_option_fields,
                                        with_sources)

log = logging.getLogger("olifant_mlx.server")
access = logging.getLogger("olifant_mlx.server.access")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"
PUBLIC = ("/health",)
INLINE_BODY = 64 << 10      # bodies up to this are parsed on the event loop (a thread hop costs more)
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1", "[::1]"}


def dumps(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def sse(obj) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


class OpenAIJSON(JSONResponse):
    def render(self, content) -> bytes:
        return dumps(content)


def error_response(e: ApiError) -> OpenAIJSON:
    return OpenAIJSON(e.body(), status_code=e.status, headers=e.headers)


async def send_error(send, status: int, message: str, code=None, headers=None) -> None:
    body = dumps(error_body(status, message, None, code))
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    hdrs += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


def where(e: BaseException) -> str:
    """The innermost frame of an exception, as file:line (no message: it may quote a prompt)."""
    tb = traceback.extract_tb(e.__traceback__)
    return f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"


def api_keys(api_key) -> tuple:
    """The keys a server accepts: none, one (text) or several (a list)."""
    if api_key is None:
        return ()
    return (api_key,) if isinstance(api_key, str) else tuple(api_key)


def key_index(keys: tuple, given: bytes) -> int | None:
    """Which of `keys` was given (its index), None for none; every key is compared, each in
    constant time, so the time says nothing of which one (or how much of one) matched."""
    found = None
    for i, key in enumerate(keys):
        if hmac.compare_digest(given, key) and found is None:
            found = i
    return found


class Guard:
    """Host, API key and body-size checks, the access log and the last-resort 500."""

    def __init__(self, app, api_key, loopback_only: bool, max_body_bytes: int,
                 access_log: bool = True):
        self.app = app
        self.keys = tuple(k.encode() for k in api_keys(api_key))    # none: no key asked
        self.loopback_only = loopback_only
        self.max_body = max_body_bytes
        self.access_log = access_log

    def refuse(self, scope):
        """(status, message, code, headers) when the request must not go further, else None."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if self.loopback_only:
            host = headers.get("host", "").lower()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in LOOPBACK_NAMES:
                return 400, "this server answers only to 127.0.0.1 / localhost (Host header)", "bad_host", None
        if self.keys and scope["path"] not in PUBLIC:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            owner = key_index(self.keys, given.strip().encode()) if scheme.lower() == "bearer" else None
            # the key's index goes with the request: its prompt cache is that key's alone
            scope.setdefault("state", {})["api_key"] = owner
            if owner is None:
                # closed after the answer: a client without the key holds no connection
                return (401, "a valid API key is needed: Authorization: Bearer KEY", "invalid_api_key",
                        {"WWW-Authenticate": "Bearer", "Connection": "close"})
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return 400, "Content-Length is not a number", "bad_length", None
            if int(length) > self.max_body:
                return (413, f"the request body is over this server's limit of {self.max_body:,} bytes",
                        "body_too_large", None)
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        state = {"status": None}

        async def tracked(message):
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
            await send(message)

        try:
            refused = self.refuse(scope)
            if refused is not None:
                await send_error(tracked, refused[0], refused[1], refused[2], refused[3])
            else:
                await self.app(scope, receive, tracked)
        except ClientDisconnect:
            pass
        except Exception as e:
            log.error("internal error: %s at %s", type(e).__name__, where(e))
            if state["status"] is None:
                await send_error(tracked, 500, "internal error on the server (see its log)", "server_error")
        finally:
            if self.access_log:
                access.info("%s %s %s %.1fms", scope.get("method", "?"), scope.get("path", "?")[:200],
                            state["status"] or "-", 1e3 * (time.perf_counter() - t0))


class Mailbox:
    """One request's events, from the worker thread to its handler on the event loop, batched.

    The worker appends under a lock and wakes the loop only when the handler has nothing
    pending, so events that pile up while the handler is busy (or the loop is slow to run)
    are taken in one wake-up and written in one send. With `wake_on_text` False (a whole
    JSON answer) text deltas wake nobody: the handler wakes for the start and the end only.
    """

    def __init__(self, loop, wake_on_text: bool = True):
        self._loop = loop
        self._wake_on_text = wake_on_text
        self._items = collections.deque()
        self._lock = threading.Lock()
        self._woken = False
        self._ready = asyncio.Event()

    def put(self, event) -> None:
        """From any thread; raises RuntimeError when the loop is closed (the requester left)."""
        with self._lock:
            self._items.append(event)
            if self._woken or (not self._wake_on_text and isinstance(event, Delta)):
                return
            self._woken = True
        self._loop.call_soon_threadsafe(self._ready.set)

    async def take(self) -> list:
        """Every event that is there, waiting for one if none is."""
        while True:
            with self._lock:
                items = list(self._items)
                self._items.clear()
                self._woken = False
            if items:
                return items
            self._ready.clear()
            await self._ready.wait()


class Api:
    """The routes over one GenerationQueue (started: its ModelInfo is known). `keys`: the API
    keys, in the Guard's order; `access`: {key: server.access.Entry} of an access file's keys
    (the others, and a server without keys, see what the server's --matter and libraries let
    them: server.access)."""

    def __init__(self, queue: GenerationQueue, defaults, limits: Limits, fingerprint: str, keys=(),
                 access=None):
        from olifant_mlx.audit import key_id
        from olifant_mlx.server.access import Access

        self.queue, self.defaults, self.limits = queue, defaults, limits
        # the request bodies with every option's field, as the option table is when the server
        # is made (an option registered after this module was imported included)
        self.bodies = {"chat": with_option_fields(ChatBody), "completion": with_option_fields(CompletionBody)}
        self.info = queue.info
        self.fingerprint = fingerprint
        self.created = int(time.time())
        libraries = self.libraries()
        access = access or {}
        # what each key (by the Guard's index) may see, its defaults, and its name in the audit log
        self.access = [access[k].access(defaults, libraries) if k in access else
                       Access.of_server(defaults, libraries) for k in keys]
        self.ids = [a.id or key_id(k) for a, k in zip(self.access, keys)]
        self.open = Access.of_server(defaults, libraries)        # a server without keys
        self.key_defaults = [a.defaults(defaults) for a in self.access]
        self.open_defaults = self.open.defaults(defaults)

    def libraries(self) -> set:
        """The libraries named when the server started: --precedents, --sources, and those its
        drafters draft from (of every served verifier)."""
        named = {self.defaults.precedents, self.defaults.sources}
        named |= {lib for _, _, i in self.queue.models.values() for _, lib in i.libraries}
        return {n for n in named | {lib for _, lib in self.info.libraries} if n}

    def access_of(self, request):
        """(Access, its request defaults, its audit id) of the request's API key."""
        owner = request.scope.get("state", {}).get("api_key")
        if owner is None or not self.access:
            return self.open, self.open_defaults, None
        return self.access[owner], self.key_defaults[owner], self.ids[owner]

    def served(self) -> dict:
        """{id: ModelInfo} of the verifiers served (the default first)."""
        return {i.id: i for _, _, i in self.queue.models.values()} or {self.info.id: self.info}

    def info_for(self, name):
        """The ModelInfo a request's "model" names (none: the default verifier); an unknown one
        is a 404 naming those served."""
        if name is None:
            return self.info
        served = self.served()
        if name not in served:
            raise ApiError(404, f"model {name[:100]!r} is not served here: this server has "
                                f"{', '.join(repr(m) for m in served)} (GET /v1/models; `serve "
                                f"--models` adds more)", "model", "model_not_found")
        return served[name]

    def model_object(self, i=None) -> dict:
        i = i or self.info
        return {"id": i.id, "object": "model", "created": self.created, "owned_by": "olifant_mlx",
                "context_length": i.context_length, "drafters": list(i.drafters),
                "default_drafter": i.default_drafter, "energy_meter": i.meter_label}

    async def health(self, request):
        return OpenAIJSON({"status": "ok", "queue": self.queue.status()})

    async def models(self, request):
        return OpenAIJSON({"object": "list", "data": [self.model_object(i) for i in self.served().values()]})

    async def model(self, request):
        return OpenAIJSON(self.model_object(self.info_for(request.path_params["model"])))

    async def chat(self, request):
        return await self.generate(request, self.bodies["chat"], plan_chat, "chat")

    async def completions(self, request):
        return await self.generate(request, self.bodies["completion"], plan_completion, "completion")

    async def generate(self, request, body, planner, kind):
        """A request checked, planned over its key's defaults and put behind its key's wall
        (server.access), then run; a refusal is a line of the audit log too."""
        access, defaults, key = self.access_of(request)
        who = {"key": key, "endpoint": kind}
        req = None
        try:
            req = await self.parse(request, body)
            info = self.info_for(req.model)
            who["model"] = info.id
            plan = planner(req, info, defaults, self.limits)
            plan = dataclasses.replace(plan, options=access.wall(plan.options, dict(info.libraries).get(plan.drafter)))
            audit = self.queue.audit
            if audit is not None and audit.failed:      # fail closed: no request goes unlogged
                raise ApiError(503, "the server's audit log cannot be written: no request is served until it "
                                    "can (see the server's log)", code="audit_unavailable")
        except ApiError as e:
            await self.refused(who, e, req)
            raise
        return await self.run(request, plan, who)

    async def refused(self, who: dict, e: ApiError, req=None) -> None:
        """The audit log's line of a request refused before it was queued: who, the status and
        code, and what it asked for (a matter, a library), never its text."""
        audit = self.queue.audit
        if audit is None:
            return
        from olifant_mlx.audit import AuditError

        asked = {f: str(getattr(req, f))[:100] for f in ("matter", "precedents", "sources")
                 if getattr(req, f, None) is not None}
        line = {**who, "status": e.status, "outcome": "refused", "reason": e.code or "invalid_request",
                "param": e.param, "asked": asked}
        try:
            await run_in_threadpool(audit.append, line)
        except AuditError as err:
            log.error("%s", err)

    async def parse(self, request, model):
        """The body, read with its cap, then parsed and validated: a small one here (well under
        a millisecond), a large one off the event loop (it takes a while, and other answers keep
        streaming meanwhile)."""
        raw = await self.body(request)
        if len(raw) <= INLINE_BODY:
            return parse_body(raw, model)
        return await run_in_threadpool(parse_body, raw, model)

    async def body(self, request: Request) -> bytes:
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise ApiError(415, "send the body as JSON with Content-Type: application/json",
                           code="unsupported_media_type")
        chunks, n = [], 0
        async for chunk in request.stream():
            n += len(chunk)
            if n > self.limits.max_body_bytes:
                raise ApiError(413, f"the request body is over this server's limit of "
                                    f"{self.limits.max_body_bytes:,} bytes", code="body_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    async def run(self, request: Request, plan, who: dict | None = None):
        events = Mailbox(asyncio.get_running_loop(), wake_on_text=plan.stream)
        job = Job(new_id(plan.kind), plan.prompt, plan.options, plan.drafter,
                  time.monotonic() + plan.timeout_s, events.put, plan.explicit_max, plan.param, plan.model,
                  owner=request.scope.get("state", {}).get("api_key"), prediction=plan.prediction,
                  prediction_k=plan.prediction_k, audit=who)
        try:
            self.queue.submit(job)
        except (QueueFull, QueueClosed) as e:
            error = ApiError(429, f"the server is busy ({self.queue.size} requests waiting): retry in "
                                  f"{e.retry_after} s", code="queue_full",
                             headers={"Retry-After": str(e.retry_after)}) if isinstance(e, QueueFull) else \
                ApiError(503, "the server is shutting down", code="shutdown")
            await self.refused(who or {}, error)
            raise error from None
        watcher = asyncio.create_task(self.watch(request, job, events))
        streaming = ended = False
        try:
            try:
                batch = await asyncio.wait_for(events.take(), max(0.0, job.deadline - time.monotonic()))
            except asyncio.TimeoutError:
                self.queue.cancel(job, "deadline")
                raise ApiError(504, "the request's deadline passed while it waited in the queue",
                               "timeout", "deadline_exceeded") from None
            first = batch[0]
            if isinstance(first, Failed):
                ended = True
                raise ApiError(first.status, first.message, first.param, first.code)
            responder = Responder(plan, self.fingerprint)
            if plan.stream:
                streaming = True
                return StreamingResponse(self.events(job, events, batch[1:], responder, watcher),
                                         media_type="text/event-stream", headers=SSE_HEADERS)
            text, batch = [], batch[1:]
            while True:
                for event in batch:
                    if isinstance(event, Delta):
                        text.append(event.text)
                    elif isinstance(event, Finished):
                        ended = True
                        return OpenAIJSON(responder.whole("".join(text), event.finish_reason, event.usage,
                                                          event.sources, event.precedents))
                    elif isinstance(event, Failed):
                        ended = True
                        raise ApiError(event.status, event.message, event.param, event.code)
                batch = await events.take()
        finally:
            if not streaming:
                watcher.cancel()
                if not ended:       # this handler is going away (cancelled): so does its job
                    self.queue.cancel(job, "disconnected")

    async def watch(self, request: Request, job: Job, events: Mailbox):
        """Wait for the client to leave; then stop its job (now if it waits, after this pass
        if it runs) and wake the handler."""
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                self.queue.cancel(job, "disconnected")
                events.put(Failed(499, "the client closed the connection", "client_closed"))
                return

    async def events(self, job: Job, events: Mailbox, batch: list, responder: Responder, watcher):
        """The server-sent events of a streamed answer: every event taken in one wake-up goes
        out in one write (the same bytes as one write per event)."""
        finished, held = False, [] if responder.plan.tools else None   # with tools: is it a call?
        try:
            out = [sse(responder.chunk("", first=True))] if responder.plan.kind == "chat" else []
            while True:
                for event in batch:
                    if isinstance(event, Delta):
                        if held is None:
                            out.append(sse(responder.chunk(event.text)))
                        else:
                            held.append(event.text)
                    elif isinstance(event, Finished):
                        finished = True
                        if held is None:
                            last = responder.chunk(None, event.finish_reason)
                        else:
                            *calls, last = responder.last_chunks("".join(held), event.finish_reason)
                            out += [sse(c) for c in calls]
                        if responder.plan.include_usage:   # sources go with the usage ...
                            out += [sse(last), sse(responder.usage_chunk(event.usage, event.sources,
                                                                         event.precedents))]
                        else:                              # ... else with the finish_reason
                            out.append(sse(with_sources(last, event.sources, event.precedents)))
                        out.append(DONE)
                        break
                    elif isinstance(event, Failed):
                        finished = True
                        out += [sse(error_body(event.status, event.message, event.param, event.code)), DONE]
                        break
                if out:
                    yield b"".join(out)
                    out = []
                if finished:
                    return
                batch = await events.take()
        finally:
            watcher.cancel()
            if not finished:
                self.queue.cancel(job, "disconnected")


async def _api_error(request, exc: ApiError):
    return error_response(exc)


async def _http_error(request, exc: HTTPException):
    message = {404: "no such endpoint: this server has GET /health, GET /v1/models, POST "
                    "/v1/completions, POST /v1/chat/completions",
               405: f"{request.method} is not allowed on {request.url.path[:100]}"}.get(
        exc.status_code, exc.detail)
    return error_response(ApiError(exc.status_code, message, headers=dict(exc.headers or {})))


async def _server_error(request, exc: Exception):
    return error_response(ApiError(500, "internal error on the server (see its log)", code="server_error"))


def create_app(queue: GenerationQueue, defaults, limits: Limits, api_key=None,
               loopback_only: bool = True, access_log: bool = True, access=None):
    """The ASGI app for a started queue. `api_key`: None, a key or a list of keys (each its own
    prompt cache); `access`: {key: server.access.Entry} of the keys an access file binds to their
    own matters and libraries (the others get the server's). `loopback_only`: answer only
    requests addressed to a loopback name (a server bound to 127.0.0.1 / ::1)."""
    from olifant_mlx import __version__

    api = Api(queue, defaults, limits, f"olifant_mlx-{__version__}", api_keys(api_key), access)
    routes = [Route("/health", api.health, methods=["GET"]),
              Route("/v1/models", api.models, methods=["GET"]),
              Route("/v1/models/{model:path}", api.model, methods=["GET"]),
              Route("/v1/completions", api.completions, methods=["POST"]),
              Route("/v1/chat/completions", api.chat, methods=["POST"])]
    app = Starlette(routes=routes, exception_handlers={ApiError: _api_error, HTTPException: _http_error,
                                                        Exception: _server_error})
    app.state.api = api
    return Guard(app, api_key, loopback_only, limits.max_body_bytes, access_log)


# ---- serving -----------------------------------------------------------------------------

def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the model loads (a taken port fails at once). Made
    with proto IPPROTO_TCP, as asyncio's own are: asyncio sets TCP_NODELAY only on a socket
    that says it is TCP, and without it a short answer's last segment waits for the client's
    delayed ACK (Nagle), some 40 ms a request on Linux."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)     # accepted sockets inherit it
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


def uvicorn_server(app, limits: Limits, connections: ConnectionLimits | None = None):
    """uvicorn on our h11 protocol (deadlines, JSON errors; never httptools, which has neither)
    and the in-flight cap: its own `limit_concurrency` counts idle connections too."""
    import uvicorn

    connections = connections or ConnectionLimits(max_in_flight=limits.queue_size + 64)
    config = uvicorn.Config(InFlight(app, connections.max_in_flight), log_config=None, access_log=False,
                            server_header=False, proxy_headers=False, lifespan="off", ws="none",
                            http=protocol_for(connections), limit_concurrency=None,
                            timeout_keep_alive=connections.keep_alive_s, timeout_graceful_shutdown=5)
    # uvicorn's own access log has the query string and the client's address: ours replaces it
    quiet = logging.getLogger("uvicorn.access")
    quiet.handlers, quiet.propagate, quiet.disabled = [], False, True
    return uvicorn.Server(config)


class Running:
    """A server on its own thread (tests, benchmarks, embedding): `url`, `queue`, `stop()`."""

    def __init__(self, app, sock: socket.socket, limits: Limits, queue: GenerationQueue | None = None,
                 connections: ConnectionLimits | None = None):
        self.server = uvicorn_server(app, limits, connections)
        self.queue = queue
        host, port = sock.getsockname()[:2]
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        self.port = port
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       name="olifant-http", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self.server.started:
            raise RuntimeError("the HTTP server did not start")

    def stop(self):
        self.server.should_exit = True
        if self.queue is not None:
            self.queue.close()
        self.thread.join(10)


def own_audit(defaults):
    """(the requests' defaults, the audit log): a server writes its audit log itself, a line per
    request with its API key's id (options.audit_log, as serve's --audit-log gives it), so its
    Session writes none (the requests' options have no audit_log)."""
    from olifant_mlx.audit import open_log

    if not defaults.audit_log:
        return defaults, None
    return defaults.replace(audit_log=None), open_log(defaults.audit_log)


def start(verifier, choice, defaults=None, limits: Limits | None = None, api_key=None,
          host: str = "127.0.0.1", port: int = 0, meter=None, access_log: bool = True,
          others=(), connections: ConnectionLimits | None = None, access=None) -> Running:
    """A whole server on threads: the worker (over `verifier`, a Verifier or a loader, and the
    `others` a request may name in "model") and uvicorn on `host`:`port` (0: a free port). The
    bind rule of `check_bind` applies; `access` binds keys to their matters and libraries
    (create_app), `defaults.audit_log` is the server's audit log (own_audit)."""
    from olifant_mlx.engine.session import GenerationOptions
    from olifant_mlx.server.config import LOOPBACK, check_bind
    from olifant_mlx.server.queue import make_setup, prompt_cache

    defaults, audit = own_audit(defaults or GenerationOptions(max_tokens=(limits or Limits()).default_max_tokens))
    limits = limits or Limits()
    host = check_bind(host, api_key)
    sock = bind(host, port)
    queue = GenerationQueue(make_setup(verifier, choice, defaults, meter), limits.queue_size,
                            [make_setup(v, choice, defaults, meter) for v in others], prompt_cache(limits),
                            audit=audit, parallel=limits.parallel, max_batch=limits.max_batch)
    try:
        queue.start()
    except BaseException:
        sock.close()
        raise
    app = create_app(queue, defaults, limits, api_key, host in LOOPBACK, access_log, access)
    return Running(app, sock, limits, queue, connections)


class QuietErrors(logging.Filter):
    """uvicorn's own log lines without exception texts or request bytes (privacy)."""

    def filter(self, record):
        if record.exc_info:
            e = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(e).__name__})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


class CurrentStderr(logging.StreamHandler):
    """Writes to sys.stderr as it is when a line is logged, not as it was when the server started:
    a server thread may outlive a capture of stderr (a test's, a redirect's) that is then closed."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def configure_logging(level=logging.INFO) -> None:
    handler = CurrentStderr()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    for name in ("olifant_mlx.server", "uvicorn.error"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.setLevel(level if name != "uvicorn.error" else logging.WARNING)
        lg.propagate = False
    logging.getLogger("uvicorn.error").addFilter(QuietErrors())

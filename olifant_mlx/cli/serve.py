"""`serve`: an OpenAI-compatible HTTP server on the Session API (olifant_mlx.server).

Every argument is checked, the drafters' specs and draft models included, and the port is
bound, before the verifier loads; then the worker thread loads it and uvicorn serves.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys

from olifant_mlx.bindings import BINDINGS, SERVE, bound, request_field
from olifant_mlx.cli.common import (MODEL_HELP, add_adapter_arg, add_option_args, add_weights_arg, check_adapter_path,
                                    check_draft_model, check_library, check_precedents, energy_help, flag_help,
                                    open_meter, options_from)
from olifant_mlx.cli.train import byte_size
from olifant_mlx.server.config import Limits

KEY_ENV = "OLIFANT_API_KEY"
EXTRA = "the server needs its extra: pip install 'olifant_mlx[server]'"
# serve's own help for an option's flag (the others: generate's, and the request field that overrides it)
SERVE_HELPS = {"k": "draft tokens per pass unless a request says (default %(default)s)",
               "max_tokens": "tokens per answer when a request does not say (default %(default)s)",
               "temperature": "temperature when a request does not say (default 0: greedy)"}


def require_stack() -> None:
    """The web stack is an optional extra: say how to get it, before anything loads."""
    missing = []
    for name in ("starlette", "uvicorn", "pydantic"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ValueError(f"{', '.join(missing)} not installed: {EXTRA}")


def prepare(args):
    """Everything checked before the verifier loads. Returns (choice, defaults, limits, host,
    api_key, meter, access, audit, socket): `access` the access file's {key: Entry}, `audit` the
    audit log (an audit.AuditLog, or None), which the server writes itself (the requests'
    defaults have none)."""
    require_stack()
    from olifant_mlx.server.app import bind, own_audit
    from olifant_mlx.server.config import check_api_keys, check_bind, check_port, parse_drafters

    defaults = options_from(args)        # serve's option flags: the requests' defaults ...
    limits = Limits(max_body_bytes=args.max_body_bytes, default_max_tokens=args.max_tokens,
                    max_tokens=args.max_tokens_limit, queue_size=args.queue_size, parallel=args.parallel,
                    max_batch=args.max_batch,
                    timeout_s=args.timeout, prompt_cache_size=args.prompt_cache_size,
                    prompt_cache_bytes=args.prompt_cache_bytes)
    keys = list(args.api_key or ())
    if not keys and not args.api_key_file and os.environ.get(KEY_ENV):
        keys = [os.environ[KEY_ENV]]
    keys += read_key_file(args.api_key_file) if args.api_key_file else []
    access = read_access_file(args.access_file) if args.access_file else {}
    api_key = check_api_keys(keys + list(access)) or None
    host = check_bind(args.host, api_key)
    port = check_port(args.port)
    choice = parse_drafters(defaults.draft, args.drafters)
    defaults = defaults.replace(draft=None)      # ... but the drafter: a request names one of `choice`
    check_adapter_path(args.adapter_path)
    models = served_models(args.model, args.models)
    for spec in choice.specs.values():
        if spec.model_file:
            for model in models:        # every served verifier drafts with every drafter
                check_draft_model(spec.model_file, model)
    check_libraries(defaults, args, models, access)
    if defaults.audit_log:
        from olifant_mlx.audit import check_path

        check_path(defaults.audit_log)      # a FIFO, a folder, a torn last line: refused now
    defaults, audit = own_audit(defaults)
    meter = open_meter(args.energy)
    sock = bind(host, port)
    return choice, defaults, limits, host, api_key, meter, access, audit, sock


def check_libraries(defaults, args, models, access=None) -> None:
    """The libraries serve's --sources and --precedents and an access file name, each checked
    against every served verifier's tokenizer before any weights load."""
    from olifant_mlx.library import LibraryError

    for name in {n for n in (defaults.sources, defaults.precedents) if n}:
        for model in models:
            check_library(name, model)
    for name in sorted({n for entry in (access or {}).values() for n in entry.libraries or ()}):
        for model in models:
            try:
                check_library(name, model)
            except LibraryError as e:
                raise LibraryError(f"--access-file {args.access_file}: {e}") from None
    if defaults.precedents:
        check_precedents(defaults, args)


def serve_help(name: str) -> str | None:
    """An option's serve flag's help: serve's own, else generate's and the request field that
    overrides it."""
    help = flag_help(name)
    if name in SERVE_HELPS or help is None:
        return SERVE_HELPS.get(name)
    if not BINDINGS[name].clients:          # the server's own: no request sets it
        return help
    if BINDINGS[name].named:                # a request names one of the server's choices
        return f"{help}; requests get it as 'default'"
    return f"{help}; a request's default (its field \"{request_field(name)}\")"


def cmd_serve(args) -> int:
    require_stack()
    from olifant_mlx.server.app import configure_logging, create_app, uvicorn_server
    from olifant_mlx.server.config import LOOPBACK
    from olifant_mlx.server.queue import GenerationQueue, make_setup, prompt_cache
    from olifant_mlx.verifier import load_verifier

    choice, defaults, limits, host, api_key, meter, access, audit, sock = prepare(args)
    configure_logging()
    shown = f"[{host}]" if ":" in host else host
    port = sock.getsockname()[1]
    sys.stderr.write(f"loading {args.model or 'the default verifier'}"
                     f"{' and ' + ', '.join(args.models) if args.models else ''} ...\n")
    others = [make_setup(functools.partial(load_verifier, name), choice, defaults, meter) for name in args.models]
    queue = GenerationQueue(make_setup(lambda: load_verifier(args.model, adapter_path=args.adapter_path),
                                       choice, defaults, meter), limits.queue_size, others, prompt_cache(limits),
                            audit=audit, parallel=limits.parallel, max_batch=limits.max_batch)

    def stopped(*_):
        """A service manager's SIGTERM while the verifier loads: a normal exit with status 0
        through the `finally` below, which stops and joins the worker (it releases its MLX
        streams as it ends: olifant_mlx.teardown). Ctrl-C is the 130 of every command."""
        raise SystemExit(0)

    # A command started with `&` from a script inherits SIGINT ignored, and uvicorn restores the
    # handler it found before re-raising the SIGINT it caught: that one vanished (status 0), and
    # a Ctrl-C while the verifier loaded did nothing. serve stops on SIGINT whatever it inherited.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, stopped)
    served, caught = None, []
    try:
        info = queue.start()
        app = create_app(queue, defaults, limits, api_key, loopback_only=host in LOOPBACK,
                         access_log=not args.no_access_log, access=access)
        served = f"http://{shown}:{port}/v1"
        libraries = sorted(app.app.state.api.libraries())     # the only ones a request may reach
        sys.stderr.write(f"serving {info.id} on {served} (drafters: "
                         f"{', '.join(info.drafters)}; default {info.default_drafter}; energy: "
                         f"{info.meter_label}{'; libraries: ' + ', '.join(libraries) if libraries else ''})"
                         f"{'; API key required' if api_key else ''}\n")
        server = uvicorn_server(app, limits)
        server.capture_signals = functools.partial(stop_signals, server, caught)
        server.run(sockets=[sock])
    finally:
        queue.close()
        sock.close()
        if served:                      # a service manager's log, or the terminal, says it ended
            sys.stderr.write(f"stopped serving {served}\n")
    if signal.SIGINT in caught:
        raise KeyboardInterrupt         # main's "interrupted", status 130
    return 0


@contextlib.contextmanager
def stop_signals(server, caught: list):
    """uvicorn's signal capture (`Server.capture_signals`), made ours: SIGINT and SIGTERM end its
    loop (a second SIGINT: without waiting for open connections) and are kept in `caught`; the
    handlers before it are put back and nothing is raised again, so what the command ends with
    depends only on what came (cmd_serve: SIGINT 130, SIGTERM 0), never on what the shell that
    started it left as SIGINT's disposition."""
    def handle(sig, _frame):
        caught.append(sig)
        if sig == signal.SIGINT and server.should_exit:
            server.force_exit = True
        server.should_exit = True

    before = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def read_key_file(path) -> list:
    """The keys of an API key file: one a line; blank lines and lines from '#' are skipped."""
    from olifant_mlx.files import read_regular
    from olifant_mlx.server.config import ConfigError, check_api_key

    try:
        text = read_regular(path).decode("utf-8")
    except (OSError, ValueError) as e:
        raise ConfigError(f"--api-key-file {path}: cannot be read ({e})") from None
    keys = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not keys:
        raise ConfigError(f"--api-key-file {path}: no key in it (one a line)")
    return [check_api_key(k, f"every key in --api-key-file {path} (line {i + 1})") for i, k in enumerate(keys)]


def read_access_file(path) -> dict:
    """{key: server.access.Entry} of an access file: each key bound to its matters and libraries."""
    from olifant_mlx.files import read_regular
    from olifant_mlx.server.access import parse_access
    from olifant_mlx.server.config import ConfigError

    try:
        text = read_regular(path).decode("utf-8")
    except (OSError, ValueError) as e:
        raise ConfigError(f"--access-file {path}: cannot be read ({e})") from None
    return parse_access(text, path)


MAX_MODELS = 4      # verifiers one server holds in memory at once (all loaded at start)
MAX_BATCH_HELP = ("requests whose verifier passes run as one pass, each with its own drafts and KV cache "
                  "(default: as many as this machine's pass costs say pay, measured once per verifier "
                  "and kept; 1: one request's pass at a time)")


def served_models(model, others) -> list:
    """The verifiers a server serves: --model first, then --models (at most MAX_MODELS in all,
    none twice), each checked as a name before anything loads."""
    from olifant_mlx.server.config import ConfigError
    from olifant_mlx.verifier import default_model

    names = [model or default_model()] + list(others or ())
    if len(names) > MAX_MODELS:
        raise ConfigError(f"--models: a server holds at most {MAX_MODELS} verifiers in memory "
                          f"(--model and {MAX_MODELS - 1} more), got {len(names)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"--models names a verifier twice: {', '.join(names)}")
    for name in names[1:]:
        if name.lower().endswith(".gguf") and not os.path.isfile(name):
            raise ConfigError(f"--models {name}: the GGUF file does not exist")
    return names


def add_serve(s):
    s.add_argument("--model", help=MODEL_HELP)
    add_weights_arg(s)
    d = s.add_mutually_exclusive_group()
    add_option_args(d, ["draft"], draft=serve_help("draft"))      # with --draft-model, its alias
    d.add_argument("--drafters", nargs="+", metavar="NAME=SPEC",
                   help="named drafters a request chooses with \"draft\": NAME (the first is the "
                        "default; \"none\" is always there), e.g. legal=adaptive:hybrid:models/legal.olif")
    s.add_argument("--models", nargs="+", default=[], metavar="MODEL",
                   help=f"more verifiers a request may name in \"model\" (aliases, GGUF files, folders, "
                        f"hub ids; all loaded at start, at most {MAX_MODELS} with --model); --model "
                        f"is the default")
    add_adapter_arg(s)
    # the generation options' flags (olifant_mlx.bindings: spellings; engine.options: type, checks),
    # said as a request's defaults: -k here, -m with the limits, the others after them
    placed = ["draft", "k", "max_tokens"]        # the rest follow the server's own flags
    add_option_args(s, ["k"], k=serve_help("k"))
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs --api-key)")
    s.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    s.add_argument("--api-key", metavar="KEY", action="append",
                   help=f"require Authorization: Bearer KEY (also ${KEY_ENV}, which keeps it out "
                        f"of the process list); repeat it for several clients: each key's prompt "
                        f"cache is its own")
    s.add_argument("--api-key-file", metavar="FILE",
                   help="API keys, one a line (a client each, with its own prompt cache; '#' starts "
                        "a comment): with or instead of --api-key")
    s.add_argument("--access-file", metavar="FILE",
                   help="API keys bound to their own matters and libraries: one JSON object a line, "
                        "{\"key\": KEY, \"id\": NAME, \"matters\": [...], \"libraries\": [...]} "
                        "(docs/server.md#what-a-key-can-see); with or instead of --api-key")
    s.add_argument("--energy", metavar="BACKEND", help=energy_help())
    add_option_args(s, ["max_tokens"], max_tokens=serve_help("max_tokens"))
    s.set_defaults(max_tokens=Limits.default_max_tokens)
    s.add_argument("--max-tokens-limit", type=int, default=Limits.max_tokens,
                   help="the most tokens a request may ask for (default %(default)s)")
    rest = [name for name in bound(SERVE) if name not in placed]
    add_option_args(s, rest, **{name: serve_help(name) for name in rest})
    s.add_argument("--queue-size", type=int, default=Limits.queue_size,
                   help="requests that may wait behind the running ones; more get 429 (default %(default)s)")
    s.add_argument("--parallel", type=int, default=Limits.parallel, metavar="N",
                   help="requests generated at once, a verifier pass of each in turn, each with its own "
                        "drafting (default %(default)s: one at a time)")
    s.add_argument("--max-batch", type=int, default=Limits.max_batch, metavar="N", help=MAX_BATCH_HELP)
    s.add_argument("--timeout", type=float, default=Limits.timeout_s,
                   help="seconds a request may take, queue included; a request may ask for "
                        "less with \"timeout\" (default 600)")
    s.add_argument("--max-body-bytes", type=int, default=Limits.max_body_bytes,
                   help="largest request body (default 4 MiB)")
    s.add_argument("--prompt-cache-size", type=int, default=Limits.prompt_cache_size, metavar="N",
                   help="KV caches kept across requests, least recently used evicted first: a "
                        "request prefills only its prompt past the longest prefix it shares with one "
                        "(default %(default)s; 0 keeps none)")
    s.add_argument("--prompt-cache-bytes", type=byte_size, default=Limits.prompt_cache_bytes, metavar="SIZE",
                   help="their memory in all, e.g. 512M (default 1G; 0: no bound but the count)")
    s.add_argument("--no-access-log", action="store_true",
                   help="no access log on stderr (it has method, path, status and time only)")
    s.set_defaults(func=cmd_serve)

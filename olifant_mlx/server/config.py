"""What a server is configured with, checked before any model loads: the address and API key
rule, the named drafters, the request limits. Nothing here imports the web stack."""
from __future__ import annotations

import ipaddress
import re
import string
from dataclasses import dataclass, field

# the addresses a server may bind without an API key: this machine's own loopback, by name
LOOPBACK = ("127.0.0.1", "::1", "localhost")
DRAFTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
RESERVED = ("none",)          # always there: plain decoding
DEFAULT_NAME = "default"      # the drafter of --draft SPEC
KEY_CHARS = set(string.ascii_letters + string.digits + string.punctuation)


class ConfigError(ValueError):
    """A server argument that cannot work; the message names it."""


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; beyond these it is answered 400 (413 for the body)."""
    max_body_bytes: int = 4 << 20       # a request body (JSON), in bytes
    default_max_tokens: int = 512       # when a request does not say (cut to the context)
    max_tokens: int = 4096              # the most a request may ask for
    max_stop: int = 16                  # stop sequences per request (OpenAI allows 4)
    max_stop_chars: int = 256           # characters per stop sequence
    max_messages: int = 1024            # chat messages per request
    queue_size: int = 16                # requests waiting behind the running ones (then 429)
    parallel: int = 1                   # requests generated at once, a verifier pass of each in turn
    max_batch: int | None = None        # requests whose passes run as one (None: the pass-cost curve's)
    timeout_s: float = 600.0            # a request's deadline: queue wait plus generation
    prompt_cache_size: int = 10         # KV caches kept across requests (mlx-lm's default); 0: none
    prompt_cache_bytes: int = 1 << 30   # their memory in all (0: no bound but the count)

    def __post_init__(self):
        def whole(name, lo):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ConfigError(f"{name.replace('_', ' ')} must be a whole number >= {lo}, got {v!r}")

        whole("max_body_bytes", 1024)
        whole("default_max_tokens", 1)
        whole("max_tokens", 1)
        whole("max_stop", 0)
        whole("max_stop_chars", 1)
        whole("max_messages", 1)
        whole("queue_size", 0)
        whole("parallel", 1)
        if self.max_batch is not None:
            whole("max_batch", 1)
        whole("prompt_cache_size", 0)
        whole("prompt_cache_bytes", 0)
        if self.default_max_tokens > self.max_tokens:
            raise ConfigError(f"the default max tokens ({self.default_max_tokens}) is above the "
                              f"limit ({self.max_tokens})")
        t = self.timeout_s
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 < t <= 86400:
            raise ConfigError(f"timeout must be a number of seconds in (0, 86400], got {t!r}")


@dataclass(frozen=True)
class DrafterChoice:
    """The drafters a request may name: name -> spec text, and the default one."""
    specs: dict = field(default_factory=dict)      # name -> DrafterSpec (or spec text)
    default: str = "none"

    @property
    def names(self) -> list:
        return list(self.specs) + [n for n in RESERVED if n not in self.specs]


def check_bind(host: str, api_key: str | None) -> str:
    """The address to bind (localhost means 127.0.0.1). Anything but this machine's loopback
    (127.0.0.1, ::1) needs an API key; a host name other than localhost is refused, since
    what it resolves to can change."""
    if not isinstance(host, str) or not host:
        raise ConfigError("--host needs an address, e.g. 127.0.0.1")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        addr = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise ConfigError(f"--host {host!r} is not an IP address: give one (127.0.0.1, the "
                          f"default, or e.g. 0.0.0.0 with --api-key)") from None
    host = str(addr)
    if host not in LOOPBACK and not api_key:
        raise ConfigError(f"--host {host} accepts connections from other machines: it needs "
                          f"--api-key KEY (or $OLIFANT_API_KEY); the default 127.0.0.1 does not")
    return host


def check_api_key(key: str | None, where: str = "--api-key") -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or len(key) < 8 or not set(key) <= KEY_CHARS:
        raise ConfigError(f"{where} must be at least 8 printable ASCII characters without spaces")
    return key


def check_api_keys(keys) -> tuple:
    """Every key a server accepts (each client's prompt cache is its key's alone), each checked,
    none twice."""
    keys = tuple(check_api_key(k) for k in keys)
    if len(set(keys)) != len(keys):
        raise ConfigError("an API key is given twice: give each client its own key")
    return keys


def check_port(port) -> int:
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(f"--port must be a whole number from 0 to 65535, got {port!r}")
    return port


def parse_drafters(draft: str | None, named, check_files: bool = True) -> DrafterChoice:
    """--draft SPEC (one drafter, named 'default') or --drafters NAME=SPEC ... (the first is
    the default), every spec validated by the registry, every name checked."""
    from olifant_mlx.drafters.registry import parse_spec

    if draft is not None and named:
        raise ConfigError("give either --draft SPEC or --drafters NAME=SPEC ..., not both")
    if not named:
        spec = parse_spec(draft or "auto", check_files)
        return DrafterChoice({DEFAULT_NAME: spec} if spec.drafts else {}, DEFAULT_NAME if spec.drafts else "none")
    specs = {}
    for item in named:
        name, eq, text = str(item).partition("=")
        if not eq or not text:
            raise ConfigError(f"--drafters {item!r}: write NAME=SPEC, e.g. legal=adaptive:hybrid:models/legal.olif")
        if not DRAFTER_NAME.match(name):
            raise ConfigError(f"--drafters {item!r}: a name is 1-32 letters, digits, '-' or '_'")
        if name in RESERVED:
            raise ConfigError(f"--drafters {item!r}: {name!r} is always there (plain decoding); "
                              f"choose another name")
        if name in specs:
            raise ConfigError(f"--drafters: {name!r} is named twice")
        specs[name] = parse_spec(text, check_files, shown=f"--drafters {item}")
    return DrafterChoice(specs, next(iter(specs)))

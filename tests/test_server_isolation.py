"""What one client of a server may learn of another's (issue 37, items 6 and 15) and the
provenance of a library drafter (issue 39), on real servers on loopback (the tiny verifier, a
real library): the prompt cache is separated per API key, so the cache oracle (send a guess
of another's prompt, read `cached_tokens`) counts only the caller's own prefixes; an unknown
library is refused without listing the others; `--draft library:NAME` reports `sources`
without the request naming them."""
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from server_helpers import DEFAULTS, LIMITS, own_cache, tiny_library, tiny_tokenizer  # noqa: E402
from tiny_models import tiny_chat_verifier  # noqa: E402

from olifant_mlx.drafters.registry import parse_spec  # noqa: E402
from olifant_mlx.engine import Session  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.cli.serve import read_key_file  # noqa: E402
from olifant_mlx.server.config import ConfigError, DrafterChoice, check_api_keys  # noqa: E402

KEY_A, KEY_B = "alice-key-0001", "bob-key-00002"
PREFIX = "Quote for Acme Widgets Ltd: the unit price is "
PROMPT, N = "abcdefgh", 40


@pytest.fixture(scope="module")
def verifier():
    return tiny_chat_verifier()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    yield from own_cache(tmp_path_factory)


@pytest.fixture(scope="module")
def output(verifier):
    return Session(verifier, "none", DEFAULTS).generate(PROMPT, DEFAULTS.replace(max_tokens=N)).tokens


@pytest.fixture(scope="module")
def tinylib(cache, output, tmp_path_factory):
    return tiny_library("secretlib", tmp_path_factory.mktemp("precedents"), output[:N])


def common_prefix(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def complete(c, key, prompt, **kw):
    r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1, **kw},
               headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_cache_oracle_across_two_keys_never_counts_the_other_keys_prefix(verifier):
    run = start(verifier, DrafterChoice({}, "none"), DEFAULTS, LIMITS, api_key=[KEY_A, KEY_B])
    try:
        with httpx.Client(base_url=run.url, timeout=120) as c:
            secret = PREFIX + "4711 EUR"
            complete(c, KEY_A, secret)
            again = complete(c, KEY_A, secret)["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert again >= len(PREFIX)             # A's own prefix is reused (the cache works)
            first = complete(c, KEY_B, secret)["usage"]     # B sends A's very prompt: nothing cached
            assert first["prompt_tokens_details"]["cached_tokens"] == 0
            sent = [verifier.encode(secret)]
            for guess in ("1234", "4711", "4712", "9999"):      # B guesses on, the oracle's way
                ids = verifier.encode(PREFIX + guess + " zq")
                own = max(common_prefix(ids, earlier) for earlier in sent)
                cached = complete(c, KEY_B, PREFIX + guess + " zq")["usage"]["prompt_tokens_details"]
                assert cached["cached_tokens"] <= own, guess    # B's own prefixes, never A's
                sent.append(ids)
            assert own >= len(verifier.encode(PREFIX)) and cached["cached_tokens"] > 0  # B's cache works
            r = c.post("/v1/completions", json={"prompt": "x"}, headers={"Authorization": "Bearer nope-nope"})
            assert r.status_code == 401
    finally:
        run.stop()


def test_api_keys_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="given twice"):
        check_api_keys([KEY_A, KEY_A])
    with pytest.raises(ConfigError, match="at least 8"):
        check_api_keys([KEY_A, "short"])
    keys = tmp_path / "keys"
    keys.write_text(f"# clients\n{KEY_A}\n\n{KEY_B}\n")
    assert read_key_file(keys) == [KEY_A, KEY_B]
    keys.write_text("# none\n")
    with pytest.raises(ConfigError, match="no key in it"):
        read_key_file(keys)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_key_file(tmp_path / "missing")


def test_a_library_drafter_reports_sources_and_an_unknown_library_lists_none(verifier, tinylib, output):
    provenance = pytest.importorskip("olifant_mlx.provenance")
    want = [s.as_dict() for s in provenance.find_sources(tinylib, output, tokenizer=tiny_tokenizer())]
    assert want and max(s["tokens"] for s in want) >= 30
    choice = DrafterChoice({"lib": parse_spec("library:secretlib"), "lookup": parse_spec("lookup")}, "lib")
    run = start(verifier, choice, DEFAULTS, LIMITS)
    try:
        with httpx.Client(base_url=run.url, timeout=120) as c:
            body = c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": N}).json()
            assert body["sources"] == want          # the request did not name them
            other = c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": N, "draft": "lookup"}).json()
            assert "sources" not in other           # a drafter without a library: none asked for
            r = c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "sources": "nope"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "sources"
            message = r.json()["error"]["message"]
            assert "no library 'nope'" in message and "secretlib" not in message, message
    finally:
        run.stop()

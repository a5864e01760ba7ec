"""Provenance on the server (issue 26): the `sources` extension beside `usage`, read with the
real OpenAI client from a real server on loopback, whole and streamed, equal to what
provenance.find_sources reports for the same output; and the request field's errors. The
verifier is the tiny one (fast); its library is real, built from text that holds a stretch of
its own greedy output (so the answer copies it)."""
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

from server_helpers import DEFAULTS, LIMITS, own_cache, tiny_library, tiny_tokenizer  # noqa: E402
from tiny_models import tiny_chat_verifier  # noqa: E402

from olifant_mlx.drafters.registry import parse_spec  # noqa: E402
from olifant_mlx.engine import Session  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import DrafterChoice  # noqa: E402

PROMPT = "abcdefgh"
N = 40


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    yield from own_cache(tmp_path_factory)


@pytest.fixture(scope="module")
def verifier():
    return tiny_chat_verifier()


@pytest.fixture(scope="module")
def output(verifier):
    return Session(verifier, "none", DEFAULTS).generate(PROMPT, DEFAULTS.replace(max_tokens=N)).tokens


@pytest.fixture(scope="module")
def tinylib(cache, output, tmp_path_factory):
    return tiny_library("tinylib", tmp_path_factory.mktemp("precedents"), output[4:30])


@pytest.fixture(scope="module")
def server(verifier, tinylib):
    """A server that reaches tinylib (a drafter of it names it at start); lookup is the default."""
    choice = DrafterChoice({"lookup": parse_spec("lookup"), "lib": parse_spec("library:tinylib")}, "lookup")
    run = start(verifier, choice, DEFAULTS, LIMITS)
    yield run
    run.stop()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_a_request_names_a_library_by_name_only(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for name, said in (("../etc", "no library '../etc'"), ("no-such-library", "no library 'no-such-library'")):
            r = c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "sources": name})
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["param"] == "sources" and said in err["message"]
        plain = c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4}).json()
        assert "sources" not in plain          # no library asked for: no extension field


def test_sources_beside_usage_read_with_the_openai_client(server, tinylib, output):
    from olifant_mlx.engine.options import options

    provenance = pytest.importorskip("olifant_mlx.provenance")
    if "sources" not in options():
        pytest.skip("the sources option (H1's engine hook) is not merged yet")
    want = [s.as_dict() for s in provenance.find_sources(tinylib, output, tokenizer=tiny_tokenizer())]
    assert want and any(s["tokens"] >= 20 for s in want)       # the output copies the deed
    c = client(server)
    extra = {"sources": "tinylib", "draft": "lookup"}
    whole = c.completions.create(model="tiny", prompt=PROMPT, max_tokens=N, extra_body=extra)
    assert whole.model_extra["sources"] == want
    assert all(p["path"] == "deed.txt" for s in want for p in s["places"])
    chunks = list(c.completions.create(model="tiny", prompt=PROMPT, max_tokens=N, stream=True,
                                       stream_options={"include_usage": True}, extra_body=extra))
    assert chunks[-1].usage is not None and chunks[-1].model_extra["sources"] == want
    assert all("sources" not in ch.model_extra for ch in chunks[:-1])
    bare = list(c.completions.create(model="tiny", prompt=PROMPT, max_tokens=N, stream=True, extra_body=extra))
    assert bare[-1].choices[0].finish_reason and bare[-1].model_extra["sources"] == want
    chat = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": PROMPT}],
                                     max_tokens=N, extra_body=extra)
    assert isinstance(chat.model_extra["sources"], list)


def test_a_guard_stop_lists_the_span_that_tripped_it(server, output):
    body = {"prompt": PROMPT, "max_tokens": N, "sources": "tinylib", "draft": "lookup", "max_verbatim": 10,
            "verbatim_action": "stop", "min_source_tokens": 30}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["choices"][0]["finish_reason"] == "content_filter"     # the guard stopped it
        assert [s["tokens"] for s in got["sources"]] == [11]     # under min_source_tokens, yet listed
        assert all(p["path"] == "deed.txt" for p in got["sources"][0]["places"])

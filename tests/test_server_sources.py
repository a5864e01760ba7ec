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

from server_helpers import DEFAULTS, LIMITS  # noqa: E402
from tiny_models import Tok, tiny_chat_verifier  # noqa: E402

from olifant_mlx import library  # noqa: E402
from olifant_mlx.drafters.registry import parse_spec  # noqa: E402
from olifant_mlx.engine import Session  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import DrafterChoice  # noqa: E402
from olifant_mlx.verifier.tokenizers import Tokenizer  # noqa: E402

PROMPT = "abcdefgh"
N = 40
BASE = 63 * (0x4E00 // 63 + 1)      # a CJK character per tiny-model id: 1 + ord(c) % 63 == id


def text_of(ids) -> str:
    return "".join(chr(BASE + t - 1) for t in ids)


def tiny_tokenizer() -> Tokenizer:
    tok = Tok()
    return Tokenizer(tok.name, tok.vocab_size, tok.digest, lambda texts: [tok.encode(t) for t in texts],
                     tok.decode)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("cache")
    mp.setenv("OLIFANT_CACHE", str(root))
    yield root
    mp.undo()


@pytest.fixture(scope="module")
def verifier():
    return tiny_chat_verifier()


@pytest.fixture(scope="module")
def output(verifier):
    return Session(verifier, "none", DEFAULTS).generate(PROMPT, DEFAULTS.replace(max_tokens=N)).tokens


@pytest.fixture(scope="module")
def tinylib(cache, output, tmp_path_factory):
    folder = tmp_path_factory.mktemp("precedents")
    (folder / "deed.txt").write_text(text_of([3, 3, 60, 2]) + text_of(output[4:30]) + text_of([61, 62, 2]))
    (folder / "other.txt").write_text(text_of([5, 6, 7, 8, 9, 10, 11, 12]))
    library.build("tinylib", folder, tiny_tokenizer())
    return library.load("tinylib")


@pytest.fixture(scope="module")
def server(verifier, tinylib):
    run = start(verifier, DrafterChoice({"lookup": parse_spec("lookup")}, "lookup"), DEFAULTS, LIMITS)
    yield run
    run.stop()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_a_request_names_a_library_by_name_only(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for name, said in (("../etc", "library name"), ("no-such-library", "no library 'no-such-library'")):
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

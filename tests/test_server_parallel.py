"""Requests admitted together (`serve --parallel N`): the worker runs a verifier pass of each in
turn, and every client gets its solo answer AND its solo drafting (drafted, accepted, passes),
with mixed drafters, k, stop strings and lengths, while one more client leaves mid-stream. The
costs are fixed and the session's learning frozen, so what each request drafts depends on nothing
measured nor on the requests before it (tests/test_interleaved.py: the same on one Session)."""
import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from server_helpers import DEFAULTS, LIMITS, concurrently, wait_for  # noqa: E402
from tiny_models import tiny_verifier  # noqa: E402

from olifant_mlx.drafters.registry import parse_spec  # noqa: E402
from olifant_mlx.measure.bench import FixedCost  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import DrafterChoice  # noqa: E402

FIXED = FixedCost(1.0, 0.1, draft_s=0.0001)
CHOICE = {"auto": "auto", "ngram": "ngram", "lookup": "lookup", "adaptive": "adaptive:hybrid"}
ASKED = [  # each client's request: mixed drafters (two clients each on two of them), k, stop strings, lengths
    {"prompt": "abcabcabcabc", "max_tokens": 120, "draft": "ngram", "num_draft_tokens": 8},
    {"prompt": "once upon a time", "max_tokens": 100, "draft": "ngram", "num_draft_tokens": 4},
    {"prompt": "the cat sat on the mat, the cat", "max_tokens": 90, "draft": "auto", "num_draft_tokens": 5},
    {"prompt": "xyzzy plugh xyzzy", "max_tokens": 110, "draft": "auto", "num_draft_tokens": 12, "stop": ["qq"]},
    {"prompt": "a b c d a b c d", "max_tokens": 100, "draft": "lookup", "num_draft_tokens": 3},
]
DRAFTING = ("completion_tokens", "drafted_tokens", "accepted_tokens", "verifier_passes", "drafter")


@pytest.fixture(scope="module")
def server():
    limits = LIMITS.__class__(**{**LIMITS.__dict__, "parallel": 4, "prompt_cache_size": 0})
    run = start(tiny_verifier(), DrafterChoice({n: parse_spec(s) for n, s in CHOICE.items()}, "auto"),
                DEFAULTS.replace(pass_cost=FIXED, draft_cost=FIXED), limits)
    run.queue.session.learning.frozen = True     # each request starts from the same estimates
    yield run
    run.stop()


def ask(http, body) -> tuple:
    """(text, the usage's drafting counts) of one streamed completion."""
    text, usage = [], None
    with http.stream("POST", "/v1/completions", json={**body, "stream": True,
                                                      "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            text += [c["text"] for c in event["choices"]]
            usage = event.get("usage") or usage
    return "".join(text), {k: usage[k] for k in DRAFTING}


def test_requests_admitted_together_each_get_their_solo_answer_and_drafting(server):
    with httpx.Client(base_url=server.url, timeout=120) as http:
        solo = [ask(http, body) for body in ASKED]
    assert sum(d["accepted_tokens"] for _, d in solo) > 0
    got, errors = [None] * len(ASKED), []

    def client(i):
        try:
            with httpx.Client(base_url=server.url, timeout=120) as http:
                got[i] = ask(http, ASKED[i])
        except Exception as e:        # shown by the assert below
            errors.append(e)

    def leaver():                     # streams a while, then closes the connection mid-answer
        with httpx.Client(base_url=server.url, timeout=120) as http:
            body = {"prompt": "leave early", "max_tokens": 4000, "stream": True}
            with http.stream("POST", "/v1/completions", json=body) as r:
                for n, _ in enumerate(r.iter_lines()):
                    if n > 6:
                        break

    peak = concurrently(server, [lambda i=i: client(i) for i in range(len(ASKED))] + [leaver])
    assert not errors, errors
    assert got == solo
    assert peak >= 2, "no two requests ran at once: the test proved nothing"
    wait_for(lambda: server.queue.status()["running"] == 0, "the leaver's generation to end")
    assert server.queue.counts["disconnected"] >= 1


def test_parallel_must_be_a_whole_number_of_at_least_one():
    from olifant_mlx.server.config import ConfigError, Limits

    with pytest.raises(ConfigError, match="parallel"):
        Limits(parallel=0)

"""Batched serving (`serve --max-batch N`): the running requests' verifier passes run as one
forward pass (engine.batch), and every client gets its solo answer, with mixed drafters, k,
stop strings, lengths and KV regimes, while clients leave mid-stream. A real loopback server on
the tiny model, real HTTP clients."""
import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from server_helpers import DEFAULTS, LIMITS, concurrently, wait_for  # noqa: E402
from tiny_models import tiny_verifier  # noqa: E402

from olifant_mlx.drafters.registry import parse_spec  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import DrafterChoice  # noqa: E402

CHOICE = {"auto": "auto", "ngram": "ngram", "lookup": "lookup", "adaptive": "adaptive:hybrid"}
ASKED = [  # each client's request: mixed drafters, k, stop strings, lengths, KV regimes
    {"prompt": "abcabcabcabc", "max_tokens": 120, "draft": "ngram", "num_draft_tokens": 8},
    {"prompt": "once upon a time", "max_tokens": 70, "draft": "adaptive", "num_draft_tokens": 4},
    {"prompt": "the cat sat on the mat, the cat", "max_tokens": 90, "draft": "auto", "num_draft_tokens": 5,
     "max_kv_size": 24},
    {"prompt": "xyzzy plugh xyzzy", "max_tokens": 110, "draft": "lookup", "num_draft_tokens": 12, "stop": ["qq"]},
]


@pytest.fixture(scope="module")
def server():
    limits = LIMITS.__class__(**{**LIMITS.__dict__, "max_batch": 4, "prompt_cache_size": 0})
    run = start(tiny_verifier(), DrafterChoice({n: parse_spec(s) for n, s in CHOICE.items()}, "auto"),
                DEFAULTS, limits)
    yield run
    run.stop()


def ask(http, body, leave_after=None) -> tuple:
    """(text, usage) of one streamed completion; `leave_after`: close the stream after that
    many events (usage None)."""
    text, usage = [], None
    with http.stream("POST", "/v1/completions", json={**body, "stream": True,
                                                      "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200, r.read()
        for n, line in enumerate(r.iter_lines()):
            if leave_after is not None and n > leave_after:
                return "".join(text), None
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            text += [c["text"] for c in event["choices"]]
            usage = event.get("usage") or usage
    return "".join(text), usage


def run_together(server, bodies, leavers=()):
    """Every body from a client of its own at once, plus clients that leave mid-stream; the
    answers, and the most requests seen running at once."""
    got, errors = [None] * len(bodies), []

    def client(i):
        try:
            with httpx.Client(base_url=server.url, timeout=120) as http:
                got[i] = ask(http, bodies[i])
        except Exception as e:        # shown by the assert below
            errors.append(e)

    def leaver(body):
        with httpx.Client(base_url=server.url, timeout=120) as http:
            ask(http, body, leave_after=6)

    peak = concurrently(server, [lambda i=i: client(i) for i in range(len(bodies))] +
                        [lambda b=body: leaver(b) for body in leavers])
    assert not errors, errors
    return got, peak


def test_four_clients_batched_each_get_their_solo_answer_while_two_leave(server):
    with httpx.Client(base_url=server.url, timeout=120) as http:
        solo = [ask(http, body) for body in ASKED]
    assert all(u["batch_size"] == 1 for _, u in solo), [u["batch_size"] for _, u in solo]
    assert sum(u["accepted_tokens"] for _, u in solo) > 0
    leavers = [{"prompt": "leave early", "max_tokens": 4000, "num_draft_tokens": 6},
               {"prompt": "cancel me", "max_tokens": 4000, "draft": "ngram"}]
    got, peak = run_together(server, ASKED, leavers)
    assert [text for text, _ in got] == [text for text, _ in solo]
    assert [u["completion_tokens"] for _, u in got] == [u["completion_tokens"] for _, u in solo]
    assert peak >= 2, "no two requests ran at once: the test proved nothing"
    assert max(u["batch_size"] for _, u in got) >= 2, [u["batch_size"] for _, u in got]
    assert all(1 <= u["mean_batch_size"] <= u["batch_size"] <= 4 for _, u in got)
    wait_for(lambda: server.queue.status()["running"] == 0, "the leavers' generations to end")
    assert server.queue.counts["disconnected"] >= 2


def test_a_batch_never_holds_more_than_max_batch(server):
    bodies = [{"prompt": f"{i} " * 6, "max_tokens": 40, "draft": "ngram"} for i in range(6)]
    got, peak = run_together(server, bodies)
    assert peak <= 4 and max(u["batch_size"] for _, u in got) <= 4
    assert server.queue.status()["max_batch"] == 4


def test_by_default_the_batch_size_is_the_pass_cost_curves(tmp_path, monkeypatch):
    from olifant_mlx.engine.batch import PassCurve, curve_key, max_batch_for

    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path))
    limits = LIMITS.__class__(**{**LIMITS.__dict__, "max_batch": None})
    run = start(tiny_verifier(), DrafterChoice({}, "none"), DEFAULTS, limits)
    try:
        size = run.queue.status()["max_batch"]
    finally:
        run.stop()
    kept = json.loads((tmp_path / "pass-costs" / f"{curve_key('tiny')}.json").read_text())
    curve = PassCurve(tuple(kept["rows"]), tuple(kept["seconds"]))
    assert kept["verifier"] == "tiny" and len(curve.rows) >= 5
    assert size == max_batch_for(curve)


def test_max_batch_must_be_a_whole_number_of_at_least_one():
    from olifant_mlx.server.config import ConfigError, Limits

    with pytest.raises(ConfigError, match="max batch"):
        Limits(max_batch=0)


def test_a_predicted_answer_ends_at_max_tokens_before_an_eos_past_it():
    # a prediction's drafts run past max_tokens; an EOS the verifier would give beyond it must
    # not end the answer there (an 8-client Qwen batch once returned 75 of its 64 tokens)
    from server_helpers import text_of
    from tiny_models import Tok

    from olifant_mlx.engine import Session

    prompt = "the clause reads: "
    ref = Session(tiny_verifier(), "none", DEFAULTS).generate(prompt, DEFAULTS.replace(max_tokens=40)).tokens
    first = ref.index(ref[24])
    assert first > 6
    verifier = tiny_verifier()
    verifier.tokenizer = Tok()
    verifier.tokenizer.eos_token_ids = [ref[first]]
    limits = LIMITS.__class__(**{**LIMITS.__dict__, "max_batch": 4, "prompt_cache_size": 0})
    run = start(verifier, DrafterChoice({"adaptive": parse_spec("adaptive:hybrid")}, "adaptive"), DEFAULTS, limits)
    try:
        bodies = [{"prompt": prompt, "max_tokens": m, "prediction": {"type": "content", "content": text_of(ref)}}
                  for m in (first - 4, first - 1, first, first + 3)]
        with httpx.Client(base_url=run.url, timeout=120) as http:
            solo = [ask(http, body) for body in bodies]
        together, _ = run_together(run, bodies)
    finally:
        run.stop()
    lengths = [first - 4, first - 1, first, first]        # the last one ends at the EOS
    for got in (solo, together):
        assert [u["completion_tokens"] for _, u in got] == lengths
        assert [text for text, _ in got] == [Tok().decode(ref[:n]) for n in lengths]
        assert [u["completion_tokens_details"]["accepted_prediction_tokens"] for _, u in got] == lengths

"""OpenAI's predicted outputs on the server (`prediction`), on a tiny model: the real server on a
loopback port, the OpenAI client and httpx. A malformed prediction is a 400 naming the field, one
past the context a 400 `context_length_exceeded`; the output is the same with and without a
prediction, streamed or whole, chat or completion; usage's accepted and rejected prediction
tokens are `prediction_counts` of the output; the request drafts up to PREDICTION_K tokens a
pass unless it names num_draft_tokens; and a prediction never reaches the next request's
drafter. The same on the offline verifier with a clause revision: test_server_offline.py."""
import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

from server_helpers import DEFAULTS, LIMITS, SECRET, check_refused, sse_events, text_of  # noqa: E402
from tiny_models import tiny_chat_verifier  # noqa: E402

from olifant_mlx.drafters.prediction import PREDICTION_K, PredictionSource, prediction_counts  # noqa: E402
from olifant_mlx.drafters.registry import parse_spec  # noqa: E402
from olifant_mlx.engine import Chat, Session  # noqa: E402
from olifant_mlx.measure.bench import REFERENCE_COST  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import DrafterChoice  # noqa: E402

CHOICE = {"adaptive": "adaptive:hybrid", "hybrid": "hybrid", "lookup": "lookup"}
# a fixed pass cost, the drafter's own time left out: the adaptive drafter's plans, and so the
# pass counts compared below, are the same on every run, however loaded the machine
OPTIONS = DEFAULTS.replace(pass_cost=REFERENCE_COST, draft_cost=REFERENCE_COST)
N = 40                      # tokens per answer
PROMPT = "Revise the clause: "
CHAT = [{"role": "user", "content": "Revise the clause below."}]


@pytest.fixture(scope="module")
def verifier():
    return tiny_chat_verifier()


@pytest.fixture(scope="module")
def served(verifier):
    """The server (CHOICE's drafters, the adaptive hybrid the default) and an httpx client of it."""
    run = start(verifier, DrafterChoice({n: parse_spec(s) for n, s in CHOICE.items()}, "adaptive"), OPTIONS,
                LIMITS)
    with httpx.Client(base_url=run.url, timeout=120) as http:
        yield run, http
    run.stop()


@pytest.fixture
def server(served):
    return served[0]


@pytest.fixture
def client(served):
    return served[1]


@pytest.fixture
def seen(server):
    """The engine Requests the server's worker runs, in order (its Session's stream, recorded)."""
    session, requests = server.queue.session, []
    stream = session.stream

    def recording(request, *args, **kwargs):
        requests.append(request)
        return stream(request, *args, **kwargs)

    session.stream = recording
    yield requests
    del session.stream


@pytest.fixture(scope="module")
def plain(verifier):
    """{kind: the plain greedy answer} of the completion and the chat prompt."""
    session = Session(verifier, "none", DEFAULTS)
    opts = DEFAULTS.replace(max_tokens=N)
    return {"completion": session.generate(PROMPT, opts), "chat": session.generate(Chat(tuple(CHAT)), opts)}


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def ask(server, kind, stream, prediction=None, **extra):
    """(text, usage) of one request through the OpenAI client; `prediction` as OpenAI's field
    (the client's own `prediction=` on chat, a body field on completions)."""
    c, body = oai(server), dict(extra)
    more = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    if kind == "chat":
        given = {} if prediction is None else {"prediction": prediction}
        r = c.chat.completions.create(model="tiny", messages=CHAT, max_tokens=N, extra_body=body, **given, **more)
    else:
        if prediction is not None:
            body["prediction"] = prediction
        r = c.completions.create(model="tiny", prompt=PROMPT, max_tokens=N, extra_body=body, **more)
    if not stream:
        choice = r.choices[0]
        return (choice.message.content if kind == "chat" else choice.text), r.usage
    chunks = list(r)
    pieces = [(p.choices[0].delta.content if kind == "chat" else p.choices[0].text) or "" for p in chunks if p.choices]
    assert chunks[-1].choices == [] and all(p.usage is None for p in chunks[:-1])
    return "".join(pieces), chunks[-1].usage


def edited(tokens):
    """An answer's ids with a word changed, one dropped and one added: a revision's prediction."""
    return tokens[:8] + [5, 6, 7] + tokens[11:20] + tokens[24:32] + [9, 9] + tokens[32:]


# ---- the field, checked ---------------------------------------------------------------------

def content(text):
    return {"type": "content", "content": text}


def test_a_malformed_prediction_is_a_400_naming_it(server, client):
    cases = []
    for path, body in (("/v1/completions", {"prompt": SECRET}), ("/v1/chat/completions", {"messages": CHAT})):
        for prediction, param in ((SECRET, "prediction"), ([SECRET], "prediction"), (5, "prediction"),
                                  ({"content": SECRET}, "prediction.type"),
                                  ({"type": "text", "content": SECRET}, "prediction.type"),
                                  ({"type": "content"}, "prediction.content"),
                                  (content(5), "prediction.content"), (content({"text": SECRET}), "prediction.content"),
                                  (content([SECRET]), "prediction.content"),
                                  (content([{"type": "text"}]), "prediction.content"),
                                  (content([{"type": "text", "text": 5}]), "prediction.content"),
                                  (content([{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]),
                                   "prediction.content")):
            cases.append((path, {**body, "prediction": prediction}, None, 400, param))
        surrogate = json.dumps({**body, "prediction": content("ab")}).replace('"ab"', '"a\\ud800b"').encode()
        cases.append((path, surrogate, None, 400, "prediction.content"))
    check_refused(client, cases)
    for path, body, *_ in cases:
        r = client.post(path, content=body if isinstance(body, bytes) else json.dumps(body).encode(),
                        headers={"content-type": "application/json"})
        err = r.json()["error"]
        assert err["param"].startswith("prediction") and err["type"] == "invalid_request_error", (body, err)
        assert SECRET not in err["message"]
    err = client.post("/v1/completions", json={"prompt": "x", "prediction": "x"}).json()["error"]
    assert err["message"] == 'prediction: must be {"type": "content", "content": text or a list of text parts}'
    r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "prediction": content("x")})
    assert r.status_code == 200          # and the server serves on


def test_what_openai_refuses_beside_a_prediction_is_refused_here_anyway(client):
    """n > 1, logprobs, penalties and malformed tools are refused on every request of this server:
    with a prediction by the same field as without one, nothing new to refuse."""
    body = {"messages": CHAT, "prediction": content("x")}
    check_refused(client, [("/v1/chat/completions", {**body, "n": 2}, None, 400, "n"),
                           ("/v1/chat/completions", {**body, "logprobs": True}, None, 400, "logprobs"),
                           ("/v1/chat/completions", {**body, "presence_penalty": 1.0}, None, 400, "presence_penalty"),
                           ("/v1/chat/completions", {**body, "tools": [{"type": "function"}]}, None, 400, "tools[0]")])


@pytest.mark.parametrize("stream", [False, True])
def test_a_prediction_past_the_context_is_a_400_naming_it(client, verifier, stream):
    prompt = "x" * 100
    extra = {"stream": True} if stream else {}
    for body, path in (({"prompt": prompt}, "/v1/completions"),
                       ({"messages": [{"role": "user", "content": prompt}]}, "/v1/chat/completions")):
        r = client.post(path, json={**body, "max_tokens": 8, "prediction": content("y" * 1990), **extra})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "prediction" and err["code"] == "context_length_exceeded", err
        assert "1,990 tokens" in err["message"] and "(2,048)" in err["message"]
        assert err["message"].endswith("shorten the prediction")
    # the prompt's own overflow is still the prompt's
    r = client.post("/v1/completions", json={"prompt": "x" * 2040, "max_tokens": 64, "prediction": content("y")})
    assert r.json()["error"]["param"] == "prompt" and r.json()["error"]["code"] == "context_length_exceeded"
    # a prediction that fits beside the prompt is served
    r = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 4, "prediction": content("y" * 1940)})
    assert r.status_code == 200, r.text


# ---- the answer and its counts ---------------------------------------------------------------

def check_counts(server, verifier, ref, kind, stream, ids, drafter="adaptive"):
    """One request predicting `ids`: the answer is the plain one, the usage counts OpenAI's."""
    given = text_of(ids)
    predicted = verifier.identity.encode(given)
    text, usage = ask(server, kind, stream, content(given), draft=drafter)
    assert text == ref.text, (drafter, ids)
    d = usage.completion_tokens_details
    accepted, rejected = prediction_counts(predicted, ref.tokens)
    assert (d.accepted_prediction_tokens, d.rejected_prediction_tokens) == (accepted, rejected), drafter
    assert accepted + rejected == len(predicted) and usage.completion_tokens == N
    return accepted, rejected


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_the_answer_is_the_same_and_usage_counts_the_prediction(server, verifier, plain, kind, stream):
    ref = plain[kind]
    text, usage = ask(server, kind, stream)
    assert text == ref.text and usage.completion_tokens_details is None      # no prediction: as before
    assert check_counts(server, verifier, ref, kind, stream, ref.tokens) == (N, 0)
    accepted, rejected = check_counts(server, verifier, ref, kind, stream, edited(ref.tokens))
    assert 0 < rejected < accepted
    accepted, rejected = check_counts(server, verifier, ref, kind, stream, [3, 4] * 12)     # mostly wrong
    assert rejected > accepted


@pytest.mark.parametrize("drafter", ["hybrid", "lookup", "none"])
def test_every_drafter_gives_the_same_answer_and_counts(server, verifier, plain, drafter):
    """Drafters that follow the prediction (the hybrid) and drafters that ignore it: the same
    answer, the same counts (they count the output, not the drafts)."""
    for kind in ("completion", "chat"):
        check_counts(server, verifier, plain[kind], kind, False, edited(plain[kind].tokens), drafter)


def test_text_parts_are_joined_and_counted_as_one_text(server, verifier, plain):
    ref = plain["chat"]
    given = text_of(edited(ref.tokens))
    parts = [{"type": "text", "text": given[:10]}, {"type": "text", "text": given[10:]}]
    whole, as_text = ask(server, "chat", False, content(given))
    split, as_parts = ask(server, "chat", False, content(parts))
    assert whole == split == ref.text
    assert as_parts.completion_tokens_details == as_text.completion_tokens_details
    _, empty = ask(server, "chat", False, content(""))
    assert (empty.completion_tokens_details.accepted_prediction_tokens,
            empty.completion_tokens_details.rejected_prediction_tokens) == (0, 0)


def test_the_raw_usage_has_openais_fields(client, plain):
    """As sent on the wire: completion_tokens_details beside prompt_tokens_details, whole and in
    the streamed usage chunk; left out without a prediction (as before predictions)."""
    ids = plain["completion"].tokens
    body = {"prompt": PROMPT, "max_tokens": N, "prediction": content(text_of(ids))}
    whole = client.post("/v1/completions", json=body).json()["usage"]
    events = sse_events(client.post("/v1/completions", json={**body, "stream": True,
                                                              "stream_options": {"include_usage": True}}).text)
    streamed = json.loads(events[-2])["usage"]
    for u in (whole, streamed):
        assert u["completion_tokens_details"] == {"accepted_prediction_tokens": len(ids),
                                                  "rejected_prediction_tokens": 0}
        assert list(u)[:5] == ["prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
                               "completion_tokens_details"]
    without = client.post("/v1/completions", json={**body, "prediction": None}).json()["usage"]
    assert "completion_tokens_details" not in without


# ---- the draft length and the drafter ----------------------------------------------------------

def test_a_prediction_drafts_up_to_prediction_k_unless_the_request_names_k(server, plain, seen):
    ref = plain["completion"]
    given = content(text_of(ref.tokens))
    ask(server, "completion", False)
    ask(server, "completion", False, given)
    ask(server, "completion", False, given, num_draft_tokens=5)
    ask(server, "completion", False, given, draft="hybrid")       # not adaptive: its k is serve's
    ask(server, "completion", False, given, draft="lookup")       # does not follow the prediction
    assert [r.options.k for r in seen] == [DEFAULTS.k, PREDICTION_K, 5, DEFAULTS.k, DEFAULTS.k]
    assert PREDICTION_K == 32 > DEFAULTS.k


def test_the_exact_answer_predicted_takes_fewer_passes(server, plain):
    for kind in ("completion", "chat"):
        ref = plain[kind]
        _, without = ask(server, kind, False)
        _, given = ask(server, kind, False, content(text_of(ref.tokens)))
        assert given.completion_tokens_details.accepted_prediction_tokens == len(ref.tokens)
        assert given.model_extra["verifier_passes"] < without.model_extra["verifier_passes"]
        assert given.model_extra["verifier_passes"] < N / 2


def test_a_prediction_never_reaches_the_next_request(server, plain, seen):
    shared = server.queue.drafters["adaptive"].drafter
    sources = list(shared.inner.sources)
    ref = plain["chat"]
    ids = ref.tokens
    for stream in (False, True):
        _, first = ask(server, "chat", stream, content(text_of(ids)))
        text, second = ask(server, "chat", stream)
        assert text == ref.text
        assert first.completion_tokens_details.accepted_prediction_tokens == len(ids)
        assert second.completion_tokens_details is None
    with_prediction, without = seen[0], seen[1]
    assert with_prediction.prediction == tuple(ids) and with_prediction.drafter is not shared
    assert [s.prediction for s in with_prediction.drafter.inner.sources if isinstance(s, PredictionSource)] == [ids]
    assert without.prediction == () and without.drafter is shared and without.options.k == DEFAULTS.k
    assert not any(isinstance(s, PredictionSource) for s in without.drafter.inner.sources)
    assert shared.inner.sources == sources and not any(isinstance(s, PredictionSource) for s in sources)

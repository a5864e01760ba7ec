"""`serve` with the offline instruct verifier (smollm2-135m): the real server on loopback, the
real OpenAI client and raw HTTP. Streamed text == whole text == the Session's `generate` for
none, the hybrid and the adaptive drafter, with usage that matches; a bounded load test (8
streaming clients x 5 requests, outputs identical, resident memory flat); a disconnect that
stops the generation; OpenAI's `prediction` on a clause revision; the command itself in a subprocess
on a non-loopback bind with a key."""
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

from serve_process import free_port, stop, wait_until_serving  # noqa: E402
from server_helpers import BAD, check_refused, idle, sse_events, wait_for  # noqa: E402

from olifant_mlx.cli.generate import demo_draft_model  # noqa: E402
from olifant_mlx.drafters.prediction import prediction_counts  # noqa: E402
from olifant_mlx.drafters.registry import parse_spec  # noqa: E402
from olifant_mlx.engine import Chat, GenerationOptions, Session  # noqa: E402
from olifant_mlx.measure.bench import REFERENCE_COST  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import DrafterChoice, Limits  # noqa: E402

pytestmark = pytest.mark.slow    # the real offline verifier: minutes on two loaded cores

SECRET = "CONFIDENTIAL-PATIENT-ZETA"
LEGAL = "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR"
CHAT = [{"role": "user", "content": "Draft a confidentiality clause for a consulting agreement."}]
CLAUSE = ("The Customer shall notify the Supplier of any claim within thirty (30) days of becoming aware of it, "
          "and the Supplier shall respond within ten (10) business days.")
DEFAULTS = GenerationOptions(k=8, max_tokens=512)
N = 8            # tokens per answer: small, the machine is shared
LOAD_N = 4       # the load test's


@pytest.fixture(scope="module")
def specs(smol):
    _, path = demo_draft_model(smol.identity, "smollm2-135m", ["builtin:licenses"])
    return {"none": "none", "hybrid": f"hybrid:{path}", "adaptive": f"adaptive:hybrid:{path}"}


@pytest.fixture(scope="module")
def server(smol, specs):
    choice = DrafterChoice({name: parse_spec(s) for name, s in specs.items() if name != "none"}, "hybrid")
    run = start(smol, choice, DEFAULTS, Limits(max_tokens=1024, max_body_bytes=1 << 20))
    yield run
    run.stop()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.mark.parametrize("drafter", ["none", "hybrid", "adaptive"])
def test_the_openai_client_gets_generates_output(server, smol, specs, drafter):
    c = client(server)
    opts = DEFAULTS.replace(max_tokens=N)
    extra = {"draft": drafter}
    texts = {}
    # one drafter for the requests in turn, as the server's: a learning one keeps its estimates
    session = Session(smol, specs[drafter], DEFAULTS)
    for kind, prompt in (("completion", LEGAL), ("chat", Chat(tuple(CHAT)))):
        ref = session.generate(prompt, opts)
        again = session.generate(prompt, opts)       # as the streamed request comes second
        if kind == "completion":
            whole = c.completions.create(model="smollm2-135m", prompt=LEGAL, max_tokens=N, extra_body=extra)
            chunks = list(c.completions.create(model="smollm2-135m", prompt=LEGAL, max_tokens=N, stream=True,
                                               stream_options={"include_usage": True}, extra_body=extra))
            text = whole.choices[0].text
            streamed = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        else:
            whole = c.chat.completions.create(model="smollm2-135m", messages=CHAT, max_tokens=N, extra_body=extra)
            chunks = list(c.chat.completions.create(model="smollm2-135m", messages=CHAT, max_tokens=N,
                                                    stream=True, stream_options={"include_usage": True},
                                                    extra_body=extra))
            text = whole.choices[0].message.content
            streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert text == streamed == ref.text, (kind, drafter)
        texts[kind] = text
        finish = {"max_tokens": "length", "eos": "stop"}[ref.finish_reason]
        with_choices = [ch for ch in chunks if ch.choices]
        assert whole.choices[0].finish_reason == finish == with_choices[-1].choices[0].finish_reason
        for u, r in ((whole.usage, ref), (chunks[-1].usage, again)):
            x = u.model_extra
            assert u.completion_tokens == len(ref.tokens) == ref.stats.tokens
            assert u.prompt_tokens == len(session.encode(prompt))
            assert u.total_tokens == u.prompt_tokens + u.completion_tokens
            assert x["drafter"] == drafter and x["stop_reason"] == ref.finish_reason
            assert x["accepted_tokens"] <= x["drafted_tokens"] and x["verifier_passes"] <= u.completion_tokens
            assert x["mean_accepted_length"] == round(x["accepted_tokens"] / x["verifier_passes"], 4)
            drafted = x["drafted_tokens"]
            assert x["acceptance"] == (round(x["accepted_tokens"] / drafted, 4) if drafted else 0)
            assert x["tokens_per_s"] > 0 and "energy_j" in x and "j_per_100_tokens" in x and x["energy_meter"]
            if drafter != "adaptive":   # the adaptive drafter plans with measured times: its drafts vary
                # (the passes may differ: the lead rule plans with measured pass times; the drafts
                # checked and accepted do not, test_loop_lead.py)
                assert (x["drafted_tokens"], x["accepted_tokens"]) == (r.stats.drafted, r.stats.accepted)
            if drafter == "none":
                assert x["drafted_tokens"] == 0 and x["verifier_passes"] == u.completion_tokens
        pieces = [ch.choices[0].text if kind == "completion" else ch.choices[0].delta.content
                  for ch in with_choices]
        assert len([p for p in pieces if p]) <= chunks[-1].usage.model_extra["verifier_passes"]
    if drafter != "hybrid":
        return
    # and raw HTTP, as curl sees it
    r = httpx.post(server.url + "/v1/completions", timeout=600,
                   json={"prompt": LEGAL, "max_tokens": N, "stream": True, "draft": drafter})
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == texts["completion"]
    r = httpx.post(server.url + "/v1/chat/completions", timeout=600,
                   json={"messages": CHAT, "max_tokens": N, "draft": drafter})
    assert r.headers["content-type"] == "application/json"
    assert r.json()["choices"][0]["message"]["content"] == texts["chat"]


def test_a_clause_revision_with_openais_prediction(smol, specs):
    """The OpenAI client's `prediction=` on a clause revision: the answer is the one without it
    (and plain decoding's), streamed and whole; usage counts the prediction's accepted and
    rejected tokens as OpenAI does; the adaptive drafter follows it in fewer verifier passes.
    Its own server plans with SmolLM2's calibrated pass cost (REFERENCE_COST), not a fit of this
    machine's timings: the pass counts compared are the same however loaded the machine is."""
    n = 80
    prompt = Chat.of("Revise the clause below so that the notice period is sixty (60) days. Keep all other "
                     "wording unchanged and output only the revised clause.\n\n" + CLAUSE)
    plain = Session(smol, "none", DEFAULTS).generate(prompt, DEFAULTS.replace(max_tokens=n))
    predicted = smol.identity.encode(CLAUSE)
    counts = prediction_counts(predicted, plain.tokens)
    run = start(smol, DrafterChoice({"adaptive": parse_spec(specs["adaptive"])}, "adaptive"),
                DEFAULTS.replace(pass_cost=REFERENCE_COST, draft_cost=REFERENCE_COST), Limits(max_tokens=1024))
    try:
        c = client(run)
        ask = {"model": "smollm2-135m", "messages": list(prompt.messages), "max_tokens": n}
        prediction = {"type": "content", "content": CLAUSE}
        without = c.chat.completions.create(**ask)
        whole = c.chat.completions.create(**ask, prediction=prediction)
        chunks = list(c.chat.completions.create(**ask, prediction=prediction, stream=True,
                                                stream_options={"include_usage": True}))
    finally:
        run.stop()
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert without.choices[0].message.content == whole.choices[0].message.content == streamed == plain.text
    assert without.usage.completion_tokens_details is None
    print(f"prediction {len(predicted)} tokens, accepted/rejected {counts}; answer {len(plain.tokens)} tokens in "
          f"{without.usage.model_extra['verifier_passes']} passes without it, "
          f"{whole.usage.model_extra['verifier_passes']} / {chunks[-1].usage.model_extra['verifier_passes']} with")
    for u in (whole.usage, chunks[-1].usage):
        d = u.completion_tokens_details
        assert (d.accepted_prediction_tokens, d.rejected_prediction_tokens) == counts
        assert sum(counts) == len(predicted) > 20 and d.accepted_prediction_tokens > d.rejected_prediction_tokens
        assert u.completion_tokens == len(plain.tokens)
        assert u.model_extra["verifier_passes"] < without.usage.model_extra["verifier_passes"]


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def test_load_8_streaming_clients_x_5_requests(server):
    """Bounded: loopback only, 44 requests of LOAD_N tokens, every one complete and identical to its
    single-request answer, no error, resident memory flat across the rounds."""
    work = [("completion", LEGAL, "hybrid"), ("chat", CHAT, "adaptive"),
            ("completion", "Patients were randomised to receive", "none"), ("chat", [
                {"role": "user", "content": "Summarise the indications for a chest X-ray."}], "hybrid")]
    c = client(server)

    def ask(kind, prompt, drafter):
        if kind == "completion":
            parts = c.completions.create(model="smollm2-135m", prompt=prompt, max_tokens=LOAD_N, stream=True,
                                         stream_options={"include_usage": True}, extra_body={"draft": drafter})
            chunks = list(parts)
            return "".join(ch.choices[0].text for ch in chunks if ch.choices), chunks
        parts = c.chat.completions.create(model="smollm2-135m", messages=prompt, max_tokens=LOAD_N, stream=True,
                                          stream_options={"include_usage": True}, extra_body={"draft": drafter})
        chunks = list(parts)
        return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices), chunks

    single = [ask(*w)[0] for w in work]
    rounds, clients = 5, 8
    rss, errors, results = [], [], []
    barrier = threading.Barrier(clients, action=lambda: rss.append(rss_bytes()), timeout=900)
    rss.append(rss_bytes())

    def one_client(i):
        w = work[i % len(work)]
        try:
            for _ in range(rounds):
                text, chunks = ask(*w)
                u = chunks[-1].usage
                results.append((text == single[i % len(work)], chunks[-2].choices[0].finish_reason,
                                u.completion_tokens))
                barrier.wait()
        except Exception as e:          # noqa: BLE001 - reported below
            errors.append(repr(e))
            barrier.abort()

    threads = [threading.Thread(target=one_client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(1800)
    assert not errors, errors
    assert len(results) == rounds * clients and all(same for same, _, _ in results)
    assert all(f in ("length", "stop") and 0 < n <= LOAD_N for _, f, n in results)
    assert server.queue.status()["rejected"] == 0
    # the worker marks itself free just after a stream's last chunk is sent, which the client
    # may already have read
    wait_for(lambda: idle(server), "an idle server", 60)
    # resident memory: what the first round settles is not what later rounds add to
    growth = max(rss[2:]) - rss[1]
    print(f"resident memory per round (MB): {[round(r / 2**20, 1) for r in rss]}")
    assert growth < 64 * 2**20, [r / 2**20 for r in rss]


def test_a_disconnect_stops_the_real_generation(server):
    wait_for(lambda: idle(server), "an idle server", 600)
    body = json.dumps({"prompt": LEGAL, "max_tokens": 400, "stream": True, "draft": "none"}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        got += s.recv(65536)
    s.close()
    wait_for(lambda: idle(server), "the generation to stop", 600)
    rec = server.queue.recent[-1]
    assert rec.stop_reason == "disconnected" and rec.tokens < 400
    assert rec.passes - rec.cancelled_at_pass <= 1, rec


def test_hostile_requests_on_the_real_server(server):
    """The hostile set of test_server.py (less what would be a valid prompt for this vocabulary)
    and a prompt far over the context, refused before any prefill; then it still serves."""
    cases = [c for c in BAD if c[4] != "context_length_exceeded"
             and not (isinstance(c[1], dict) and isinstance(c[1].get("prompt"), list))]
    cases += [("/v1/completions", {"prompt": "the Licensee shall " * 4000, "max_tokens": 8}, None, 400,
               "context_length_exceeded"),
              ("/v1/completions", {"prompt": [1, 2, 10**6]}, None, 400, "prompt")]
    with httpx.Client(base_url=server.url, timeout=600) as c:
        check_refused(c, cases)
        r = c.post("/v1/completions", json={"prompt": LEGAL, "max_tokens": 2, "draft": "none"})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_the_serve_command_on_a_non_loopback_bind():
    key = "offline-test-key-0123"
    port = free_port()
    env = {**os.environ, "OLIFANT_API_KEY": key}
    p = subprocess.Popen([sys.executable, "-m", "olifant_mlx", "serve", "--model", "smollm2-135m",
                          "--draft", "lookup", "--host", "127.0.0.2", "--port", str(port), "--energy", "none",
                          "-m", "4"], stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.2:{port}"
    try:
        wait_until_serving(p, url)
        assert httpx.post(url + "/v1/chat/completions", json={"messages": CHAT}).status_code == 401
        c = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=600)
        r = c.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": SECRET}])
        assert r.usage.completion_tokens <= 4 and r.usage.model_extra["drafter"] == "default"
        assert r.usage.model_extra["energy_meter"] == "not measured" and r.usage.model_extra["energy_j"] is None
    finally:
        code, err = stop(p)        # a service manager's stop: graceful, exit 0
    assert code == 0, err
    assert f"serving smollm2-135m on http://127.0.0.2:{port}/v1" in err and "API key required" in err
    assert "POST /v1/chat/completions 401" in err and "POST /v1/chat/completions 200" in err
    assert SECRET not in err and "Traceback" not in err

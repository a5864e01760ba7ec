"""A raw continuation is appended to its prompt as it is: `prompt + text` equals the verifier's
decoding of the prompt's ids with the output's (decode(prompt_ids + output_ids)), on every
surface that continues text: `generate` on a raw prompt (streamed NDJSON chunks and the final
object) and the server's /v1/completions (whole and streamed), on the real smollm2-135m and a
real server on loopback. The prompts end mid-word, after a word and after a space."""
import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from server_helpers import DEFAULTS, LIMITS, sse_events  # noqa: E402

from olifant_mlx.cli import main  # noqa: E402
from olifant_mlx.engine import GenerationOptions, Session  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import DrafterChoice  # noqa: E402

pytestmark = pytest.mark.slow    # the real verifier: 80 short generations

N = 6
PROMPTS = ["The contract shall not", "The contract shall not ", "The Licensee shall indem", "In witness where",
           "This Agreement is governed by the laws of", "Payment is due within thirty", "The parties agree that ",
           "Notwithstanding the fore", "Confidential Information means", "The Software is provided ",
           "Each party repres", "Termination for conv", "The Supplier warrants that the", "Force maje",
           "Any dispute arising out of", "The term of this Agreement is ", "Subject to clause 4.2, the", "Liab",
           "The quick brown fox jumps over the", "Once upon a time, there was a "]


def decoded(verifier, prompt, output_ids):
    """decode(prompt_ids + output_ids), without BOS and end-of-sequence tokens."""
    ids = verifier.encode(prompt)
    ids = ids[1:] if ids[:1] == [verifier.bos_id] else ids
    return verifier.identity.decode(ids + [t for t in output_ids if t not in verifier.eos_ids])


@pytest.fixture(scope="module")
def reference(smol):
    """Each prompt's greedy output ids, from the Session with no drafter."""
    session = Session(smol, "none", GenerationOptions(k=0, max_tokens=N))
    return {p: session.generate(p).tokens for p in PROMPTS}


def test_the_reference_drops_no_space(smol, reference):
    # the check can fail: at least one prompt's output begins with a space the detokenizer drops
    assert any(decoded(smol, p, ids)[len(p):][:1] == " " and not p.endswith(" ") for p, ids in reference.items())


def test_generate_on_a_raw_prompt_appends(smol, reference, monkeypatch, capsys):
    import olifant_mlx.verifier

    monkeypatch.setattr(olifant_mlx.verifier, "load_verifier", lambda *a, **k: smol)
    for p in PROMPTS:
        code = main(["generate", "--model", "smollm2-135m", "--draft", "none", "--ignore-chat-template",
                     "-p", p, "-m", str(N), "--json-stream", "--quiet"])
        assert code == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        final = lines[-1]
        streamed = "".join(x["text"] for x in lines[:-1] if "text" in x)
        assert final["tokens"] == reference[p], p
        assert p + final["text"] == decoded(smol, p, final["tokens"]), p
        assert streamed == final["text"], p


def test_the_servers_completions_append(smol, reference):
    run = start(smol, DrafterChoice({}, "none"), DEFAULTS, LIMITS)
    try:
        with httpx.Client(base_url=run.url, timeout=600) as c:
            for p in PROMPTS:
                body = {"prompt": p, "max_tokens": N, "temperature": 0}
                whole = c.post("/v1/completions", json=body).json()["choices"][0]["text"]
                sse = c.post("/v1/completions", json={**body, "stream": True}).text
                streamed = "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(sse)
                                   if e != "[DONE]" and json.loads(e)["choices"])
                want = decoded(smol, p, reference[p])
                assert p + whole == want, p
                assert p + streamed == want, p
    finally:
        run.stop()

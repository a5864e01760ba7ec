"""What the server tests share: the options and limits the tiny servers run with, waiting on a
server, SSE parsing, and the hostile request set with the check that each gets a clear error."""
import json
import time

from olifant_mlx.engine import GenerationOptions
from olifant_mlx.server.config import Limits

SECRET = "CONFIDENTIAL-PATIENT-ZETA"     # in prompts: must never reach a log
DEFAULTS = GenerationOptions(k=8, max_tokens=512)

# one request's pass at a time (max_batch 1), as the tests of queueing expect; batching: test_server_batch.py
LIMITS = Limits(max_tokens=5000, default_max_tokens=64, max_body_bytes=1 << 20, timeout_s=120, max_batch=1)


def wait_for(cond, what, timeout=120.0):
    """Poll until cond() (a generous bound for a loaded machine, not a timing claim)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def concurrently(run, calls) -> int:
    """Each call on a thread of its own, all at once; the most requests seen running together
    (a look every 5 ms, not a spin against the worker)."""
    import threading

    threads = [threading.Thread(target=call) for call in calls]
    peak = 0
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, run.queue.status()["running"])
        time.sleep(0.005)
    for t in threads:
        t.join()
    return peak


def idle(run):
    s = run.queue.status()
    return s["running"] == 0 and s["waiting"] == 0


def sse_events(text):
    """The `data:` payloads of an SSE body, as OpenAI clients split them."""
    out = []
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                out.append(line[6:])
    return out


MSG = [{"role": "user", "content": f"hello {SECRET}"}]
BAD = [  # (path, body: dict / bytes, headers, status, code or param)
    ("/v1/completions", b"{" + SECRET.encode(), None, 400, "invalid_json"),
    ("/v1/completions", b"[1, 2]", None, 400, "invalid_json"),
    ("/v1/completions", b'{"prompt": "x", "temperature": NaN}', None, 400, "invalid_json"),
    ("/v1/completions", b"\xff\xfe{}", None, 400, "invalid_json"),
    ("/v1/completions", b"[" * 100_000 + b"]" * 100_000, None, 400, None),
    ("/v1/completions", json.dumps({"prompt": SECRET}).encode(), {"content-type": "text/plain"}, 415, None),
    ("/v1/completions", json.dumps({"prompt": SECRET}).encode(), {"content-type": ""}, 415, None),
    ("/v1/completions", {"prompt": 5}, None, 400, "prompt"),
    ("/v1/completions", {"max_tokens": 5}, None, 400, "prompt"),
    ("/v1/completions", {"prompt": SECRET, "max_tokens": "5"}, None, 400, "max_tokens"),
    ("/v1/completions", {"prompt": SECRET, "max_tokens": True}, None, 400, "max_tokens"),
    ("/v1/completions", {"prompt": SECRET, "max_tokens": 10**12}, None, 400, "max_tokens"),
    ("/v1/completions", {"prompt": SECRET, "max_tokens": 0}, None, 400, "max_tokens"),
    ("/v1/completions", {"prompt": SECRET, "max_tokens": -1}, None, 400, "max_tokens"),
    ("/v1/completions", {"prompt": SECRET, "temperature": "hot"}, None, 400, "temperature"),
    ("/v1/completions", {"prompt": SECRET, "temperature": 9}, None, 400, "temperature"),
    ("/v1/completions", b'{"prompt": "x", "temperature": 1e999}', None, 400, "temperature"),
    ("/v1/completions", {"prompt": SECRET, "top_p": 0}, None, 400, "top_p"),
    ("/v1/completions", {"prompt": SECRET, "seed": 2**70}, None, 400, "seed"),
    ("/v1/completions", {"prompt": SECRET, "num_draft_tokens": 100}, None, 400, "num_draft_tokens"),
    ("/v1/completions", {"prompt": SECRET, "stream": "yes"}, None, 400, "stream"),
    ("/v1/completions", {"prompt": SECRET, "draft": "legal"}, None, 400, "drafter_not_found"),
    ("/v1/completions", {"prompt": SECRET, "draft": "/etc/passwd"}, None, 400, "invalid_drafter"),
    ("/v1/completions", {"prompt": SECRET, "draft": "olifant:/tmp/x.olif"}, None, 400, "invalid_drafter"),
    ("/v1/completions", {"prompt": SECRET, "draft": 3}, None, 400, "draft"),
    ("/v1/completions", {"prompt": SECRET, "model": "gpt-4"}, None, 404, "model_not_found"),
    ("/v1/completions", {"prompt": SECRET, "n": 2}, None, 400, "n"),
    ("/v1/completions", {"prompt": SECRET, "logprobs": 3}, None, 400, "logprobs"),
    ("/v1/completions", {"prompt": SECRET, "echo": True}, None, 400, "echo"),
    ("/v1/completions", {"prompt": SECRET, "presence_penalty": 1.0}, None, 400, "presence_penalty"),
    ("/v1/completions", {"prompt": SECRET, "stop": ["a"] * 17}, None, 400, "stop"),
    ("/v1/completions", {"prompt": SECRET, "stop": ["x" * 257]}, None, 400, "stop"),
    ("/v1/completions", {"prompt": SECRET, "stop": [""]}, None, 400, "stop"),
    ("/v1/completions", {"prompt": SECRET, "timeout": 10**6}, None, 400, "timeout"),
    ("/v1/completions", {"prompt": [1, 2, 999]}, None, 400, "prompt"),
    ("/v1/completions", {"prompt": ["a", "b"]}, None, 400, "prompt"),
    ("/v1/completions", {"prompt": SECRET * 1000, "max_tokens": 100}, None, 400, "context_length_exceeded"),
    ("/v1/completions", {"prompt": SECRET, "stream_options": {"include_usage": True}}, None, 400, "stream_options"),
    ("/v1/chat/completions", {"messages": []}, None, 400, "messages"),
    ("/v1/chat/completions", {"prompt": SECRET}, None, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": SECRET}]}, None, 400, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, None, 400, "messages[0].content"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]}, None, 400, "unsupported_content"),
    ("/v1/chat/completions", {"messages": MSG, "logprobs": True}, None, 400, "logprobs"),
    ("/v1/chat/completions", {"messages": MSG, "tools": [{"type": "function"}]}, None, 400, "tools[0]"),
    ("/v1/chat/completions", {"messages": MSG, "max_completion_tokens": 99999}, None, 400, "max_completion_tokens"),
    ("/v1/chat/completions", {"messages": MSG, "chat_template_kwargs": {"tokenize": True}}, None, 400,
     "chat_template_kwargs"),
    ("/v1/chat/completions", {"messages": MSG * 2000}, None, 400, "messages"),
    ("/v1/chat/completions", {"messages": MSG, "stop": {"a": 1}}, None, 400, "stop"),
    ("/v1/completions", b'{"prompt": "' + b"x" * (2 << 20) + b'"}', None, 413, "body_too_large"),
    ("/v1/nothing", {"prompt": SECRET}, None, 404, None),
]


def check_refused(client, cases):
    """Each request answered with its status and OpenAI's error shape, never a traceback."""
    for path, body, headers, status, what in cases:
        hdrs = {"content-type": "application/json", **(headers or {})}
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = client.post(path, content=data, headers=hdrs)
        label = (path, data[:80], status)
        assert r.status_code == status, (label, r.status_code, r.text[:300])
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], label
        assert "Traceback" not in r.text and "File \"" not in r.text, label
        if what is not None:
            assert what in (err["code"], err["param"]), (label, err)


# ---- a library on the tiny verifier's tokens (provenance on the server) ----------------------

TINY_BASE = 63 * (0x4E00 // 63 + 1)      # a CJK character per tiny-model id: 1 + ord(c) % 63 == id


def text_of(ids) -> str:
    """Text the tiny tokenizer reads back as these ids."""
    return "".join(chr(TINY_BASE + t - 1) for t in ids)


def tiny_tokenizer():
    """The tiny verifier's tokenizer as a library builder takes one."""
    from tiny_models import Tok

    from olifant_mlx.verifier.tokenizers import Tokenizer

    tok = Tok()
    return Tokenizer(tok.name, tok.vocab_size, tok.digest, lambda texts: [tok.encode(t) for t in texts],
                     tok.decode)


def own_cache(tmp_path_factory):
    """A module fixture's body: $OLIFANT_CACHE on a fresh folder while the module runs."""
    import pytest

    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("cache")
    mp.setenv("OLIFANT_CACHE", str(root))
    yield root
    mp.undo()


def tiny_library(name, folder, copied):
    """A library of two documents on the tiny tokenizer, the first holding `copied` (ids)."""
    from olifant_mlx import library

    (folder / "deed.txt").write_text(text_of([3, 3, 60, 2]) + text_of(copied) + text_of([61, 62, 2]))
    (folder / "other.txt").write_text(text_of([5, 6, 7, 8, 9, 10, 11, 12]))
    library.build(name, folder, tiny_tokenizer())
    return library.load(name)

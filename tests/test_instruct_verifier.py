"""The real offline instruct verifier (SmolLM2-135M-Instruct): an instruction gets an answer
through the chat template, the same text with every drafter; a multi-turn chat on stdin;
the long-prompt error. Minutes on two cores: marked slow."""
import json
import os
import subprocess
import sys

import pytest

from olifant_mlx.engine import Chat, ContextError, GenerationOptions, Session
from olifant_mlx.engine.request import fit_context
from tiers import kv_regimes

pytestmark = pytest.mark.slow

CLAUSE = ("Draft a confidentiality clause for a software licence agreement between Acme Ltd and "
          "Beta GmbH.")


def test_an_instruction_gets_a_clause_with_every_drafter(smol, draft_path):
    session = Session(smol)
    prompt = session.prompt_for(CLAUSE)
    assert isinstance(prompt, Chat) and smol.has_chat_template
    opts = GenerationOptions(max_tokens=24, k=0)
    plain = session.generate(prompt, opts, drafter=None)
    assert len(plain.tokens) > 20 and "confidential" in plain.text.lower()
    raw = session.generate(CLAUSE, opts)            # without the template: what users got before
    assert raw.text != plain.text
    for spec in ("auto", "lookup", f"olifant:{draft_path}", f"hybrid:{draft_path}",
                 f"adaptive:olifant:{draft_path}", "hybrid"):
        session = session.with_drafter(spec)
        for kv in kv_regimes():   # both in the extended tier (tests/tiers.py)
            if not kv and spec not in ("auto", "lookup"):
                continue                            # uncached passes re-read the whole context
            r = session.generate(prompt, opts.replace(k=5, kv_cache=kv))
            assert r.text == plain.text and r.tokens == plain.tokens, (spec, kv)


def cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True,
                          input=stdin, env={**os.environ, "COLUMNS": "200"}, timeout=600)


def test_generate_applies_the_template_and_says_which_drafter(draft_path):
    r = cli("generate", "--model", "smollm2-135m", "-p", CLAUSE, "-m", "24", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["tokens"]) == 24 and out["text"].strip()
    assert "Prompt:" in r.stderr and "Generation:" in r.stderr and "Peak memory:" in r.stderr
    assert "Drafting: auto -> adaptive:hybrid" in r.stderr
    nd = cli("generate", "--model", "smollm2-135m", "-p", CLAUSE, "-m", "24", "--json-stream", "--quiet")
    lines = [json.loads(x) for x in nd.stdout.splitlines()]
    assert "".join(x["text"] for x in lines[:-1]) == out["text"] == lines[-1]["text"]
    assert lines[-2]["finish_reason"] == "max_tokens"


def test_a_multi_turn_chat_on_stdin():
    r = cli("chat", "--model", "smollm2-135m", "-m", "24",
            stdin="What is a confidentiality clause?\nNow make it shorter.\nq\n")
    assert r.returncode == 0, r.stderr
    answers = [a for a in r.stdout.split("\n\n") if a.strip()]
    assert len(r.stdout.strip()) > 40 and r.stderr.count("tokens,") == 2, (r.stdout, r.stderr)
    assert answers


def test_chat_turns_see_the_whole_conversation(smol):
    session = Session(smol, "lookup")
    chat = Chat.of("Name one EU regulation.")
    first = session.generate(chat, GenerationOptions(max_tokens=16))
    second = chat.then("assistant", first.text).then("user", "Repeat your answer exactly.")
    ids = session.encode(second)                 # what the drafter's start() sees
    answer = smol.tokenizer.encode(first.text, add_special_tokens=False)
    assert len(answer) > 3 and any(ids[i:i + len(answer)] == answer for i in range(len(ids)))
    assert ids[:len(session.encode(chat)) - 3] == session.encode(chat)[:-3]   # the first turn, unchanged


def test_a_prompt_longer_than_the_context_is_refused_at_once(smol):
    session = Session(smol)
    long = "Article 1. " * 3000                         # ~ 12,000 tokens, context 8,192
    with pytest.raises(ContextError, match=r"context holds 8,192"):
        session.generate(long, GenerationOptions(max_tokens=8))
    r = cli("generate", "--model", "smollm2-135m", "--ignore-chat-template", "-m", "8", "-p", "-",
            stdin=long)
    assert r.returncode == 1 and "--truncate" in r.stderr and "Traceback" not in r.stderr
    # --truncate keeps the prompt's tail: exactly what fits beside --max-tokens (the flag's wiring:
    # test_cli_conventions; generating from an 8k-token prompt costs minutes on a CPU)
    opts = GenerationOptions(max_tokens=8, truncate=True)
    full = session.encode(long)
    ids = fit_context(session.verifier, full, opts)
    assert len(ids) == 8192 - 8 and ids[-100:] == full[-100:]

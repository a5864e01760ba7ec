"""Prompt cache reuse on the real SmolLM2-135M-Instruct: a multi-turn chat whose turns start from
the conversation's cache answers token for token what a fresh Session answers on the whole
conversation, with drafting (olifant, hybrid, adaptive hybrid) and without, in both regimes.
Minutes on two cores: marked slow."""
import pytest

from olifant_mlx.engine import Chat, GenerationOptions, PromptCache, Session
import tiers
from tiers import extended

pytestmark = pytest.mark.slow

QUESTIONS = ("Draft a confidentiality clause for a software licence.",
             "Now make it shorter.", "Add a clause on the governing law.")


@pytest.mark.parametrize("regime", ["kv", pytest.param("uncached", marks=extended)])
def test_a_chat_with_the_cache_answers_as_a_fresh_session(smol, draft_path, regime):
    """Uncached: two turns, 16 tokens, plain and adaptive hybrid (each pass re-reads the whole
    conversation, so a third turn would cost the most and prove nothing the cache does). The
    fresh answer of each turn is a fresh plain Session's, made once: a fresh drafting Session
    answers it too (lossless, tests/test_offline_verifier.py), so every drafter's cached turn
    is held to the same tokens."""
    opts = GenerationOptions(k=5, max_tokens=40 if regime == "kv" else 16, kv_cache=regime == "kv")
    specs = ["none", f"olifant:{draft_path}", f"hybrid:{draft_path}", f"adaptive:hybrid:{draft_path}"]
    fresh = {}                           # the conversation so far -> a fresh plain Session's answer
    for spec in specs if regime == "kv" else specs[::3]:
        session, cache = Session(smol, spec, opts), PromptCache()
        chat = Chat(())
        for turn, q in enumerate(QUESTIONS if regime == "kv" else QUESTIONS[:2]):
            chat = chat.then("user", q)
            got = session.generate(chat, cache=cache)
            key = repr(chat.messages)
            if key not in fresh:
                fresh[key] = Session(smol, "none", opts).generate(chat).tokens
            assert got.tokens == fresh[key], f"{spec}, turn {turn}"
            cached = got.stats.extra.get("cached_tokens")
            if regime == "uncached":
                assert cached is None
            elif turn:       # everything before this turn's question came from the cache
                assert cached >= len(smol.chat_ids(chat.messages[:-2])), f"{spec}, turn {turn}: {cached}"
            chat = chat.then("assistant", got.text)


def test_a_sliding_window_falls_back_to_a_fresh_prefill(smol, draft_path):
    """--max-kv-size smaller than the conversation: turns that outgrow the window read it afresh."""
    opts = GenerationOptions(k=5, max_tokens=24, max_kv_size=96)
    session, cache = Session(smol, f"hybrid:{draft_path}", opts), PromptCache()
    chat, seen = Chat(()), []
    for q in QUESTIONS:
        chat = chat.then("user", q)
        got = session.generate(chat, cache=cache)
        assert got.tokens == Session(smol, f"hybrid:{draft_path}", opts).generate(chat).tokens
        n = len(smol.chat_ids(chat.messages))
        seen.append((n, got.stats.extra["cached_tokens"]))
        chat = chat.then("assistant", got.text)
    assert all(c == 0 for n, c in seen if n > 96) and any(n > 96 for n, _ in seen)


NEAR_TIE = 0.25     # logits: where plain's top two are closer, a quantized cache may pick either
ISSUE_DRAFT = "fixtures/drafts/smollm2-135m-2e6be56f1309.olif"   # the draft that diverged (issue 37)


@pytest.fixture(params=["suite", "issue"])
def kv_draft(request, draft_path):
    """The suite's draft model (fixed inputs), and the one that made this test fail where it was
    not written (a demo model trained from one machine's licence texts; in the shared fixtures)."""
    if request.param == "suite":
        return draft_path
    path = request.getfixturevalue("shared") / ISSUE_DRAFT       # skips without the shared material
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


def plain_logits(smol, ids, tokens, bits, start):
    """Plain decoding's logits before token len(tokens) over a quantized cache, one-token steps."""
    from olifant_mlx.engine import cache as kv
    from olifant_mlx.mlx_setup import mx

    layers = kv.make_cache(smol.model)
    logits = kv.prefill(smol.model, layers, ids)
    kv.quantize(layers, bits, 64, start)
    for t in tokens:
        logits = smol.model(mx.array([[t]]), cache=layers)[0, -1]
        kv.quantize(layers, bits, 64, start)
    return logits


@pytest.mark.parametrize("bits", [4, 8])
def test_a_quantized_kv_cache_speculates_exactly(smol, kv_draft, bits, request):
    """--kv-bits, the guarantee docs/speculative-decoding.md states: speculative output equals
    plain output with the same quantized cache up to a near-tie: where they differ first, plain's
    two candidates are within NEAR_TIE of each other (a pass over k + 1 tokens and one-token steps
    reach the same position through different passes over quantized keys). The switch after the
    prefill (start 0) or inside the answer (start 60: passes stop at it). The lead rule plans on
    a fixed cost curve: live, measured pass times choose which positions a multi-token pass
    computes, which made the verdict differ from run to run. Every drafter and k over a
    quantized cache: tests/test_prompt_cache.py (the tiny model)."""
    from olifant_mlx.measure.bench import REFERENCE_COST

    if request.node.callspec.id in ("issue-4", "suite-8") and not tiers.on():
        pytest.skip("extended tier (tests/tiers.py): each draft model and each width stay checked")
    prompt = Chat.of("Draft a confidentiality clause for a software licence.")
    for start in (0, 60):
        opts = GenerationOptions(k=8, max_tokens=48, kv_bits=bits, quantized_kv_start=start,
                                 pass_cost=REFERENCE_COST, draft_cost=REFERENCE_COST)
        session = Session(smol, "none", opts)
        plain = session.generate(prompt).tokens
        for spec in (f"olifant:{kv_draft}", f"adaptive:hybrid:{kv_draft}"):   # the hybrid inside it
            got = Session(smol, spec, opts).generate(prompt).tokens
            d = next((i for i, (a, b) in enumerate(zip(got, plain)) if a != b), None)
            if d is None:
                assert got == plain, f"{spec}, start {start}"
                continue
            logits = plain_logits(smol, session.encode(prompt), plain[:d], bits, start)
            gap = float(logits[plain[d]] - logits[got[d]])
            assert 0 <= gap < NEAR_TIE, f"{spec}, start {start}: token {d} is {got[d]}, plain's {plain[d]} by {gap}"


def cli(*args, stdin=None):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True,
                          input=stdin, timeout=600)


def test_chat_on_stdin_reuses_the_conversations_cache():
    r = cli("chat", "--model", "smollm2-135m", "-m", "16",
            stdin="What is a confidentiality clause?\nNow make it shorter.\nq\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("tokens,") == 2 and r.stderr.count("prompt tokens from the cache") == 1, r.stderr


def test_cache_prompt_then_generate_continues_it(smol, tmp_path):
    """The file round trip through the commands: the answer is the fresh Session's on the whole
    prompt; a file made for another model is refused, naming it."""
    import argparse
    import json
    import os

    from olifant_mlx.cli.generate import continue_cached
    from tiny_models import tiny_verifier

    path = tmp_path / "contract.safetensors"
    r = cli("cache-prompt", "--model", "smollm2-135m", "--prompt-cache-file", str(path),
            "-p", "Here is a licence: THE SOFTWARE IS PROVIDED AS IS, WITHOUT WARRANTY OF ANY KIND.")
    assert r.returncode == 0 and "saved the KV cache" in r.stderr, r.stderr
    assert os.stat(path).st_mode & 0o777 == 0o600
    r = cli("generate", "--model", "smollm2-135m", "--prompt-cache-file", str(path), "-p", " Summarise it.",
            "-m", "24", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["stats"]["cached_tokens"] > 20
    opts = GenerationOptions(k=8, max_tokens=24)
    session = Session(smol, "auto", opts)
    args = argparse.Namespace(prompt_cache_file=str(path))
    ids, _ = continue_cached(session, session.prompt_for(" Summarise it."), args, opts)
    assert out["tokens"] == Session(smol, "none", opts).generate(ids).tokens
    # another model's file: refused before the verifier loads, naming the file
    from olifant_mlx.engine import cache as kv
    from olifant_mlx.engine import prompt_file

    v = tiny_verifier()
    layers = kv.make_cache(v.model)
    kv.prefill(v.model, layers, [1, 2, 3])
    foreign = tmp_path / "tiny.safetensors"
    prompt_file.save(foreign, layers, [1, 2, 3], v)
    r = cli("generate", "--model", "smollm2-135m", "--prompt-cache-file", str(foreign), "-p", "x")
    assert r.returncode == 1 and str(foreign) in r.stderr and "another model" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_generate_says_what_kv_bits_guarantees_when_it_drafts(capsys):
    """Issue 37, item 18: with --kv-bits the output equals plain decoding's up to near-ties,
    and the command says so when it drafts (not when it does not)."""
    from olifant_mlx.cli import main
    from olifant_mlx.cli.generate import KV_BITS_NOTE

    for draft, said in (("lookup", True), ("none", False)):
        assert main(["generate", "--model", "smollm2-135m", "--kv-bits", "8", "--quantized-kv-start", "0",
                     "--draft", draft, "-m", "4", "-p", "hello"]) == 0
        assert (KV_BITS_NOTE in capsys.readouterr().err) is said, draft

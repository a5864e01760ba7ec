"""The real offline verifiers (GGUF from PyPI -> mlx-lm) and the engine on them."""
import json
import os
import subprocess
import sys

import pytest

from olifant_mlx.cli.generate import demo_draft_model
from olifant_mlx.drafters import (AdaptiveDrafter, HybridDrafter, LookupDrafter, NeuralDrafter,
                                  NgramDrafter, OlifantDrafter, WordNgramDrafter)
from olifant_mlx.engine import GenerationOptions, Session, generate, generate_steps
from olifant_mlx.engine.loop import script_options
from tiers import kv_regimes

pytestmark = pytest.mark.slow    # the real offline verifiers: minutes on two cores

LEGAL = ("Article 1\nThis Regulation lays down rules concerning the protection of natural persons "
         "with regard to the processing of personal data")


def test_gguf_conversion_is_right(smol):
    v, ours = smol, smol.identity
    text = Session(v).generate("The capital of France is", GenerationOptions(k=0, max_tokens=8)).text
    assert "Paris" in text
    assert v.context_length == 8192 and v.name == "smollm2-135m"
    assert ours.vocab_size == 49152 and ours.encode("12") == [33, 34]  # digits split one by one


def test_every_drafter_preserves_output(smol):
    model, tok, ours = smol.model, smol.tokenizer, smol.identity
    prompt = tok.encode(LEGAL)
    olifant = OlifantDrafter(demo_draft_model(ours, "smollm2-135m", ["builtin:licenses"])[0])
    for kv in kv_regimes():       # both in the extended tier (tests/tiers.py)
        n = 20 if kv else 12  # uncached steps re-read the whole context: keep them few
        ref, _ = generate(model, prompt, max_tokens=n, kv_cache=kv)
        for d in (olifant, NgramDrafter(), WordNgramDrafter(ours), LookupDrafter(),
                  HybridDrafter(olifant), AdaptiveDrafter(HybridDrafter(olifant))):
            # k 1 and 8 here; k 3 and 8 for each of these drafters, both regimes, in
            # tests/test_transcripts.py (live == its transcript's replay, so == plain)
            for k in (1, 8):
                out, _ = generate(model, prompt, d, k=k, max_tokens=n, kv_cache=kv)
                assert out == ref, (d.name, k, kv)
        steps = list(generate_steps(model, prompt, NeuralDrafter(model),
                                    script_options(k=3, max_tokens=n, kv_cache=kv)))
        assert [t for s in steps for t in s.emitted] == ref
        # the verifier drafting for itself: every draft accepted, but where max_tokens cuts
        assert all(s.accepted == len(s.drafted) == 3 for s in steps[:-1])
        out, st = generate(model, prompt, olifant, k=8, max_tokens=5, kv_cache=kv)
        assert out == ref[:5] and st.stop_reason == "max_tokens"


def test_eos_ends_generation(smol):
    model, tok = smol.model, smol.tokenizer
    chat = "<|im_start|>user\nReply with one word: yes or no?<|im_end|>\n<|im_start|>assistant\n"
    prompt = tok.encode(chat)
    eos = tok.eos_token_ids
    ref, st = generate(model, prompt, max_tokens=40, eos_ids=eos)
    assert st.stop_reason == "eos" and 0 < len(ref) < 40
    for d in (NgramDrafter(), LookupDrafter()):
        for kv in (True, False):
            out, st = generate(model, prompt, d, k=5, max_tokens=40, eos_ids=eos, kv_cache=kv)
            assert out == ref and st.stop_reason == "eos"


def cli(*args):
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    return r


def test_generate_and_demo_commands(tmp_path):
    r = cli("generate", "--model", "smollm2-135m", "--draft", "lookup", "-k", "3", "-p", LEGAL,
            "--max-tokens", "12", "--json", "--stats")
    out = json.loads(r.stdout)
    assert len(out["tokens"]) == 12 and out["stats"]["drafter"] == "lookup"
    assert "tokens-per-sec" in r.stderr and "acceptance" in r.stderr
    plain = json.loads(cli("generate", "--model", "smollm2-135m", "-p", LEGAL, "--max-tokens", "12",
                           "--json", "--no-kv-cache").stdout)
    assert plain["tokens"] == out["tokens"]
    r = cli("demo", "--max-tokens", "30", "--rounds", "1")     # rounds: tests/test_demo_rounds.py
    assert "outputs identical: yes" in r.stdout and "speedup" in r.stdout


def test_gemma3_alias(gemma):
    v = gemma
    model, tok, ours = v.model, v.tokenizer, v.identity
    prompt = tok.encode("Monday, Tuesday, Wednesday,")
    assert prompt[0] == tok.bos_token_id == 2  # gemma needs its BOS
    ref, _ = generate(model, prompt, max_tokens=8)
    assert ours.decode(ref).startswith(" Thursday")
    for kv in (True, False):
        out, _ = generate(model, prompt, LookupDrafter(), k=3, max_tokens=8, kv_cache=kv,
                          bos_id=tok.bos_token_id)
        assert out == ref


def test_generate_remembers_sessions_only_when_asked(smol, tmp_path):
    ours = smol.identity
    draft = tmp_path / "d.olif"
    demo_draft_model(ours, "smollm2-135m", ["builtin:licenses"])[0].save(draft)
    hist = tmp_path / "sessions.bin"
    base = ("generate", "--model", "smollm2-135m", "-p", LEGAL, "--max-tokens", "24", "--json")
    plain = json.loads(cli(*base).stdout)
    first = json.loads(cli(*base, "--draft", f"hybrid:{draft}", "--history", str(hist)).stdout)
    assert hist.read_bytes()[:8] == b"OLIFHST1" and (hist.stat().st_mode & 0o777) == 0o600
    second = json.loads(cli(*base, "--draft", f"adaptive:hybrid:{draft}", "--history", str(hist)).stdout)
    assert plain["tokens"] == first["tokens"] == second["tokens"]
    # the second session drafts the first one's continuation
    assert second["stats"]["accepted"] > first["stats"]["accepted"]
    assert second["stats"]["steps"] < first["stats"]["steps"]
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", *base, "--draft", "lookup",
                        "--history", str(tmp_path / "other.bin")], capture_output=True, text=True)
    assert r.returncode != 0 and "--history needs a hybrid drafter" in r.stderr
    assert not (tmp_path / "other.bin").exists()


def test_qwen_alias_answers_an_instruction_through_its_chat_template():
    """qwen2.5-coder-1.5b: fetched (22 parts), checked, converted (the platform's format), an
    instruction answered through the file's chat template; speculative output == plain.
    Minutes on two cores (a 1.5B verifier at about 2 tokens/s); skipped when offline. A first
    run downloads 1.1 GB and converts it to 6 GB of fp32 (about 10 minutes here), so it runs
    when the alias is already fetched or when OLIFANT_TEST_QWEN=1 asks for the download."""
    from olifant_mlx.files import cache_dir
    from olifant_mlx.verifier.aliases import VerifierError, alias_gguf

    if not (cache_dir() / "gguf" / "qwen2.5-coder-1.5b.gguf").is_file() and os.environ.get("OLIFANT_TEST_QWEN") != "1":
        pytest.skip("qwen2.5-coder-1.5b is not fetched yet: OLIFANT_TEST_QWEN=1 fetches it (1.1 GB, minutes)")
    try:
        alias_gguf("qwen2.5-coder-1.5b")
    except VerifierError as e:
        if "cannot fetch" in str(e):
            pytest.skip(f"qwen2.5-coder-1.5b cannot be downloaded here: {e}")
        raise
    # in this process, as the generate command does it (Session.prompt_for: the chat template):
    # one load of the 6 GB verifier, not one per command (the command: tests of SmolLM2)
    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.verifier import load_verifier

    session = Session(load_verifier("qwen2.5-coder-1.5b"))
    prompt = session.prompt_for("Write a Python function add(a, b) that returns the sum.")
    assert session.verifier.has_chat_template and not isinstance(prompt, str)
    plain = session.generate(prompt, GenerationOptions(k=0, max_tokens=10), drafter=None)
    session = session.with_drafter("lookup")
    spec = session.generate(prompt, GenerationOptions(k=3, max_tokens=10))
    assert spec.tokens == plain.tokens and len(plain.tokens) == 10 and spec.stats.drafted > 0
    assert "def add" in plain.text or "```" in plain.text, plain.text    # an answer, not a continuation

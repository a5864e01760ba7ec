"""Generation the way mlx-lm users expect it, on the tiny verifier: sampling filters and a
repetition penalty that stay lossless under drafting, stop sequences, extra EOS tokens, the
context check and --truncate, chat prompts through a template."""
import pytest

from olifant_mlx.drafters import HybridDrafter, LookupDrafter, NgramDrafter
from olifant_mlx.engine import Chat, ContextError, GenerationOptions, Session
from olifant_mlx.engine.session import StopScanner, split_segments
from olifant_mlx.verifier import Verifier
from tiny_models import Tok, tiny_verifier


@pytest.fixture(scope="module")
def verifier():
    return tiny_verifier()


PROMPT = "The Member States shall ensure that"


@pytest.mark.parametrize("opts", [dict(temperature=0.8, top_k=5, seed=1),
                                  dict(temperature=1.0, min_p=0.2, seed=2),
                                  dict(temperature=0.7, top_p=0.9, top_k=8, min_p=0.05, seed=3),
                                  dict(repetition_penalty=1.3),
                                  dict(repetition_penalty=1.5, temperature=0.9, seed=4)],
                         ids=["top-k", "min-p", "all-filters", "repetition-penalty", "penalty+sampling"])
def test_processors_and_filters_stay_lossless(verifier, opts):
    session = Session(verifier)
    base = GenerationOptions(max_tokens=30, k=0, **opts)
    plain = session.generate(PROMPT, base).tokens
    greedy = session.generate(PROMPT, GenerationOptions(max_tokens=30, k=0)).tokens
    assert plain != greedy                       # the option changed the output ...
    for kv in (True, False):
        for d in (NgramDrafter(), LookupDrafter(), HybridDrafter(None)):
            for k in (1, 4):
                out = session.generate(PROMPT, base.replace(k=k, kv_cache=kv), drafter=d).tokens
                assert out == plain, (opts, kv, d.name, k)   # ... and drafting did not


def test_stop_sequences_cut_text_and_never_show_part_of_one(verifier):
    session = Session(verifier, "ngram")
    full = session.generate(PROMPT, GenerationOptions(max_tokens=40)).text
    stop = full[17:20]
    assert stop and stop not in full[:17]
    rs = list(session.stream(session.plan(PROMPT, GenerationOptions(max_tokens=40, stop=(stop, "never-there")))))
    text = "".join(r.text for r in rs)
    assert text == full[:17] and rs[-1].finish_reason == "stop"
    # a stop sequence split across passes is held back, not shown and then retracted
    scan = StopScanner(("END",))
    assert scan.feed([("abc E", "plain")]) == ([("abc ", "plain")], False)
    assert scan.feed([("N", "accepted")]) == ([], False)
    assert scan.feed([("D tail", "bonus")]) == ([], True)
    scan = StopScanner(("END",))
    assert scan.feed([("E", "plain")]) == ([], False) and scan.flush() == [("E", "plain")]
    assert split_segments([("ab", "x"), ("cd", "y")], 3) == ([("ab", "x"), ("c", "y")], [("d", "y")])


def test_extra_eos_tokens(verifier):
    class NamedTok(Tok):
        def get_vocab(self):
            return {chr(96 + i % 26) + str(i): i for i in range(64)}

    v = Verifier(verifier.model, NamedTok(), Tok(), "tiny")
    session = Session(v, "lookup")
    ref = session.generate(PROMPT, GenerationOptions(max_tokens=30)).tokens
    eos = ref[6]
    name = next(k for k, i in NamedTok().get_vocab().items() if i == eos)
    r = session.generate(PROMPT, GenerationOptions(max_tokens=30, extra_eos_tokens=(name,)))
    assert r.tokens == ref[:ref.index(eos)] and r.finish_reason == "eos"


def test_context_is_checked_before_prefill_and_truncate_keeps_the_tail(verifier):
    v = Verifier(verifier.model, Tok(), Tok(), "tiny", context_length=40)
    session = Session(v, "ngram")
    long = "x" * 35                                       # 35 prompt tokens + 10 asked > 40
    with pytest.raises(ContextError, match=r"35 tokens and 10 more .* holds 40.*or truncate to keep") as e:
        session.generate(long, GenerationOptions(max_tokens=10))
    assert e.value.worded(lambda option: f"--{option.replace('_', '-')}").endswith(
        "ask for fewer tokens (--max-tokens), or --truncate to keep the prompt's last 30 tokens")
    r = session.generate("ab" + long, GenerationOptions(max_tokens=10, truncate=True))
    assert r.stats.prompt_tokens == 30 and r.stats.tokens == 10
    tail = Session(v).generate(Tok().encode("ab" + long)[-30:], GenerationOptions(max_tokens=10, k=0))
    assert r.tokens == tail.tokens                        # exactly the tail's continuation
    assert session.generate("x" * 20, GenerationOptions(max_tokens=10)).stats.tokens == 10


def test_chat_prompts_go_through_the_template(verifier):
    class TemplateTok(Tok):
        has_chat_template = True

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kw):
            text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
            return text + ("<assistant>" if add_generation_prompt else "") + kw.get("suffix", "")

        def encode(self, text, add_special_tokens=True):
            return super().encode(text)

    v = Verifier(verifier.model, TemplateTok(), Tok(), "tiny-instruct")
    session = Session(v)
    chat = session.prompt_for("hi", system_prompt="be brief")
    assert isinstance(chat, Chat) and session.prompt_for("hi", chat_template=False) == "hi"
    assert session.encode(chat) == Tok().encode("<system>be brief<user>hi<assistant>")
    turn2 = chat.then("assistant", "hello").then("user", "more")
    assert session.encode(turn2) == Tok().encode("<system>be brief<user>hi<assistant>hello<user>more<assistant>")
    assert session.encode(Chat.of("hi", template_kwargs={"suffix": "!"}))[-1] == Tok().encode("!")[0]
    assert Session(verifier).prompt_for("hi") == "hi"       # no template: the text as it is
    with pytest.raises(ValueError, match="role"):
        Chat(({"role": "wizard", "content": "x"},))

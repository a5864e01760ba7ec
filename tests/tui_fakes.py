"""What the TUI tests share: the real Session over a fake verifier and a scripted engine loop,
a fake tokenizer identity, tiny draft models trained for given tokenizers, and helpers."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from rich.text import Text

from olifant_mlx.engine import Session, Step
from olifant_mlx.tui.app import OlifantApp

SNAPSHOTS = Path(__file__).parent / "snapshots"
WORDS = ["the", " warranties", " of", " merchantability", ",", " fitness", "\n", " for", " a",
         " particular", " purpose"]


class Identity:
    """A tokenizer identity (what draft models are checked against)."""

    def __init__(self, name="fake-tok", vocab_size=256, digest=bytes(range(32))):
        self.name, self.vocab_size, self.digest = name, vocab_size, digest


FAKE_IDENTITY = Identity()


class FakeDetok:
    """Like mlx-lm's streaming detokenizer: reading last_segment clears it. Token t is
    words[t] (by default WORDS, over and over)."""

    def __init__(self, words=WORDS):
        self.words = words

    def reset(self):
        self.text, self._seg = "", ""

    def add_token(self, t):
        self._seg += self.words[t % len(self.words)]
        self.text += self.words[t % len(self.words)]

    def finalize(self):
        pass

    @property
    def last_segment(self):
        seg, self._seg = self._seg, ""
        return seg


class FakeVerifier:
    """What a Session needs of a Verifier, with a chat template; the fake engine below never
    calls the model. `loads` counts verifiers made (a load each)."""
    name = "fake-verifier"
    eos_ids = (999,)
    bos_id = None
    model = None
    identity = FAKE_IDENTITY
    context_length = None
    has_chat_template = True
    loads = 0

    def __init__(self):
        FakeVerifier.loads += 1

    def encode(self, text):
        return list(range(len(text.split())))

    def chat_ids(self, messages, template_kwargs=None):
        return list(range(sum(len(m["content"].split()) + 2 for m in messages)))

    def detokenizer(self):
        d = FakeDetok()
        d.reset()
        return d


class FakeSession(Session):
    """The real Session over a fake verifier and a scripted engine loop."""
    delay = 0.0
    streams = 0          # generations started (the engine loop was asked for steps)
    prompts: list = []   # every prompt's ids
    caches: list = []    # the prompt cache each generation was given (None: read afresh)

    def _steps(self, ids, drafter, opts, stats, on_prefill, eos_ids, cache=None, constraint=None, batched=False):
        FakeSession.streams += 1
        FakeSession.prompts.append(list(ids))
        FakeSession.caches.append(cache)
        return fake_steps(None, ids, drafter, k=opts.k, max_tokens=opts.max_tokens, stats=stats,
                          delay=self.delay)


def fake_session(model, meter, delay=0.0):
    s = FakeSession(FakeVerifier(), "none", meter=meter)
    FakeSession.delay = delay
    return s


def fake_steps(model, ids, drafter, *, k, max_tokens, stats, delay=0.0, **kw):
    """Steps of three kinds in turn: correction, bonus, plain; `max_tokens` tokens in all."""
    produced, i = 0, 0
    while produced < max_tokens:
        if k == 0:
            drafted, acc, emitted = [], 0, [produced]
        elif i % 2 == 0:
            drafted, acc, emitted = [produced, produced + 1, 5], 2, [produced, produced + 1, 4]
        else:
            drafted, acc, emitted = [produced, produced + 1], 2, [produced, produced + 1, 8]
        emitted = emitted[:max_tokens - produced]
        acc = min(acc, len(emitted))
        produced += len(emitted)
        done = produced >= max_tokens
        step = Step(index=i, drafted=drafted, accepted=acc, emitted=emitted,
                    verifier_token=emitted[-1] if len(emitted) > acc else None, fast_path=False,
                    forward_tokens=len(drafted) or 1, draft_s=0.0001, verify_s=0.001, step_s=0.0011,
                    finished=done, stop_reason="max_tokens" if done else "")
        stats.add(step)
        if delay:
            time.sleep(delay)
        yield step
        i += 1


def fake_text(n, k=3):
    out = []
    for step in fake_steps(None, [], None, k=k, max_tokens=n, stats=_Stats()):
        out.extend(WORDS[t % len(WORDS)] for t in step.emitted)
    return "".join(out)


class _Stats:
    def add(self, s):
        pass


def replay_spec(shared):
    return "replay:" + str(shared / "fixtures/energy/ioreport/replay_m4_zeus_apple_silicon.json")


def static_text(app, selector) -> str:
    content = app.query_one(selector).content
    return content.plain if isinstance(content, Text) else str(content)


async def wait_for(pilot, cond, timeout=60.0):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out waiting")
        await pilot.pause(0.05)


async def settle(pilot, app, timeout=60.0):
    """Until the generation in flight (if any) is over and its messages handled."""
    await pilot.pause()
    await wait_for(pilot, lambda: not app.workspace.generating, timeout)
    await pilot.pause()


def fake_app(delay=0.0, **kw):
    kw.setdefault("energy", "none")
    kw.setdefault("model_dirs", [])
    kw.setdefault("tokenizer_fn", lambda model: FAKE_IDENTITY)
    return OlifantApp(session_factory=lambda model, meter: fake_session(model, meter, delay), **kw)


class ByteTokenizer:
    """Enough of a tokenizer to train a draft model for it (one id per byte)."""

    def __init__(self, identity):
        self.name, self.vocab_size, self.digest = identity.name, identity.vocab_size, identity.digest

    def encode_batch(self, texts):
        return [list(t.encode()) for t in texts]

    def decode(self, ids):          # a library's passage index holds its paragraphs' text
        return bytes(ids).decode(errors="replace")

    def identity(self):
        return {"name": self.name, "vocab_size": self.vocab_size, "digest": self.digest.hex()}


def train_tiny(path, identity):
    """A small draft model trained for `identity`'s tokenizer."""
    from olifant_mlx.draftmodel.train import train

    corpus = path.with_suffix(".txt")
    corpus.write_text("the warranties of merchantability and fitness for a particular purpose. " * 20)
    train([str(corpus)], ByteTokenizer(identity), str(path), show_progress=False)
    return path


# ---- SVG snapshots (tests/snapshots/; OLIFANT_UPDATE_SNAPSHOTS=1 (re)writes them) -------------

def pinned_textual() -> str | None:
    """The Textual version the snapshots are drawn with (.ci/constraints.txt)."""
    constraints = Path(__file__).parents[1] / ".ci/constraints.txt"
    for line in constraints.read_text().splitlines() if constraints.is_file() else ():
        name, _, version = line.partition("==")
        if name.strip().lower() == "textual":
            return version.strip()
    return None


def check_snapshot(name: str, svg: str):
    import textual

    pinned = pinned_textual()
    if pinned and textual.__version__ != pinned and os.environ.get("OLIFANT_UPDATE_SNAPSHOTS") != "1":
        pytest.skip(f"the snapshots are Textual {pinned}'s (.ci/constraints.txt); this is {textual.__version__}")
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("OLIFANT_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(svg)
        return
    if not path.is_file():
        pytest.fail(f"missing snapshot {path}: run with OLIFANT_UPDATE_SNAPSHOTS=1 and review it")
    if svg != path.read_text():
        got = Path(os.environ.get("TMPDIR", "/tmp")) / f"{name}.got.svg"
        got.write_text(svg)
        pytest.fail(f"{name} differs from {path}: see {got} (OLIFANT_UPDATE_SNAPSHOTS=1 to accept)")

"""The drafter contract: cheap guesses of the verifier's next k tokens.

A drafter object is shared by every generation that drafts with it; the engine drafts each
generation with a state of its own, `open(prompt, learning, cost)`: started on the prompt
(without BOS unless `wants_bos`), sharing what is read only (an IGTree, an index, a draft
model's weights), holding what this generation learns, and taking what earlier ones left in
`learning` (drafters.learning: the Session's, or the drafter's own when None); `cost` is the
pass-cost model a drafter that sizes its drafts by the verifier's pass time (the adaptive one)
plans this generation with (None: its own fit). `finish()` at the end of the generation keeps
what it learnt for the next. The default `open` is a shallow copy of the drafter, started: a
drafter whose `start` makes its per-generation members anew (as every one here does) needs no
other.

A state: `draft(context, k)` -> up to k ids following `context` (the prompt plus everything
generated so far), `accept(tokens)` with the tokens appended to the context after each step;
optional, with defaults in `DrafterBase`: `draft_scored` (drafts with a confidence `Signal`
per token), `candidates` (every draft it could propose, for the adaptive drafter to choose
from), `observe(step, kv_cache)` (called by the engine after every verifier pass) and
`plans_led_passes` (True: the drafter sizes a pass led by a correction itself, see
`engine.costs.LeadRule`). Used directly (`start(prompt)`, then `draft`/`accept`), a drafter
object is its own state, for one generation at a time. `as_drafter` gives a drafter the
defaults of what it lacks, so the engine reads every member without asking whether it is there.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable


@dataclass(frozen=True)
class Signal:
    """How a drafted token was found, which predicts how likely it is to be accepted.

    source: "igtree", "lookup", "history", or a drafter's name; level: the IGTree's match
    depth, a copy's agreement with the context (1, 2, 3, 4, 8, 16, 32), or the position in the
    draft; share: the IGTree winner's share of its node in quarters (0..3), else 0."""
    source: str
    level: int = 0
    share: int = 0


class Draft(NamedTuple):
    tokens: list
    signals: list


EMPTY = Draft([], [])


def position_signals(name: str, n: int) -> list:
    """Signals of a drafter that knows nothing better: its name and the position (capped)."""
    return [Signal(name, min(i, 7)) for i in range(n)]


@runtime_checkable
class Drafter(Protocol):
    name: str
    wants_bos: bool
    plans_led_passes: bool

    def start(self, prompt: Sequence[int]) -> None: ...

    def draft(self, context: Sequence[int], k: int) -> list: ...

    def accept(self, tokens: Sequence[int]) -> None: ...

    def draft_scored(self, context: Sequence[int], k: int) -> Draft: ...

    def candidates(self, context: Sequence[int], k: int) -> list: ...

    def observe(self, step, kv_cache: bool) -> None: ...

    def open(self, prompt: Sequence[int], learning=None, cost=None) -> Drafter: ...

    def finish(self) -> None: ...


class DrafterBase:
    """Defaults for the optional part of the contract. A subclass defines `draft` or
    `draft_scored` (each default is written in terms of the other)."""
    name = "drafter"
    wants_bos = False          # True: reads the sequence exactly as the verifier does (BOS too)
    plans_led_passes = False   # True: sizes a pass led by a correction itself (the adaptive drafter)

    def start(self, prompt) -> None:
        pass

    def open(self, prompt, learning=None, cost=None):
        """This drafter's state for one generation (see the module docstring): a shallow copy,
        started on `prompt`."""
        state = copy.copy(self)
        state.start(prompt)
        return state

    def finish(self) -> None:
        pass

    def accept(self, tokens) -> None:
        pass

    def draft(self, context, k) -> list:
        return self.draft_scored(context, k).tokens

    def draft_scored(self, context, k) -> Draft:
        tokens = list(self.draft(context, k))
        return Draft(tokens, position_signals(self.name, len(tokens)))

    def candidates(self, context, k) -> list:
        d = self.draft_scored(context, k)
        return [d] if d.tokens else []

    def observe(self, step, kv_cache: bool) -> None:
        pass


class NoDrafter(DrafterBase):
    """Plain decoding: never drafts."""
    name = "none"

    def draft(self, context, k):
        return []


def none_from_spec(spec, tokenizer, history):
    """`none` (the registry's builder): plain decoding."""
    return NoDrafter()


REQUIRED = ("start", "draft", "accept")
OPTIONAL = ("draft_scored", "candidates", "observe", "finish")


class _Adapted(DrafterBase):
    """A duck-typed drafter that lacks part of the optional contract, given the defaults of
    what it lacks (its own optional methods are used as they are)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = str(getattr(inner, "name", type(inner).__name__))
        self.wants_bos = bool(getattr(inner, "wants_bos", False))
        self.plans_led_passes = bool(getattr(inner, "plans_led_passes", False))
        for method in OPTIONAL:
            if callable(getattr(inner, method, None)):
                setattr(self, method, getattr(inner, method))

    def start(self, prompt):
        self.inner.start(prompt)

    def open(self, prompt, learning=None, cost=None):
        """The object's own `open` where it has one, else a shallow copy of it, started."""
        own = getattr(self.inner, "open", None)
        if callable(own):
            return as_drafter(own(prompt, learning, cost))
        state = _Adapted(copy.copy(self.inner))     # its bound methods: the copy's
        state.start(prompt)
        return state

    def draft(self, context, k):
        return self.inner.draft(context, k)

    def accept(self, tokens):
        self.inner.accept(tokens)


def as_drafter(obj) -> Drafter:
    """`obj` as a full Drafter: None is NoDrafter, a Drafter is itself, and an object with
    start/draft/accept gets the defaults of the optional members it lacks. Anything else is a
    TypeError."""
    if obj is None:
        return NoDrafter()
    if isinstance(obj, Drafter):
        return obj
    missing = [m for m in REQUIRED if not callable(getattr(obj, m, None))]
    if missing:
        raise TypeError(f"{type(obj).__name__} is not a drafter: it lacks {', '.join(missing)}")
    return _Adapted(obj)

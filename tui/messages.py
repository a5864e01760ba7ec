"""What the workers of tui/workers.py post to the tab that started them (workers never touch
widgets): status, chunks of text, the finished run, Compare's result, failures, the tokenizer.
Each tab handles them itself (tui/writing.py); a tab's other messages are defined beside it."""
from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message


@dataclass
class Chunk(Message):
    run: int                  # which generation (the job's id; Compare's plain run: -id)
    segments: list            # [(text, provenance)]
    stats: object             # a copy of the running Stats
    elapsed: float
    sources: list = field(default_factory=list)   # newly found copied spans (tui/copied.py)
    verbatim: list = field(default_factory=list)  # runs the verbatim guard reported (Source dicts)
    precedents: list | None = None  # the passages the prompt was given (Precedents.as_list()), once
    left_out: int = 0               # pinned passages that did not fit the precedent budget


@dataclass
class Status(Message):
    text: str
    loading: bool = False


@dataclass
class Loaded(Message):
    """The verifier is loaded: its name and tokenizer identity (for the Models list)."""
    name: str
    identity: object
    loads: int


@dataclass
class Done(Message):
    run: int
    text: str
    stats: object
    window: object
    finish_reason: str


@dataclass
class CompareDone(Message):
    plain: tuple              # (text, Stats, Window)
    spec: tuple
    same: bool
    measured: object = None   # measure.rounds.Speedups over the rounds after the shown pair
    rates: tuple = ()         # (plain, speculative) median tokens/s over those rounds


@dataclass
class Failed(Message):
    where: str
    error: str
    run: int | None = None


@dataclass
class TokenizerKnown(Message):
    """The verifier's tokenizer (loaded alone, without weights) for marking draft models."""
    model: str | None
    identity: object

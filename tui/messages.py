"""Messages from the workers to the UI thread (workers never touch widgets)."""
from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message


@dataclass
class Chunk(Message):
    segments: list            # [(text, provenance)]
    stats: str
    target: str = "generate"


@dataclass
class Status(Message):
    text: str
    loading: bool = False


@dataclass
class Done(Message):
    stats: object
    text: str
    window: object
    cancelled: bool


@dataclass
class CompareDone(Message):
    plain: tuple              # (text, Stats, Window)
    spec: tuple
    same: bool


@dataclass
class Failed(Message):
    where: str
    error: str


@dataclass
class TrainDone(Message):
    summary: dict = field(default_factory=dict)


@dataclass
class TrainProgress(Message):
    phase: str = ""
    done: int = 0
    total: int | None = None

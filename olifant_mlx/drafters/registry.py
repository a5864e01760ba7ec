"""Drafters by name: one registry builds them from specs, validates a spec before any model is
loaded, and writes the help text every surface shows (the energy backends' pattern).

A spec is `KIND` or `KIND:ARG`: `auto` (the default everywhere: the best drafter available
for the verifier), `none`, `olifant:PATH`, `ngram[:N]`, `ngram-words[:N]`, `lookup[:N]`,
`neural:MODEL`, `hybrid[:PATH][+SPEC...]` (extra candidate sources after the draft model),
`adaptive:SPEC` (any other spec, its length chosen per step), `rest:PATH` (a corpus suffix
index), `ngram-cache:PATH` (llama.cpp's static n-gram cache) and `library:NAME` (a precedent
library: the adaptive hybrid over its IGTree, its suffix index and the session's text).

Each kind is one `DrafterKind` entry (`register`): its name, the grammar of its argument, its
help line, its builder (a function of the drafter's own module: `from_spec(spec, tokenizer,
history)`) and what it is (reads the session history, may be a hybrid's source, needs the
verifier's tokenizer, chooses its own draft length). Parsing, `help_text()`, `describe()`,
`uses_history` and the TUI's drafter list are derived from the entries, so a drafter is its
module plus one entry in the table of the built-in kinds (olifant_mlx/drafters/__init__.py,
which imports every drafter module first: the modules import this one, so it imports none).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from olifant_mlx.drafters.base import Drafter
from olifant_mlx.files import NotARegularFile, open_regular_file

MODEL_MAGIC = b"OLIFIGT\0"
INDEX_MAGIC = b"OLIFSFX\0"          # rest: (olifant_mlx.draftmodel.suffix)
NGRAM_MAGIC = b"OLIFNGC\0"          # ngram-cache:
NOT_A = {MODEL_MAGIC: "an olifant draft model (train one with `python -m olifant_mlx train`)",
         INDEX_MAGIC: "a suffix index (build one with `python -m olifant_mlx build-rest`)",
         NGRAM_MAGIC: "an n-gram cache (build one with `python -m olifant_mlx build-rest --ngram-cache`)"}


class DrafterSpecError(ValueError):
    """A drafter spec that names no drafter, a missing or foreign file, or a bad number."""


@dataclass(frozen=True)
class DrafterSpec:
    """A parsed, validated spec. `inner` is the wrapped spec of `adaptive:`; `sources` the
    extra candidate sources of `hybrid:PATH+SPEC+...`."""
    kind: str
    arg: str = ""
    inner: DrafterSpec | None = None
    sources: tuple = ()

    @property
    def text(self) -> str:
        if self.inner is not None:
            return f"{self.kind}:{self.inner.text}"
        arg = "+".join([self.arg] + [s.text for s in self.sources]) if self.sources else self.arg
        return f"{self.kind}:{arg}" if arg else self.kind

    @property
    def model_file(self) -> str | None:
        """The draft-model file this spec reads, if any (also through adaptive:)."""
        if self.inner is not None:
            return self.inner.model_file
        return self.arg if KINDS[self.kind].arg in ("file", "optfile") and self.arg else None

    @property
    def drafts(self) -> bool:
        return KINDS[self.kind].drafts

    @property
    def number(self) -> int | None:
        """An "int" argument, or the kind's default when it was left out."""
        return int(self.arg) if self.arg else KINDS[self.kind].default

    def __str__(self):
        return self.text


@dataclass(frozen=True)
class DrafterKind:
    """One drafter kind, everything every surface says or checks about it."""
    name: str
    arg: str                 # "" (none) | "int" (optional) | "file" | "optfile" | "model" | "spec" | "name"
    summary: str             # its help line (`describe()`, the TUI)
    build: Callable          # (spec, tokenizer, history) -> Drafter (a module's from_spec)
    default: int | None = None  # an "int" argument's value when it is left out
    magic: bytes = MODEL_MAGIC  # what a "file" argument must start with
    sources: bool = False    # takes extra candidate sources after its file: KIND[:PATH]+SPEC+...
    source: bool = True      # may be such a source (False: it chooses among candidates itself)
    history: bool = False    # reads the session's history (`uses_history`)
    tokenizer: bool = False  # needs the verifier's tokenizer to be built
    drafts: bool = True      # False: plain decoding
    own_length: bool = False  # chooses its draft length itself (the TUI's length box follows)
    aliases: tuple = ()      # other spellings of the kind (`plain` for none)

    @property
    def usage(self) -> str:
        more = "[+SPEC...]" if self.sources else ""
        return {"": self.name, "int": f"{self.name}[:N]", "file": f"{self.name}:PATH",
                "optfile": f"{self.name}[:PATH]", "model": f"{self.name}:MODEL",
                "spec": f"{self.name}:SPEC", "name": f"{self.name}:NAME"}[self.arg] + more


KINDS: dict[str, DrafterKind] = {}
ALIASES: dict[str, str] = {}


def register(kind: DrafterKind) -> None:
    """Add a kind (or replace the one of that name) with its aliases."""
    KINDS[kind.name] = kind
    ALIASES.update(dict.fromkeys(kind.aliases, kind.name))


class _FileProblem(DrafterSpecError):
    """A draft-model file that cannot be used; parse_spec names what the user typed."""


def check_model_file(path: str, magic: bytes = MODEL_MAGIC) -> None:
    """Exists, is a regular file (never open a FIFO), and starts like a model file."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise _FileProblem(f"draft model {path} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _FileProblem(f"{path} is not a regular file")
    try:
        with open_regular_file(path, "rb") as f:     # a FIFO swapped in after the stat is refused too
            head = f.read(8)
    except NotARegularFile:
        raise _FileProblem(f"{path} is not a regular file") from None
    except OSError as e:
        raise _FileProblem(f"cannot read {path}: {e.strerror}") from None
    if head != magic:
        raise _FileProblem(f"{path} is not {NOT_A[magic]}")


def parse_spec(text: str, check_files: bool = True, shown: str | None = None) -> DrafterSpec:
    """Parse and validate a spec, touching no model: unknown kinds, missing arguments, bad
    numbers and missing or foreign draft-model files are DrafterSpecErrors naming the spec;
    a file's error names `shown`, what the user typed (default `--draft TEXT`), not the part
    of a nested spec (adaptive:hybrid:PATH) that held the file."""
    try:
        return _parse(text, check_files)
    except _FileProblem as e:
        raise DrafterSpecError(f"{shown or '--draft ' + (text or '').strip()}: {e}") from None


def _parse(text: str, check_files: bool) -> DrafterSpec:
    text = (text or "").strip()
    kind, _, arg = text.partition(":")
    kind = ALIASES.get(kind, kind)
    if kind not in KINDS:
        raise DrafterSpecError(f"unknown drafter {text!r}: use {help_text()}")
    k = KINDS[kind]
    if k.arg == "":
        if arg:
            raise DrafterSpecError(f"drafter {kind} takes no argument, got {text!r}")
        return DrafterSpec(kind)
    if k.arg == "int":
        if not arg:
            return DrafterSpec(kind)
        if not arg.isdigit() or not 1 <= int(arg) <= 16:
            raise DrafterSpecError(f"drafter {text!r}: N must be a whole number from 1 to 16")
        return DrafterSpec(kind, arg)
    if k.sources and "+" in arg:
        return _parse_sources(k, text, arg, check_files)
    if k.arg == "optfile" and not arg:
        return DrafterSpec(kind)
    if not arg:
        raise DrafterSpecError(f"drafter {kind} needs an argument: {k.usage}")
    if k.arg == "name":
        if check_files:
            load_library(text, arg)
        return DrafterSpec(kind, arg)
    if k.arg == "spec":
        inner = _parse(arg, check_files)
        if inner.kind == kind:
            raise DrafterSpecError(f"drafter {text!r}: {kind} of {kind} is not a drafter")
        return DrafterSpec(kind, inner=inner)
    if k.arg in ("file", "optfile") and check_files:
        check_model_file(arg, k.magic)
    return DrafterSpec(kind, arg)


def _parse_sources(k: DrafterKind, text: str, arg: str, check_files: bool) -> DrafterSpec:
    """`hybrid:PATH+SPEC+...`: the draft model (PATH may be empty), then extra candidate
    sources, each any drafter spec whose kind may be a source (not auto, none, hybrid, adaptive)."""
    path, *rest = arg.split("+")
    if path and check_files:
        check_model_file(path, k.magic)
    sources = []
    for item in rest:
        if not item:
            raise DrafterSpecError(f"drafter {text!r}: an empty source after '+'")
        src = _parse(item, check_files)
        if not KINDS[src.kind].source:
            raise DrafterSpecError(f"drafter {text!r}: {src.kind} cannot be a {k.name}'s source "
                                   f"(use a drafter that proposes drafts itself)")
        sources.append(src)
    return DrafterSpec(k.name, path, sources=tuple(sources))


def load_library(text: str, name: str):
    """The precedent library `name` (`library:NAME`), or a DrafterSpecError naming the spec `text`."""
    from olifant_mlx.library import LibraryError, load

    try:
        return load(name)
    except LibraryError as e:
        raise DrafterSpecError(f"--draft {text}: {e}") from None


def build_drafter(spec, tokenizer=None, history=None) -> Drafter:
    """A drafter from a spec (text or DrafterSpec). `tokenizer` is the verifier's identity
    (name, vocab_size, digest): a draft model trained for another tokenizer is refused.
    `history` (a SessionHistory) goes to the hybrid drafter, the only one that reads it."""
    if not isinstance(spec, DrafterSpec):
        spec = parse_spec(spec)
    kind = KINDS[spec.kind]
    if kind.tokenizer and tokenizer is None:
        raise DrafterSpecError(f"{kind.name} needs the verifier's tokenizer")
    return kind.build(spec, tokenizer, history)


def help_text() -> str:
    """'none | olifant:PATH | ngram[:N] | ...': the --draft choices, in registry order."""
    return " | ".join(k.usage for k in KINDS.values())


def describe() -> list:
    """(usage, summary) of every drafter, for help screens and the TUI's list."""
    return [(k.usage, k.summary) for k in KINDS.values()]


def uses_history(spec: DrafterSpec) -> bool:
    """Whether a session history would be read by this drafter (the hybrid, or adaptive of it)."""
    while spec.inner is not None:
        spec = spec.inner
    return KINDS[spec.kind].history

"""Drafting with precedents: the passages of a library that best match a request, and the
documents the user pins, put into the prompt ahead of the instruction with their citations,
so that the verifier adapts them and the drafters copy from them (docs/precedents.md).

    used = gather(tokenizer, "Draft the confidentiality clause ...", library="contracts",
                  pinned=("nda-2019.docx",), budget=512, matter="acme")
    prompt = with_block(Chat.of("Draft the confidentiality clause ..."), used)
    used.passages, used.tokens      # what went in, numbered from 1 as the prompt labels them
    provenance_index(used, tokenizer)   # the copied spans' document, page and paragraph

The wall: with a matter, retrieval returns passages of that matter's documents and of
documents without one; another matter's document reaches the prompt only pinned by name.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from olifant_mlx.option_errors import LibraryOptionError, OptionFileError, OptionsError
from olifant_mlx.passages import PassageError, Passage, UnusableIndex, search

DEFAULT_BUDGET = 512        # tokens of precedents when precedent_tokens is None (context permitting): two
# passages; more cost prefill and distract the model from the one it copies (docs/precedents.md#the-budget)
CANDIDATES = 24            # passages retrieved before the budget is filled
MIN_SHARE = 0.3            # a retrieved passage scoring under this share of the best one stays out
MAX_PINS = 64             # documents a request may pin
PIN_PREFIX = "library:"   # a pin of a named library's document: library:NAME:PATH
PIN_BATCH = 16            # a pinned file's paragraphs tokenized at a time, until the budget is passed
LABEL_TOKENS = 16          # what a passage's label and blank lines cost, about, in the budget
CHAT_HEAD = "Precedents from the user's documents (adapt them where they fit; cite them by number):"
CHAT_TAIL = "Request:"
TEXT_HEAD = "Precedents:"
TEXT_TAIL = "---"


@dataclass(frozen=True)
class Precedents:
    """The passages a prompt was given, in the order (and numbering from 1) of its block."""
    passages: tuple
    block: str                 # the text put into the prompt
    tokens: int                # the block's tokens
    budget: int
    library: str | None
    left_out: int = 0          # pinned passages that did not fit the budget
    note: str = ""             # why there are none, when they were left out whole (--truncate)

    def as_list(self) -> list[dict]:
        return [{"number": i, **p.as_dict()} for i, p in enumerate(self.passages, 1)]

    def documents(self) -> list[str]:
        return list(dict.fromkeys(p.path for p in self.passages))

    def summary(self) -> str:
        """One line for people: how many passages from which documents, and their cost."""
        if not self.passages:
            return f"precedents: none ({self.note})" if self.note else "precedents: no passage matched the request"
        docs = self.documents()
        pinned = sum(p.pinned for p in self.passages)
        line = (f"precedents: {len(self.passages)} passage{'s' * (len(self.passages) != 1)} "
                f"({self.tokens:,} tokens{f', {pinned} pinned' if pinned else ''}) from "
                f"{len(docs)} document{'s' * (len(docs) != 1)}: "
                + "; ".join(f"[{i}] {p.citation()}" for i, p in enumerate(self.passages, 1)))
        if self.left_out:
            line += f" ({self.left_out} pinned passage(s) left out: over the budget of {self.budget:,} tokens)"
        return line


def query_of(prompt) -> str:
    """What to search for: a chat's messages (the latest last, so they weigh most), or the text."""
    if isinstance(prompt, str):
        return prompt
    messages = getattr(prompt, "messages", None)
    if messages is None:
        raise OptionsError("precedents need a text or a chat prompt to search with, not token ids", "precedents")
    return "\n".join(m["content"] for m in messages if m.get("role") in ("user", "assistant"))


def gather(tokenizer, query: str, library: str | None = None, pinned=(), budget: int = DEFAULT_BUDGET,
           matter: str | None = None, room: int | None = None, capped: bool = False, matters=None,
           documents=()) -> Precedents:
    """The pinned documents' passages (in order: `pinned` files or library paths, then
    `documents`, library paths only), then the library's best passages for `query` (the matter
    wall applied; `matters`, a server key's wall: every pin is then a document of the library
    within it, never a file), while they fit `budget` tokens. `room`: the budget is the default,
    not the user's, and may grow up to `room` tokens to hold the first passage (the first pinned,
    else the best) whole — a document of long paragraphs still drafts without a flag. `capped`:
    the user's budget was cut to what the context leaves (errors then name the context). A pinned
    file is tokenized only as far as the budget can hold it."""

    lib = None if library is None else open_library(library, tokenizer)
    cap = budget if room is None else max(budget, room)      # the most any pinned document can take
    pins, unread = [], 0
    for spec in pinned:
        got, rest = pinned_passages(spec, lib, tokenizer, cap - sum(p.tokens + LABEL_TOKENS for p in pins), matters)
        pins += got
        unread += rest
    if len(documents) > MAX_PINS:
        raise OptionsError(f"precedent: at most {MAX_PINS} pinned documents, got {len(documents)}",
                           "precedent_documents")
    pins += [p for i, path in enumerate(documents) for p in library_pins(path, lib, matters, f"precedent[{i}]")]
    found = []
    if lib is not None:
        try:
            found = search(lib, query, matter=matter, n=CANDIDATES, matters=matters)
        except UnusableIndex as e:
            raise LibraryOptionError(str(e), "precedents", library) from None
        except PassageError as e:
            if pins and "no words" in str(e):
                found = []          # pinned documents and nothing to search for: the pins alone
            else:
                raise OptionsError(str(e), "precedents") from None
        found = [p for p in found if p.score >= MIN_SHARE * found[0].score]
    if room is not None and pins + found:
        budget = max(budget, min((pins + found)[0].tokens + LABEL_TOKENS, room))
    chosen, left_out = _fill(pins, found, budget, given=room is None and not capped)
    block = _block(chosen, chat=True)
    tokens = len(tokenizer.encode(block)) if chosen else 0
    while tokens > budget and len(chosen) > 1:     # labels cost more than LABEL_TOKENS: the last goes
        left_out += chosen.pop().pinned
        block = _block(chosen, chat=True)
        tokens = len(tokenizer.encode(block))
    return Precedents(tuple(chosen), block, tokens, budget, library, left_out + unread)


def open_library(name: str, tokenizer, option: str = "precedents"):
    """The library `name`, checked against the verifier's tokenizer; an OptionsError about
    `option` (the field that named it) otherwise."""
    from olifant_mlx import library as libraries

    try:
        lib = libraries.load(name, list_others=False)      # a server's clients may not know the others
    except libraries.LibraryError as e:
        raise LibraryOptionError(str(e), option, name) from None
    if not lib.fits(tokenizer):
        raise LibraryOptionError(f"library {name!r} was built for another tokenizer "
                                 f"({lib.meta.get('tokenizer', {}).get('name')}, not {tokenizer.name}): build one "
                                 f"for this verifier with `library build NEW_NAME {lib.meta.get('folder', 'FOLDER')} "
                                 f"--tokenizer {tokenizer.name}`", option, name)
    return lib


def library_pin(library: str, path: str) -> str:
    """The pin (a --precedent) of the document at `path` in `library`, whatever library the
    generation retrieves from: `library:NAME:PATH` (the TUI pins a listed passage's document so)."""
    return f"{PIN_PREFIX}{library}:{path}"


def parse_pin(spec: str) -> tuple[str | None, str]:
    """(the library a `library:NAME:PATH` pin names, PATH), or (None, spec) for any other."""
    from olifant_mlx.library import NAME_RE

    if spec.startswith(PIN_PREFIX):
        name, sep, path = spec[len(PIN_PREFIX):].partition(":")
        if sep and NAME_RE.fullmatch(name) and path:
            return name, path
    return None, spec


def in_library(path: str) -> str | None:
    """`path` as a library's document path (relative, normalised: `./a//b.txt` is `a/b.txt`), or
    None when it cannot be one (absolute, `~`, or leading out of the library with `..`)."""
    norm = os.path.normpath(path)
    if os.path.isabs(norm) or norm.startswith(("~", os.pardir)) or norm == os.curdir:
        return None
    return norm


def _fill(pins: list, found: list, budget: int, given: bool = True):
    """(the passages that fit, pinned first then by rank, how many pinned ones did not fit);
    a pinned document goes in from its start while it fits (its first passage that does not
    fit, and every later one, stay out); a retrieved passage that overlaps one already chosen
    from its document stays out. OptionsError when not even the smallest one fits (`given`:
    the budget is the user's)."""
    candidates = pins + found
    if candidates and min(p.tokens for p in candidates) + LABEL_TOKENS > budget:
        need = min(p.tokens for p in candidates) + LABEL_TOKENS
        what = (f"a precedent budget of {budget:,} tokens" if given else
                f"the {budget:,} tokens the verifier's context leaves for precedents")
        raise OptionsError(f"{what} holds no passage: the smallest one that matched needs {need:,} tokens "
                           "with its label" + ("" if given else ": ask for fewer tokens (max tokens)"),
                           "precedent_tokens")
    chosen, taken, used, left_out, full = [], {}, 0, 0, set()
    for p in candidates:
        spans = taken.setdefault((p.library, p.path), [])
        if not p.pinned and any(a <= p.end and p.paragraph <= b for a, b in spans):
            continue
        if p.pinned and (p.library, p.path) in full:
            left_out += 1
        elif used + p.tokens + LABEL_TOKENS <= budget:
            chosen.append(p)
            spans.append((p.paragraph, p.end))
            used += p.tokens + LABEL_TOKENS
        elif p.pinned:
            left_out += 1
            full.add((p.library, p.path))
    retrieved = [p for p in chosen if not p.pinned]
    rank = {}
    for p in retrieved:                 # a document's passages together, in its order
        rank.setdefault((p.library, p.path), len(rank))
    retrieved.sort(key=lambda p: (rank[(p.library, p.path)], p.paragraph))
    return [p for p in chosen if p.pinned] + retrieved, left_out


def pinned_passages(spec: str, lib, tokenizer, limit: int | None = None, matters=None) -> tuple[list[Passage], int]:
    """(the passages of a pinned document, how many more it has): the path of a document in the
    precedents library `lib` (which wins over a file of that path in the working folder), a
    document of a named library (`library:NAME:PATH`), or a file (read by the document readers,
    in a library's folder or not; cited by the name given). A file's
    paragraphs are tokenized in order only until `limit` tokens (labels included) are passed —
    the one that passes it is kept, for the budget to refuse — and the rest are counted, not
    tokenized: a 28.8 MB pin costs what its first paragraphs do. Behind a wall (`matters`: a
    server's request) only a document of the library within it: any other is refused as a
    missing one is, and no file is ever read."""
    from olifant_mlx.draftmodel import documents

    if matters is not None:
        return library_pins(spec, lib, matters, f"precedent {spec[:200]}"), 0
    name, rel = parse_pin(spec)
    if name is not None:                 # a document of a named library, whichever --precedents is
        pin_lib = lib if lib is not None and lib.name == name else open_library(name, tokenizer, "precedent_files")
        found = _library_document(pin_lib, in_library(rel))
        if not found:
            raise OptionsError(f"{spec}: library {name!r} has no document {rel!r}", "precedent_files")
        return found, 0
    found = _library_document(lib, in_library(spec)) if lib is not None else []
    if found:                            # the library's document, never ./PATH
        return found, 0
    path = Path(spec).expanduser()
    if not path.exists():
        where = f" nor a document of library {lib.name!r}" if lib is not None else ""
        raise OptionFileError(f"{spec}: no such file{where}", "precedent_files")
    why = not_pinnable(path)
    if why is not None:
        raise OptionFileError(f"{spec}: not read: {why}", "precedent_files")
    ext, outcome = documents.read_document(path)
    if ext is None:
        raise OptionFileError(f"{spec}: not read: {outcome.reason}", "precedent_files")
    title = ext.paragraphs[0][:80] if ext.paragraphs else path.name
    paragraphs = [(i, text, page) for i, (text, page) in enumerate(zip(ext.paragraphs, ext.pages), 1)
                  if text.strip()]
    out, used = [], 0
    for start in range(0, len(paragraphs), PIN_BATCH):
        batch = paragraphs[start:start + PIN_BATCH]
        for (i, text, page), ids in zip(batch, tokenizer.encode_batch([t + "\n\n" for _, t, _ in batch])):
            out.append(Passage(-1, str(spec), title, None, i, page, len(ids), text, 0.0, None, True))
            used += len(ids) + LABEL_TOKENS
            if limit is not None and used > limit:
                return out, len(paragraphs) - len(out)
    return out, 0


def library_pins(path: str, lib, matters=None, shown: str = "precedent") -> list[Passage]:
    """The passages of the precedents library's document at `path` (its path there), never a
    file; behind a wall (`matters`) a document outside it is refused as a missing one is, by
    the same message (`shown`: how the pin is named in it; never the path's document)."""
    if lib is None:
        raise OptionsError(f"{shown}: a pinned document is one of the precedents library: name the library "
                           f"(precedents)", "precedent_documents")
    found = _library_document(lib, in_library(path), matters)
    if not found:
        raise OptionsError(f"{shown}: no such document in the precedents library", "precedent_documents")
    return found


def not_pinnable(path: Path) -> str | None:
    """Why a file that exists cannot be pinned (a folder, a format the readers do not read, a
    FIFO...), or None."""
    from olifant_mlx.draftmodel import documents
    from olifant_mlx.library import TEXT_SUFFIXES

    if path.is_dir():
        return "a folder (pin its documents one by one, or build a library of it)"
    return documents.not_read(path, also=TEXT_SUFFIXES)


def library_document(lib, spec: str) -> bool:
    """Whether `spec` names a document of library `lib` (which a pin of it then is)."""
    return lib is not None and bool(_library_document(lib, in_library(spec)))


def _library_document(lib, path: str | None, matters=None) -> list[Passage]:
    """The passages of the document at `path` of `lib` ([] when it has none, or none within
    `matters`, a server key's wall)."""
    from olifant_mlx.passages import document_passages

    if path is None:
        return []
    try:
        return document_passages(lib, path, matters)
    except PassageError as e:                  # a damaged index: its file and the rebuild
        raise LibraryOptionError(str(e), "precedents", lib.name) from None


def _block(passages, chat: bool) -> str:
    """The precedents as the prompt shows them: a heading, then each passage under its label."""
    if not passages:
        return ""
    head = CHAT_HEAD if chat else TEXT_HEAD
    body = "\n\n".join(f"[{i}] {p.citation()}\n{p.text.strip()}" for i, p in enumerate(passages, 1))
    return f"{head}\n\n{body}"


def with_block(prompt, used: Precedents):
    """The prompt with the precedents ahead of its request: a Chat's last user message, or a
    text (a base model's prompt) under a plain-text heading; unchanged when nothing was used."""
    if not used.passages:
        return prompt
    if isinstance(prompt, str):
        return f"{_block(used.passages, chat=False)}\n\n{TEXT_TAIL}\n\n{prompt}"
    messages = list(prompt.messages)
    last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last is None:
        raise OptionsError("precedents go with the user's request: the conversation has no user message",
                           "precedents")
    messages[last] = {**messages[last], "content": f"{used.block}\n\n{CHAT_TAIL}\n{messages[last]['content']}"}
    return type(prompt)(tuple(messages), prompt.template_kwargs)


def provenance_index(used: Precedents, tokenizer):
    """A provenance index over the passages the prompt was given, each run of consecutive
    paragraphs of one document one indexed document, its places cited as the passages are."""
    from olifant_mlx.draftmodel.suffix import Corpus
    from olifant_mlx.provenance import LibraryIndex

    paragraphs = [(p, number, text) for p in used.passages
                  for number, text in zip(range(p.paragraph, p.end + 1), p.paragraphs())]
    ids = tokenizer.encode_batch([text.strip() + "\n\n" for _, _, text in paragraphs])
    rows, parts, start = [], [], 0
    for (p, number, _), x in zip(paragraphs, ids):
        row = rows[-1] if rows else None
        if row is None or (row["path"], row["library"]) != (p.path, p.library) or row["numbers"][-1] + 1 != number:
            row = {"id": p.document, "path": p.path, "title": p.title, "matter": p.matter, "library": p.library,
                   "start": start, "tokens": 0, "paragraphs": [], "pages": [], "numbers": []}
            rows.append(row)
        row["paragraphs"].append(row["tokens"])
        row["pages"].append(p.page)
        row["numbers"].append(number)
        row["tokens"] += len(x)
        parts.append(np.asarray(x, dtype=np.uint32))
        start += len(x)
    stream = np.concatenate(parts) if parts else np.zeros(0, np.uint32)
    corpus = Corpus(tokenizer.vocab_size, tokenizer.name, tokenizer.digest)
    corpus.add_documents(stream, np.asarray([r["start"] for r in rows], dtype=np.uint64))
    return LibraryIndex.of_parts(corpus.build_index(), rows, stream)

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

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from olifant_mlx.engine.options import OptionFileError, OptionsError
from olifant_mlx.passages import PassageError, Passage, search

DEFAULT_BUDGET = 512       # tokens of precedents when --precedent-tokens is not given (context permitting):
# two passages; more cost prefill and distract the model from the one it copies (docs/precedents.md#the-budget)
CANDIDATES = 24            # passages retrieved before the budget is filled
MIN_SHARE = 0.3            # a retrieved passage scoring under this share of the best one stays out
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

    def as_list(self) -> list[dict]:
        return [{"number": i, **p.as_dict()} for i, p in enumerate(self.passages, 1)]

    def documents(self) -> list[str]:
        return list(dict.fromkeys(p.path for p in self.passages))

    def summary(self) -> str:
        """One line for people: how many passages from which documents, and their cost."""
        if not self.passages:
            return "precedents: no passage matched the request"
        docs = self.documents()
        pinned = sum(p.pinned for p in self.passages)
        line = (f"precedents: {len(self.passages)} passage{'s' * (len(self.passages) != 1)} "
                f"({self.tokens:,} tokens{f', {pinned} pinned' if pinned else ''}) from "
                f"{len(docs)} document{'s' * (len(docs) != 1)}: "
                + "; ".join(f"[{i}] {p.citation()}" for i, p in enumerate(self.passages, 1)))
        if self.left_out:
            line += f" ({self.left_out} pinned passage(s) left out: over --precedent-tokens {self.budget:,})"
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
           matter: str | None = None, room: int | None = None) -> Precedents:
    """The pinned documents' passages (in order), then the library's best passages for `query`
    (the matter wall applied), while they fit `budget` tokens. `room`: the budget is the default,
    not the user's, and may grow up to `room` tokens to hold the first passage (the first pinned,
    else the best) whole — a document of long paragraphs still drafts without a flag."""
    from olifant_mlx import library as libraries

    lib = None
    if library is not None:
        try:
            lib = libraries.load(library, list_others=False)      # a server's clients may not know the others
        except libraries.LibraryError as e:
            raise OptionsError(f"--precedents {library}: {e}", "precedents") from None
        if not lib.fits(tokenizer):
            raise OptionsError(f"--precedents {library}: the library was built for another tokenizer "
                               f"({lib.meta.get('tokenizer', {}).get('name')}, not {tokenizer.name}): build one "
                               f"for this verifier with `library build NEW_NAME {lib.meta.get('folder', 'FOLDER')} "
                               f"--tokenizer {tokenizer.name}`", "precedents")
    pins = [p for spec in pinned for p in pinned_passages(spec, lib, tokenizer)]
    found = []
    if lib is not None:
        try:
            found = search(lib, query, matter=matter, n=CANDIDATES)
        except PassageError as e:
            if pins and "no words" in str(e):
                found = []          # pinned documents and nothing to search for: the pins alone
            else:
                raise OptionsError(f"--precedents {library}: {e}", "precedents") from None
        found = [p for p in found if p.score >= MIN_SHARE * found[0].score]
    if room is not None and pins + found:
        budget = max(budget, min((pins + found)[0].tokens + LABEL_TOKENS, room))
    chosen, left_out = _fill(pins, found, budget, given=room is None)
    block = _block(chosen, chat=True)
    return Precedents(tuple(chosen), block, len(tokenizer.encode(block)) if chosen else 0, budget,
                      library, left_out)


def _fill(pins: list, found: list, budget: int, given: bool = True):
    """(the passages that fit, pinned first then by rank, how many pinned ones did not fit);
    a retrieved passage that overlaps one already chosen from its document stays out.
    OptionsError when not even the smallest one fits (`given`: the budget is the user's)."""
    candidates = pins + found
    if candidates and min(p.tokens for p in candidates) + LABEL_TOKENS > budget:
        need = min(p.tokens for p in candidates) + LABEL_TOKENS
        what = (f"--precedent-tokens {budget:,}" if given else
                f"the {budget:,} tokens the verifier's context leaves for precedents")
        raise OptionsError(f"{what} holds no passage: the smallest one that matched needs {need:,} tokens "
                           "with its label" + ("" if given else ": ask for fewer tokens (--max-tokens)"),
                           "precedent_tokens")
    chosen, taken, used, left_out = [], {}, 0, 0
    for p in candidates:
        spans = taken.setdefault((p.library, p.path), [])
        if not p.pinned and any(a <= p.end and p.paragraph <= b for a, b in spans):
            continue
        if used + p.tokens + LABEL_TOKENS <= budget:
            chosen.append(p)
            spans.append((p.paragraph, p.end))
            used += p.tokens + LABEL_TOKENS
        elif p.pinned:
            left_out += 1
    retrieved = [p for p in chosen if not p.pinned]
    rank = {}
    for p in retrieved:                 # a document's passages together, in its order
        rank.setdefault((p.library, p.path), len(rank))
    retrieved.sort(key=lambda p: (rank[(p.library, p.path)], p.paragraph))
    return [p for p in chosen if p.pinned] + retrieved, left_out


def pinned_passages(spec: str, lib, tokenizer) -> list[Passage]:
    """The passages of a pinned document: a file (read by the document readers, in a library
    or not), or the path of a document in the precedents library."""
    from olifant_mlx.draftmodel import documents
    from olifant_mlx.library import TEXT_SUFFIXES
    from olifant_mlx.passages import document_passages

    path = Path(spec).expanduser()
    if not path.exists() and lib is not None:
        found = document_passages(lib, spec)
        if found:
            return found
    if not path.exists():
        where = f" nor a document of library {lib.name!r}" if lib is not None else ""
        raise OptionFileError(f"--precedent {spec}: no such file{where}", "precedent_files")
    why = documents.not_read(path, also=TEXT_SUFFIXES)
    if why is None and path.is_dir():
        why = "a folder (pin its documents one by one, or build a library of it)"
    if why is not None:
        raise OptionFileError(f"--precedent {spec}: not read: {why}", "precedent_files")
    ext, outcome = documents.read_document(path)
    if ext is None:
        raise OptionFileError(f"--precedent {spec}: not read: {outcome.reason}", "precedent_files")
    sizes = [len(x) for x in tokenizer.encode_batch([p + "\n\n" for p in ext.paragraphs])]
    title = ext.paragraphs[0][:80] if ext.paragraphs else path.name
    return [Passage(-1, str(spec), title, None, i, page, n, text, 0.0, None, True)
            for i, (text, page, n) in enumerate(zip(ext.paragraphs, ext.pages, sizes), 1) if text.strip()]


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

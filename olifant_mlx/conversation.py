"""Conversations and documents, in memory, and their exports: what the TUI's workspace holds
and what `generate`/`chat --output` write (the same model for both surfaces).

A `Conversation` is either a chat (messages for an instruct model's chat template) or a
document (a text continued as it is, the paper's protocol). Each generated answer or
continuation keeps its provenance segments and its statistics, so an export can carry them.
Nothing here touches the disk: `export_text` makes the text of an export and
`from_dict` validates what a saved-conversations file holds (tui/store.py).
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field

from olifant_mlx.engine import Chat
from olifant_mlx.exports import appendix, cited, docx_bytes

KINDS = ("chat", "document")
ROLES = ("system", "user", "assistant")
PROVENANCE = ("accepted", "correction", "bonus", "plain")
COPIED = "copied"            # a document mark: text found verbatim in a library (char_spans)
FORMATS = {"md": "Markdown", "txt": "plain text", "json": "JSON (with the statistics)",   # each with
           "docx": "Word (copied spans highlighted)"}
# the sources of its copied spans (an appendix; json: "sources"), when a library was asked for
EXPORT_FORMAT = "olifant_mlx.export"
EXPORT_VERSION = 1


class ConversationError(ValueError):
    """Data that is not a conversation this version can read."""


def short_spec(spec: str) -> str:
    """A drafter spec with its file paths cut to their names (for headers and titles)."""
    return ":".join(os.path.basename(part) if "/" in part else part for part in spec.split(":"))


def char_spans(sources, text: str, tokens, decode=None) -> list:
    """The sources with "chars": [start, end] added, character offsets in `text` (the output
    of `tokens`); one that cannot be placed gets none (listed, not marked)."""
    out, pos = [], 0
    for s in sources:
        s = dict(s)
        span = s.get("text") or ""
        at = text.find(span, pos) if span else -1
        if at < 0 and span:
            at = text.find(span)
        if at >= 0:
            s["chars"] = [at, at + len(span)]
            pos = at + len(span)
        elif decode is not None:
            a = len(decode(list(tokens[:s["start"]])))
            b = len(decode(list(tokens[:s["end"]])))
            if 0 <= a < b <= len(text):
                s["chars"] = [a, b]
        out.append(s)
    return out


def new_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass
class Turn:
    """A message; an assistant's answer also keeps its provenance and its numbers."""
    role: str
    content: str
    segments: list = field(default_factory=list)     # [(text, provenance)] of an answer
    stats: dict | None = None                         # Stats.as_dict()
    energy: dict | None = None                        # Window.as_dict(tokens), when measured
    finish_reason: str | None = None
    verifier: str | None = None
    drafter: str | None = None
    seed: int | None = None                           # the sampling seed, when sampling
    sources: list = field(default_factory=list)       # Source.as_dict() (+ "library", "chars")
    precedents: list = field(default_factory=list)    # the passages it was given (Precedents.as_list())

    def as_dict(self) -> dict:
        d = {"role": self.role, "content": self.content}
        if self.role == "assistant":
            d.update(segments=[[t, k] for t, k in self.segments], stats=self.stats,
                     energy=self.energy, finish_reason=self.finish_reason,
                     verifier=self.verifier, drafter=self.drafter, seed=self.seed,
                     sources=self.sources, precedents=self.precedents)
        return d


@dataclass
class Run:
    """One continuation of a document: where it went and its numbers."""
    start: int
    end: int
    stats: dict | None = None
    energy: dict | None = None
    finish_reason: str | None = None
    verifier: str | None = None
    drafter: str | None = None
    sources: list = field(default_factory=list)       # chars relative to `start`
    precedents: list = field(default_factory=list)    # the passages it was given

    def as_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "stats": self.stats, "energy": self.energy,
                "finish_reason": self.finish_reason, "verifier": self.verifier,
                "drafter": self.drafter, "sources": self.sources, "precedents": self.precedents}


@dataclass
class Conversation:
    kind: str = "chat"
    title: str = ""
    id: str = field(default_factory=new_id)
    system_prompt: str | None = None
    turns: list = field(default_factory=list)        # chat: [Turn]
    text: str = ""                                    # document: the text
    marks: list = field(default_factory=list)         # document: [(start, end, provenance)]
    runs: list = field(default_factory=list)          # document: [Run]
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    # ---- for generation ----

    def chat(self, upto: int | None = None, template_kwargs=None) -> Chat:
        """The messages before turn `upto` (all by default), for the verifier's chat template."""
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        msgs += [{"role": t.role, "content": t.content} for t in self.turns[:upto]]
        return Chat(tuple(msgs), dict(template_kwargs or {}))

    def last_answer(self) -> str:
        if self.kind == "document":
            if not self.runs:
                return ""
            r = self.runs[-1]
            return self.text[r.start:r.end]
        for t in reversed(self.turns):
            if t.role == "assistant":
                return t.content
        return ""

    def label(self) -> str:
        """What the conversation list shows."""
        title = self.title or self.default_title() or "(empty)"
        return ("chat · " if self.kind == "chat" else "doc · ") + title

    def default_title(self) -> str:
        if self.kind == "document":
            source = self.text
        else:
            source = next((t.content for t in self.turns if t.role == "user"), "")
        first = " ".join(source.split())
        return first[:48] + ("…" if len(first) > 48 else "")

    def touch(self) -> None:
        self.updated = time.time()
        if not self.title:
            self.title = self.default_title()

    # ---- as data ----

    def as_dict(self) -> dict:
        d = {"id": self.id, "kind": self.kind, "title": self.title or self.default_title(),
             "created": self.created, "updated": self.updated}
        if self.kind == "chat":
            d.update(system_prompt=self.system_prompt, messages=[t.as_dict() for t in self.turns])
        else:
            d.update(text=self.text, marks=[list(m) for m in self.marks],
                     continuations=[r.as_dict() for r in self.runs])
        return d

    @classmethod
    def from_dict(cls, d) -> Conversation:
        """A conversation from saved data, every field checked (ConversationError)."""
        _need(isinstance(d, dict), "a conversation must be an object")
        kind = d.get("kind")
        _need(kind in KINDS, f"conversation kind must be chat or document, got {kind!r}")
        _need(isinstance(d.get("id"), str) and 0 < len(d["id"]) <= 64, "conversation id missing")
        _need(isinstance(d.get("title", ""), str), "title must be text")
        for key in ("created", "updated"):
            _need(isinstance(d.get(key, 0), (int, float)) and not isinstance(d.get(key, 0), bool),
                  f"{key} must be a number")
        c = cls(kind=kind, title=d.get("title", ""), id=d["id"], created=d.get("created", time.time()),
                updated=d.get("updated", time.time()))
        if kind == "chat":
            sp = d.get("system_prompt")
            _need(sp is None or isinstance(sp, str), "system_prompt must be text")
            c.system_prompt = sp
            msgs = d.get("messages", [])
            _need(isinstance(msgs, list), "messages must be a list")
            c.turns = [_turn(m) for m in msgs]
        else:
            _document(c, d)
        return c

    def sources(self) -> list:
        """Every source of the answers or continuations, in order."""
        if self.kind == "chat":
            return [s for t in self.turns for s in t.sources]
        return [s for r in self.runs for s in r.sources]

    def last_precedents(self) -> list:
        """The passages the last answer or continuation was given."""
        done = [t.precedents for t in self.turns if t.role == "assistant"] + [r.precedents for r in self.runs]
        return done[-1] if done else []

    def precedents(self) -> list:
        """[(what, passages)] of every answer or continuation given precedents, in order."""
        given = [t for t in self.turns if t.role == "assistant"] if self.kind == "chat" else self.runs
        what = "answer" if self.kind == "chat" else "continuation"
        return [(f"{what} {i}", g.precedents) for i, g in enumerate(given, 1) if g.precedents]


def _need(cond, what):
    if not cond:
        raise ConversationError(what)


def _turn(m) -> Turn:
    """A saved message, checked."""
    _need(isinstance(m, dict) and m.get("role") in ("user", "assistant")
          and isinstance(m.get("content"), str), f"bad message {str(m)[:60]!r}")
    t = Turn(m["role"], m["content"])
    if t.role != "assistant":
        return t
    segs = m.get("segments") or []
    _need(isinstance(segs, list) and all(
        isinstance(s, list) and len(s) == 2 and isinstance(s[0], str)
        and s[1] in PROVENANCE for s in segs), "bad answer segments")
    _need("".join(s[0] for s in segs) in ("", t.content), "answer segments do not make up its text")
    t.segments = [(s[0], s[1]) for s in segs]
    t.stats, t.energy = _opt_dict(m, "stats"), _opt_dict(m, "energy")
    t.finish_reason = _opt_str(m, "finish_reason")
    t.verifier, t.drafter = _opt_str(m, "verifier"), _opt_str(m, "drafter")
    seed = m.get("seed")
    _need(seed is None or (isinstance(seed, int) and not isinstance(seed, bool)), "seed must be a whole number")
    t.seed = seed
    t.sources, t.precedents = _sources(m), _precedents(m)
    return t


def _document(c: Conversation, d: dict) -> None:
    """A saved document's text, marks and continuations, checked, into `c`."""
    _need(isinstance(d.get("text"), str), "a document needs its text")
    c.text = d["text"]
    n = len(c.text)
    marks = d.get("marks", [])
    _need(isinstance(marks, list) and all(
        isinstance(m, list) and len(m) == 3 and all(isinstance(x, int) for x in m[:2])
        and 0 <= m[0] < m[1] <= n and m[2] in PROVENANCE + (COPIED,) for m in marks), "bad document marks")
    c.marks = [(m[0], m[1], m[2]) for m in marks]
    runs = d.get("continuations", [])
    _need(isinstance(runs, list), "continuations must be a list")
    for r in runs:
        _need(isinstance(r, dict) and isinstance(r.get("start"), int) and isinstance(r.get("end"), int)
              and 0 <= r["start"] <= r["end"] <= n, "bad continuation")
        c.runs.append(Run(r["start"], r["end"], _opt_dict(r, "stats"), _opt_dict(r, "energy"),
                          _opt_str(r, "finish_reason"), _opt_str(r, "verifier"),
                          _opt_str(r, "drafter"), _sources(r), _precedents(r)))


def _opt_dict(d, key):
    v = d.get(key)
    if v is not None and not isinstance(v, dict):
        raise ConversationError(f"{key} must be an object")
    return v


def _sources(d) -> list:
    v = d.get("sources") or []
    if not isinstance(v, list) or not all(isinstance(s, dict) and isinstance(s.get("places", []), list)
                                          for s in v):
        raise ConversationError("sources must be a list of objects")
    return v


def _precedents(d) -> list:
    v = d.get("precedents") or []
    if not isinstance(v, list) or not all(isinstance(p, dict) and isinstance(p.get("citation"), str) for p in v):
        raise ConversationError("precedents must be a list of passages, each with its citation")
    return v


def _opt_str(d, key):
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise ConversationError(f"{key} must be text")
    return v


# ---- exports -------------------------------------------------------------------------

def format_for(path: str, chosen: str | None = None) -> str:
    """The export format: the one chosen, else the file's extension (.md, .txt, .json, .docx)."""
    if chosen:
        return chosen
    ext = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    return {"markdown": "md", "text": "txt"}.get(ext, ext if ext in FORMATS else "md")


def _stats_line(stats: dict | None, energy: dict | None) -> str:
    if not stats:
        return ""
    parts = [f"{stats.get('tokens', 0)} tokens", f"{stats.get('tokens_per_s', 0):.1f} tokens/s",
             f"acceptance {stats.get('acceptance', 0):.1%}",
             f"mean accepted length {stats.get('mean_accepted_length', 0):.2f}",
             f"{stats.get('steps', 0)} verifier passes"]
    if energy and energy.get("energy_j") is not None:
        parts.append(f"{energy['energy_j']:.2f} J ({energy.get('label', '')})")
    return ", ".join(parts)


def export_data(conv: Conversation, fmt: str, settings: dict | None = None) -> str | bytes:
    """What an export file holds: the Word file's bytes for "docx", else export_text."""
    if fmt != "docx":
        return export_text(conv, fmt, settings)
    return docx_bytes(conv.title or conv.default_title() or "untitled", _docx_blocks(conv), conv.sources(),
                      conv.precedents())


def _docx_blocks(conv: Conversation) -> list:
    """The Word file's blocks (exports.docx_bytes): a document's text with its copied marks; a
    chat's messages under "You" and "Assistant", each answer's copied spans and its numbers."""
    if conv.kind == "document":
        return [("text", conv.text, [(a, b) for a, b, kind in conv.marks if kind == COPIED])]
    blocks = [("note", f"System: {conv.system_prompt}", [])] if conv.system_prompt else []
    for t in conv.turns:
        if t.role == "user":
            blocks += [("heading", "You", []), ("text", t.content, [])]
            continue
        who = _who(t)
        marks = [tuple(s["chars"]) for s in t.sources if s.get("chars")]
        blocks += [("heading", f"Assistant{f' ({who})' if who else ''}", []), ("text", t.content, marks)]
        line = _stats_line(t.stats, t.energy)
        if line:
            blocks.append(("note", line, []))
    return blocks


def _who(t) -> str:
    """An answer's verifier and drafter as its heading in an export shows them: the drafter's
    files by their names, never a path of the user's cache (issue 48)."""
    return " · ".join(x for x in (t.verifier, t.drafter and f"drafter {short_spec(t.drafter)}") if x)


def export_text(conv: Conversation, fmt: str, settings: dict | None = None) -> str:
    """The text of an export: "md" (Markdown), "txt" (plain text) or "json" (everything,
    with the statistics of each answer or continuation and the settings used)."""
    if fmt == "json":
        return json.dumps({"format": EXPORT_FORMAT, "version": EXPORT_VERSION,
                           "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "settings": settings or {}, **conv.as_dict(), "sources": conv.sources(),
                           "precedents": [{"for": what, "passages": ps} for what, ps in conv.precedents()]},
                          indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt not in ("md", "txt"):
        raise ValueError(f"export format must be md, txt, json or docx, got {fmt!r}")
    body = _body(conv, fmt)
    tail = appendix(conv.sources(), fmt == "md") + cited(conv.precedents(), fmt == "md")
    return body + ("\n" + tail if tail else "")


def _body(conv: Conversation, fmt: str) -> str:
    title = conv.title or conv.default_title() or "untitled"
    if conv.kind == "document":
        if fmt == "txt":
            return conv.text if conv.text.endswith("\n") else conv.text + "\n"
        return f"# {title}\n\n{conv.text}\n"
    out = []
    if fmt == "md":
        out.append(f"# {title}\n")
        if conv.system_prompt:
            out.append(f"*System:* {conv.system_prompt}\n")
        for t in conv.turns:
            if t.role == "user":
                out.append(f"## You\n\n{t.content}\n")
            else:
                who = _who(t)
                out.append(f"## Assistant{f' ({who})' if who else ''}\n\n{t.content}\n")
                line = _stats_line(t.stats, t.energy)
                if line:
                    out.append(f"*{line}*\n")
        return "\n".join(out)
    if conv.system_prompt:
        out.append(f"System: {conv.system_prompt}\n")
    for t in conv.turns:
        out.append(f"{'You' if t.role == 'user' else 'Assistant'}:\n{t.content}\n")
    return "\n".join(out)

"""What the Review tab works with, without widgets: the review of a document's revised clauses
(which changes are accepted, rejected or still to review, the change being looked at), the
redline of a clause as marked text, the messages the revision worker posts and the worker
itself (`revise_clauses`, on the tab's own thread worker: olifant_mlx.revise's plan_revision,
the Session's stream, finish). A test runs each without an App.

A change is kept unless it is rejected: what is exported is every change accepted or not yet
reviewed, as tracked changes (Word) or marks (.md, .txt), so a change never vanishes unseen.
The redline never relies on colour: a deletion is struck through inside [-…-], an insertion
underlined inside {+…+}, an accepted change followed by ✓, a rejected one dimmed and followed
by ✗, the change being looked at in reverse video.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from rich.style import Style
from rich.text import Text
from textual.message import Message

from olifant_mlx.revise import Document, Paragraph, Revision
from olifant_mlx.teardown import on_own_thread
from olifant_mlx.tui.messages import Failed, Status

FORMATS = {"docx": "Word, the changes kept as tracked changes", "md": "Markdown (CriticMarkup)",
           "txt": "text (word diff: [-deleted-]{+inserted+})"}
MARKS = {"accepted": "✓", "rejected": "✗", "pending": ""}
STYLES = {"del": Style(strike=True), "ins": Style(underline=True), "rejected": Style(dim=True),
          "current": Style(reverse=True)}      # the styles' cues; the tab adds the theme's colours


# ---- the review ------------------------------------------------------------------------------

@dataclass
class Clause:
    """A clause chosen for revision: its revision once done (or why it failed), and what you
    decided about each of its changes (by number, as redline.changes numbers them)."""
    paragraph: Paragraph
    revision: Revision | None = None
    error: str = ""
    running: bool = False             # asked for in the run in flight
    started: bool = False             # ... and being drafted now
    states: dict = field(default_factory=dict)       # change number -> "accepted" | "rejected"

    @property
    def count(self) -> int:
        return len(self.revision.changes) if self.revision is not None else 0

    def state(self, n: int) -> str:
        return self.states.get(n, "pending")

    def kept(self) -> set:
        return {n for n in range(self.count) if self.state(n) != "rejected"}

    def status(self) -> str:
        """What became of it, in words: revising, failed, no change, its changes, its flags."""
        if self.running:
            return "revising …" if self.started else "to revise"
        if self.error:
            return "not revised: " + self.error
        if self.revision is None:
            return ""
        if not self.revision.changed:
            words = "no change"
        else:
            n, rejected = self.count, sum(self.state(i) == "rejected" for i in range(self.count))
            words = f"{n} change{'s' * (n != 1)}" + (f", {rejected} rejected" if rejected else "")
        return words + "".join(f"; ⚑ {flag}" for flag in self.revision.flags)


class Review:
    """A document's clauses as revised: each Clause by paragraph index, and the change being
    looked at (`at`: (paragraph index, change number), or (index, None) for a clause without
    changes)."""

    def __init__(self, doc: Document):
        self.doc = doc
        self.clauses: dict[int, Clause] = {}
        self.at: tuple | None = None

    def begin(self, paragraphs) -> None:
        """These paragraphs are being revised (again): what was decided about them is gone."""
        for p in paragraphs:
            self.clauses[p.index] = Clause(p, running=True)

    def started(self, index: int) -> None:
        if index in self.clauses:
            self.clauses[index].started = True

    def done(self, revision: Revision) -> Clause:
        c = self.clauses[revision.paragraph.index] = Clause(revision.paragraph, revision)
        return c

    def failed(self, index: int, error: str) -> None:
        p = self.doc.paragraphs[index]
        self.clauses[index] = Clause(p, error=error)

    def stop(self) -> list[int]:
        """A run over: the clauses it did not revise (it stopped first) are as if never asked
        for; their paragraphs' indexes."""
        gone = [i for i, c in self.clauses.items() if c.running]
        for index in gone:
            del self.clauses[index]
        return gone

    def revised(self) -> list[Clause]:
        return [self.clauses[i] for i in sorted(self.clauses) if self.clauses[i].revision is not None]

    def stops(self) -> list[tuple]:
        """Every change of every revised clause, in the document's order: (index, number)."""
        return [(c.paragraph.index, n) for c in self.revised() for n in range(c.count)]

    def goto(self, index: int) -> None:
        """Look at clause `index`: its first change (its only place when it has none)."""
        c = self.clauses.get(index)
        if c is not None and (self.at is None or self.at[0] != index):
            self.at = (index, 0 if c.count else None)

    def move(self, step: int) -> tuple | None:
        """The next (step 1) or previous (-1) change from the one looked at, across clauses;
        None (and nothing moved) at either end."""
        stops = self.stops()
        if self.at in stops:
            target = stops.index(self.at) + step
        else:            # from a clause without changes (or from nowhere): the nearest change that way
            index = self.at[0] if self.at is not None else (-1 if step > 0 else len(self.doc.paragraphs))
            ahead = [i for i, s in enumerate(stops) if (s[0] > index if step > 0 else s[0] < index)]
            target = (ahead[0] if step > 0 else ahead[-1]) if ahead else -1
        if not 0 <= target < len(stops):
            return None
        self.at = stops[target]
        return self.at

    def decide(self, accept: bool, whole_clause: bool = False) -> int:
        """Accept (or reject) the change looked at, or every change of its clause; how many."""
        if self.at is None or self.at[0] not in self.clauses:
            return 0
        c = self.clauses[self.at[0]]
        numbers = range(c.count) if whole_clause else [self.at[1]] if self.at[1] is not None else []
        for n in numbers:
            c.states[n] = "accepted" if accept else "rejected"
        return len(numbers)

    def counts(self) -> dict:
        states = [c.state(n) for c in self.revised() for n in range(c.count)]
        return {s: states.count(s) for s in ("accepted", "rejected", "pending")}

    def keep(self) -> dict:
        """{paragraph index: the change numbers to write} (revise.export's `keep`)."""
        return {c.paragraph.index: c.kept() for c in self.revised() if c.revision.changed}

    def revisions(self) -> list[Revision]:
        return [c.revision for c in self.revised()]

    def summary(self) -> str:
        """The run's result in one line."""
        revised = self.revised()
        if not revised:
            return "nothing revised yet"
        changed = sum(c.revision.changed for c in revised)
        flagged = sum(bool(c.revision.flags) for c in revised)
        failed = sum(bool(c.error) for c in self.clauses.values())
        n = self.counts()
        parts = [f"{len(revised)} revised: {changed} changed, {len(revised) - changed} no change"
                 + (f", {flagged} flagged" if flagged else "") + (f", {failed} not revised" if failed else ""),
                 f"{n['accepted']} accepted, {n['rejected']} rejected, {n['pending']} to review"]
        return " · ".join(parts)


# ---- the redline as marked text ---------------------------------------------------------------

def redline(clause: Clause, current: int | None = None, styles: dict | None = None) -> Text:
    """The clause's revision as marked text: [-deleted-] struck through, {+inserted+}
    underlined, ✓ after an accepted change, ✗ after a rejected one (dimmed), the `current`
    change in reverse video. `styles`: STYLES with the theme's colours."""
    st = {**STYLES, **(styles or {})}
    t = Text()
    n = 0
    for e in clause.revision.edits:
        if not e.changed:
            t.append(e.before)
            continue
        state = clause.state(n)
        extra = Style.combine([Style()] + ([st["rejected"]] if state == "rejected" else [])
                              + ([st["current"]] if n == current else []))
        if e.before:
            t.append(f"[-{e.before}-]", Style.combine([st["del"], extra]))
        if e.after:
            t.append(f"{{+{e.after}+}}", Style.combine([st["ins"], extra]))
        t.append(MARKS[state], extra)
        n += 1
    return t


def title(clause: Clause, current: int | None) -> str:
    """The line above a clause's redline: which clause, what became of it, which change."""
    head = f"¶{clause.paragraph.number}: {clause.status()}"
    if current is not None and clause.count:
        head += f" · change {current + 1} of {clause.count}: {clause.state(current)}"
    elif clause.revision is not None and not clause.revision.changed:
        head += " (the verifier gave the clause back as it was)"
    return head


def label(p: Paragraph, clause: Clause | None, width: int) -> Text:
    """A paragraph's line in the list: number, kind or what became of it, first words."""
    if p.heading:
        what = f"heading {p.heading}"
    elif p.tracked:
        what = f"tracked changes of its own ({p.tracked}): left as it is"
    elif not p.is_clause:
        what = "short"
    else:
        what = clause.status() if clause is not None else ""
    words = " ".join(p.text.split())
    head = f"¶{p.number} " + (f"[{what}] " if what else "")
    room = max(width - len(head), 8)
    return Text(head + (words if len(words) <= room else words[:room - 1] + "…"), no_wrap=True,
                overflow="ellipsis")


def describe(doc: Document) -> str:
    """What was opened, in one line."""
    clauses = sum(p.is_clause for p in doc.paragraphs)
    line = f"{Path(doc.path).name}: {len(doc.paragraphs)} paragraphs, {clauses} clauses"
    if doc.tracked:
        line += (f"; {len(doc.tracked)} with tracked changes of their own are left as they are "
                 f"(accept or reject them in Word first)")
    return line


def check_export(path: str, document: str) -> str:
    """The export's format from the file's suffix, after revise.check_output's checks (the
    document itself, a folder that cannot be written, ...); ValueError saying what is wrong."""
    from olifant_mlx.revise import RevisionError, check_output

    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise ValueError(f"{path}: the file's suffix picks the format: " + ", ".join(f".{f}" for f in FORMATS))
    try:
        return check_output(path, document)
    except RevisionError as e:
        raise ValueError(str(e).replace("--output ", "")) from None


# ---- the worker and what it posts ----------------------------------------------------------------

@dataclass
class Asked:
    """A revision run: the instruction, the clauses in order, the tokens of answer each may have
    (None: revise's room for its length)."""
    instruction: str
    paragraphs: tuple
    max_tokens: int | None = None


@dataclass
class Opened(Message):
    """A document read (or not: `error`, what revise would say)."""
    path: str
    doc: Document | None
    error: str = ""


def open_document(path: str, post) -> None:
    """Read the document at `path` (olifant_mlx.revise.read_document) and post Opened (a
    thread worker of the tab's: a long document never holds the UI up)."""
    from olifant_mlx.revise import RevisionError, read_document

    try:
        post(Opened(path, read_document(path)))
    except RevisionError as e:
        post(Opened(path, None, str(e)))
    except Exception as e:     # shown under the field, never as a traceback
        post(Opened(path, None, f"{path}: {type(e).__name__}: {e}"))


def revise_options(options):
    """The options a revision runs with: k PREDICTION_K (revise's default: the drafter copies
    the clause in long drafts, the adaptive drafter's planner sizing each below it) unless the
    settings ask for another k than the usual default, and each clause's own room for its
    answer (max_tokens None) unless they ask for another max tokens; (options, max_tokens)."""
    from olifant_mlx.drafters.prediction import PREDICTION_K
    from olifant_mlx.engine import GenerationOptions

    k = PREDICTION_K if options.k == GenerationOptions.k else options.k
    max_tokens = None if options.max_tokens == GenerationOptions.max_tokens else options.max_tokens
    return options.replace(k=k), max_tokens


@dataclass
class ClauseStarted(Message):
    run: int
    index: int               # the paragraph's
    order: int               # 1.. of `of`
    of: int


@dataclass
class ClauseDone(Message):
    run: int
    revision: Revision
    stats: object
    window: object


@dataclass
class ClauseFailed(Message):
    run: int
    index: int
    error: str


@dataclass
class Revised(Message):
    """Every clause of the run revised (or failed)."""
    run: int


@on_own_thread           # MLX never runs on the pool's thread: see olifant_mlx.teardown
def revise_clauses(workspace, job, post, cancelled) -> None:
    """Each clause of `job.prompt` (an Asked) revised in turn over the workspace's Session, its
    text streamed as Chunks (tui/workers.py's stream), then finished (olifant_mlx.revise): a
    ClauseDone each, Revised at the end; a clause too long for the context is a ClauseFailed and
    the run goes on; stopped or failed, a Failed (the clauses done are kept)."""
    from olifant_mlx.engine.request import ContextError
    from olifant_mlx.tui.render import context_error
    from olifant_mlx.revise import finish, plan_revision
    from olifant_mlx.tui.workers import stream

    asked, s = job.prompt, job.settings
    try:
        session = workspace.session_for(s, post)
        for order, p in enumerate(asked.paragraphs, 1):
            if cancelled():
                raise InterruptedError
            post(ClauseStarted(job.id, p.index, order, len(asked.paragraphs)))
            try:
                request = plan_revision(session, p, asked.instruction, s.options, asked.max_tokens,
                                        system_prompt=s.system_prompt, template_kwargs=workspace.template_kwargs)
            except ContextError as e:
                post(ClauseFailed(job.id, p.index, context_error(e)))
                continue
            d = request.drafting
            post(Status(f"revising ¶{p.number} ({order} of {len(asked.paragraphs)}) with {session.verifier.name}, "
                        f"drafter {d.spec.text if d.spec else d.drafter.name}, k {request.options.k}"))
            job.t0 = time.perf_counter()
            _, text, stats, window, reason = stream(post, session, job, cancelled, request)
            if reason == "stopped":
                raise InterruptedError
            post(ClauseDone(job.id, finish(p, text, SimpleNamespace(finish_reason=reason, stats=stats)),
                            stats, window))
        post(Revised(job.id))
    except InterruptedError:
        post(Failed("revision", "stopped", job.id))
    except Exception as e:     # shown in the UI, never as a traceback
        post(Failed("revision", f"{type(e).__name__}: {e}", job.id))

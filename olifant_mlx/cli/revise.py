"""`revise`: a document's clauses revised on instruction, the redline printed or written (docs/revise.md).

Everything is checked before the verifier loads: the document (read whole), the clauses chosen,
the output file, every clause's room in the verifier's context. Nothing is written unless
--output names a file, and then only once every clause is revised (atomically, 0600).
"""
from __future__ import annotations

import json
import os
import sys
import time

from olifant_mlx.cli.common import add_generation_args, print_json, table, template_kwargs
from olifant_mlx.drafters.prediction import PREDICTION_K

WHO = "revise"


def add_revise(p) -> None:
    p.add_argument("file", metavar="FILE", help="the document: .docx, .txt, .md, .odt, .rtf or .html")
    p.add_argument("-i", "--instruction", help="what to change, in words ('make the notice period sixty days')")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--clause", action="append", metavar="N|HEADING",
                     help="a clause to revise: its number as --list shows it, or a heading's text (the clauses "
                          "under it) or a clause's first words ('7.2', 'Limitation of Liability'); repeatable "
                          "(default: the clauses a search of the document for the instruction finds)")
    how.add_argument("--where", metavar="WORDS", help="revise the clauses a search of the document for these "
                                                      "words finds")
    how.add_argument("--all", action="store_true", help="revise every clause (with a progress bar)")
    p.add_argument("--list", action="store_true", help="list the document's paragraphs with their numbers and stop")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the redline: .docx (Word tracked changes; the original's formatting kept), "
                        ".md (CriticMarkup), .txt (word diff) or .json; 0600, written once all are revised")
    p.add_argument("--author", default=None, help="the tracked changes' author in Word (default: olifant_mlx)")
    p.add_argument("--json", action="store_true", help="the clauses with before, after, changes and stats as "
                                                       "JSON on stdout")
    add_generation_args(p, prompt=False)
    p.set_defaults(func=cmd_revise, k=PREDICTION_K, max_tokens=None)


def cmd_revise(args) -> int:
    from olifant_mlx import revise
    from olifant_mlx.verifier.loader import check_text

    doc = revise.read_document(args.file)
    if args.list:
        return list_paragraphs(doc, args.json)
    if not args.instruction or not args.instruction.strip():
        raise revise.RevisionError("give the instruction: -i 'what to change' (or --list to see the paragraphs)")
    check_text(args.instruction, "the instruction (-i)")
    selection = revise.select(doc, args.instruction, args.clause or (), args.where, args.all)
    fmt = revise.check_output(args.output, args.file) if args.output else None
    per_clause = args.max_tokens is None
    if per_clause:
        args.max_tokens = 0                     # each clause's own, below; options are checked with a stand-in
    check_room(args, selection.chosen, per_clause)
    from olifant_mlx.cli.generate import open_session

    session, options = open_session(args)
    notes(doc, selection, session)
    revisions, seconds = revise_all(session, options, selection.chosen, args, per_clause)
    result = report(doc, args, selection, revisions, seconds, session)
    if args.output:
        from olifant_mlx.files import write_atomic

        write_atomic(args.output, revise.export(doc, revisions, fmt, args.author or revise.AUTHOR, report=result))
    show(result, revisions, args)
    return 0


def list_paragraphs(doc, as_json: bool) -> int:
    """`--list`: every paragraph's number, kind and first words (--json: all of each)."""
    rows = [{"paragraph": p.number, "kind": kind(p), "tracked": p.tracked, "text": p.text} for p in doc.paragraphs]
    if as_json:
        print_json({"file": doc.path, "paragraphs": rows})
        return 0
    for p in doc.paragraphs:
        tracked = f" [tracked changes: {p.tracked}]" if p.tracked else ""
        print(f"{p.number:>5}  {kind(p):<9} {p.label(66)[len(str(p.number)) + 2:]}{tracked}")
    return 0


def kind(p) -> str:
    return f"heading {p.heading}" if p.heading else "clause" if p.is_clause else "short"


def check_room(args, paragraphs, per_clause: bool) -> None:
    """Every clause's prompt and answer within the verifier's context, told from its tokenizer
    and config before any weights load (a verifier whose config is not local is checked when
    each request is planned)."""
    from olifant_mlx.revise import RevisionError, max_tokens_for
    from olifant_mlx.verifier import default_model, load_tokenizer

    model = args.model or default_model()
    limit = context_of(model)
    if not limit:
        return
    tok = load_tokenizer(model)
    for p in paragraphs:
        n = len(tok.encode(p.text))
        answer = max_tokens_for(n) if per_clause else args.max_tokens
        need = n + len(tok.encode(args.instruction)) + 64 + answer
        if need > limit:
            raise RevisionError(f"{args.file}: ¶{p.number} is {n:,} tokens: with the instruction and "
                                f"{answer:,} tokens of answer it needs {need:,}, more than {model}'s context "
                                f"holds ({limit:,}); split the clause, or give fewer tokens of answer with -m")


def context_of(model: str) -> int | None:
    """The verifier's context length from its config.json, where it is a local folder (aliases are
    converted once, into the cache), else None."""
    from olifant_mlx.verifier import resolve_model
    from olifant_mlx.verifier.loader import _context_length

    try:
        folder = resolve_model(model)
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            return _context_length(json.load(f), None)
    except (OSError, ValueError):
        return None


def notes(doc, selection, session) -> None:
    """What the user should know before the clauses stream by (stderr)."""
    tracked = doc.tracked
    if tracked:
        sys.stderr.write(f"note: {len(tracked)} paragraph(s) of {doc.path} have tracked changes of their own: "
                         f"they are kept as they are and not revised\n")
    for p, why in selection.skipped:
        sys.stderr.write(f"skipped {p.label(40)}: {why}\n")
    sys.stderr.write(f"revising {len(selection.chosen)} clause(s) ({selection.how}) with {session.verifier.name}\n")


def revise_all(session, options, paragraphs, args, per_clause: bool):
    """Each paragraph revised in turn, a progress bar (or, off a terminal, a line a clause) on
    stderr; (the Revisions, the seconds it took)."""
    from olifant_mlx.engine import PromptCache
    from olifant_mlx.revise import finish, plan_revision

    progress = Progress(paragraphs, session, enabled=not args.json or sys.stderr.isatty())
    revisions, start, drafting = [], time.perf_counter(), None
    cache = PromptCache() if options.kv_cache else None     # the instruction's prompt read once
    try:
        for p in paragraphs:
            request = plan_revision(session, p, args.instruction, options, None if per_clause else args.max_tokens,
                                    drafting, cache, system_prompt=args.system_prompt,
                                    chat_template=not args.ignore_chat_template, template_kwargs=template_kwargs(args))
            drafting = request.drafting           # what it learns goes on to the next clause
            text, last = [], None
            for r in session.stream(request):
                text.append(r.text)
                progress.advance(len(r.tokens))
                last = r
            revisions.append(finish(p, "".join(text), last))
            progress.done(revisions[-1])
    finally:
        progress.close()
    return revisions, time.perf_counter() - start


class Progress:
    """Clauses done and an estimate of the time left, from the tokens of the clauses still to
    revise at the rate so far: a bar on a terminal, else a line a clause."""

    def __init__(self, paragraphs, session, enabled: bool = True):
        encode = session.verifier.identity.encode
        self.sizes = [max(len(encode(p.text)), 1) for p in paragraphs]
        self.total, self.n, self.finished = sum(self.sizes), len(paragraphs), 0
        self.tokens, self.start, self.bar = 0, time.perf_counter(), None
        self.enabled, self.terminal = enabled, sys.stderr.isatty()
        if enabled and self.terminal and self.n > 1:
            from rich.console import Console
            from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeRemainingColumn

            self.bar = Bar(TextColumn("revising {task.fields[clause]}"), BarColumn(), TimeRemainingColumn(),
                           console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("revise", total=self.total, clause=f"1/{self.n}")

    def advance(self, tokens: int) -> None:
        left = sum(self.sizes[:self.finished + 1]) - self.tokens    # this clause's estimate, not past it
        self.tokens += min(tokens, max(left, 0))
        if self.bar is not None:
            self.bar.update(self.task, completed=self.tokens)

    def done(self, revision) -> None:
        self.finished += 1
        self.tokens = sum(self.sizes[:self.finished])
        if self.bar is not None:
            self.bar.update(self.task, completed=self.tokens, clause=f"{min(self.finished + 1, self.n)}/{self.n}")
        elif self.enabled:
            elapsed = time.perf_counter() - self.start
            eta = elapsed / self.tokens * (self.total - self.tokens) if self.tokens else 0.0
            more = f", about {eta:.0f} s left" if self.finished < self.n else ""
            sys.stderr.write(f"[{self.finished}/{self.n}] {revision.paragraph.label(40)}: {describe(revision)} "
                             f"({elapsed:.0f} s{more})\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def describe(revision) -> str:
    """'changed (2 changes)', 'no change', with its flags."""
    n = len(revision.changes)
    what = f"changed ({n} change{'s' * (n != 1)})" if revision.changed else "no change"
    return "; ".join([what, *revision.flags])


def report(doc, args, selection, revisions, seconds, session) -> dict:
    """The run as JSON: the document, the instruction, how the clauses were chosen, each clause's
    revision with its generation's stats, and the totals."""
    tokens = sum(r.stats["tokens"] for r in revisions if r.stats)
    passes = sum(r.stats["steps"] for r in revisions if r.stats)
    return {"file": doc.path, "instruction": args.instruction, "selected": selection.how,
            "verifier": session.verifier.name, "output": args.output,
            "clauses": [r.as_dict() for r in revisions],
            "skipped": [{"paragraph": p.number, "why": why} for p, why in selection.skipped],
            "totals": {"clauses": len(revisions), "changed": sum(r.changed for r in revisions),
                       "no_change": sum(not r.changed for r in revisions),
                       "flagged": sum(bool(r.flags) for r in revisions), "tokens": tokens, "passes": passes,
                       "tokens_per_pass": round(tokens / passes, 3) if passes else None,
                       "seconds": round(seconds, 3)}}


def show(result, revisions, args) -> None:
    """--json: the report on stdout; else each clause's word diff on stdout and a summary on stderr."""
    from olifant_mlx.redline import text_redline

    if args.json:
        print_json(result)
        return
    for r in revisions:
        print(f"¶{r.paragraph.number}: {describe(r)}")
        if r.changed:
            print(text_redline([r.paragraph.text], {0: list(r.edits)}).rstrip("\n"))
        print()
    t = result["totals"]
    rows = [("clauses", f"{t['clauses']} ({t['changed']} changed, {t['no_change']} no change, "
                        f"{t['flagged']} flagged)"),
            ("tokens", f"{t['tokens']:,} in {t['passes']:,} verifier passes ("
                       f"{t['tokens_per_pass'] or 0:.2f} a pass)"),
            ("time", f"{t['seconds']:.1f} s")]
    if args.output:
        rows.append(("written", f"{args.output} (0600)"))
    sys.stdout.flush()
    table(f"{WHO}: {result['file']}", rows, stderr=True)    # for people, like generate's summary

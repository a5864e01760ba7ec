"""`generate`, `chat` and `demo`: speculative decoding from the command line, on the Session API.

Text streams to stdout, the summary goes to stderr; nothing the user types or generates is
written anywhere else, unless they name a --history file. Every argument is checked before
the verifier loads.
"""
from __future__ import annotations

import argparse
import hashlib
import sys

from olifant_mlx.cli.common import (MODEL_HELP, add_generation_args, add_mlx_lm_args, add_prompt_cache_args,
                                    add_weights_arg, draft_tokens, empty_answer_hint, kv_window_note, prepare,
                                    print_json, summary_lines, template_kwargs)
from olifant_mlx.cli.output import answer_turn, document, output_format, write_output
from olifant_mlx.cli.sharding import add_sharding_args, sharded_command
from olifant_mlx.engine.options import OptionsError, default_of

DEMO_PROMPT = (  # the warranty disclaimer of the MIT licence: legal boilerplate verifiers know
    "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, "
    "INCLUDING BUT NOT LIMITED TO")

# said after the demo on the embedded verifier: what its text is, and how to get a real one
STAND_IN_NOTE = ("SmolLM2-135M is a 135M-parameter stand-in for a real verifier: its text is not legal "
                 "advice; for a real one, `python -m olifant_mlx models pull mistral --default` (4 GB).")


class PrefillBar:
    """Prefill progress on a terminal (stderr), for prompts long enough to notice."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar, self.task = enabled, None, None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < 1024:
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("reading the prompt"), BarColumn(),
                                TextColumn("{task.completed:,}/{task.total:,} tokens"),
                                TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("prefill", total=total)
        self.bar.update(self.task, completed=done)

    def close(self):
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def open_session(args):
    """Validate every argument, then load the verifier: (Session, options)."""
    from olifant_mlx.engine import Session
    from olifant_mlx.verifier import load_verifier

    options, spec, meter = prepare(args)
    verifier = load_verifier(args.model, shard=getattr(args, "shard", None),
                             adapter_path=getattr(args, "adapter_path", None))
    session = Session(verifier, spec, options, meter=meter)
    for warning in session.history.warnings if session.history is not None else ():
        sys.stderr.write(f"warning: {warning}\n")
    return session, options


KV_BITS_NOTE = ("note: with --kv-bits, drafted output can differ from plain decoding's on the same quantized "
                "cache where the verifier's two best tokens are close; leave --kv-bits off for exact output "
                "(docs/speculative-decoding.md)")


def stream_answer(session, request, args, out=None):
    """Run a planned Request (engine.request.plan), streaming text to `out` (default:
    sys.stdout as it is now, not as it was at import) or NDJSON chunks with --json-stream;
    returns (text, tokens, last Response)."""
    out = out or sys.stdout
    options = request.options
    ndjson = getattr(args, "json_stream", False)
    quiet_text = getattr(args, "json", False)
    bar = PrefillBar(sys.stderr.isatty() and not ndjson)
    text, tokens, last = [], [], None
    sources = []
    drafting = request.drafter.name != "none"
    try:
        for r in session.stream(request, on_prefill=bar):
            bar.close()
            if last is None and drafting and options.kv_bits and not getattr(args, "quiet", False):
                sys.stderr.write(KV_BITS_NOTE + "\n")
            if last is None and drafting and (note := kv_window_note(r.stats.prompt_tokens, options)):
                sys.stderr.write(note + "\n")
            text.append(r.text)
            tokens.extend(r.tokens)
            if last is None and r.precedents is not None:
                if ndjson:
                    print_json({"type": "precedents", "precedents": r.precedents.as_list()}, stream=out)
                elif not getattr(args, "quiet", False) and getattr(args, "verbose", True):
                    sys.stderr.write(r.precedents.summary() + "\n")
            if ndjson:
                print_json({"text": r.text, "tokens": r.tokens,
                            "provenance": [kind for _, kind in r.segments],
                            "finish_reason": r.finish_reason}, stream=out)
                for src in r.sources:
                    print_json({"type": "source", **src.as_dict()}, stream=out)
            elif not quiet_text and r.text:
                out.write(r.text)
                out.flush()
            if r.verbatim is not None:       # after the text it came with, on a line of its own
                mid_line = not (ndjson or quiet_text) and not "".join(text).endswith("\n")
                warn_verbatim(r.verbatim, options, mid_line and same_stream(out, sys.stderr))
            sources.extend(r.sources)
            last = r
    finally:
        bar.close()
    last.sources = sources          # every source of the generation, for report() and chat
    return "".join(text), tokens, last


def same_stream(a, b) -> bool:
    """Whether two streams write to one file, pipe or terminal (True where that is unknown)."""
    import os

    try:
        x, y = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError, AttributeError):
        return True
    return (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


def warn_verbatim(src, options, new_line=False) -> None:
    """The guard's one line on stderr: the document and the span's length (never its text);
    `new_line`: the streamed text stands mid-line where stderr writes, so start a line first."""
    place = src.places[0]
    where = f"{place.path}" + (f", page {place.page}" if place.page else "") + f", paragraph {place.paragraph}"
    action = "generation stopped" if options.verbatim_action == "stop" else "warning"
    sys.stderr.write(("\n" if new_line else "") + f"{action}: the output copies {src.tokens} consecutive "
                     f"tokens (more than --max-verbatim {options.max_verbatim}) from {where}\n")


def source_lines(sources) -> list[str]:
    """The sources of a reply, one line each: span, length and where (chat prints them)."""
    lines = []
    for s in sources:
        p = s.places[0]
        more = f" (+{s.count - 1} more)" if s.count > 1 else ""
        page = f" p. {p.page}" if p.page else ""
        lines.append(f"  tokens {s.start}-{s.end} ({s.tokens}): {p.path}{page} ¶{p.paragraph}{more}")
    return lines


def source_documents(sources) -> list[str]:
    """Each document the output copies from, one line each, with the page and paragraph of every
    place listed (a span held by three documents names all three)."""
    where = {}
    for s in sources:
        for p in s.places:
            where.setdefault(p.path, {})[f"p. {p.page} ¶{p.paragraph}" if p.page else f"¶{p.paragraph}"] = None
    return [f"  {path}: {', '.join(spots)}" for path, spots in where.items()]


def report(session, request, prompt, text, tokens, last, args) -> None:
    """The summary on stderr (unless --quiet), the final JSON object, the empty-answer hint:
    what the generation ran with is its Request's."""
    stats, spec = last.stats, request.drafting.spec
    stats.extra.update(k=request.options.k, regime="kv" if request.options.kv_cache else "uncached",
                       drafter_spec=spec.text if spec else None)
    if getattr(args, "json", False) or getattr(args, "json_stream", False):
        energy = last.energy.as_dict(stats.tokens) if last.energy is not None else None
        print_json({"text": text, "tokens": tokens, "finish_reason": last.finish_reason,
                    "stats": stats.as_dict(), "energy": energy,
                    "sources": [s.as_dict() for s in last.sources],
                    "precedents": last.precedents.as_list() if last.precedents is not None else None})
    elif text and not text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
    if not getattr(args, "verbose", True):      # mlx-lm's --verbose False: the response only
        return
    if stats.tokens == 0 and stats.stop_reason == "eos":
        sys.stderr.write("note: " + empty_answer_hint(session, prompt) + "\n")
    if not getattr(args, "quiet", False):
        sys.stderr.write("\n".join(summary_lines(stats, request.drafting, last.energy, args.stats)) + "\n")
        if last.sources:        # where, not what: the spans' text stays in --json
            docs = source_documents(last.sources)
            sys.stderr.write(f"sources: {len(last.sources)} verbatim span(s), the longest "
                             f"{max(s.tokens for s in last.sources)} tokens, from {len(docs)} document(s):\n"
                             + "\n".join(docs) + "\n")


def cmd_generate(args) -> int:
    from olifant_mlx.conversation import Conversation, Turn
    from olifant_mlx.engine import Chat
    from olifant_mlx.verifier.loader import check_text

    if args.prompt_cache_file and args.prefill_response is not None:
        raise ValueError("--prefill-response cannot go with --prompt-cache-file (the cached prompt ends inside "
                         "the user's message, before the assistant's answer begins): put the text in the prompt")
    prompt_text = sys.stdin.read() if args.prompt == "-" else args.prompt
    check_text(prompt_text, "the prompt (-p)")       # before the model loads
    if not prompt_text.strip() and not args.prompt_cache_file:     # a cached prompt may be continued as it is
        raise OptionsError("the prompt (-p) is empty: give the instruction, or the text to continue "
                           "('-p -' reads it from stdin)", "prompt")
    if args.output:
        output_format(args.output, probe=True)
    session, options = open_session(args)
    prompt = session.prompt_for(prompt_text, args.system_prompt, not args.ignore_chat_template,
                                template_kwargs(args))
    appended = not isinstance(prompt, Chat) or args.prefill_response is not None    # text to append to
    cache = None
    if args.prompt_cache_file:
        prompt, cache = continue_cached(session, prompt, args, options)
    # the text is appended to the prompt's (a raw prompt, a prefilled answer): it keeps its first space
    request = session.plan(prefilled(session, prompt, args.prefill_response), options, cache=cache,
                   continuation=appended)
    text, tokens, last = stream_answer(session, request, args)
    report(session, request, prompt, text, tokens, last, args)
    if args.output:
        turn = answer_turn(session, request, text, tokens, last, args.prefill_response or "")
        if appended and not isinstance(prompt, Chat):
            conv = document(prompt_text, turn)
        else:
            conv = Conversation(kind="chat", system_prompt=args.system_prompt,
                                turns=[Turn("user", prompt_text), turn])
            conv.touch()
        write_output(args.output, conv, options)
    return 0


def prefilled(session, prompt, prefill):
    """The prompt to generate from: with mlx-lm's --prefill-response, the chat template's ids
    with the assistant's answer begun (a base model has no template to put it after)."""
    from olifant_mlx.engine import Chat

    if prefill is None:
        return prompt
    if not isinstance(prompt, Chat):
        raise ValueError(f"--prefill-response goes after the chat template, and "
                         f"{session.verifier.name} has none (a base model): put the text at the "
                         f"end of the prompt instead")
    return session.verifier.chat_ids(prompt.messages, prompt.template_kwargs, prefill=prefill)


def continue_cached(session, prompt, args, options):
    """(the whole prompt's ids, a PromptCache holding the file's cache): the prompt continues
    the cached one. A chat's continuation is its template's text from the user's message on,
    as mlx-lm's generate cuts it (the cached prompt is the start of that message)."""
    from olifant_mlx.engine import Chat, PromptCache
    from olifant_mlx.engine import cache as kv
    from olifant_mlx.engine import prompt_file

    v = session.verifier
    layers, cached = prompt_file.load(args.prompt_cache_file, v.identity, v.model, options.max_kv_size)
    if isinstance(prompt, Chat):
        def render(messages):
            return v.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True,
                                                   **prompt.template_kwargs)

        full = render(prompt.messages)
        marked = render(prompt.messages[:-1] + ({"role": "user", "content": "<query>"},))
        text = full[marked.index("<query>"):]
    else:
        text = prompt
    store = PromptCache()
    quantized = (options.kv_bits, options.kv_group_size, options.quantized_kv_start) if options.kv_bits else None
    store.keep(kv.cache_key(v.model, options.max_kv_size, quantized), cached, layers)
    return cached + list(v.tokenizer.encode(text, add_special_tokens=False)), store


def cmd_cache_prompt(args) -> int:
    """mlx-lm's cache_prompt: the prompt's KV cache in a file, for `generate --prompt-cache-file`.
    With a chat template the prompt is the start of a user message, left open."""
    from olifant_mlx.engine import cache as kv
    from olifant_mlx.engine import prompt_file
    from olifant_mlx.engine.session import GenerationOptions
    from olifant_mlx.mlx_setup import mx
    from olifant_mlx.verifier import load_verifier

    GenerationOptions(max_kv_size=args.max_kv_size)           # checked before the model loads
    prompt_file.check_target(args.prompt_cache_file)
    text = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not text.strip():
        raise OptionsError("the prompt (-p) is empty: nothing to cache", "prompt")
    v = load_verifier(args.model)
    if v.has_chat_template and not args.ignore_chat_template:
        rendered = v.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                   add_generation_prompt=False, continue_final_message=True)
        ids = list(v.tokenizer.encode(rendered, add_special_tokens=False))
    else:
        ids = v.encode(text)
    layers = kv.make_cache(v.model, args.max_kv_size)
    kv.prefill(v.model, layers, ids)
    mx.eval([c.state for c in layers])
    prompt_file.save(args.prompt_cache_file, layers, ids, v)
    sys.stderr.write(f"saved the KV cache of {len(ids):,} prompt tokens to {args.prompt_cache_file} (mode 0600)\n")
    return 0


CHAT_HELP = "type a message; 'q' quits, 'r' starts a new conversation, 'h' shows this help"


def cmd_chat(args) -> int:
    """A multi-turn conversation on stdin/stdout (like mlx_lm.chat), kept in memory only."""
    from olifant_mlx.engine import Chat, PromptCache

    from olifant_mlx.conversation import Conversation, Turn

    if args.output:
        output_format(args.output, probe=True)     # before the model loads
    session, options = open_session(args)
    if not session.verifier.has_chat_template:
        raise ValueError(f"{session.verifier.name} has no chat template (a base model): use "
                         f"`generate` to continue text")
    cache = PromptCache()      # the conversation's KV cache: a turn prefills only its new tokens
    system = ({"role": "system", "content": args.system_prompt},) if args.system_prompt else ()

    def fresh():         # (the conversation for the verifier, the one --output keeps)
        return Chat(system, template_kwargs(args)), Conversation(kind="chat", system_prompt=args.system_prompt)

    chat, kept = fresh()
    interactive = sys.stdin.isatty()
    if interactive:
        sys.stderr.write(f"[{session.verifier.name}, drafter {session.spec.text if session.spec else 'none'}] "
                         f"{CHAT_HELP}\n")
    for query in typed_lines(interactive):
        if query.strip() == "r":
            chat, kept = fresh()
            cache.clear()
            sys.stderr.write("(new conversation)\n")
            continue
        chat = chat.then("user", query)
        request = session.plan(prefilled(session, chat, args.prefill_response), options, cache=cache,
                       continuation=args.prefill_response is not None)
        text, tokens, last = stream_answer(session, request, args)
        sys.stdout.write("\n")
        sys.stdout.flush()
        chat = chat.then("assistant", (args.prefill_response or "") + text)
        if args.output:               # after every answer: the file always holds a whole conversation
            kept.turns += [Turn("user", query), answer_turn(session, request, text, tokens, last,
                                                            args.prefill_response or "")]
            kept.touch()
            write_output(args.output, kept, options)
        chat_notes(session, chat, last, args)
    return 0


def typed_lines(interactive: bool):
    """The messages typed, one a line, until 'q' or the end of stdin; 'h' shows the help and
    blank lines are passed over."""
    while True:
        if interactive:
            sys.stderr.write(">> ")
            sys.stderr.flush()
        line = sys.stdin.readline()
        query = line.rstrip("\n")
        if not line or query.strip() == "q":
            return
        if query.strip() == "h":
            sys.stderr.write(CHAT_HELP + "\n")
        elif query.strip():
            yield query


def chat_notes(session, chat, last, args) -> None:
    """After a chat answer, on stderr: its sources; then, unless --verbose False, the hint for
    an empty answer and (unless --quiet) its numbers."""
    if last.sources:
        sys.stderr.write(f"[sources: {len(last.sources)} verbatim span(s) from the library]\n"
                         + "\n".join(source_lines(last.sources)) + "\n")
    s = last.stats
    if not args.verbose:         # mlx-lm's --verbose False: the answers only
        return
    if s.tokens == 0 and s.stop_reason == "eos":
        sys.stderr.write("note: " + empty_answer_hint(session, chat) + "\n")
    if not args.quiet:
        reused = s.extra.get("cached_tokens", 0)
        cached = f"; {reused} of the {s.prompt_tokens} prompt tokens from the cache" if reused else ""
        sys.stderr.write(f"[{s.tokens} tokens, {s.generation_tps:.1f} tok/s, acceptance "
                         f"{s.acceptance:.0%}, {s.steps} verifier passes, {s.stop_reason}{cached}]\n")


def _corpus_identity(spec: str) -> str:
    """A corpus's name and what it holds now (files: size and mtime; the licences: which
    distributions are installed), so a changed corpus trains a new demo model."""
    import os

    if spec == "builtin:licenses":
        from importlib import metadata

        names = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
        return spec + "|" + hashlib.sha256("\n".join(names).encode()).hexdigest()
    try:
        st = os.stat(spec)
        return f"{spec}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        return spec


def demo_draft_model(tokenizer, verifier_name, corpora):
    """The demo's draft model: trained once on `corpora` with the verifier's tokenizer, cached."""
    from olifant_mlx.draftmodel.igtree import IGTree
    from olifant_mlx.draftmodel.open import open_model_file
    from olifant_mlx.draftmodel.train import train
    from olifant_mlx.files import cache_dir

    key = hashlib.sha256(("\n".join(_corpus_identity(c) for c in corpora)
                          + tokenizer.digest.hex()).encode()).hexdigest()[:12]
    path = cache_dir() / "drafts" / f"{verifier_name}-{key}.olif"
    if not path.is_file():
        sys.stderr.write(f"building the demo draft model from {', '.join(corpora)} (once) ...\n")
        train(list(corpora), tokenizer, path, show_progress=True)
    return open_model_file(path, want=IGTree), path


def rounds_count(value: str) -> int:
    """argparse type of demo's --rounds: 1..100 (a usage error otherwise)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rounds must be a whole number, got {value!r}") from None
    if not 1 <= n <= 100:
        raise argparse.ArgumentTypeError(f"--rounds must be between 1 and 100, got {n}")
    return n


def cmd_demo(args) -> int:
    from rich.console import Console
    from rich.text import Text

    from olifant_mlx.cli.train import DEFAULT_CORPUS
    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.engine.request import without_drafting
    from olifant_mlx.measure import rounds
    from olifant_mlx.verifier import EMBEDDED_DEFAULT, load_verifier

    options = GenerationOptions(k=args.k, max_tokens=args.max_tokens)
    verifier = load_verifier(args.model or EMBEDDED_DEFAULT)
    ours = verifier.identity
    draft_model, path = demo_draft_model(ours, verifier.name, args.corpus or [DEFAULT_CORPUS])
    draft_model.check_tokenizer(ours.name, ours.vocab_size, ours.digest)
    prompt = args.prompt or DEMO_PROMPT
    spec = f"adaptive:hybrid:{path}"        # the best drafter measured, over the demo's model
    session = Session(verifier, spec, options)
    speculative = session.plan(prompt)
    plains, specs = demo_runs(session, {"plain": without_drafting(speculative), "speculative": speculative},
                              args.rounds)
    plain, spec_run = plains[-1], specs[-1]
    con = Console()
    con.print(f"[bold]verifier[/] {verifier.name} (KV cache, prompt continued as raw text), "
              f"[bold]drafter[/] adaptive hybrid (session text, then the olifant IGTree of "
              f"{draft_model.n_nodes:,} nodes trained on {', '.join(args.corpus or [DEFAULT_CORPUS])}), "
              f"k <= {args.k}\n[bold]prompt[/] {prompt}\n")
    for label, r in (("plain", plain), ("speculative", spec_run)):
        con.print(Text.assemble((label + ": ", "bold"), r.text))
    same = all(r.tokens == plain.tokens for r in plains + specs)
    con.print(demo_table(plains, specs, args.rounds))
    measured = rounds.speedups([r.stats.tokens_per_s for r in plains], [r.stats.tokens_per_s for r in specs])
    con.print(f"outputs identical: [bold]{'yes' if same else 'NO'}[/]   verifier {verifier.name}, drafter {spec}")
    for i, line in enumerate(rounds.summary(measured, rounds.load_average())):
        con.print(f"[bold]{line}[/]" if i == 0 else f"[yellow]{line}[/]", highlight=False)
    if verifier.name == EMBEDDED_DEFAULT:
        con.print(STAND_IN_NOTE, soft_wrap=True, highlight=False, markup=False)
    return 0 if same else 1


def demo_runs(session, requests: dict, n: int):
    """(plain Results, speculative Results) of the demo's measured rounds: a warm-up of both
    runs (first-call costs, the drafter's first lookups), then `n` rounds that alternate which
    runs first, so that a drift in the machine's load hits both alike."""
    from olifant_mlx.verifier.aliases import stderr_progress

    runs = [("warm-up", "plain"), ("warm-up", "speculative")] + [
        (f"round {i + 1}/{n}", which) for i in range(n)
        for which in (("plain", "speculative") if i % 2 == 0 else ("speculative", "plain"))]
    plains, specs = [], []
    with stderr_progress("demo", len(runs)) as advance:     # on a terminal: which run, its passes
        for i, (stage, which) in enumerate(runs):
            passes = []

            def tick(stage=stage, which=which, passes=passes):    # asked after each verifier pass
                passes.append(1)
                advance(0, f"{stage}: {which}, {len(passes)} verifier passes")
                return False

            advance(0, f"{stage}: {which}")
            r = session.generate(requests[which], should_stop=tick)
            advance()
            if i >= 2:                         # the warm-up's runs are not measured
                (plains if which == "plain" else specs).append(r)
    return plains, specs


def demo_table(plains, specs, n: int):
    """The demo's table: tokens, median tok/s, acceptance, mean accepted length, passes."""
    import statistics

    from rich.table import Table

    t = Table(show_header=True, caption=f"tok/s: median of {n} rounds; the rest: the last round")
    for c in ("", "tokens", "tok/s", "acceptance", "mean accepted length", "verifier passes"):
        t.add_column(c, justify="right")
    for label, runs in (("plain", plains), ("speculative", specs)):
        st = runs[-1].stats
        drafted = label != "plain"
        t.add_row(label, str(st.tokens), f"{statistics.median(r.stats.tokens_per_s for r in runs):.1f}",
                  f"{st.acceptance:.1%}" if drafted else "—",
                  f"{st.mean_accepted_length:.2f}" if drafted else "—", str(st.steps))
    return t


def add_generate(g):
    add_generation_args(g)
    add_mlx_lm_args(g)
    add_sharding_args(g)
    add_prompt_cache_args(g)
    g.add_argument("--stats", action="store_true", help="more detail in the summary (steps, times)")
    g.add_argument("--quiet", action="store_true", help="no summary on stderr")
    add_output_arg(g, "the prompt and the text (a raw prompt: continued as a document)")
    out = g.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object on stdout at the end")
    out.add_argument("--json-stream", action="store_true",
                     help="one JSON object per chunk on stdout (NDJSON), then the final one")
    g.set_defaults(func=sharded_command(cmd_generate))


def add_output_arg(p, what: str) -> None:
    p.add_argument("--output", metavar="FILE",
                   help=f"also write {what} to FILE, with the copied spans and their sources; its "
                        f"suffix picks the format: .docx (Word, copied spans highlighted), .md, .txt, "
                        f".json (created mode 0600)")


def add_chat(c):
    add_generation_args(c, prompt=False)
    add_mlx_lm_args(c)
    add_sharding_args(c)
    c.add_argument("--quiet", action="store_true", help="no per-answer summary on stderr")
    add_output_arg(c, "the conversation, after every answer")
    c.set_defaults(func=sharded_command(cmd_chat), stats=False)


def add_cache_prompt(cp):
    cp.add_argument("--model", help=MODEL_HELP)
    cp.add_argument("-p", "--prompt", required=True, help="the prompt to cache ('-' reads stdin)")
    cp.add_argument("--prompt-cache-file", required=True, metavar="FILE",
                    help="where to write it (a .safetensors file, mode 0600)")
    cp.add_argument("--max-kv-size", type=int, help="a sliding KV window (generate must use the same)")
    cp.add_argument("--ignore-chat-template", action="store_true",
                    help="cache the prompt as raw text, without the verifier's chat template")
    cp.set_defaults(func=cmd_cache_prompt)


def add_demo(d):
    d.add_argument("--model", help="verifier (default smollm2-135m)")
    add_weights_arg(d)
    d.add_argument("--corpus", nargs="+", help="draft-model corpus (default: builtin:licenses)")
    d.add_argument("-k", type=draft_tokens, default=default_of("k"),
                   help="draft tokens per step at most (default %(default)s)")
    d.add_argument("-m", "--max-tokens", type=int, default=80)
    d.add_argument("-p", "--prompt", help="prompt text (default: a licence clause)")
    d.add_argument("--rounds", type=rounds_count, default=3,
                   help="measured rounds of plain and speculative, after a warm-up (default 3)")
    d.set_defaults(func=cmd_demo)

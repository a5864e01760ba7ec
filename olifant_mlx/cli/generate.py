"""`generate` and `demo`: speculative decoding from the command line, on the Session API.

Text streams to stdout, the summary goes to stderr; nothing the user types or generates is
written anywhere else, unless they name a --history file.
"""
from __future__ import annotations

import hashlib
import sys

from olifant_mlx.cli.common import MODEL_HELP, draft_help, draft_tokens, print_json

DEMO_PROMPT = (  # the warranty disclaimer of the MIT licence: legal boilerplate verifiers know
    "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, "
    "INCLUDING BUT NOT LIMITED TO")


def summary_line(stats, label: str) -> str:
    return (f"{label}: {stats.tokens} tokens in {stats.seconds:.2f} s = {stats.tokens_per_s:.1f} tok/s, "
            f"acceptance {stats.acceptance:.1%}, mean accepted length {stats.mean_accepted_length:.2f}, "
            f"{stats.steps} steps, stopped by {stats.stop_reason or 'nothing'}")


def options_from(args):
    """GenerationOptions from generate's flags (validated: errors before any model loads)."""
    from olifant_mlx.engine import GenerationOptions

    return GenerationOptions(k=args.k, max_tokens=args.max_tokens, kv_cache=not args.no_kv_cache,
                             max_kv_size=args.max_kv_size, temperature=args.temperature,
                             top_p=args.top_p, seed=args.seed, history=args.history)


def cmd_generate(args) -> int:
    from olifant_mlx.drafters import parse_spec, uses_history
    from olifant_mlx.drafters.history import check_path
    from olifant_mlx.engine import Session
    from olifant_mlx.verifier import load_verifier

    options = options_from(args)
    spec = parse_spec(args.draft)
    if options.history and not uses_history(spec):
        raise ValueError("--history needs a hybrid drafter: --draft hybrid:PATH or "
                         "adaptive:hybrid:PATH")
    if options.history:
        check_path(options.history)       # a FIFO or a dangling link: refused before the verifier loads
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    session = Session(load_verifier(args.model), spec, options)
    for warning in session.history.warnings if session.history is not None else ():
        sys.stderr.write(f"warning: {warning}\n")
    stream = None if args.json else sys.stdout
    text, tokens, last = [], [], None
    for r in session.stream(prompt):
        text.append(r.text)
        tokens.extend(r.tokens)
        if stream is not None and r.text:
            stream.write(r.text)
            stream.flush()
        last = r
    if stream is not None:
        stream.write("\n")
        stream.flush()
    stats = last.stats
    stats.extra.update(k=args.k, regime=options.regime)
    if args.json:
        print_json({"text": "".join(text), "tokens": tokens, "stats": stats.as_dict()})
    if args.stats or not args.json:
        label = f"{session.verifier.name} {options.regime} {session.drafter.name} k={args.k}"
        sys.stderr.write(summary_line(stats, label) + "\n")
    return 0


def demo_draft_model(tokenizer, verifier_name, corpora):
    """The demo's draft model: trained once on `corpora` with the verifier's tokenizer, cached."""
    from olifant_mlx.draftmodel.igtree import IGTree
    from olifant_mlx.draftmodel.train import train
    from olifant_mlx.files import cache_dir

    key = hashlib.sha256(("\n".join(corpora) + tokenizer.digest.hex()).encode()).hexdigest()[:12]
    path = cache_dir() / "drafts" / f"{verifier_name}-{key}.olif"
    if not path.is_file():
        sys.stderr.write(f"building the demo draft model from {', '.join(corpora)} (once) ...\n")
        train(list(corpora), tokenizer, path, show_progress=True)
    return IGTree.load(path)


def cmd_demo(args) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from olifant_mlx.cli.train import DEFAULT_CORPUS
    from olifant_mlx.drafters import NoDrafter
    from olifant_mlx.drafters.olifant import OlifantDrafter
    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.verifier import EMBEDDED_DEFAULT, load_verifier

    plain_opts = GenerationOptions(k=0, max_tokens=args.max_tokens)    # checked before any model loads
    verifier = load_verifier(args.model or EMBEDDED_DEFAULT)
    ours = verifier.identity
    draft_model = demo_draft_model(ours, verifier.name, args.corpus or [DEFAULT_CORPUS])
    draft_model.check_tokenizer(ours.name, ours.vocab_size, ours.digest)
    prompt = args.prompt or DEMO_PROMPT
    session = Session(verifier, OlifantDrafter(draft_model))
    session.generate("Warm-up.", plain_opts.replace(max_tokens=4), NoDrafter())  # first-call costs
    plain = session.generate(prompt, plain_opts, NoDrafter())
    spec = session.generate(prompt, GenerationOptions(k=args.k, max_tokens=args.max_tokens))
    con = Console()
    con.print(f"[bold]verifier[/] {verifier.name} (KV cache), [bold]draft[/] olifant IGTree "
              f"({draft_model.n_nodes:,} nodes), k={args.k}\n[bold]prompt[/] {prompt}\n")
    for label, r in (("plain", plain), ("speculative", spec)):
        con.print(Text.assemble((label + ": ", "bold"), r.text))
    same = plain.tokens == spec.tokens
    t = Table(show_header=True)
    for c in ("", "tokens", "tok/s", "acceptance", "mean accepted length", "steps"):
        t.add_column(c, justify="right")
    for label, s in (("plain", plain.stats), ("speculative", spec.stats)):
        t.add_row(label, str(s.tokens), f"{s.tokens_per_s:.1f}", f"{s.acceptance:.1%}",
                  f"{s.mean_accepted_length:.2f}", str(s.steps))
    con.print(t)
    ps, ss = plain.stats, spec.stats
    speedup = ss.tokens_per_s / ps.tokens_per_s if ps.tokens_per_s else 0.0
    con.print(f"outputs identical: [bold]{'yes' if same else 'NO'}[/]   speedup: [bold]{speedup:.2f}x[/] "
              f"(measured in this run, verifier {verifier.name})")
    return 0 if same else 1


def add_parsers(sub):
    g = sub.add_parser("generate", help="generate text, optionally with speculative decoding")
    g.add_argument("--model", help=MODEL_HELP)
    g.add_argument("--draft", default="none", help=draft_help())
    g.add_argument("-k", type=draft_tokens, default=3, help="draft tokens per step (0..64)")
    g.add_argument("--no-kv-cache", action="store_true", help="uncached regime: full sequence each step")
    g.add_argument("--max-kv-size", type=int, help="sliding KV window (rotating cache)")
    g.add_argument("-p", "--prompt", required=True, help="text, or - for stdin")
    g.add_argument("--max-tokens", type=int, default=100)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0, help="sampling seed: same seed, same text, "
                                                       "with or without drafting")
    g.add_argument("--history", metavar="FILE",
                   help="opt-in: a hybrid drafter also drafts from earlier sessions kept in FILE, "
                        "and this session's prompt and output are appended to it (local, mode 0600)")
    g.add_argument("--stats", action="store_true", help="summary on stderr (also with --json)")
    g.add_argument("--json", action="store_true", help="one JSON object on stdout instead of streaming")
    g.set_defaults(func=cmd_generate)

    d = sub.add_parser("demo", help="plain vs speculative on a legal prompt with the offline verifier")
    d.add_argument("--model", help="verifier (default smollm2-135m)")
    d.add_argument("--corpus", nargs="+", help="draft-model corpus (default: builtin:licenses)")
    d.add_argument("-k", type=draft_tokens, default=5)
    d.add_argument("--max-tokens", type=int, default=80)
    d.add_argument("-p", "--prompt", help="prompt text (default: a licence clause)")
    d.set_defaults(func=cmd_demo)

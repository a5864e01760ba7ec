"""`generate` and `demo`: speculative decoding from the command line.

Text streams to stdout, the summary goes to stderr; nothing the user types or
generates is written anywhere else, unless they name a --history file.
"""
from __future__ import annotations

import hashlib
import json
import sys

from olifant_mlx.engine import Stats, generate_steps

DEMO_PROMPT = (  # the warranty disclaimer of the MIT licence: legal boilerplate verifiers know
    "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, "
    "INCLUDING BUT NOT LIMITED TO")


def open_session(model_spec, draft_spec="none"):
    """(model, mlx-lm tokenizer, our Tokenizer, drafter, verifier name)."""
    from olifant_mlx.drafters import make_drafter
    from olifant_mlx.verifier import load_verifier, verifier_tokenizer

    model, tok, name = load_verifier(model_spec)
    ours = verifier_tokenizer(tok, name)
    return model, tok, ours, make_drafter(draft_spec, ours), name


def run(model, tok, prompt_text, drafter, *, k, max_tokens, kv_cache=True, max_kv_size=None,
        stream=None, sampling=None):
    """Generate; optionally stream text to `stream`. Returns (tokens, text, Stats)."""
    prompt = tok.encode(prompt_text)
    detok = tok.detokenizer
    detok.reset()
    stats = Stats()
    tokens = []
    for step in generate_steps(model, prompt, drafter, k=k, max_tokens=max_tokens,
                               kv_cache=kv_cache, eos_ids=tok.eos_token_ids,
                               max_kv_size=max_kv_size, bos_id=tok.bos_token_id, stats=stats,
                               sampling=sampling):
        tokens.extend(step.emitted)
        for t in step.emitted:
            detok.add_token(t)
        if stream is not None:
            stream.write(detok.last_segment)
            stream.flush()
    detok.finalize()
    if stream is not None:
        stream.write(detok.last_segment + "\n")
        stream.flush()
    return tokens, detok.text, stats


def summary_line(stats: Stats, label: str) -> str:
    return (f"{label}: {stats.tokens} tokens in {stats.seconds:.2f} s = {stats.tokens_per_s:.1f} tok/s, "
            f"acceptance {stats.acceptance:.1%}, mean accepted length {stats.mean_accepted_length:.2f}, "
            f"{stats.steps} steps")


def cmd_generate(args) -> int:
    model, tok, ours, drafter, name = open_session(args.model, args.draft)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    regime = "uncached" if args.no_kv_cache else "kv-cache"
    from olifant_mlx.engine import Sampling

    if args.temperature < 0 or not 0 < args.top_p <= 1:
        raise ValueError("--temperature must be >= 0 and --top-p in (0, 1]")
    sampling = Sampling(args.temperature, args.top_p, args.seed) if args.temperature > 0 else None
    history = None
    if args.history:
        from olifant_mlx.drafters import find_hybrid
        from olifant_mlx.history import SessionHistory

        hybrid = find_hybrid(drafter)
        if hybrid is None:
            raise ValueError("--history needs a hybrid drafter: --draft hybrid:PATH or "
                             "adaptive:hybrid:PATH")
        hybrid.history = history = SessionHistory(args.history, ours.digest, ours.vocab_size)
    tokens, text, stats = run(model, tok, prompt, drafter, k=args.k, max_tokens=args.max_tokens,
                              kv_cache=not args.no_kv_cache, max_kv_size=args.max_kv_size,
                              stream=None if args.json else sys.stdout, sampling=sampling)
    stats.extra.update(verifier=name, drafter=drafter.name, k=args.k, regime=regime)
    if history is not None:   # the user asked for it: remember this session, locally
        ids = tok.encode(prompt)
        history.append((ids[1:] if ids[:1] == [tok.bos_token_id] else ids) + tokens)
    if args.json:
        print(json.dumps({"text": text, "tokens": tokens, "stats": stats.as_dict()}))
    if args.stats or not args.json:
        sys.stderr.write(summary_line(stats, f"{name} {regime} {drafter.name} k={args.k}") + "\n")
    return 0


def demo_draft_model(tokenizer, verifier_name, corpora):
    """The demo's draft model: trained once on `corpora` with the verifier's tokenizer, cached."""
    from olifant_mlx.igtree import IGTree
    from olifant_mlx.tokenizers import cache_dir
    from olifant_mlx.train import train

    key = hashlib.sha256(("\n".join(corpora) + tokenizer.digest.hex()).encode()).hexdigest()[:12]
    path = cache_dir() / "drafts" / f"{verifier_name}-{key}.olif"
    if not path.is_file():
        sys.stderr.write(f"building the demo draft model from {', '.join(corpora)} (once) ...\n")
        train(list(corpora), tokenizer, path, show_progress=True)
    return IGTree.load(path)


def cmd_demo(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from olifant_mlx.cli import DEFAULT_CORPUS
    from olifant_mlx.drafters import NoDrafter, OlifantDrafter
    from olifant_mlx.verifier import EMBEDDED_DEFAULT

    model, tok, ours, _, name = open_session(args.model or EMBEDDED_DEFAULT)
    draft_model = demo_draft_model(ours, name, args.corpus or [DEFAULT_CORPUS])
    draft_model.check_tokenizer(ours.name, ours.vocab_size, ours.digest)
    prompt = args.prompt or DEMO_PROMPT
    run(model, tok, "Warm-up.", NoDrafter(), k=0, max_tokens=4)  # first-call costs out of the timing
    plain_ids, plain, ps = run(model, tok, prompt, NoDrafter(), k=0, max_tokens=args.max_tokens)
    spec_ids, spec, ss = run(model, tok, prompt, OlifantDrafter(draft_model), k=args.k,
                             max_tokens=args.max_tokens)
    con = Console()
    con.print(f"[bold]verifier[/] {name} (KV cache), [bold]draft[/] olifant IGTree "
              f"({draft_model.n_nodes:,} nodes), k={args.k}\n[bold]prompt[/] {prompt}\n")
    from rich.text import Text

    for label, text in (("plain", plain), ("speculative", spec)):
        con.print(Text.assemble((label + ": ", "bold"), text))
    same = plain_ids == spec_ids
    t = Table(show_header=True)
    for c in ("", "tokens", "tok/s", "acceptance", "mean accepted length", "steps"):
        t.add_column(c, justify="right")
    for label, s in (("plain", ps), ("speculative", ss)):
        t.add_row(label, str(s.tokens), f"{s.tokens_per_s:.1f}", f"{s.acceptance:.1%}",
                  f"{s.mean_accepted_length:.2f}", str(s.steps))
    con.print(t)
    speedup = ss.tokens_per_s / ps.tokens_per_s if ps.tokens_per_s else 0.0
    con.print(f"outputs identical: [bold]{'yes' if same else 'NO'}[/]   speedup: [bold]{speedup:.2f}x[/] "
              f"(measured in this run, verifier {name})")
    return 0 if same else 1


def add_parsers(sub):
    g = sub.add_parser("generate", help="generate text, optionally with speculative decoding")
    g.add_argument("--model", help="verifier: alias (smollm2-135m, gemma3-270m), GGUF file, MLX "
                                   "folder or hub id (default: Mistral-7B-v0.1 if cached, else "
                                   "smollm2-135m)")
    g.add_argument("--draft", default="none",
                   help="none | olifant:PATH | ngram | ngram-words | lookup | neural:MODEL | "
                        "hybrid:PATH | adaptive:SPEC")
    g.add_argument("-k", type=int, default=3, help="draft tokens per step (0..64)")
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
    d.add_argument("-k", type=int, default=5)
    d.add_argument("--max-tokens", type=int, default=80)
    d.add_argument("-p", "--prompt", help="prompt text (default: a licence clause)")
    d.set_defaults(func=cmd_demo)

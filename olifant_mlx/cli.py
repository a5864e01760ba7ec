"""`python -m olifant_mlx COMMAND`: train, info, draft, generate, demo, energy, bench, calc,
analyze, tui."""
from __future__ import annotations

import argparse
import json
import sys

DEFAULT_CORPUS = "builtin:licenses"
# modules that add their own subcommands (each has add_parsers(sub))
COMMAND_MODULES = ("olifant_mlx.decode_cli", "olifant_mlx.energy.cli", "olifant_mlx.analysis_cli",
                   "olifant_mlx.bench", "tui.cli")


def _table(title, rows):
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_header=False)
    t.add_column("", style="bold")
    t.add_column("", justify="right")
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


def _mb(n):
    return f"{n / 1e6:.2f} MB"


def cmd_train(args) -> int:
    from olifant_mlx.tokenizers import load_tokenizer
    from olifant_mlx.train import train

    tok = load_tokenizer(args.tokenizer)
    order = args.order
    if args.permutation:
        order = [int(x) for x in args.permutation.split(",")]
    s = train(args.corpus or [DEFAULT_CORPUS], tok, args.out, window=args.window, order=order,
              top_k=args.top_k, max_tokens=args.max_tokens, holdout=args.holdout,
              eval_specs=args.eval or (), eval_max=args.eval_max, text_field=args.text_field,
              show_progress=not args.quiet)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    rows = [("model", s["out"]), ("tokenizer", f"{s['tokenizer']['name']} ({s['tokenizer']['vocab_size']})"),
            ("documents", f"{s['documents']:,}"), ("instances", f"{s['instances']:,}"),
            ("nodes", f"{s['nodes']:,}"), ("classes", f"{s['classes']:,}"),
            ("level order", " ".join(f"t{p + 1}" for p in s["permutation"])),
            ("file size", _mb(s["file_bytes"])), ("read + tokenize", f"{s['read_tokenize_s']:.1f} s"),
            ("build", f"{s['build_s']:.1f} s"), ("load (mmap)", f"{s['load_s'] * 1e3:.1f} ms"),
            ("peak RSS", f"{s['peak_rss_mb']:.0f} MB")]
    for name, e in s["eval"].items():
        rows.append((f"accuracy on {name}", f"{e['accuracy']:.2%} of {e['instances']:,}"))
    _table("draft model trained", rows)
    return 0


def cmd_info(args) -> int:
    from olifant_mlx.igtree import IGTree

    m = IGTree.load(args.model)
    d = m.describe()
    if args.json:
        print(json.dumps(d, indent=2))
    else:
        _table(args.model, [(k, str(v)) for k, v in d.items()])
    return 0


def cmd_draft(args) -> int:
    from olifant_mlx.igtree import IGTree
    from olifant_mlx.tokenizers import load_tokenizer

    m = IGTree.load(args.model)
    tok = load_tokenizer(args.tokenizer)
    m.check_tokenizer(tok.name, tok.vocab_size, tok.digest)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    ids = tok.encode(prompt)
    ans = m.draft_answers(ids, args.k, min_depth=args.min_depth, min_share=args.min_share)
    # decode with the prompt: SentencePiece drops a leading space of a lone continuation
    text = tok.decode(ids + ans["token"].tolist())[len(tok.decode(ids)):]
    if args.json:
        print(json.dumps({"prompt_tokens": len(ids), "draft": [int(t) for t in ans["token"]],
                          "text": text,
                          "depth": ans["depth"].tolist(),
                          "share": [round(int(a["winner_count"]) / max(int(a["total"]), 1), 4) for a in ans]}))
    else:
        from rich.console import Console
        from rich.text import Text

        shown = Text(prompt)
        shown.append(text, style="bold green")
        Console().print(shown)
        for a in ans:
            sys.stderr.write(f"{a['token']:>6} {tok.decode([a['token']])!r:<16} depth {a['depth']} "
                             f"share {a['winner_count']}/{a['total']}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m olifant_mlx",
                                description="Olifant: IGTree draft models for speculative decoding")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a draft model on a corpus")
    t.add_argument("--corpus", nargs="+", metavar="PATH",
                   help=".txt/.jsonl (.gz/.xz), a directory, builtin:licenses, or a HF dataset "
                        f"name[:config]:split (default {DEFAULT_CORPUS})")
    t.add_argument("--tokenizer", default="mistral",
                   help="'mistral' (Mistral-7B-v0.1, default), a SentencePiece .model, or a "
                        "HF/mlx-lm model path")
    t.add_argument("--window", type=int, default=4, help="context tokens per instance (1..16)")
    t.add_argument("--order", choices=["gain_ratio", "info_gain"], default="gain_ratio")
    t.add_argument("--permutation", help="explicit level order: 0-based window positions, root "
                                         "first, e.g. 3,2,1,0")
    t.add_argument("--top-k", type=int, default=0,
                   help="class counts stored per node beyond the winner (0 = winner only)")
    t.add_argument("--out", required=True, help="model file to write")
    t.add_argument("--eval", nargs="+", metavar="PATH", help="held-out corpora to score")
    t.add_argument("--holdout", type=float, default=0.0,
                   help="fraction of documents held out of training and scored")
    t.add_argument("--eval-max", type=int, help="score at most this many held-out tokens")
    t.add_argument("--max-tokens", type=int, help="train on at most this many tokens")
    t.add_argument("--text-field", default="text", help="text field of .jsonl and datasets")
    t.add_argument("--json", action="store_true", help="print the summary as JSON")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    i = sub.add_parser("info", help="describe a model file")
    i.add_argument("model")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_info)

    d = sub.add_parser("draft", help="draft k tokens after a prompt with a model alone")
    d.add_argument("-m", "--model", required=True)
    d.add_argument("-p", "--prompt", required=True, help="text, or - for stdin")
    d.add_argument("-k", type=int, default=8)
    d.add_argument("--tokenizer", default="mistral")
    d.add_argument("--min-depth", type=int, default=0)
    d.add_argument("--min-share", type=float, default=0.0)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_draft)

    from importlib import import_module

    for module in COMMAND_MODULES:
        import_module(module).add_parsers(sub)
    return p


def main(argv=None) -> int:
    from olifant_mlx.corpus import CorpusError
    from olifant_mlx.energy import EnergyError
    from olifant_mlx.igtree import IGTreeError, TokenizerMismatch
    from olifant_mlx.tokenizers import TokenizerError
    from olifant_mlx.verifier import VerifierError

    args = build_parser().parse_args(argv)
    k = getattr(args, "k", None)
    ks = k if isinstance(k, list) else [k] if isinstance(k, int) else []
    if any(x < 0 or x > 64 for x in ks):
        sys.stderr.write(f"error: k must be between 0 and 64, got {k}\n")
        return 2
    try:
        return args.func(args)
    except (IGTreeError, TokenizerMismatch, TokenizerError, CorpusError, VerifierError, ValueError,
            OSError, EnergyError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130

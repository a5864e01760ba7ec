"""`train`, `info` and `draft`: make a draft model, describe one, draft with one alone."""
from __future__ import annotations

import sys

from olifant_mlx.cli.common import draft_tokens, mb, print_json, table

DEFAULT_CORPUS = "builtin:licenses"


def cmd_train(args) -> int:
    from olifant_mlx.draftmodel.train import train
    from olifant_mlx.verifier import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    order = args.order
    if args.permutation:
        order = [int(x) for x in args.permutation.split(",")]
    s = train(args.corpus or [DEFAULT_CORPUS], tok, args.out, window=args.window, order=order,
              top_k=args.top_k, max_tokens=args.max_tokens, holdout=args.holdout,
              eval_specs=args.eval or (), eval_max=args.eval_max, text_field=args.text_field,
              show_progress=not args.quiet)
    if args.json:
        print_json(s, indent=2)
        return 0
    rows = [("model", s["out"]), ("tokenizer", f"{s['tokenizer']['name']} ({s['tokenizer']['vocab_size']})"),
            ("documents", f"{s['documents']:,}"), ("instances", f"{s['instances']:,}"),
            ("nodes", f"{s['nodes']:,}"), ("classes", f"{s['classes']:,}"),
            ("level order", " ".join(f"t{p + 1}" for p in s["permutation"])),
            ("file size", mb(s["file_bytes"])), ("read + tokenize", f"{s['read_tokenize_s']:.1f} s"),
            ("build", f"{s['build_s']:.1f} s"), ("load (mmap)", f"{s['load_s'] * 1e3:.1f} ms"),
            ("peak RSS", f"{s['peak_rss_mb']:.0f} MB")]
    for name, e in s["eval"].items():
        rows.append((f"accuracy on {name}", f"{e['accuracy']:.2%} of {e['instances']:,}"))
    table("draft model trained", rows)
    return 0


def cmd_info(args) -> int:
    from olifant_mlx.draftmodel.igtree import IGTree

    d = IGTree.load(args.model).describe()
    if args.json:
        print_json(d, indent=2)
    else:
        table(args.model, [(k, str(v)) for k, v in d.items()])
    return 0


def cmd_draft(args) -> int:
    from olifant_mlx.draftmodel.igtree import IGTree
    from olifant_mlx.verifier import load_tokenizer

    m = IGTree.load(args.model)
    tok = load_tokenizer(args.tokenizer)
    m.check_tokenizer(tok.name, tok.vocab_size, tok.digest)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    ids = tok.encode(prompt)
    ans = m.draft_answers(ids, args.k, min_depth=args.min_depth, min_share=args.min_share)
    # decode with the prompt: SentencePiece drops a leading space of a lone continuation
    text = tok.decode(ids + ans["token"].tolist())[len(tok.decode(ids)):]
    if args.json:
        print_json({"prompt_tokens": len(ids), "draft": [int(t) for t in ans["token"]],
                    "text": text, "depth": ans["depth"].tolist(),
                    "share": [round(int(a["winner_count"]) / max(int(a["total"]), 1), 4) for a in ans]})
        return 0
    from rich.console import Console
    from rich.text import Text

    shown = Text(prompt)
    shown.append(text, style="bold green")
    Console().print(shown)
    for a in ans:
        sys.stderr.write(f"{a['token']:>6} {tok.decode([a['token']])!r:<16} depth {a['depth']} "
                         f"share {a['winner_count']}/{a['total']}\n")
    return 0


def add_parsers(sub):
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
    d.add_argument("-k", type=draft_tokens, default=8)
    d.add_argument("--tokenizer", default="mistral")
    d.add_argument("--min-depth", type=int, default=0)
    d.add_argument("--min-share", type=float, default=0.0)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_draft)

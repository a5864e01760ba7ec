"""`python -m olifant_mlx tui`: the terminal UI."""
from __future__ import annotations


def cmd_tui(args) -> int:
    from tui.app import OlifantApp

    app = OlifantApp(model=args.model, draft=args.draft, k=args.k, max_tokens=args.max_tokens,
                     energy=args.energy)
    app.run()
    return 0


def add_parsers(sub):
    t = sub.add_parser("tui", help="terminal UI: live speculative drafting, energy, calculator")
    t.add_argument("--model", help="verifier (alias, GGUF, MLX folder or hub id; default as generate)")
    t.add_argument("--draft", default="ngram",
                   help="none | olifant:PATH | ngram | ngram-words | lookup | neural:MODEL")
    t.add_argument("-k", type=int, default=3, help="draft tokens per step (0..64)")
    t.add_argument("--max-tokens", type=int, default=100)
    t.add_argument("--energy", help="energy backend: auto (default, $OLIFANT_ENERGY) | ioreport | "
                                    "powermetrics | rapl | nvml | replay:PATH | none")
    t.set_defaults(func=cmd_tui)

"""`tui`: the terminal UI."""
from __future__ import annotations

from olifant_mlx.cli.common import MODEL_HELP, draft_help, draft_tokens, energy_help


def cmd_tui(args) -> int:
    from olifant_mlx.drafters import parse_spec
    from olifant_mlx.engine import GenerationOptions
    from olifant_mlx.tui.app import OlifantApp

    parse_spec(args.draft)                               # bad input fails before the UI starts
    GenerationOptions(k=args.k, max_tokens=args.max_tokens)
    app = OlifantApp(model=args.model, draft=args.draft, k=args.k, max_tokens=args.max_tokens,
                     energy=args.energy)
    app.run()
    return 0


def add_parsers(sub):
    t = sub.add_parser("tui", help="terminal UI: live speculative drafting, energy, calculator")
    t.add_argument("--model", help=MODEL_HELP)
    t.add_argument("--draft", default="ngram", help=draft_help())
    t.add_argument("-k", type=draft_tokens, default=3, help="draft tokens per step (0..64)")
    t.add_argument("--max-tokens", type=int, default=100)
    t.add_argument("--energy", help=energy_help())
    t.set_defaults(func=cmd_tui)

"""`calc` (the speedup calculator) and `analyze` (redundancy of a set of texts)."""
from __future__ import annotations

import json

from olifant_mlx.cli.common import whole_number
from olifant_mlx.measure import calc


def parse_verify_costs(spec: str | None) -> dict | None:
    """'1:1.0,2:1.39,3:1.52' -> {1: 1.0, 2: 1.39, 3: 1.52}: the cost of verifying g draft
    tokens in plain steps (from a measured verifier cost curve)."""
    if not spec:
        return None
    costs = {}
    for part in spec.split(","):
        g, _, v = part.partition(":")
        try:
            costs[int(g)] = float(v)
        except ValueError:
            raise ValueError(f"--verify-cost wants g:cost pairs like 3:1.52, got {part!r}") from None
        if costs[int(g)] <= 0:
            raise ValueError(f"verify cost must be > 0, got {part!r}")
    return costs


def chart(curve: dict, width: int = 40) -> str:
    top = max(curve.values()) or 1.0
    lines = []
    for g, s in curve.items():
        bar = "█" * max(1, round(width * s / top))
        lines.append(f"γ={g:>2} {bar} {s:.2f}x")
    return "\n".join(lines)


def cmd_calc(args) -> int:
    r = calc.report(args.alpha, args.gamma, args.c, parse_verify_costs(args.verify_cost) or 1.0,
                    args.acceptance)
    if args.fast_path:   # the headline figures of the KV regime
        r = dict(r, speedup=r["fast_path_speedup"], best_gamma=r["fast_path_best_gamma"],
                 best_speedup=r["fast_path_best_speedup"], curve=r["fast_path_curve"])
    r["fast_path"] = args.fast_path
    if args.json:
        print(json.dumps(r))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="Speculative decoding speedup (Leviathan et al. 2023"
                    + (", rejection fast-path" if r["fast_path"] else "") + ")", show_header=False)
    t.add_column("", style="bold")
    t.add_column("", justify="right")
    if r["acceptance_in"] is not None:
        t.add_row("measured acceptance", f"{r['acceptance_in']:.3f}")
    for label, key, fmt in (("alpha", "alpha", "{:.4f}"), ("gamma", "gamma", "{}"), ("c", "c", "{}"),
                            ("verify cost (steps)", "verify_cost", "{:.3f}"),
                            ("expected tokens / step (closed form)", "expected_tokens", "{:.4f}"),
                            ("expected tokens / step (series)", "expected_tokens_series", "{:.4f}"),
                            ("cost / step", "cost_per_step", "{:.3f}"),
                            ("speedup", "speedup", "{:.2f}x"), ("best gamma (1..12)", "best_gamma", "{}"),
                            ("best speedup", "best_speedup", "{:.2f}x")):
        t.add_row(label, fmt.format(r[key]))
    con = Console()
    con.print(t)
    con.print(chart(r["curve"]), highlight=False)
    if not args.fast_path:
        con.print(f"KV cache with the rejection fast path: {r['fast_path_speedup']:.2f}x "
                  f"({calc.FAST_PATH_NOTE})", highlight=False)
    return 0


def cmd_analyze(args) -> int:
    from olifant_mlx.draftmodel.corpus import iter_documents
    from olifant_mlx.measure.metrics import redundancy
    from olifant_mlx.verifier import load_tokenizer

    sets = {}
    for spec in args.texts:                # read before the tokenizer loads: a bad path fails first
        name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
        sets[name or path] = texts = list(iter_documents(path, args.text_field))[:args.max_texts]
        if not texts:
            raise ValueError(f"analyze: {path} holds no texts (a .txt file is one text, a .jsonl "
                             f"file one per line with a {args.text_field!r} field)")
    tok = load_tokenizer(args.tokenizer)
    rows = {}
    for name, texts in sets.items():
        rows[name] = redundancy(texts, tok.encode_batch(texts), args.n)
    if args.json:
        print(json.dumps({"tokenizer": tok.name, "n": args.n, "sets": rows}))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Redundancy ({args.n}-grams of {tok.name} tokens; the paper's Table 5)")
    for col in ("texts", "set", "tokens", "within-text", "cross-doc.", "gzip"):
        t.add_column(col, justify="left" if col == "set" else "right")
    pct = lambda x: "—" if x is None else f"{x:.1%}"  # noqa: E731
    for name, r in rows.items():
        t.add_row(str(r["texts"]), name, f"{r['tokens']:,}", pct(r["within_text"]),
                  pct(r["cross_document"]), "—" if r["gzip_ratio"] is None else f"{r['gzip_ratio']:.3f}")
    Console().print(t)
    return 0


def add_calc(c):
    c.add_argument("--alpha", type=float, help="per-token acceptance probability")
    c.add_argument("--acceptance", type=float,
                   help="a measured acceptance ratio (accepted/drafted) instead of alpha")
    c.add_argument("--gamma", "-k", type=int, default=4, help="draft tokens per step")
    c.add_argument("--c", type=float, default=0.0, help="draft step cost / verifier step cost")
    c.add_argument("--verify-cost", help="measured cost of verifying g tokens in plain steps, "
                                         "e.g. 1:1,2:1.39,3:1.52,4:1.81")
    c.add_argument("--fast-path", action="store_true",
                   help="KV regime with the rejection fast-path (first draft checked for free)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_calc)


def add_analyze(a):
    a.add_argument("texts", nargs="+", help="[NAME=]PATH: .txt/.jsonl corpus of texts, one set each")
    a.add_argument("--tokenizer", default="mistral")
    a.add_argument("--n", type=whole_number(1), default=4, help="n-gram order")
    a.add_argument("--max-texts", type=whole_number(1), help="read at most this many texts of each set")
    a.add_argument("--text-field", default="text")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_analyze)

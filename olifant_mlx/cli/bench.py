"""`bench`: the paper's sweep (strategies x tasks x k x regimes), its tables and figures."""
from __future__ import annotations

from olifant_mlx.cli.common import MODEL_HELP, add_weights_arg, draft_tokens, energy_help, open_meter, whole_number
from olifant_mlx.cli.sharding import add_sharding_args, sharded_command

QUICK = {"prompts": 2, "max_tokens": 24, "ks": [3], "regimes": ["kv"]}
DEFAULT_TASK = "legal"      # bench without prompts: the legal clause openings shipped with the package


def default_prompts() -> str:
    """The prompt file `bench` runs when none is given: 12 openings of contract clauses."""
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent / "data" / "bench-legal.jsonl")


def _pairs(items, what):
    out = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{what} wants NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def _first(*values):
    """The first value given (0 counts as given: `--max-tokens 0` is not the default)."""
    return next((v for v in values if v is not None), None)


def _read_config(path) -> dict:
    from olifant_mlx.files import read_regular

    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise ValueError("--config needs Python 3.11 or newer (tomllib)") from None
    try:
        return tomllib.loads(read_regular(path).decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--config {path}: not a TOML file ({e})") from None


def cmd_bench(args) -> int:
    if args.list_experiments:
        from olifant_mlx.measure.experiments import listing

        print(listing())
        return 0
    if args.experiment:
        from olifant_mlx.measure.experiments import configure

        experiment = configure(args.experiment, args, args.bench_defaults)
        if experiment.run:
            return experiment.run(args)
    if args.report:
        from olifant_mlx.measure.report import write_report

        print(f"wrote {write_report(args.report)}")
        return 0
    from olifant_mlx.measure.sweep_command import run_sweep

    return run_sweep(sweep_settings(args))


def sweep_settings(args):
    """The sweep the command line asks for: its flags, else --config's values, else --quick's,
    else the defaults."""
    from functools import partial

    from olifant_mlx.measure.sweep_command import SweepSettings

    cfg = _read_config(args.config) if args.config else {}
    tasks = {**cfg.get("tasks", {}), **_pairs(args.prompts, "--prompts")}
    if not tasks and args.verifier == "model":      # transcripts bring their own; reference texts need files
        tasks = {DEFAULT_TASK: default_prompts()}
    strategies = {**cfg.get("strategies", {}), **_pairs(args.strategy, "--strategy")}
    quick = QUICK if args.quick else {}
    n_prompts = _first(args.n_prompts, cfg.get("prompts"), quick.get("prompts"), 100)
    if not isinstance(n_prompts, int) or n_prompts < 1:
        raise ValueError(f"--n-prompts (prompts in --config) must be a whole number >= 1, got {n_prompts!r}")
    return SweepSettings(
        tasks=tasks, strategies=strategies or {"ngram": "ngram", "lookup": "lookup"},
        ks=args.k or cfg.get("ks") or quick.get("ks") or [3, 5, 8],
        regimes=args.regimes or cfg.get("regimes") or quick.get("regimes") or ["kv", "uncached"],
        n_prompts=n_prompts,
        max_tokens=_first(args.max_tokens, cfg.get("max_tokens"), quick.get("max_tokens"), 100),
        results=args.results, out_dir=args.out_dir, verifier=args.verifier,
        model=args.model or cfg.get("model"),
        reference=_pairs(args.reference, "--reference") if args.verifier == "reference" else None,
        transcripts=getattr(args, "transcripts", None), transcripts_out=args.transcripts_out,
        curve=args.curve, open_meter=partial(open_meter, args.energy), calibrate=args.calibrate,
        contexts=args.contexts, no_mlx_lm=args.no_mlx_lm, shard=getattr(args, "shard", None))


def add_bench(b):
    from olifant_mlx.drafters.registry import help_text

    b.add_argument("--model", help=MODEL_HELP + "; with --verifier reference, whose tokenizer "
                                                "and (with --calibrate) cost curve to use")
    add_weights_arg(b)
    b.add_argument("--verifier", choices=["model", "reference", "transcript"], default="model",
                   help="reference: replay each held-out document's real continuation as the "
                        "verifier's output (simulated; needs --reference); transcript: replay the "
                        "verifier's own greedy output (exact acceptance without the verifier; "
                        "generated once and cached, or --transcripts FILE)")
    b.add_argument("--transcripts", metavar="FILE",
                   help="with --verifier transcript: stored transcripts (e.g. docs/transcripts/*.json); "
                        "no verifier is loaded, and without --prompts their own prompts are the tasks")
    b.add_argument("--transcripts-out", metavar="FILE", help="with --verifier transcript: write the "
                   "transcripts used as one JSON file (ids and text)")
    b.add_argument("--reference", nargs="+", metavar="TASK=CORPUS",
                   help="held-out corpus whose documents the task's prompts begin")
    b.add_argument("--prompts", nargs="+", metavar="TASK=FILE",
                   help=f"prompt files per task (default: {DEFAULT_TASK}=the 12 openings of contract clauses "
                        "shipped with olifant_mlx, olifant_mlx/data/bench-legal.jsonl)")
    b.add_argument("--strategy", nargs="+", metavar="NAME=SPEC",
                   help=f"drafters by name, SPEC one of {help_text()}, or mlx-lm[:MODEL] "
                        "(mlx-lm's own stream_generate, with MODEL as its draft_model; KV regime "
                        "only); e.g. olifant=olifant:models/legal.olif ngram=ngram lookup=lookup "
                        "mlx-draft=mlx-lm:smollm2-135m")
    b.add_argument("--no-mlx-lm", action="store_true",
                   help="do not also run mlx-lm's plain stream_generate on every prompt (the "
                        "second reference of every speedup: the speedup vs mlx-lm column)")
    b.add_argument("--config", help="TOML with model, [tasks], [strategies], ks, regimes, prompts, max_tokens")
    b.add_argument("-k", nargs="+", type=draft_tokens, help="draft lengths to sweep")
    b.add_argument("--regimes", nargs="+", choices=["kv", "uncached"])
    b.add_argument("--n-prompts", type=whole_number(1), help="prompts per task (default 100)")
    b.add_argument("--max-tokens", type=whole_number(0), help="tokens per generation (default 100)")
    b.add_argument("--quick", action="store_true", help=f"small subset: {QUICK}")
    b.add_argument("--energy", help=energy_help())
    b.add_argument("--results", default="bench-results/results.jsonl",
                   help="JSON lines, appended; an interrupted run resumes from it")
    b.add_argument("--out-dir", default="bench-results", help="where the CSV/Markdown tables go")
    b.add_argument("--calibrate", action="store_true",
                   help="also measure the verifier's cost curve (pass time against pass length, 1..k+1 "
                        "tokens, both regimes, at --contexts) and store it with the machine in the cache")
    b.add_argument("--contexts", nargs="+", type=whole_number(1), default=[64, 256, 1024],
                   help="context lengths --calibrate measures at (default 64 256 1024)")
    b.add_argument("--curve", metavar="FILE",
                   help="a stored cost curve: a modelled_speedup column (labelled modelled, beside the "
                        "measured one) and the lead rule and adaptive drafters start from it")
    add_sharding_args(b)
    b.add_argument("--report", metavar="FILE", help="measure nothing: write FILE (docs/results.md) from the "
                   "committed JSON of the runs named in results/index.json beside it")
    b.add_argument("--experiment", metavar="NAME", help="a named configuration (bench --list-experiments): "
                   "it sets the options this command line leaves at their defaults")
    b.add_argument("--list-experiments", action="store_true", help="list the experiments and the flags they set")
    b.add_argument("--rounds", type=whole_number(1), help="with --experiment plain_vs_mlx_lm or live: rounds "
                   "of alternating order (the experiment's default: 5 and 2)")
    b.set_defaults(bench_defaults=vars(b.parse_args([])))     # what --experiment may set
    b.set_defaults(func=sharded_command(cmd_bench, handlers={"calibrate": _calibrate}))


def _calibrate(verifier, **args):
    from olifant_mlx.measure.bench import calibrate

    return calibrate(verifier, **args)

"""`bench`: the paper's sweep (strategies x tasks x k x regimes), its tables and figures."""
from __future__ import annotations

import json
import os
from pathlib import Path

from olifant_mlx.cli.common import MODEL_HELP, add_weights_arg, draft_tokens, energy_help, open_meter, whole_number
from olifant_mlx.cli.sharding import add_sharding_args, sharded_command

QUICK = {"prompts": 2, "max_tokens": 24, "ks": [3], "regimes": ["kv"]}


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


def _check_corpus(task, corpus):
    """A reference corpus that is a path must be a file or a folder (a FIFO would hang)."""
    if os.path.exists(corpus) and not (os.path.isfile(corpus) or os.path.isdir(corpus)):
        raise ValueError(f"--reference {task}={corpus}: not a regular file or a folder")


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
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.table import Table

    from olifant_mlx.drafters import build_drafter, parse_spec
    from olifant_mlx.engine import GenerationOptions
    from olifant_mlx.files import check_file_path, write_atomic
    from olifant_mlx.measure.bench import (
        ModelRunner,
        baseline,
        ReferenceRunner,
        Strategy,
        _fmt,
        add_predictions,
        aggregate,
        calibrate,
        continuations_of,
        read_prompts,
        read_results,
        spec_identity,
        sweep,
        write_plots,
        write_tables,
    )
    from olifant_mlx.verifier import default_model, load_tokenizer, load_verifier

    cfg = _read_config(args.config) if args.config else {}
    tasks = {**cfg.get("tasks", {}), **_pairs(args.prompts, "--prompts")}
    strategies = {**cfg.get("strategies", {}), **_pairs(args.strategy, "--strategy")}
    stored = _stored_transcripts(args)
    if stored and not tasks:          # a transcript file alone: its own prompts, by task
        texts_of = {}
        for t in stored.values():
            texts_of.setdefault(t.get("task") or "prompts", []).append(t["prompt"])
    if not tasks and not stored:
        raise ValueError("no tasks: give --prompts NAME=FILE (e.g. legal=prompts.dev.jsonl)")
    strategies = strategies or {"ngram": "ngram", "lookup": "lookup"}
    quick = QUICK if args.quick else {}
    ks = args.k or cfg.get("ks") or quick.get("ks") or [3, 5, 8]
    regimes = args.regimes or cfg.get("regimes") or quick.get("regimes") or ["kv", "uncached"]
    n_prompts = _first(args.n_prompts, cfg.get("prompts"), quick.get("prompts"), 100)
    max_tokens = _first(args.max_tokens, cfg.get("max_tokens"), quick.get("max_tokens"), 100)
    if not isinstance(n_prompts, int) or n_prompts < 1:
        raise ValueError(f"--n-prompts (prompts in --config) must be a whole number >= 1, got {n_prompts!r}")
    for k in ks:                      # every argument checked before any model loads
        GenerationOptions(k=k, max_tokens=max_tokens)
    baselines = {name: baseline(spec) for name, spec in strategies.items() if baseline(spec)}
    specs = {name: parse_spec(spec) for name, spec in strategies.items() if name not in baselines}
    texts = ({t: ps[:n_prompts] for t, ps in texts_of.items()} if stored and not tasks else
             {t: read_prompts(p)[:n_prompts] for t, p in tasks.items()})
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    check_file_path(results, "results file")
    reference = args.verifier in ("reference", "transcript")
    model_spec = args.model or cfg.get("model")
    if reference and getattr(args, "shard", None) is not None:
        raise ValueError(f"--verifier {args.verifier} runs no verifier: there is nothing to shard")
    verifier = None
    curve, options = _start_from_curve(args.curve, reference) if args.curve else (None, None)
    if args.verifier == "transcript":
        runner, verifier = _transcript_runner(args, model_spec, texts, max_tokens, stored, options)
        ours = runner.tokenizer
    elif reference:
        refs = _pairs(args.reference, "--reference")
        if set(refs) != set(texts):
            raise ValueError("--verifier reference needs --reference TASK=CORPUS for every task "
                             f"({', '.join(texts)})")
        ours = load_tokenizer(model_spec or default_model())
        conts = {}
        for t, corpus in refs.items():
            _check_corpus(t, corpus)
            conts.update(continuations_of(texts[t], corpus))
        runner = ReferenceRunner(ours, conts, options)
    else:
        verifier = load_verifier(model_spec, shard=getattr(args, "shard", None))
        ours = verifier.identity
        runner = ModelRunner(verifier, open_meter(args.energy), options)
    name, label = runner.name, runner.label
    drafters = {sname: Strategy(build_drafter(spec, ours), spec_identity(spec)) for sname, spec in specs.items()}
    curve_path = args.curve
    plain_mlx = [n for n, b in baselines.items() if not b.draft]   # the reference, run once
    if reference and baselines:
        Console(stderr=True).print(f"mlx-lm strategies need a real verifier: skipping "
                                   f"{', '.join(baselines)}")
    elif not reference:
        for b in baselines.values():
            b.load(ours.digest)
        drafters.update({n: Strategy(b, b.name) for n, b in baselines.items() if n not in plain_mlx})
    mlx_lm = not reference and (not args.no_mlx_lm or bool(plain_mlx))
    if getattr(args, "shard", None) is not None and (baselines or mlx_lm):
        # mlx-lm's stream_generate runs on rank 0 alone: the other ranks could not follow it
        Console(stderr=True).print("a sharded verifier runs no mlx-lm strategies: skipping the "
                                   "mlx-lm baseline" + (f" and {', '.join(baselines)}" if baselines else ""))
        mlx_lm = False
        drafters = {n: d for n, d in drafters.items() if n not in baselines}
    con = Console(stderr=True)
    skipped = read_results(results)[1]
    if skipped:
        con.print(f"warning: {skipped} line(s) of {results} are not result rows (cut short by a kill, "
                  f"or not a row object); ignored")
    con.print(f"verifier {name}; energy: {label}; {len(texts)} task(s), "
              f"{len(drafters)} strategies, k {ks}, regimes {regimes}, {n_prompts} prompts x "
              f"{max_tokens} tokens; results -> {results}")
    with Progress(TextColumn("bench"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeRemainingColumn(), console=con) as bar:
        task = bar.add_task("bench", total=None)
        try:
            rows = sweep(runner, texts, drafters, ks, regimes, max_tokens, results,
                         n_prompts=n_prompts, mlx_lm=mlx_lm,
                         on_progress=lambda done, total: bar.update(task, completed=done, total=total))
        except KeyboardInterrupt:
            con.print("interrupted: the results file is consistent; run again to resume")
            return 130
    calibration = None
    if args.calibrate:
        from olifant_mlx.measure.curves import load_curve, measure_curve, save_curve

        verifier = verifier or load_verifier(model_spec)
        calibration = calibrate(verifier, next(iter(texts.values()))[0])
        write_atomic(Path(args.out_dir) / "calibration.json", json.dumps(calibration, indent=2), 0o644)
        con.print(f"measuring {verifier.name}'s cost curve (passes of 1..{max(ks) + 1} tokens, contexts "
                  f"{args.contexts}, both regimes) ...")
        measured = measure_curve(verifier, next(iter(texts.values()))[0], max(ks) + 1, args.contexts)
        stored = save_curve(measured)
        con.print(f"cost curve stored: {stored} (bench --curve {stored} models speedups with it)")
        if curve is None:             # this run's table gets the modelled speedups under it
            curve, curve_path = load_curve(stored), stored
    cells = aggregate(rows)           # this sweep's rows only: the file may hold other settings
    add_predictions(cells, rows, calibration)
    from olifant_mlx.measure.curves import add_modelled

    add_modelled(cells, rows, curve)
    paths = write_tables(cells, args.out_dir)
    paths.update(write_plots(cells, args.out_dir, note=label if reference else ""))
    t = Table(title=f"bench, verifier {name} ({label})" + (f"; modelled speedup: under the cost curve "
                                                           f"{curve_path}, not measured" if curve else ""))
    shown = ["task", "regime", "strategy", "k", "prompts", "tokens_per_s", "speedup",
             "speedup_vs_mlx_lm", "predicted_speedup", *(["modelled_speedup"] if curve else []), "acceptance",
             "mean_accepted_length", "rouge_l", "exact_match",
             "compute_cpu_s_per_100_tokens", "j_per_100_tokens", "tokens_per_joule"]
    for c in shown:
        t.add_column(c.replace("_", " "), justify="left" if c in ("task", "regime", "strategy") else "right")
    for c in cells:
        t.add_row(*[_fmt(k, c.get(k)) for k in shown])
    Console(width=max(Console().width, 180)).print(t)
    if calibration:
        Console().print("verify cost, KV cache, relative to 1 new token: " + ", ".join(
            f"{n}: {v:.2f}" for n, v in calibration["kv_relative"].items())
            + f"; uncached full context ({calibration['context_tokens']} tokens) = "
              f"{calibration['uncached_over_kv1']:.1f} cached steps")
    if not paths.get("speedup"):
        con.print("plots skipped: pip install 'olifant_mlx[plots]' (matplotlib)")
    con.print("written: " + ", ".join(str(p) for p in paths.values()))
    return 0


def _start_from_curve(path, reference: bool) -> tuple:
    """--curve FILE: (the stored cost curve, the options every run starts from): the lead rule
    and every cost-aware drafter (the adaptive one) start from the curve instead of the prior
    (a live verifier's passes refine it; a simulated one plans with the curve's fit alone).
    Read before any model loads."""
    from olifant_mlx.engine import GenerationOptions
    from olifant_mlx.measure.bench import FixedCost, reference_options
    from olifant_mlx.measure.curves import fit, load_curve, seeded_pass_cost

    curve = load_curve(path)
    if reference:
        return curve, reference_options(FixedCost(*fit(curve)))
    return curve, GenerationOptions(pass_cost=seeded_pass_cost(curve), draft_cost=seeded_pass_cost(curve))


def _stored_transcripts(args) -> dict:
    """--transcripts FILE: {prompt: transcript} (checked before any model loads)."""
    if not getattr(args, "transcripts", None):
        return {}
    if args.verifier != "transcript":
        raise ValueError("--transcripts replays stored transcripts: use it with --verifier transcript")
    from olifant_mlx.measure.transcripts import read_transcript_set

    return {t["prompt"]: t for t in read_transcript_set(args.transcripts)}


def _transcript_runner(args, model_spec, texts, max_tokens, stored, options=None):
    """(TranscriptRunner, the verifier if one was loaded): stored transcripts (--transcripts),
    else the verifier's own, generated once into the cache (resumable) and optionally written
    as one file (--transcripts-out)."""
    from rich.console import Console

    from olifant_mlx.measure.transcripts import TranscriptRunner, make_transcripts, write_transcript_set
    from olifant_mlx.verifier import load_tokenizer, load_verifier

    prompts = [p for ps in texts.values() for p in ps]
    verifier = None
    if stored:
        missing = [p for p in prompts if p not in stored]
        if missing:
            raise ValueError(f"--transcripts {args.transcripts}: no transcript of {len(missing)} prompt(s), "
                             f"e.g. {missing[0][:60]!r}")
        short = [p for p in prompts if len(stored[p]["tokens"]) < max_tokens      # and not ended by EOS
                 and not set(stored[p]["tokens"][-1:]) & set(stored[p].get("eos_ids") or ())]
        if short:
            raise ValueError(f"--transcripts {args.transcripts}: {len(short)} transcript(s) are shorter than "
                             f"--max-tokens {max_tokens}")
        transcripts = {p: stored[p] for p in prompts}
        ours = load_tokenizer(model_spec or transcripts[prompts[0]]["verifier"])
    else:
        verifier = load_verifier(model_spec)
        ours = verifier.identity
        Console(stderr=True).print(f"transcripts of {verifier.name}: {len(prompts)} prompts x {max_tokens} "
                                   f"tokens (cached; an interrupted run resumes)")
        transcripts = make_transcripts(verifier, prompts, max_tokens)
    if args.transcripts_out:
        write_transcript_set(args.transcripts_out, transcripts, texts)
    return TranscriptRunner(ours, transcripts, options), verifier


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
    b.add_argument("--prompts", nargs="+", metavar="TASK=FILE", help="prompt files per task")
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

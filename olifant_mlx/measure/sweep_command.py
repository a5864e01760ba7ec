"""`bench`'s sweep from its settings: the prompts, the runner (a real verifier, reference texts
or transcripts) and the strategies, every cell measured with a progress bar, the optional
calibration, then the tables, figures and the table printed. cli.bench turns the command line
into `SweepSettings`; everything here is checked before any model loads.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SHOWN = ["task", "regime", "strategy", "k", "prompts", "tokens_per_s", "speedup", "speedup_vs_mlx_lm",
         "predicted_speedup", "modelled_speedup", "acceptance", "mean_accepted_length", "rouge_l",
         "exact_match", "compute_cpu_s_per_100_tokens", "j_per_100_tokens", "tokens_per_joule"]


@dataclass(frozen=True)
class SweepSettings:
    """What one sweep runs: prompt files per task (none: the stored transcripts' own prompts),
    strategies by name (a drafter spec, or mlx-lm[:MODEL]), the grid (ks x regimes), prompts
    per task and tokens per generation, where rows, tables and figures go, and the verifier:
    `model` (loaded from `model`, sharded where `shard` is given), `reference` (each task's
    held-out corpus, `reference`) or `transcript` (stored ones, or made once)."""
    tasks: dict
    strategies: dict
    ks: list
    regimes: list
    n_prompts: int
    max_tokens: int
    results: str
    out_dir: str
    verifier: str = "model"
    model: str | None = None
    reference: dict | None = None
    transcripts: str | None = None
    transcripts_out: str | None = None
    curve: str | None = None
    open_meter: Callable | None = None      # the energy meter a real verifier's runs are measured with
    calibrate: bool = False
    contexts: tuple = (64, 256, 1024)
    no_mlx_lm: bool = False
    shard: object = None

    @property
    def simulated(self) -> bool:
        """No verifier is timed: reference texts or transcripts play it."""
        return self.verifier in ("reference", "transcript")


def run_sweep(s: SweepSettings) -> int:
    """The sweep, its tables and figures; the exit status (130: interrupted, resumable)."""
    from rich.console import Console

    from olifant_mlx.files import check_file_path, check_writable

    stored = stored_transcripts(s)
    if not s.tasks and not stored:
        raise ValueError("no tasks: give --prompts NAME=FILE (e.g. legal=prompts.dev.jsonl)")
    baselines, specs = _check_strategies(s)
    texts = _texts(s, stored)
    results = Path(s.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    check_file_path(results, "results file")
    if s.transcripts_out:
        check_writable(s.transcripts_out, "--transcripts-out file")     # before hours of transcripts
    if s.simulated and s.shard is not None:
        raise ValueError(f"--verifier {s.verifier} runs no verifier: there is nothing to shard")
    curve, options = start_from_curve(s.curve, s.simulated) if s.curve else (None, None)
    runner, verifier, ours = _runner(s, texts, stored, options)
    drafters, mlx_lm = _strategies(s, specs, baselines, ours)
    con = Console(stderr=True)
    rows = _measure(s, runner, texts, drafters, mlx_lm, results, con)
    if rows is None:
        con.print("interrupted: the results file is consistent; run again to resume")
        return 130
    calibration, curve, curve_path = _calibrate(s, verifier, texts, curve, con) if s.calibrate \
        else (None, curve, s.curve)
    _report(s, runner, rows, calibration, curve, curve_path, con)
    return 0


def _check_strategies(s: SweepSettings) -> tuple:
    """(mlx-lm baselines by name, drafter specs by name), every k checked first."""
    from olifant_mlx.drafters import parse_spec
    from olifant_mlx.engine import GenerationOptions
    from olifant_mlx.measure.bench import baseline

    for k in s.ks:
        GenerationOptions(k=k, max_tokens=s.max_tokens)
    baselines = {name: baseline(spec) for name, spec in s.strategies.items() if baseline(spec)}
    specs = {name: parse_spec(spec) for name, spec in s.strategies.items() if name not in baselines}
    return baselines, specs


def _texts(s: SweepSettings, stored: dict) -> dict:
    """task -> its first n_prompts prompts: from the prompt files, else the stored transcripts'
    own prompts by task."""
    from olifant_mlx.measure.bench import read_prompts

    if s.tasks:
        return {t: read_prompts(p)[:s.n_prompts] for t, p in s.tasks.items()}
    texts = {}
    for t in stored.values():
        texts.setdefault(t.get("task") or "prompts", []).append(t["prompt"])
    return {t: ps[:s.n_prompts] for t, ps in texts.items()}


def start_from_curve(path, simulated: bool) -> tuple:
    """--curve FILE: (the stored cost curve, the options every run starts from): the lead rule
    and every cost-aware drafter (the adaptive one) start from the curve instead of the prior
    (a live verifier's passes refine it; a simulated one plans with the curve's fit alone).
    Read before any model loads."""
    from olifant_mlx.engine import GenerationOptions
    from olifant_mlx.measure.bench import FixedCost, reference_options
    from olifant_mlx.measure.curves import fit, load_curve, seeded_pass_cost

    curve = load_curve(path)
    if simulated:
        return curve, reference_options(FixedCost(*fit(curve)))
    return curve, GenerationOptions(pass_cost=seeded_pass_cost(curve), draft_cost=seeded_pass_cost(curve))


def stored_transcripts(s: SweepSettings) -> dict:
    """--transcripts FILE: {prompt: transcript} (checked before any model loads)."""
    if not s.transcripts:
        return {}
    if s.verifier != "transcript":
        raise ValueError("--transcripts replays stored transcripts: use it with --verifier transcript")
    from olifant_mlx.measure.transcripts import read_transcript_set

    return {t["prompt"]: t for t in read_transcript_set(s.transcripts)}


def _runner(s: SweepSettings, texts, stored, options) -> tuple:
    """(the runner, the verifier where one was loaded, the tokenizer identity drafters build on)."""
    from olifant_mlx.measure.bench import ModelRunner, ReferenceRunner, continuations_of
    from olifant_mlx.verifier import default_model, load_tokenizer, load_verifier

    if s.verifier == "transcript":
        runner, verifier = transcript_runner(s, texts, stored, options)
        return runner, verifier, runner.tokenizer
    if s.verifier == "reference":
        refs = s.reference or {}
        if set(refs) != set(texts):
            raise ValueError("--verifier reference needs --reference TASK=CORPUS for every task "
                             f"({', '.join(texts)})")
        ours = load_tokenizer(s.model or default_model())
        conts = {}
        for t, corpus in refs.items():
            _check_corpus(t, corpus)
            conts.update(continuations_of(texts[t], corpus))
        return ReferenceRunner(ours, conts, options), None, ours
    verifier = load_verifier(s.model, shard=s.shard)
    meter = s.open_meter() if s.open_meter is not None else None
    return ModelRunner(verifier, meter, options), verifier, verifier.identity


def _check_corpus(task, corpus):
    """A reference corpus that is a path must be a file or a folder (a FIFO would hang)."""
    if os.path.exists(corpus) and not (os.path.isfile(corpus) or os.path.isdir(corpus)):
        raise ValueError(f"--reference {task}={corpus}: not a regular file or a folder")


def transcript_runner(s: SweepSettings, texts, stored, options=None) -> tuple:
    """(TranscriptRunner, the verifier if one was loaded): stored transcripts (--transcripts),
    else the verifier's own, generated once into the cache (resumable) and optionally written
    as one file (--transcripts-out)."""
    from rich.console import Console

    from olifant_mlx.measure.transcripts import TranscriptRunner, make_transcripts, write_transcript_set
    from olifant_mlx.verifier import load_tokenizer, load_verifier

    prompts = [p for ps in texts.values() for p in ps]
    verifier = None
    if stored:
        transcripts = _stored_for(s, stored, prompts)
        ours = load_tokenizer(s.model or transcripts[prompts[0]]["verifier"])
    else:
        verifier = load_verifier(s.model)
        ours = verifier.identity
        Console(stderr=True).print(f"transcripts of {verifier.name}: {len(prompts)} prompts x {s.max_tokens} "
                                   f"tokens (cached; an interrupted run resumes)")
        transcripts = make_transcripts(verifier, prompts, s.max_tokens)
    if s.transcripts_out:
        write_transcript_set(s.transcripts_out, transcripts, texts)
    return TranscriptRunner(ours, transcripts, options), verifier


def _stored_for(s: SweepSettings, stored: dict, prompts) -> dict:
    """The stored transcripts of `prompts`: every one there, none shorter than max_tokens
    unless it ended with an EOS."""
    missing = [p for p in prompts if p not in stored]
    if missing:
        raise ValueError(f"--transcripts {s.transcripts}: no transcript of {len(missing)} prompt(s), "
                         f"e.g. {missing[0][:60]!r}")
    short = [p for p in prompts if len(stored[p]["tokens"]) < s.max_tokens      # and not ended by EOS
             and not set(stored[p]["tokens"][-1:]) & set(stored[p].get("eos_ids") or ())]
    if short:
        raise ValueError(f"--transcripts {s.transcripts}: {len(short)} transcript(s) are shorter than "
                         f"--max-tokens {s.max_tokens}")
    return {p: stored[p] for p in prompts}


def _strategies(s: SweepSettings, specs, baselines, ours) -> tuple:
    """({name: Strategy} to sweep, whether mlx-lm's plain stream_generate runs beside them):
    mlx-lm strategies only on a real verifier that is not sharded (rank 0 alone runs them)."""
    from rich.console import Console

    from olifant_mlx.drafters import build_drafter
    from olifant_mlx.measure.bench import Strategy, spec_identity

    drafters = {name: Strategy(build_drafter(spec, ours), spec_identity(spec)) for name, spec in specs.items()}
    plain_mlx = [n for n, b in baselines.items() if not b.draft]   # the reference, run once
    if s.simulated and baselines:
        Console(stderr=True).print(f"mlx-lm strategies need a real verifier: skipping "
                                   f"{', '.join(baselines)}")
    elif not s.simulated:
        for b in baselines.values():
            b.load(ours.digest)
        drafters.update({n: Strategy(b, b.name) for n, b in baselines.items() if n not in plain_mlx})
    mlx_lm = not s.simulated and (not s.no_mlx_lm or bool(plain_mlx))
    if s.shard is not None and (baselines or mlx_lm):
        Console(stderr=True).print("a sharded verifier runs no mlx-lm strategies: skipping the "
                                   "mlx-lm baseline" + (f" and {', '.join(baselines)}" if baselines else ""))
        mlx_lm = False
        drafters = {n: d for n, d in drafters.items() if n not in baselines}
    return drafters, mlx_lm


def _measure(s: SweepSettings, runner, texts, drafters, mlx_lm, results, con):
    """The sweep's rows, with a progress bar; None when interrupted (the results file stays
    consistent)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from olifant_mlx.measure.bench import read_results, sweep

    skipped = read_results(results)[1]
    if skipped:
        con.print(f"warning: {skipped} line(s) of {results} are not result rows (cut short by a kill, "
                  f"or not a row object); ignored")
    prompts = ", ".join(f"{task} {len(ps)}" for task, ps in texts.items())
    con.print(f"verifier {runner.name}; energy: {runner.label}; {sum(len(ps) for ps in texts.values())} "
              f"prompts ({prompts}) x up to {s.max_tokens} tokens; {len(drafters)} strategies, k {s.ks}, "
              f"regimes {s.regimes}; results -> {results}")
    with Progress(TextColumn("bench"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeRemainingColumn(), console=con) as bar:
        task = bar.add_task("bench", total=None)
        try:
            return sweep(runner, texts, drafters, s.ks, s.regimes, s.max_tokens, results,
                         n_prompts=s.n_prompts, mlx_lm=mlx_lm,
                         on_progress=lambda done, total: bar.update(task, completed=done, total=total))
        except KeyboardInterrupt:
            return None


def _calibrate(s: SweepSettings, verifier, texts, curve, con) -> tuple:
    """--calibrate: (the verify-cost calibration, written to out_dir; the cost curve and its
    path: the one measured and stored here where no --curve was given)."""
    from olifant_mlx.files import write_atomic
    from olifant_mlx.measure.bench import calibrate
    from olifant_mlx.measure.curves import load_curve, measure_curve, save_curve
    from olifant_mlx.verifier import load_verifier

    verifier = verifier or load_verifier(s.model)
    first = next(iter(texts.values()))[0]
    calibration = calibrate(verifier, first)
    write_atomic(Path(s.out_dir) / "calibration.json", json.dumps(calibration, indent=2), 0o644)
    con.print(f"measuring {verifier.name}'s cost curve (passes of 1..{max(s.ks) + 1} tokens, contexts "
              f"{list(s.contexts)}, both regimes) ...")
    stored = save_curve(measure_curve(verifier, first, max(s.ks) + 1, s.contexts))
    con.print(f"cost curve stored: {stored} (bench --curve {stored} models speedups with it)")
    if curve is None:             # this run's table gets the modelled speedups under it
        return calibration, load_curve(stored), stored
    return calibration, curve, s.curve


def _report(s: SweepSettings, runner, rows, calibration, curve, curve_path, con) -> None:
    """This sweep's cells (its rows only: the file may hold other settings) as tables, figures
    and the table printed, with the modelled speedups under `curve` where there is one."""
    from rich.console import Console
    from rich.table import Table

    from olifant_mlx.measure.bench import _fmt, add_predictions, aggregate, write_plots, write_tables
    from olifant_mlx.measure.curves import add_modelled

    cells = aggregate(rows)
    add_predictions(cells, rows, calibration)
    add_modelled(cells, rows, curve)
    paths = write_tables(cells, s.out_dir)
    paths.update(write_plots(cells, s.out_dir, note=runner.label if s.simulated else ""))
    t = Table(title=f"bench, verifier {runner.name} ({runner.label})" + (
        f"; modelled speedup: under the cost curve {curve_path}, not measured" if curve else ""))
    shown = [c for c in SHOWN if curve or c != "modelled_speedup"]
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
    elif not paths.get("tokens_per_joule"):
        con.print("tokens_per_joule.png skipped: energy was not measured")
    con.print("written: " + ", ".join(str(p) for p in paths.values()))

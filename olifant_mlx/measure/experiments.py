"""Named benchmark configurations: `bench --experiment NAME` (`bench --list-experiments`).

An experiment sets `bench`'s options where the command line leaves them at their defaults
(`{shared}` in a value is the shared folder, `corpora.shared_dir`) and names the package
function that runs it: `bench`'s own sweep (run None) or a measurement of its own. A
`prepare` step makes what the options name (a draft model trained on first use).
"""
from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from olifant_mlx.measure.corpora import shared_dir, task_draft_model

LEGAL_PROMPTS = "legal={shared}/corpora/legal/prompts.dev.jsonl"
LEGAL_MODEL = "{legal_model}"          # filled in by _legal_draft_model


@dataclass(frozen=True)
class Experiment:
    help: str
    options: dict = field(default_factory=dict)     # bench's options (argparse dests) -> values
    prepare: Callable | None = None                 # prepare(args) before the run
    run: Callable | None = None                     # run(args) -> exit status; None: bench's sweep


def _legal_draft_model(args) -> None:
    """The verifier's legal draft model (benchmarks' models folder beside --out-dir), trained on
    the shared legal train split the first time, for strategies that name {legal_model}."""
    if not any(LEGAL_MODEL in s for s in args.strategy or ()):
        return
    from olifant_mlx.verifier import default_model, load_tokenizer

    model = args.model or default_model()
    path = task_draft_model("legal", load_tokenizer(model), Path(model).name, shared_dir() / "corpora",
                            Path(args.out_dir).parent / "models")
    args.strategy = [s.replace(LEGAL_MODEL, str(path)) for s in args.strategy]


def mlx_lm_ratios(runner, prompts, rounds, max_tokens, ours=("ours", None, 0)) -> dict:
    """mlx-lm seconds / ours per round (alternating which goes first), with min, median, max."""
    from olifant_mlx.measure.bench import MlxLm, alternating_rounds

    runners = [ours, ("mlx-lm", MlxLm(), 0)]
    secs = alternating_rounds(runner, prompts, runners, rounds, max_tokens, True)
    rs = [s["mlx-lm"] / s[ours[0]] for s in secs]
    return {"rounds": [round(r, 4) for r in rs], "min": round(min(rs), 4),
            "median": round(statistics.median(rs), 4), "max": round(max(rs), 4),
            "seconds": [{k: round(v, 3) for k, v in s.items()} for s in secs]}


def plain_vs_mlx_lm(args) -> int:
    """Our plain decoding against mlx-lm's stream_generate on the same prompts and verifier:
    printed as JSON and written to --out-dir/plain_vs_mlx_lm.json."""
    from olifant_mlx.files import write_atomic
    from olifant_mlx.measure.bench import MlxLm, ModelRunner, read_prompts
    from olifant_mlx.verifier import load_verifier

    if args.verifier != "model":
        raise ValueError(f"--experiment plain_vs_mlx_lm times a real verifier: not with --verifier {args.verifier}")
    if len(args.prompts or ()) != 1 or "=" not in args.prompts[0]:
        raise ValueError("--experiment plain_vs_mlx_lm takes one task: --prompts TASK=FILE")
    task, _, path = args.prompts[0].partition("=")
    prompts = read_prompts(path)[: args.n_prompts]
    v = load_verifier(args.model)
    runner = ModelRunner(v)
    runner.run("Warm-up text.", None, 0, True, 4)
    runner.run("Warm-up text.", MlxLm(), 0, True, 4)
    result = {"verifier": v.name, "task": task, "prompts": len(prompts), "max_tokens": args.max_tokens,
              **mlx_lm_ratios(runner, prompts, args.rounds, args.max_tokens)}
    print(json.dumps(result))
    write_atomic(Path(args.out_dir) / "plain_vs_mlx_lm.json", json.dumps(result, indent=2) + "\n", 0o644)
    return 0


LIVE_TRAIN_TOKENS = 1_000_000      # corpus tokens per task for the live experiment's IGTree and index


def live_strategies(specs: dict, files: dict, tokenizer) -> dict:
    """{name: spec} with {olifant} and {rest} filled in (the task's IGTree and suffix index) and
    `auto` resolved as a user's would be with only those two files in ./models."""
    from olifant_mlx.drafters import resolve_auto

    out = {}
    for name, spec in specs.items():
        if spec == "auto":
            out[name] = resolve_auto(tokenizer, dirs=[files["model"].parent]).text
        else:
            out[name] = spec.replace("{olifant}", str(files["model"])).replace("{rest}", str(files["sfx"]))
    return out


def live_summary(runs: list, curve: dict, strategies) -> dict:
    """Per strategy, from every generation of one task and regime (dicts: round, prompt, label,
    seconds, decode_s, tokens, and the Stats' steps, forward_tokens, pass_sizes, drafted, draft_s):
    the measured speedup over plain and over mlx-lm per round (end to end, prefill included), the
    measured decode-only speedup over plain, and the modelled speedup of the very same generations
    (their passes, each at the curve's cost for its size, and their drafting time:
    measure.curves.modelled_seconds), with the modelled/measured (decode-only) ratio."""
    from olifant_mlx.measure.curves import modelled_seconds, pass_seconds

    rounds = sorted({r["round"] for r in runs})

    def total(label, key, rnd=None):
        return sum(r[key] for r in runs if r["label"] == label and (rnd is None or r["round"] == rnd))

    out = {}
    for name in strategies:
        mine = [r for r in runs if r["label"] == name]
        per_round = [total("plain", "seconds", n) / total(name, "seconds", n) for n in rounds]
        row = {"speedup_rounds": [round(x, 4) for x in per_round],
               "speedup_median": round(statistics.median(per_round), 4),
               "decode_speedup": round(total("plain", "decode_s") / total(name, "decode_s"), 4),
               "tokens_per_s": round(total(name, "tokens") / total(name, "seconds"), 3)}
        if any(r["label"] == "mlx-lm" for r in runs):
            vs = [total("mlx-lm", "seconds", n) / total(name, "seconds", n) for n in rounds]
            row["vs_mlx_lm_rounds"] = [round(x, 4) for x in vs]
            row["vs_mlx_lm_median"] = round(statistics.median(vs), 4)
        if name in ("plain", "mlx-lm"):
            # what one pass cost in this run, beside what the curve says (its fit at n = 1)
            row["decode_s_per_token"] = round(total(name, "decode_s") / max(total(name, "tokens"), 1), 5)
            if curve is not None and name == "plain":
                row["curve_s_per_token"] = round(pass_seconds(curve, 1, mine[0]["regime"]), 5)
            out[name] = row
            continue
        row["acceptance"] = round(sum(r["accepted"] for r in mine) / max(sum(r["drafted"] for r in mine), 1), 4)
        row["tokens_per_pass"] = round(total(name, "tokens") / max(total(name, "steps"), 1), 3)
        if curve is not None:
            times = [modelled_seconds({**r, "n_tokens": r["tokens"],
                                       "draft_s_per_step": r["draft_s"] / r["steps"] if r["steps"] else 0.0}, curve)
                     for r in mine]
            row["modelled_speedup"] = round(sum(p for p, _ in times) / sum(o for _, o in times), 4)
            row["modelled_over_measured"] = round(row["modelled_speedup"] / row["decode_speedup"], 4)
        out[name] = row
    return out


def live(args) -> int:
    """Each --strategy against plain decoding and mlx-lm's stream_generate, live on a real
    verifier, in alternating rounds (--rounds), every output checked identical to plain; beside
    each measured speedup, the modelled one of the very same generations under the verifier's
    cost curve (--curve FILE, or --calibrate to measure it first). A spec may name {olifant} and
    {rest}: the task's IGTree and suffix index for this verifier, built from the first million
    tokens of the shared train split on first use (beside --out-dir); `auto` resolves per task
    over them. Printed and written as JSON to --out-dir/live-VERIFIER.json."""
    import os

    from olifant_mlx.engine import GenerationOptions
    from olifant_mlx.files import write_atomic
    from olifant_mlx.measure.bench import ModelRunner, read_prompts
    from olifant_mlx.measure.curves import load_curve, seeded_pass_cost
    from olifant_mlx.verifier import load_verifier

    tasks, k, specs = _live_arguments(args)
    prompts = {t: read_prompts(path)[: args.n_prompts] for t, path in tasks.items()}
    curve = load_curve(args.curve) if args.curve else None
    v = load_verifier(args.model)
    if args.calibrate:
        curve = _live_calibration(args, v, next(iter(prompts.values()))[0], k)
    options = (GenerationOptions(pass_cost=seeded_pass_cost(curve), draft_cost=seeded_pass_cost(curve))
               if curve else None)
    runner = ModelRunner(v, options=options)
    result = {"experiment": "live", "verifier": v.name, "k": k, "rounds": args.rounds,
              "max_tokens": args.max_tokens, "curve": args.curve, "load_average_start": os.getloadavg()[0],
              "tasks": {}}
    for task, texts in prompts.items():
        result["tasks"][task] = _live_task(args, runner, task, texts, specs, k, curve)
    result["load_average_end"] = os.getloadavg()[0]
    path = Path(args.out_dir) / f"live-{v.name}.json"
    write_atomic(path, json.dumps(result, indent=1) + "\n", 0o644)
    print(json.dumps({t: {r: x["summary"] for r, x in by.items()} for t, by in result["tasks"].items()}, indent=1))
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _live_arguments(args) -> tuple:
    """The live experiment's ({task: prompt file}, k, {name: spec}), checked before the
    verifier loads."""
    from olifant_mlx.drafters import parse_spec
    from olifant_mlx.measure.corpora import TRAIN

    if args.verifier != "model":
        raise ValueError(f"--experiment live times a real verifier: not with --verifier {args.verifier}")
    tasks = dict(p.split("=", 1) for p in args.prompts or () if "=" in p)
    if not tasks or len(tasks) != len(args.prompts):
        raise ValueError("--experiment live takes --prompts TASK=FILE ...")
    unknown = [t for t in tasks if t not in TRAIN and any(x in s for s in args.strategy or () for x in
                                                          ("{olifant}", "{rest}", "=auto"))]
    if unknown:
        raise ValueError(f"--experiment live: no train split for task(s) {', '.join(unknown)} "
                         f"(one of {', '.join(sorted(TRAIN))})")
    if not args.k or len(args.k) != 1:
        raise ValueError("--experiment live takes one -k")
    specs = dict(s.split("=", 1) for s in args.strategy or ())
    if "plain" in specs or "mlx-lm" in specs:
        raise ValueError("--experiment live: 'plain' and 'mlx-lm' are its baselines, not --strategy names")
    for spec in specs.values():      # a misspelt drafter is named before the verifier loads
        parse_spec(spec, check_files=False)
    return tasks, args.k[0], specs


def _live_calibration(args, verifier, text, k) -> dict:
    """--calibrate: the verifier's cost curve measured and stored (args.curve names it)."""
    from olifant_mlx.measure.curves import load_curve, measure_curve, save_curve

    print(f"measuring {verifier.name}'s cost curve at contexts {args.contexts} ...", file=sys.stderr)
    args.curve = str(save_curve(measure_curve(verifier, text, k + 1, args.contexts)))
    print(f"cost curve stored: {args.curve}", file=sys.stderr)
    return load_curve(args.curve)


def _live_task(args, runner, task, texts, specs, k, curve) -> dict:
    """One task's runs per regime: plain, mlx-lm (KV) and every strategy, warmed up, then in
    alternating rounds; {regime: prompts, strategies, outputs_identical, summary, runs}."""
    from olifant_mlx.drafters import build_drafter
    from olifant_mlx.measure.bench import MlxLm, alternating_rounds
    from olifant_mlx.measure.corpora import TRAIN, task_corpus_files

    tok, name = runner.verifier.identity, runner.name
    files = (task_corpus_files(task, tok, name, Path(args.out_dir) / "models" / task, LIVE_TRAIN_TOKENS)
             if task in TRAIN else {})
    resolved = live_strategies(specs, files, tok) if files else dict(specs)
    out = {}
    for regime in args.regimes or ["kv"]:
        kv = regime == "kv"
        runners = [("plain", None, 0)] + ([("mlx-lm", MlxLm(), 0)] if kv and not args.no_mlx_lm else [])
        runners += [(label, build_drafter(spec, tok), k) for label, spec in resolved.items()]
        for _, drafter, kk in runners:           # first calls (compilation, the drafter's first lookups)
            runner.run("Warm-up text.", drafter, kk, kv, 4)
        runs = []
        alternating_rounds(runner, texts, runners, args.rounds, args.max_tokens, kv,
                           on_run=_live_recorder(runs, task, regime))
        out[regime] = {"prompts": len(texts), "strategies": resolved, "outputs_identical": True,
                       "summary": live_summary(runs, curve, [label for label, _, _ in runners]), "runs": runs}
    return out


def _live_recorder(runs: list, task: str, regime: str):
    """on_run for alternating_rounds: each generation's numbers appended to `runs`, a line on stderr."""
    def seen(rnd, i, label, tokens, st):
        runs.append({"round": rnd, "prompt": i, "label": label, "regime": regime,
                     "seconds": st.seconds, "decode_s": st.decode_s, "tokens": len(tokens),
                     "steps": st.steps, "forward_tokens": st.forward_tokens, "drafted": st.drafted,
                     "accepted": st.accepted, "draft_s": st.draft_s,
                     "pass_sizes": {str(size): c for size, c in sorted(st.pass_sizes.items())}})
        print(f"{task} {regime} round {rnd + 1} prompt {i + 1}: {label} {st.seconds:.2f} s",
              file=sys.stderr, flush=True)
    return seen


EXPERIMENTS = {
    "speculative": Experiment(
        "plain vs olifant vs ngram vs lookup on the legal dev prompts (benchmarks/speculative.py, "
        "one verifier a run: --model gemma3-270m for the other)",
        {"model": "smollm2-135m", "prompts": [LEGAL_PROMPTS],
         "reference": ["legal={shared}/corpora/legal/eurlexsum.valid.txt.xz"],
         "strategy": [f"olifant=olifant:{LEGAL_MODEL}", "ngram=ngram", "lookup=lookup"],
         "k": [3, 5, 8], "regimes": ["kv", "uncached"], "n_prompts": 20, "max_tokens": 100,
         "no_mlx_lm": True, "results": "benchmarks/out/speculative.jsonl",
         "out_dir": "benchmarks/out/speculative"},
        prepare=_legal_draft_model),
    "plain_vs_mlx_lm": Experiment(
        "our plain decoding against mlx-lm's stream_generate, alternating order over rounds: "
        "mlx-lm seconds / ours (benchmarks/plain_vs_mlx_lm.py)",
        {"model": "smollm2-135m", "prompts": [LEGAL_PROMPTS], "n_prompts": 6, "max_tokens": 80,
         "rounds": 5, "out_dir": "benchmarks/out"},
        run=plain_vs_mlx_lm),
    "live": Experiment(
        "every drafter against plain decoding and mlx-lm's stream_generate, live, in alternating rounds, "
        "outputs checked identical, with the modelled speedup of the same generations beside each "
        "(--curve FILE or --calibrate)",
        {"model": "qwen2.5-coder-1.5b",
         "prompts": [LEGAL_PROMPTS, "medical={shared}/corpora/medical/prompts.dev.jsonl"],
         "n_prompts": 6, "max_tokens": 64, "k": [8], "regimes": ["kv"], "rounds": 2,
         "strategy": ["auto=auto", "olifant=olifant:{olifant}", "lookup=lookup"],
         "out_dir": "benchmarks/out/live"},
        run=live),
}


def _fill(value, shared: str):
    if isinstance(value, list):
        return [_fill(v, shared) for v in value]
    return value.replace("{shared}", shared) if isinstance(value, str) else value


def configure(name: str, args, defaults: dict) -> Experiment:
    """Experiment `name` with its options set on `args` where they are at their `defaults`."""
    if name not in EXPERIMENTS:
        raise ValueError(f"--experiment {name!r}: not one of {', '.join(sorted(EXPERIMENTS))} "
                         f"(bench --list-experiments)")
    exp = EXPERIMENTS[name]
    shared = str(shared_dir())
    for key, value in exp.options.items():
        if getattr(args, key, None) == defaults.get(key):
            setattr(args, key, _fill(value, shared))
    if exp.prepare:
        exp.prepare(args)
    return exp


def as_flags(options: dict) -> str:
    """An experiment's options as the bench flags that would give them."""
    out = []
    for key, value in options.items():
        flag = "-k" if key == "k" else "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        else:
            out.append(f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}")
    return " ".join(out)


def listing() -> str:
    """`bench --list-experiments`: each name, what it measures and the flags it sets."""
    return "\n".join(f"{name}: {e.help}\n    {as_flags(e.options)}" for name, e in EXPERIMENTS.items())

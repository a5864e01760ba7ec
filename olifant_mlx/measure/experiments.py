"""Named benchmark configurations: `bench --experiment NAME` (`bench --list-experiments`).

An experiment sets `bench`'s options where the command line leaves them at their defaults
(`{shared}` in a value is the shared folder, `corpora.shared_dir`) and names the package
function that runs it: `bench`'s own sweep (run None) or a measurement of its own. A
`prepare` step makes what the options name (a draft model trained on first use).
"""
from __future__ import annotations

import json
import statistics
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

"""Drafting peers head to head: olifant, prompt lookup, the in-session 4-gram, the hybrid, the
adaptive hybrid and mlx-lm's own stream_generate (plain and with a draft model), on the offline
verifier and in reference-text mode, both regimes, legal, medical and general dev prompts.

    python benchmarks/peers.py [--quick] [--verifier smollm2-135m] [--tasks legal medical general]
        [--regimes kv uncached] [--ks 3 5 8] [--strategy NAME=SPEC ...] [--only NAME ...]
        [--kv-prompts 6] [--kv-tokens 80] [--uncached-prompts 2] [--uncached-tokens 40]
        [--reference-prompts 20] [--reference-tokens 100] [--no-reference] [--no-model]
        [--rounds 3] [--close 0.05] [--out benchmarks/out/peers]

Strategies are bench specs in which {model} is the task's draft model for the verifier's
tokenizer (trained once on the task's train split, cached in benchmarks/out/models/), {task}
the task and {verifier} the verifier: the defaults below, plus any --strategy (a slot for more
peers: e.g. rest=rest:benchmarks/out/models/{task}.{verifier}.rest, or a hybrid with an extra
source, hybrid-rest=hybrid:{model}+rest:...). mlx-lm strategies run on the real verifier in the
KV regime only; mlx-lm's plain stream_generate runs on every KV prompt as the second reference
(the "vs mlx-lm" speedups).

One `bench` sweep per task and regime (plain first, then every strategy and k on the same
prompt in the same process; every output of ours checked token for token against plain),
then reference-text mode (each dev prompt's real continuation plays the verifier: acceptance and
MAL, no time). The summary compares, per task, regime and k, the adaptive hybrid with the best
single strategy of ours at that k (MAL, speedup); where they are within --close of each other
or the adaptive hybrid is behind, a head to head of --rounds rounds in alternating order
(seconds ratio per round: min / median / max). Rows are resumable (OUT/*.jsonl); tables go to
OUT/ (summary.md, cells.md, cells.csv, summary.json).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

from olifant_mlx.drafters import build_drafter
from olifant_mlx.measure.bench import (ModelRunner, ReferenceRunner, aggregate,
                                       alternating_rounds, baseline, continuations_of, load_rows,
                                       read_prompts, sweep)
from olifant_mlx.measure.corpora import TRAIN, VALID, task_draft_model
from olifant_mlx.verifier import load_verifier

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))
C = SHARED / "corpora"
MODELS = ROOT / "benchmarks" / "out" / "models"
DEFAULTS = {"olifant": "olifant:{model}", "lookup": "lookup", "ngram": "ngram",
            "hybrid": "hybrid:{model}", "adaptive-hybrid": "adaptive:hybrid:{model}",
            "mlx-lm-draft": "mlx-lm:{verifier}"}
OURS = "adaptive-hybrid"
QUICK = dict(tasks=["legal", "medical", "general"], regimes=["kv"], ks=[5], kv_prompts=2,
             kv_tokens=32, reference_prompts=5, reference_tokens=60, rounds=0)


def draft_model(task, tokenizer, verifier) -> Path:
    return task_draft_model(task, tokenizer, verifier, C, MODELS)


def build(specs, tokenizer, digest, reference):
    """{name: drafter or MlxLm} for one task; mlx-lm ones only with a real verifier."""
    out = {}
    for name, spec in specs.items():
        b = baseline(spec)
        if b is not None:
            if not reference:
                out[name] = b.load(digest)
        else:
            out[name] = build_drafter(spec, tokenizer)
    return out


def progress(label):
    return lambda done, total: print(f"{label} {done}/{total}", file=sys.stderr, flush=True)


def singles(cells, task, regime, k, mode):
    """The cells of every strategy of ours but the adaptive hybrid (mlx-lm ones aside)."""
    return [c for c in cells if c["mode"] == mode and c["task"] == task and c["regime"] == regime
            and c["k"] == k and c["strategy"] not in ("plain", OURS) and not c["strategy"].startswith("mlx-lm")]


def compare(cells, key):
    """Per (mode, task, regime, k): the adaptive hybrid against the best single strategy by `key`."""
    out = []
    for c in cells:
        if c["strategy"] != OURS or c.get(key) is None:
            continue
        rivals = [r for r in singles(cells, c["task"], c["regime"], c["k"], c["mode"]) if r.get(key) is not None]
        if not rivals:
            continue
        best = max(rivals, key=lambda r: r[key])
        out.append({"mode": c["mode"], "task": c["task"], "regime": c["regime"], "k": c["k"], "key": key,
                    "adaptive_hybrid": c[key], "best_single": best["strategy"], "best": best[key],
                    "ratio": c[key] / best[key] if best[key] else None})
    return out


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"minutes: {QUICK}")
    ap.add_argument("--verifier", default="smollm2-135m")
    ap.add_argument("--tasks", nargs="+", choices=sorted(TRAIN))
    ap.add_argument("--regimes", nargs="+", choices=["kv", "uncached"])
    ap.add_argument("--ks", type=int, nargs="+")
    ap.add_argument("--strategy", nargs="+", default=[], metavar="NAME=SPEC")
    ap.add_argument("--only", nargs="+", help="run just these strategy names")
    ap.add_argument("--kv-prompts", type=int)
    ap.add_argument("--kv-tokens", type=int)
    ap.add_argument("--uncached-prompts", type=int, default=2)
    ap.add_argument("--uncached-tokens", type=int, default=40)
    ap.add_argument("--reference-prompts", type=int)
    ap.add_argument("--reference-tokens", type=int)
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--no-model", action="store_true", help="reference-text mode only")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--close", type=float, default=0.05)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "peers"))
    return ap.parse_args()


def settings(args) -> SimpleNamespace:
    """The run's sizes: a flag given, else --quick's, else the default; the strategies."""
    q = QUICK if args.quick else {}

    def opt(name, default):
        v = getattr(args, name)
        return v if v is not None else q.get(name, default)
    specs = dict(DEFAULTS)
    for item in args.strategy:
        name, _, spec = item.partition("=")
        specs[name] = spec
    if args.only:
        specs = {n: s for n, s in specs.items() if n in args.only}
    return SimpleNamespace(tasks=opt("tasks", ["legal", "medical", "general"]),
                           regimes=opt("regimes", ["kv", "uncached"]), ks=opt("ks", [3, 5, 8]),
                           kv_n=opt("kv_prompts", 6), kv_tokens=opt("kv_tokens", 80),
                           ref_n=opt("reference_prompts", 20), ref_tokens=opt("reference_tokens", 100),
                           rounds=opt("rounds", 3), specs=specs)


def model_task(args, cfg, runner, verifier, task, prompts, out) -> tuple:
    """One task on the real verifier: its cells (every strategy, regime and k) and its duels."""
    path = draft_model(task, verifier.identity, verifier.name)
    fill = {"model": path, "task": task, "verifier": verifier.name}
    drafters = build({n: s.format(**fill) for n, s in cfg.specs.items()}, verifier.identity,
                     verifier.identity.digest, False)
    rows, sizes = [], {}
    for regime in cfg.regimes:
        n, max_tokens = sizes[regime] = (cfg.kv_n, cfg.kv_tokens) if regime == "kv" else \
            (args.uncached_prompts, args.uncached_tokens)
        results = out / f"model-{task}-{regime}.jsonl"
        sweep(runner, {task: prompts}, drafters, cfg.ks, [regime], max_tokens, results,
              n_prompts=n, mlx_lm=regime == "kv", on_progress=progress(f"{task} {regime}"))
        rows += [r for r in load_rows(results) if r["verifier"] == verifier.name]
    bad = [r for r in rows if not r["exact_match"] and not r["strategy"].startswith("mlx-lm")]
    if bad:
        raise SystemExit(f"{len(bad)} output(s) of ours differ from plain decoding: a bug")
    # the uncached cells' speedup vs mlx-lm: over its KV run on the same prompts
    task_cells = [dict(c, mode="model") for c in aggregate(rows)]
    duels = []
    for regime in cfg.regimes if cfg.rounds else ():
        n, max_tokens = sizes[regime]
        duels += head_to_head(runner, drafters, [c for c in task_cells if c["regime"] == regime],
                              task, regime, prompts[:n], max_tokens, cfg.rounds, args.close)
    return task_cells, duels


def reference_cells(args, cfg, verifier, prompts, out) -> list:
    """Every task replayed on its reference texts (no model runs)."""
    from olifant_mlx.verifier import load_tokenizer

    tok = verifier.identity if verifier is not None else load_tokenizer(args.verifier)
    name = verifier.name if verifier is not None else args.verifier
    cells = []
    for task in cfg.tasks:
        ps = prompts[task][:cfg.ref_n]
        runner = ReferenceRunner(tok, continuations_of(ps, str(C / VALID[task])))
        path = draft_model(task, tok, name)
        fill = {"model": path, "task": task, "verifier": name}
        drafters = build({n: s.format(**fill) for n, s in cfg.specs.items()}, tok, tok.digest, True)
        results = out / f"reference-{task}.jsonl"
        sweep(runner, {task: ps}, drafters, cfg.ks, cfg.regimes, cfg.ref_tokens, results, n_prompts=cfg.ref_n,
              on_progress=progress(f"reference {task}"))
        rows = [r for r in load_rows(results) if r["verifier"] == "reference"]
        cells += [dict(c, mode="reference") for c in aggregate(rows)]
    return cells


def main():
    args = parse_args()
    cfg = settings(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells, duels = [], []
    prompts = {t: read_prompts(str(C / t / "prompts.dev.jsonl")) for t in cfg.tasks}
    verifier = None
    if not args.no_model:
        verifier = load_verifier(args.verifier)
        runner = ModelRunner(verifier)
        runner.run("Warm-up text.", None, 0, True, 4)
        for task in cfg.tasks:
            task_cells, task_duels = model_task(args, cfg, runner, verifier, task, prompts[task], out)
            cells += task_cells
            duels += task_duels
    if not args.no_reference:
        cells += reference_cells(args, cfg, verifier, prompts, out)
    write(out, cells, duels)


def head_to_head(runner, drafters, cells, task, regime, prompts, max_tokens, rounds, close):
    """Where the adaptive hybrid and the best single strategy at the same k are close (or it is
    behind): alternating rounds, best single's seconds / adaptive hybrid's per round."""
    out = []
    for c in compare([dict(c, mode="model") for c in cells], "speedup"):
        if c["ratio"] is None or c["ratio"] > 1 + close:
            continue
        runners = [("single", drafters[c["best_single"]], c["k"]), ("ours", drafters[OURS], c["k"])]
        secs = alternating_rounds(runner, prompts, runners, rounds, max_tokens, regime == "kv")
        rs = [s["single"] / s["ours"] for s in secs]
        out.append({"task": task, "regime": regime, "k": c["k"], "best_single": c["best_single"],
                    "rounds": rounds, "prompts": len(prompts), "min": round(min(rs), 3),
                    "median": round(statistics.median(rs), 3), "max": round(max(rs), 3)})
        print("head to head", json.dumps(out[-1]), file=sys.stderr, flush=True)
    return out


COLS = ["mode", "task", "regime", "strategy", "k", "prompts", "acceptance", "mean_accepted_length",
        "tokens_per_pass", "speedup", "speedup_vs_mlx_lm", "modelled_speedup", "exact_match",
        "reproposals", "partial_steps", "verifier_tokens_per_token", "tokens_per_s"]


def fmt(key, v):
    if v is None:
        return "—"
    if key in ("acceptance", "exact_match"):
        return f"{v:.1%}"
    if key.startswith("speedup") or key.endswith("_speedup"):
        return f"{v:.2f}x"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def write(out, cells, duels):
    cells = [c for c in cells if c["strategy"] != "plain" or c["mode"] == "model"]
    with open(out / "cells.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLS, extrasaction="ignore")
        w.writeheader()
        for c in cells:
            w.writerow({k: c.get(k) for k in COLS})
    lines = ["| " + " | ".join(COLS) + " |", "|" + "---|" * len(COLS)]
    lines += ["| " + " | ".join(fmt(k, c.get(k)) for k in COLS) + " |" for c in cells]
    (out / "cells.md").write_text("\n".join(lines) + "\n")
    comps = compare(cells, "mean_accepted_length") + compare(cells, "modelled_speedup") + \
        compare([c for c in cells if c["mode"] == "model"], "speedup")
    s = ["The adaptive hybrid against the best single strategy of ours at the same k (mlx-lm's aside): "
         "ratio above 1 means the adaptive hybrid is ahead.", "",
         "| mode | task | regime | k | measure | adaptive hybrid | best single | its value | ratio |",
         "|---|---|---|---|---|---|---|---|---|"]
    for c in comps:
        s.append(f"| {c['mode']} | {c['task']} | {c['regime']} | {c['k']} | {c['key']} | "
                 f"{fmt(c['key'], c['adaptive_hybrid'])} | {c['best_single']} | {fmt(c['key'], c['best'])} | "
                 f"{c['ratio']:.3f} |")
    if duels:
        s += ["", "Head to head where close: best single's seconds / adaptive hybrid's, per round, "
              "order alternating.", "", "| task | regime | k | best single | rounds x prompts | min | median | max |",
              "|---|---|---|---|---|---|---|---|"]
        for d in duels:
            s.append(f"| {d['task']} | {d['regime']} | {d['k']} | {d['best_single']} | {d['rounds']} x "
                     f"{d['prompts']} | {d['min']:.3f} | {d['median']:.3f} | {d['max']:.3f} |")
    (out / "summary.md").write_text("\n".join(s) + "\n")
    (out / "summary.json").write_text(json.dumps({"comparisons": comps, "head_to_head": duels}, indent=2) + "\n")
    print("\n".join(s))


if __name__ == "__main__":
    main()

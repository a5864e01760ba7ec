"""`python -m olifant_mlx bench`: the paper's sweep of strategies x tasks x k x regimes.

Each prompt is first generated plain (the greedy reference); every strategy then runs on
the same prompt in the same process, so its speedup, ROUGE-L and exact-match flag are
relative to that reference. Every generation becomes one JSON line, appended as soon as
it finishes: a killed run resumes where it stopped (rows already present are skipped;
the reference tokens are stored with the plain row). Energy comes from the meter when
one is available (with its label); process CPU seconds per 100 tokens are always
recorded, labelled as compute, never as energy.
"""
from __future__ import annotations

import csv
import json
import time
from collections import defaultdict
from pathlib import Path

from olifant_mlx.engine import Stats, generate_steps
from olifant_mlx.metrics import rouge_l

QUICK = {"prompts": 2, "max_tokens": 24, "ks": [3], "regimes": ["kv"]}


def row_key(r) -> tuple:
    return (r["verifier"], r["task"], r["regime"], r["strategy"], r["k"], r["prompt"])


def load_rows(path) -> list:
    """Rows of a results file; a line cut short by a kill is ignored."""
    rows = []
    if Path(path).is_file():
        for line in open(path, encoding="utf-8"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _end_torn_line(path):
    """A run killed mid-write leaves a partial last line: end it so new rows stay whole."""
    p = Path(path)
    if p.is_file() and p.stat().st_size:
        with open(p, "rb+") as f:
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")


def run_one(model, prompt, drafter, k, max_tokens, kv, tok, meter):
    """(tokens, Stats, energy window or None, CPU seconds) of one generation."""
    stats = Stats()
    tokens = []
    cpu0 = time.process_time()
    start = meter.mark() if meter is not None else None
    for step in generate_steps(model, prompt, drafter, k=k, max_tokens=max_tokens, kv_cache=kv,
                               eos_ids=tok.eos_token_ids, bos_id=tok.bos_token_id, stats=stats):
        tokens.extend(step.emitted)
    window = meter.between(start, meter.mark()) if meter is not None else None
    return tokens, stats, window, time.process_time() - cpu0


def sweep(session, tasks: dict, strategies: dict, ks, regimes, max_tokens: int, results,
          meter=None, n_prompts=None, on_progress=None):
    """Run every missing cell; append rows to `results`; return all rows.

    session: (model, mlx-lm tokenizer, verifier name); tasks: {name: [prompt texts]};
    strategies: {name: drafter} (a drafter resets itself in start(), so one serves every run).
    """
    model, tok, verifier = session
    rows = load_rows(results)
    done = {row_key(r): r for r in rows}
    plan = [(task, regime, i, text) for task, texts in tasks.items() for regime in regimes
            for i, text in enumerate(texts[:n_prompts])]
    total = len(plan) * (1 + len(strategies) * len(ks))
    finished = sum(1 for r in rows if r["verifier"] == verifier)
    _end_torn_line(results)
    with open(results, "a", encoding="utf-8") as out:
        def record(row):
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()

        for task, regime, i, text in plan:
            prompt = tok.encode(text)
            kv = regime == "kv"
            ref_row = done.get((verifier, task, regime, "plain", 0, i))
            if ref_row is None:
                ref, st, w, cpu = run_one(model, prompt, None, 0, max_tokens, kv, tok, meter)
                ref_row = make_row(verifier, task, regime, "plain", 0, i, ref, ref, st, w, cpu)
                record(ref_row)
                finished += 1
                if on_progress:
                    on_progress(finished, total)
            ref = ref_row["tokens"]
            for name, drafter in strategies.items():
                for k in ks:
                    if (verifier, task, regime, name, k, i) in done:
                        continue
                    out_tokens, st, w, cpu = run_one(model, prompt, drafter, k, max_tokens, kv, tok, meter)
                    record(make_row(verifier, task, regime, name, k, i, out_tokens, ref, st, w, cpu,
                                    plain_s=ref_row["seconds"]))
                    finished += 1
                    if on_progress:
                        on_progress(finished, total)
    return rows


def make_row(verifier, task, regime, strategy, k, prompt, tokens, ref, stats, window, cpu_s,
             plain_s=None):
    d = stats.as_dict()
    n = len(tokens)
    energy = window.as_dict(n) if window is not None else {"backend": "none", "energy_j": None}
    return {
        "verifier": verifier, "task": task, "regime": regime, "strategy": strategy, "k": k,
        "prompt": prompt, "tokens": tokens if strategy == "plain" else None, "n_tokens": n,
        "seconds": d["seconds"], "tokens_per_s": d["tokens_per_s"], "steps": d["steps"],
        "acceptance": d["acceptance"], "mean_accepted_length": d["mean_accepted_length"],
        "drafted": d["drafted"], "accepted": d["accepted"],
        "rouge_l": rouge_l(ref, tokens), "exact_match": tokens == ref,
        "plain_seconds": plain_s if plain_s is not None else d["seconds"],
        "compute_cpu_s_per_100_tokens": 100.0 * cpu_s / n if n else None,
        "energy_j": energy.get("energy_j"), "j_per_100_tokens": energy.get("j_per_100_tokens"),
        "tokens_per_joule": energy.get("tokens_per_joule"), "mean_power_w": energy.get("mean_power_w"),
        "energy_label": energy.get("label", "not measured"), "energy_backend": energy.get("backend"),
        "time": time.time(),
    }


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def aggregate(rows) -> list:
    """One dict per (verifier, task, regime, strategy, k): the paper's table cells."""
    cells = defaultdict(list)
    for r in rows:
        cells[(r["verifier"], r["task"], r["regime"], r["strategy"], r["k"])].append(r)
    out = []
    for (v, task, regime, s, k), rs in sorted(cells.items()):
        secs = sum(r["seconds"] for r in rs)
        plain_secs = sum(r["plain_seconds"] for r in rs)
        n = sum(r["n_tokens"] for r in rs)
        energy = [r["energy_j"] for r in rs]
        measured = all(e is not None for e in energy)
        out.append({
            "verifier": v, "task": task, "regime": regime, "strategy": s, "k": k, "prompts": len(rs),
            "tokens_per_s": n / secs if secs else None,
            "speedup": plain_secs / secs if secs else None,   # same tokens, same prompts
            "acceptance": _mean(r["acceptance"] for r in rs),
            "mean_accepted_length": _mean(r["mean_accepted_length"] for r in rs),
            "rouge_l": _mean(r["rouge_l"] for r in rs),
            "exact_match": sum(r["exact_match"] for r in rs) / len(rs),
            "compute_cpu_s_per_100_tokens": _mean(r["compute_cpu_s_per_100_tokens"] for r in rs),
            "j_per_100_tokens": 100.0 * sum(energy) / n if measured and n else None,
            "tokens_per_joule": n / sum(energy) if measured and sum(energy) else None,
            "mean_power_w": sum(energy) / secs if measured and secs else None,
            "energy_label": rs[0]["energy_label"],
        })
    return out


COLUMNS = ["verifier", "task", "regime", "strategy", "k", "prompts", "tokens_per_s", "speedup",
           "acceptance", "mean_accepted_length", "rouge_l", "exact_match",
           "compute_cpu_s_per_100_tokens", "j_per_100_tokens", "tokens_per_joule", "mean_power_w",
           "energy_label"]


def _fmt(key, v):
    if v is None:
        return "not measured" if key in ("j_per_100_tokens", "tokens_per_joule", "mean_power_w") else "—"
    if key in ("acceptance", "exact_match"):
        return f"{v:.1%}"
    if key == "speedup":
        return f"{v:.2f}x"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def write_tables(cells, out_dir) -> dict:
    """CSV (machines) and Markdown (people) of the aggregated cells; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for c in cells:
            w.writerow({k: c[k] for k in COLUMNS})
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(k, c[k]) for k in COLUMNS) + " |" for c in cells]
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    return {"csv": out / "bench.csv", "markdown": out / "bench.md"}


def calibrate(model, tok, text: str, max_new: int = 9, repeats: int = 3) -> dict:
    """The verifier's forward time for 1..max_new new tokens with a KV cache after `text`,
    and for the whole context without one (why the two regimes differ)."""
    from olifant_mlx.engine import _prefill, make_cache
    from olifant_mlx.mlx_setup import mx
    from mlx_lm.models.cache import trim_prompt_cache

    prompt = tok.encode(text)
    cache = make_cache(model)
    mx.eval(_prefill(model, cache, prompt))
    cached = {}
    for n in range(1, max_new + 1):
        best = None
        for _ in range(repeats):
            t = time.perf_counter()
            mx.eval(model(mx.array(prompt[-n:])[None], cache=cache))
            dt = time.perf_counter() - t
            trim_prompt_cache(cache, n)
            best = dt if best is None else min(best, dt)
        cached[n] = best
    full = min(_timed(lambda: mx.eval(model(mx.array(prompt)[None]))) for _ in range(repeats))
    return {"context_tokens": len(prompt), "kv_ms": {n: 1e3 * s for n, s in cached.items()},
            "kv_relative": {n: s / cached[1] for n, s in cached.items()},
            "uncached_full_context_ms": 1e3 * full, "uncached_over_kv1": full / cached[1]}


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def read_prompts(path) -> list:
    """Prompts: a .jsonl with a "prompt" (or "text") field per line, or text one per line."""
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        if path.endswith((".jsonl", ".json")):
            obj = json.loads(line)
            out.append(obj.get("prompt") or obj["text"])
        else:
            out.append(line)
    return out


def _pairs(items, what):
    out = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{what} wants NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def cmd_bench(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.table import Table

    from olifant_mlx.decode_cli import open_session
    from olifant_mlx.drafters import make_drafter
    from olifant_mlx.energy import open_meter

    cfg = {}
    if args.config:
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise ValueError("--config needs Python 3.11 or newer (tomllib)") from None
        cfg = tomllib.loads(Path(args.config).read_text())
    tasks = {**cfg.get("tasks", {}), **_pairs(args.prompts, "--prompts")}
    strategies = {**cfg.get("strategies", {}), **_pairs(args.strategy, "--strategy")}
    if not tasks:
        raise ValueError("no tasks: give --prompts NAME=FILE (e.g. legal=prompts.dev.jsonl)")
    strategies = strategies or {"ngram": "ngram", "lookup": "lookup"}
    quick = QUICK if args.quick else {}
    ks = args.k or cfg.get("ks") or quick.get("ks") or [3, 5, 8]
    regimes = args.regimes or cfg.get("regimes") or quick.get("regimes") or ["kv", "uncached"]
    n_prompts = args.n_prompts or cfg.get("prompts") or quick.get("prompts") or 100
    max_tokens = args.max_tokens or cfg.get("max_tokens") or quick.get("max_tokens") or 100
    model, tok, ours, _, name = open_session(args.model or cfg.get("model"))
    drafters = {sname: make_drafter(spec, ours) for sname, spec in strategies.items()}
    meter = open_meter(args.energy)
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    texts = {t: read_prompts(p) for t, p in tasks.items()}
    con = Console(stderr=True)
    con.print(f"verifier {name}; energy: {meter.info.label}; {len(texts)} task(s), "
              f"{len(drafters)} strategies, k {ks}, regimes {regimes}, {n_prompts} prompts x "
              f"{max_tokens} tokens; results -> {results}")
    with Progress(TextColumn("bench"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeRemainingColumn(), console=con) as bar:
        task = bar.add_task("bench", total=None)
        try:
            rows = sweep((model, tok, name), texts, drafters, ks, regimes, max_tokens, results,
                         meter=meter, n_prompts=n_prompts,
                         on_progress=lambda done, total: bar.update(task, completed=done, total=total))
        except KeyboardInterrupt:
            con.print("interrupted: the results file is consistent; run again to resume")
            return 130
    cells = aggregate(rows)
    paths = write_tables(cells, args.out_dir)
    t = Table(title=f"bench ({meter.info.label})")
    shown = ["task", "regime", "strategy", "k", "prompts", "tokens_per_s", "speedup", "acceptance",
             "mean_accepted_length", "rouge_l", "exact_match", "compute_cpu_s_per_100_tokens",
             "j_per_100_tokens", "tokens_per_joule"]
    for c in shown:
        t.add_column(c.replace("_", " "), justify="left" if c in ("task", "regime", "strategy") else "right")
    for c in cells:
        t.add_row(*[_fmt(k, c[k]) for k in shown])
    Console(width=max(Console().width, 180)).print(t)
    if args.calibrate:
        cal = calibrate(model, tok, texts[next(iter(texts))][0])
        (Path(args.out_dir) / "calibration.json").write_text(json.dumps(cal, indent=2))
        Console().print("verify cost, KV cache, relative to 1 new token: " + ", ".join(
            f"{n}: {v:.2f}" for n, v in cal["kv_relative"].items())
            + f"; uncached full context ({cal['context_tokens']} tokens) = "
              f"{cal['uncached_over_kv1']:.1f} cached steps")
    con.print(f"tables: {paths['csv']}, {paths['markdown']}")
    return 0


def add_parsers(sub):
    b = sub.add_parser("bench", help="the paper's sweep: strategies x tasks x k x regimes")
    b.add_argument("--model", help="verifier (default as for generate)")
    b.add_argument("--prompts", nargs="+", metavar="TASK=FILE", help="prompt files per task")
    b.add_argument("--strategy", nargs="+", metavar="NAME=SPEC",
                   help="drafters, e.g. olifant=olifant:models/legal.olif ngram=ngram lookup=lookup")
    b.add_argument("--config", help="TOML with model, [tasks], [strategies], ks, regimes, prompts, max_tokens")
    b.add_argument("-k", nargs="+", type=int)
    b.add_argument("--regimes", nargs="+", choices=["kv", "uncached"])
    b.add_argument("--n-prompts", type=int)
    b.add_argument("--max-tokens", type=int)
    b.add_argument("--quick", action="store_true", help=f"small subset: {QUICK}")
    b.add_argument("--energy", help="meter backend (default: $OLIFANT_ENERGY or auto)")
    b.add_argument("--results", default="bench-results/results.jsonl",
                   help="JSON lines, appended; an interrupted run resumes from it")
    b.add_argument("--out-dir", default="bench-results", help="where the CSV/Markdown tables go")
    b.add_argument("--calibrate", action="store_true", help="also measure the verifier's cost curve")
    b.set_defaults(func=cmd_bench)

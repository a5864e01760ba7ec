"""The step after a partial acceptance, three rules: the correction held back for the next step's
free check (held, the older KV rule), the correction always leading the next pass (led), and
the engine's default (auto: engine.loop.LeadRule, leading only where its cost model expects
it to pay, else feeding the correction alone).

    python benchmarks/lead.py [--verifiers smollm2-135m gemma3-270m] [--task legal] [--prompts 6]
        [--max-tokens 80] [-k 3] [--drafters olifant hybrid lookup] [--rounds 3]
        [--reference-prompts 20] [--reference-tokens 100] [--reference-only] [--out benchmarks/out/lead]

Per verifier (KV cache, the task's dev prompts, the draft model trained for that verifier on
the task's train split): for each drafter and rule, one generation per prompt counting partial
passes (a draft rejected after a verified pass), re-proposals (a first draft that is the token
the verifier just rejected at that position), led passes, tokens per verifier pass and mean
accepted length; every output checked against plain; the prompts' plain, held, led and auto
runs interleaved (order rotating per prompt) and timed, so each rule also gets a speedup over
plain from that one run (plain seconds / its seconds). Then speed: `--rounds` rounds over the
prompts, plain / held / led / auto in alternating order (`bench.alternating_rounds`), speedups
per round (min, median, max). Finally reference-text mode (the real continuations of the
task's validation documents, the first verifier's tokens): the same counts under every rule
(auto planning with bench.REFERENCE_COST there).
Writes OUT/lead.json and OUT/lead.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from olifant_mlx.drafters import build_drafter
from olifant_mlx.measure.bench import (ModelRunner, ReferenceRunner, alternating_rounds,
                                       continuations_of, read_prompts)
from olifant_mlx.measure.corpora import TRAIN, VALID, task_draft_model
from olifant_mlx.verifier import load_tokenizer, load_verifier

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))
C = SHARED / "corpora"
MODELS = ROOT / "benchmarks" / "out" / "models"      # shared with peers.py
RULES = {"held": False, "led": True, "auto": "auto"}     # rule name -> Session.lead


def specs(path):
    return {"olifant": f"olifant:{path}", "hybrid": f"hybrid:{path}", "lookup": "lookup",
            "ngram": "ngram", "adaptive-hybrid": f"adaptive:hybrid:{path}"}


class RuleRunner:
    """A runner whose 'drafter' is (drafter, lead): the same runner under any KV rule."""

    def __init__(self, inner):
        self.inner, self.name, self.label = inner, inner.name, inner.label

    def run(self, prompt, drafter, k, kv, max_tokens):
        d, lead = drafter if isinstance(drafter, tuple) else (drafter, "auto")
        return self.inner.with_options(lead=lead).run(prompt, d, k, kv, max_tokens)


def counts(runner, prompts, drafter, k, max_tokens, lead, ref_tokens=None):
    """One generation per prompt under one rule: the loop's counters, summed."""
    t = blank()
    for i, p in enumerate(prompts):
        out, st, _, _ = runner.run(p, (drafter, lead), k, True, max_tokens)
        add(t, out, st, ref_tokens is None or out == ref_tokens[i])
    return finish(t)


def blank():
    return dict(partial=0, reproposed=0, led=0, steps=0, tokens=0, accepted=0, drafted=0, identical=0,
                seconds=0.0)


def add(t, out, st, identical, seconds=0.0):
    t["partial"] += st.partial_steps
    t["reproposed"] += st.reproposals
    t["led"] += st.led_steps
    t["steps"] += st.steps
    t["tokens"] += st.tokens
    t["accepted"] += st.accepted
    t["drafted"] += st.drafted
    t["identical"] += bool(identical)
    t["seconds"] += seconds


def finish(t):
    t["tokens_per_pass"] = round(t["tokens"] / t["steps"], 3)
    t["mal"] = round(t["accepted"] / t["steps"], 3)
    t["acceptance"] = round(t["accepted"] / t["drafted"], 4) if t["drafted"] else 0.0
    t["seconds"] = round(t["seconds"], 3)
    return t


def timed_counts(runner, prompts, drafter, k, max_tokens):
    """Per prompt: plain and every rule, the order rotating with the prompt, on the same loaded
    verifier: each rule's counters (as `counts`) plus wall seconds, and the speedup of each
    over the plain runs interleaved with it (one run per cell)."""
    import time

    names = ["plain", *RULES]
    t = {name: blank() for name in names}
    for i, p in enumerate(prompts):
        order = names[i % len(names):] + names[: i % len(names)]
        outs = {}
        for rule in order:
            d = None if rule == "plain" else (drafter, RULES[rule])
            t0 = time.perf_counter()
            out, st, _, _ = runner.run(p, d, 0 if rule == "plain" else k, True, max_tokens)
            secs = time.perf_counter() - t0
            outs[rule] = (out, st, secs)
        for rule, (out, st, secs) in outs.items():
            add(t[rule], out, st, out == outs["plain"][0], secs)
    res = {rule: finish(t[rule]) for rule in RULES}
    for rule in RULES:
        res[rule]["speedup"] = round(t["plain"]["seconds"] / t[rule]["seconds"], 3) if t[rule]["seconds"] else None
    res["plain_seconds"] = round(t["plain"]["seconds"], 3)
    return res


def summary(xs):
    return {"min": round(min(xs), 3), "median": round(statistics.median(xs), 3),
            "max": round(max(xs), 3), "rounds": [round(x, 3) for x in xs]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifiers", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--task", default="legal", choices=sorted(TRAIN))
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=80)
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--drafters", nargs="+", default=["olifant", "hybrid", "lookup"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reference-prompts", type=int, default=20)
    ap.add_argument("--reference-tokens", type=int, default=100)
    ap.add_argument("--reference-only", action="store_true", help="only the reference-text counts")
    ap.add_argument("--no-counts", action="store_true", help="only the speed rounds")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "lead"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = read_prompts(str(C / args.task / "prompts.dev.jsonl"))
    result = {"task": args.task, "k": args.k, "prompts": args.prompts, "max_tokens": args.max_tokens,
              "reference_prompts": args.reference_prompts, "reference_tokens": args.reference_tokens,
              "verifiers": {}, "reference": {}}
    for name in [] if args.reference_only else args.verifiers:
        v = load_verifier(name)
        runner = RuleRunner(ModelRunner(v))
        runner.run("Warm-up text.", None, 0, True, 4)
        path = task_draft_model(args.task, v.identity, v.name, C, MODELS)
        ds = {d: build_drafter(specs(path)[d], v.identity) for d in args.drafters}
        ps = prompts[: args.prompts]
        res = {d: {} for d in ds}
        for d, drafter in ds.items() if not args.no_counts else ():
            res[d] = timed_counts(runner, ps, drafter, args.k, args.max_tokens)
            print(name, d, json.dumps(res[d]), file=sys.stderr, flush=True)
            (out / "lead.json").write_text(json.dumps(dict(result, partial={name: res}), indent=2) + "\n")
        for d, drafter in ds.items():
            if not args.rounds:
                break
            secs = alternating_rounds(runner, ps, [("plain", None, 0)] + [
                (rule, (drafter, lead), args.k) for rule, lead in RULES.items()],
                args.rounds, args.max_tokens, True)
            res[d]["speed"] = {f"{a}_vs_{b}": summary([s[b] / s[a] for s in secs])
                               for a, b in [("held", "plain"), ("led", "plain"), ("auto", "plain"),
                                            ("led", "held"), ("auto", "held"), ("auto", "led")]}
            print(name, d, json.dumps(res[d]["speed"]), file=sys.stderr, flush=True)
        result["verifiers"][v.name] = res
        (out / "lead.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.reference_prompts:
        tok = load_tokenizer(args.verifiers[0], C, MODELS)
        ps = prompts[: args.reference_prompts]
        conts = continuations_of(ps, str(C / VALID[args.task]))
        runner = RuleRunner(ReferenceRunner(tok, conts))
        path = task_draft_model(args.task, tok, args.verifiers[0], C, MODELS)
        for d in args.drafters:
            drafter = build_drafter(specs(path)[d], tok)
            result["reference"][d] = {rule: counts(runner, ps, drafter, args.k, args.reference_tokens,
                                                   lead) for rule, lead in RULES.items()}
            print("reference", d, json.dumps(result["reference"][d]), file=sys.stderr, flush=True)
    (out / "lead.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "lead.md").write_text(markdown(result) + "\n")
    print(markdown(result))


def markdown(r) -> str:
    lines = [f"Task {r['task']}, k = {r['k']}, KV cache; {r['prompts']} dev prompts x {r['max_tokens']} "
             "tokens on the offline verifiers; held = the correction held back for the next step's free "
             "check (the older rule), led = the correction always leads the next pass, auto = "
             "the engine's default (leads where its cost model expects it to pay); reference text: "
             f"{r.get('reference_prompts', 0)} prompts x {r.get('reference_tokens', 0)} tokens.", "",
             "| verifier | drafter | rule | partial passes | re-proposals | led passes | passes | "
             "tokens per pass | MAL | acceptance | identical | speedup over plain, one run | "
             "speedup over plain, rounds (min / median / max) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = [(v, d, x) for v, res in r["verifiers"].items() for d, x in res.items()]
    rows += [("reference text", d, x) for d, x in r["reference"].items()]
    for v, d, x in rows:
        for rule in [name for name in RULES if name in x]:
            c = x[rule]
            sp = x.get("speed", {}).get(f"{rule}_vs_plain")
            sp = f"{sp['min']:.3f} / {sp['median']:.3f} / {sp['max']:.3f}" if sp else "—"
            one = f"{c['speedup']:.3f}" if c.get("speedup") else "—"
            ident = f"{c['identical']}/{r['prompts']}" if v != "reference text" else "—"
            lines.append(f"| {v} | {d} | {rule} | {c['partial']} | {c['reproposed']} | {c['led']} | "
                         f"{c['steps']} | {c['tokens_per_pass']:.3f} | {c['mal']:.3f} | "
                         f"{c['acceptance']:.1%} | {ident} | {one} | {sp} |")
    lines += ["", "Seconds ratios per round, min / median / max (a_vs_b above 1: a is faster):", "",
              "| verifier | drafter | led vs held | auto vs held | auto vs led |", "|---|---|---|---|---|"]
    for v, d, x in rows:
        sp = x.get("speed", {})
        if sp:
            cells = [sp.get(key) for key in ("led_vs_held", "auto_vs_held", "auto_vs_led")]
            cells = [f"{c['min']:.3f} / **{c['median']:.3f}** / {c['max']:.3f}" if c else "—" for c in cells]
            lines.append(f"| {v} | {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

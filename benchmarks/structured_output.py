"""Structured output on real contracts: does every extraction parse against its schema, and what
does constrained speculative decoding cost against unconstrained plain decoding?

Each of the contracts of tests/data/contracts.json is one round; in it the arms run one after
the other on the same chat request (the instruction and the contract), their order alternating
between rounds (the machine is shared: a neighbour's burst then spreads over the arms):

- `plain`: unconstrained plain decoding (k 0, no schema), the baseline;
- `constrained-plain`: plain decoding under the schema (k 0: no forced drafts either);
- `constrained-spec`: speculative decoding under the schema: the grammar's forced tokens and
  the drafter's (`--draft`, default lookup) as drafts, k `-k`.

Per round: tokens, seconds and tokens/s of each arm (decoding after the prefill, and whole),
the ratio of each constrained arm to `plain`, whether each constrained answer parses as JSON
and validates against the schema (jsonschema), whether the two constrained answers are the same
tokens, the fields right against the contract's facts, and the load average. The summary has
the median and range of the per-round ratios and the counts.

    python benchmarks/structured_output.py [--model smollm2-135m] [--contracts 20] \\
        [--arms constrained-spec] [-m 160] [-k 8] [--draft lookup] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "contracts.json"
ARMS = ("plain", "constrained-plain", "constrained-spec")


def fields_right(answer: dict, facts: dict) -> dict:
    """Which facts the answer got right (names and law compared without case or a leading 'the')."""
    def norm(x):
        return str(x).lower().removeprefix("the ").strip(" .")

    names = {norm(p.get("name", "")) for p in answer.get("parties", []) if isinstance(p, dict)}
    cap = answer.get("liability_cap") or {}
    return {"parties": all(norm(p["name"]) in names for p in facts["parties"]),
            "effective_date": answer.get("effective_date") == facts["effective_date"],
            "governing_law": norm(answer.get("governing_law", "")) == norm(facts["governing_law"]),
            "notice_period_days": answer.get("notice_period_days") == facts["notice_period_days"],
            "liability_cap": cap.get("amount") == facts["liability_cap"]["amount"]
            and cap.get("currency") == facts["liability_cap"]["currency"]}


def one_round(session, arms, order, data, contract) -> dict:
    """One contract: every arm on the same chat request, in `order`."""
    import jsonschema

    from olifant_mlx.engine.session import Chat

    chat = Chat.of(f"{data['instruction']}\n\n{contract['text']}")
    row = {"id": contract["id"], "load_average": os.getloadavg()[0], "arms": {}}
    for arm in order:
        opts, draft = arms[arm]
        t = time.perf_counter()
        r = session.generate(chat, opts, drafter=draft)
        seconds = time.perf_counter() - t
        st = r.stats
        got = {"tokens": len(r.tokens), "seconds": round(seconds, 3), "prefill_s": round(st.prefill_s, 3),
               "tokens_per_s": round(len(r.tokens) / seconds, 3),
               "decode_tokens_per_s": round(len(r.tokens) / max(seconds - st.prefill_s, 1e-9), 3),
               "passes": st.steps, "drafted": st.drafted, "accepted": st.accepted,
               "finish_reason": r.finish_reason, "ids": r.tokens}
        if opts.json_schema:
            try:
                answer = json.loads(r.text)
                jsonschema.validate(answer, data["schema"])
                got.update(parses=True, right=fields_right(answer, contract["facts"]))
            except (ValueError, jsonschema.ValidationError) as e:
                got.update(parses=False, error=str(e)[:200], text=r.text)
        row["arms"][arm] = got
        print(f"{contract['id']} {arm:18} {got['tokens']:4} tokens {got['seconds']:7.1f} s "
              f"{got['decode_tokens_per_s']:6.2f} tok/s passes {got['passes']:4} "
              f"parses {got.get('parses', '-')}", flush=True)
    a = row["arms"]
    if "constrained-plain" in a and "constrained-spec" in a:
        row["constrained_identical"] = a["constrained-plain"]["ids"] == a["constrained-spec"]["ids"]
    for arm in ("constrained-plain", "constrained-spec"):
        if arm in a and "plain" in a:
            row[f"{arm}/plain"] = {k: round(a[arm][k] / a["plain"][k], 3)
                                   for k in ("tokens_per_s", "decode_tokens_per_s")}
    return row


def summarise(rounds) -> dict:
    """Parse counts, fields right, the median and range of the per-round ratios, the load."""
    summary = {"rounds": len(rounds)}
    for arm in ("constrained-plain", "constrained-spec"):
        parsed = [r["arms"][arm]["parses"] for r in rounds if arm in r["arms"]]
        if parsed:
            summary[f"{arm} parses"] = f"{sum(parsed)}/{len(parsed)}"
            right = [r["arms"][arm].get("right", {}) for r in rounds if arm in r["arms"]]
            summary[f"{arm} fields right"] = {f: sum(bool(x.get(f)) for x in right) for f in right[0] or {}}
        for k in ("tokens_per_s", "decode_tokens_per_s"):
            ratios = [r[f"{arm}/plain"][k] for r in rounds if f"{arm}/plain" in r]
            if ratios:
                summary[f"{arm}/plain {k}"] = {"median": round(statistics.median(ratios), 3),
                                               "min": min(ratios), "max": max(ratios)}
    same = [r["constrained_identical"] for r in rounds if "constrained_identical" in r]
    if same:
        summary["constrained spec == constrained plain"] = f"{sum(same)}/{len(same)}"
    loads = [r["load_average"] for r in rounds]
    summary["load_average"] = {"min": min(loads), "max": max(loads)}
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--contracts", type=int, default=20, help="how many of the 20 contracts (the first N)")
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    ap.add_argument("-m", "--max-tokens", type=int, default=160)
    ap.add_argument("-k", type=int, default=8)
    ap.add_argument("--draft", default="lookup")
    ap.add_argument("--out", help="write the run as JSON here")
    args = ap.parse_args(argv)

    from olifant_mlx.engine.session import Chat, GenerationOptions, Session
    from olifant_mlx.verifier import load_verifier

    data = json.loads(FIXTURE.read_text())
    schema = json.dumps(data["schema"])
    verifier = load_verifier(args.model)
    session = Session(verifier, "none")
    base = GenerationOptions(max_tokens=args.max_tokens, k=0)
    arms = {"plain": (base, "none"), "constrained-plain": (base.replace(json_schema=schema), "none"),
            "constrained-spec": (base.replace(json_schema=schema, k=args.k), args.draft)}
    warm = Chat.of("Say hello.")
    session.generate(warm, base.replace(max_tokens=4, json_schema=schema))    # the grammar's tokenizer, once
    rounds = [one_round(session, arms, args.arms if n % 2 == 0 else args.arms[::-1], data, contract)
              for n, contract in enumerate(data["contracts"][:args.contracts])]
    summary = summarise(rounds)
    result = {"what": "structured output on contracts: parse rate and tokens/s against unconstrained plain",
              "verifier": args.model, "drafter": args.draft, "k": args.k, "max_tokens": args.max_tokens,
              "command": "python benchmarks/structured_output.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": {"cpus": os.cpu_count(), "note": "shared with other engineers' work"},
              "summary": summary, "rounds": rounds}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Concurrent clients against the server: batched passes vs one request at a time.

    python benchmarks/batched_serving.py --model qwen2.5-coder-1.5b [--clients 1 2 4 8] [--rounds 2]
        [--workload revision|precedent] [--max-tokens 64] [--k 16] [--out docs/results/batched-serving.json]

One server on loopback (olifant_mlx.server.app.start, the verifier loaded once), real HTTP clients
on threads. For each number of clients, in alternating rounds, the same requests go out at once
twice: with the server batching (`--max-batch` = the clients) and one at a time (max batch 1,
the rest queued), both speculative (the server's default drafter, `auto`). Two workloads:
`revision` (docs/workload/revisions.jsonl: each clause sent with its instruction and as the
prediction) and `precedent` (the legal drafting instructions of docs/workload/precedents.jsonl,
the server's default precedents the workload's library, built once as precedent_workload.py
builds it). Each client's text and token count must equal its own in the one-at-a-time runs,
where every request ran alone. Reported per run: aggregate tokens per second (all completion tokens over
the wall time from the first request sent to the last token), each client's latency to its last
token, the passes and the batch sizes the usage says, the load average. Also measured once: the
pass-cost curve of rows 1..72 (engine.batch.measure_curve) into docs/results/curves/
VERIFIER-rows72.json, beside the other curves. Time it alone on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from olifant_mlx.files import write_atomic

ROOT = Path(__file__).resolve().parent.parent
CURVES = ROOT / "docs" / "results" / "curves"


def revision_requests(verifier, n: int, max_tokens: int) -> list:
    """The first `n` revisions of docs/workload/revisions.jsonl as request bodies: the prompt
    `revise` sends (a chat for an instruct model, the plain layout for a base one) with the
    clause as the prediction."""
    from olifant_mlx.revise import KEEP as keep

    items = [json.loads(line) for line in (ROOT / "docs" / "workload" / "revisions.jsonl").read_text().splitlines()
             if line.strip()]
    out = []
    for it in items[:n]:
        instruction = " ".join(it["instruction"].split())
        body = {"max_tokens": max_tokens, "temperature": 0, "prediction": {"type": "content", "content": it["clause"]}}
        if verifier.has_chat_template:
            text = f"Revise the clause below. Instruction: {instruction}\n{keep}\n\n{it['clause']}"
            out.append(("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": text}]}))
        else:
            text = f"Instruction: {instruction}\n{keep}\n\nClause:\n{it['clause']}\n\nRevised clause:\n"
            out.append(("/v1/completions", {**body, "prompt": text}))
    return out


def precedent_requests(verifier, n: int, max_tokens: int) -> list:
    """The precedent workload's first `n` legal drafting instructions (docs/workload/
    precedents.jsonl), sent as a client types them: the server puts its precedent library's best
    passages into each prompt (its default `precedents`: precedent_library) and drafts from them."""
    path = ROOT / "docs" / "workload" / "precedents.jsonl"
    items = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out = []
    for it in [it for it in items if it["scenario"] == "legal"][:n]:
        body = {"max_tokens": max_tokens, "temperature": 0}
        if verifier.has_chat_template:
            out.append(("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": it["instruction"]}]}))
        else:
            out.append(("/v1/completions", {**body, "prompt": it["instruction"] + "\n\n"}))
    return out


def precedent_library(verifier) -> str:
    """The precedent workload's legal library for this verifier, as `precedent_workload.py recall`
    builds it (the first 40 acts of EUR-Lex-Sum's validation split; built once, kept): its name."""
    import subprocess

    script = Path(__file__).resolve().parent / "precedent_workload.py"
    subprocess.run([sys.executable, str(script), "recall", "--model", verifier.name], check=True,
                   stdout=subprocess.DEVNULL)
    return f"workload-{verifier.name}"            # precedent_workload.workload_library's name


def ask(http, path, body) -> dict:
    """One streamed request: its text, usage and latency to its last token (from `t0`)."""
    text, usage = [], None
    with http.stream("POST", path, json={**body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{path}: {r.status_code} {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for c in event["choices"]:
                text.append(c.get("text") or (c.get("delta") or {}).get("content") or "")
            usage = event.get("usage") or usage
    return {"text": "".join(text), "usage": usage, "done": time.perf_counter()}


def at_once(url, requests) -> tuple:
    """Every request from a client of its own, sent together: the answers, the wall seconds."""
    import httpx

    got, errors = [None] * len(requests), []
    t0 = time.perf_counter()

    def client(i):
        try:
            with httpx.Client(base_url=url, timeout=3600) as http:
                got[i] = ask(http, *requests[i])
        except Exception as e:          # reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    for g in got:
        g["latency_s"] = g.pop("done") - t0
    return got, max(g["latency_s"] for g in got)


def set_batch(run, size: int) -> None:
    """The idle server's batch size (between runs: no request is running)."""
    queue = run.queue
    queue.max_batch = size
    for batch in queue.batches.values():
        batch.max_batch = size


def one_run(run, requests, mode: str, size: int) -> dict:
    set_batch(run, size if mode == "batched" else 1)
    load = os.getloadavg()[0]
    got, wall = at_once(run.url, requests)
    tokens = sum(g["usage"]["completion_tokens"] for g in got)
    return {"mode": mode, "clients": len(requests), "load_average": round(load, 2), "wall_s": round(wall, 3),
            "tokens": tokens, "aggregate_tps": round(tokens / wall, 3),
            "latencies_s": [round(g["latency_s"], 3) for g in got],
            "passes": [g["usage"]["verifier_passes"] for g in got],
            "completion_tokens": [g["usage"]["completion_tokens"] for g in got],
            "prompt_tokens": [g["usage"]["prompt_tokens"] for g in got],
            "batch_sizes": [g["usage"].get("batch_size", 1) for g in got],
            "mean_batch_sizes": [g["usage"].get("mean_batch_size", 1.0) for g in got],
            "texts": [g["text"] for g in got]}


def summarize(verifier, workload, runs) -> list:
    """Per number of clients: the median aggregate tokens/s of each mode and their ratio, the
    mean and largest client latency of each, and whether every text and token count equals its
    solo run's (the first one-at-a-time run's)."""
    solo = {}
    for r in runs:
        if r["mode"] == "one-at-a-time":
            for i, t in enumerate(zip(r["texts"], r["completion_tokens"])):
                solo.setdefault(i, t)
    out = []
    for n in sorted({r["clients"] for r in runs}):
        mine = {m: [r for r in runs if r["clients"] == n and r["mode"] == m] for m in ("batched", "one-at-a-time")}
        tps = {m: statistics.median(r["aggregate_tps"] for r in rs) for m, rs in mine.items()}
        lat = {m: [statistics.mean(r["latencies_s"]) for r in rs] for m, rs in mine.items()}
        worst = {m: [max(r["latencies_s"]) for r in rs] for m, rs in mine.items()}
        same = all(t == solo[i][0] and c == solo[i][1] for rs in mine.values() for r in rs
                   for i, (t, c) in enumerate(zip(r["texts"], r["completion_tokens"])))
        out.append({"verifier": verifier, "workload": workload, "clients": n, "batched_tps": tps["batched"],
                    "one_at_a_time_tps": tps["one-at-a-time"], "ratio": round(tps["batched"] / tps["one-at-a-time"], 3),
                    "batched_mean_latency_s": round(statistics.median(lat["batched"]), 3),
                    "one_at_a_time_mean_latency_s": round(statistics.median(lat["one-at-a-time"]), 3),
                    "batched_max_latency_s": round(statistics.median(worst["batched"]), 3),
                    "one_at_a_time_max_latency_s": round(statistics.median(worst["one-at-a-time"]), 3),
                    "mean_batch_size": round(statistics.mean(b for r in mine["batched"]
                                                             for b in r["mean_batch_sizes"]), 2),
                    "identical": same})
    return out


def table(rows) -> str:
    lines = ["| verifier | workload | clients | batched tok/s | one at a time tok/s | ratio | mean latency s (b / 1) | "
             "last client s (b / 1) | mean batch | identical |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['verifier']} | {r['workload']} | {r['clients']} | {r['batched_tps']:.2f} | "
                     f"{r['one_at_a_time_tps']:.2f} | "
                     f"{r['ratio']:.2f}x | {r['batched_mean_latency_s']:.1f} / "
                     f"{r['one_at_a_time_mean_latency_s']:.1f} | "
                     f"{r['batched_max_latency_s']:.1f} / {r['one_at_a_time_max_latency_s']:.1f} | "
                     f"{r['mean_batch_size']:.2f} | {'yes' if r['identical'] else 'NO'} |")
    return "\n".join(lines)


def rows_curve(model, name) -> dict:
    from olifant_mlx.engine.batch import measure_curve

    start = os.getloadavg()[0]
    curve = measure_curve(model, on_progress=lambda i, n: print(f"\r  pass-cost curve {i}/{n}", end="",
                                                                 file=sys.stderr))
    print(file=sys.stderr)
    one = curve.seconds[0]
    return {"verifier": name, "what": "seconds of a KV pass of R rows after 64 cached tokens, fastest of 3 "
                                      "alternating rounds (engine.batch.measure_curve)",
            **curve.as_dict(), "relative": [round(s / one, 3) for s in curve.seconds],
            "load_average": [round(start, 2), round(os.getloadavg()[0], 2)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workload", choices=("revision", "precedent"), default="revision")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--no-curve", action="store_true", help="skip the rows 1..72 pass-cost curve")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "batched-serving.json"),
                    help="results JSON (this verifier's rows for this workload replace its earlier ones)")
    args = ap.parse_args()

    from olifant_mlx.engine import GenerationOptions
    from olifant_mlx.server.app import start
    from olifant_mlx.server.config import DrafterChoice, Limits
    from olifant_mlx.drafters.registry import parse_spec
    from olifant_mlx.verifier import load_verifier

    verifier = load_verifier(args.model)
    if not args.no_curve:
        curve = rows_curve(verifier.model, verifier.name)
        write_atomic(CURVES / f"{verifier.name}-rows72.json", json.dumps(curve, indent=1) + "\n", 0o644)
        print(f"rows 1..72: {curve['relative']} x one row ({curve['seconds'][0]:.3f} s)", file=sys.stderr)
    options = GenerationOptions(k=args.k, max_tokens=args.max_tokens)
    if args.workload == "revision":
        requests = revision_requests(verifier, max(args.clients), args.max_tokens)
    else:
        requests = precedent_requests(verifier, max(args.clients), args.max_tokens)
        options = options.replace(precedents=precedent_library(verifier))
    limits = Limits(max_tokens=4096, default_max_tokens=args.max_tokens, max_batch=max(args.clients),
                    prompt_cache_size=0, queue_size=64, timeout_s=3600)
    run = start(verifier, DrafterChoice({"auto": parse_spec("auto")}, "auto"), options, limits, access_log=False)
    runs = []
    try:
        for n in args.clients:
            for rnd in range(args.rounds):
                modes = ("batched", "one-at-a-time") if rnd % 2 == 0 else ("one-at-a-time", "batched")
                for mode in modes:
                    r = one_run(run, requests[:n], mode, n)
                    runs.append({**r, "round": rnd, "verifier": verifier.name, "workload": args.workload})
                    print(f"{verifier.name} {n} clients {mode}: {r['aggregate_tps']:.2f} tok/s, "
                          f"wall {r['wall_s']:.1f} s, load {r['load_average']}", file=sys.stderr)
    finally:
        run.stop()
    rows = summarize(verifier.name, args.workload, runs)
    print(table(rows))
    texts = ROOT / "benchmarks" / "out" / f"batched-serving-texts-{verifier.name}-{args.workload}.json"  # not committed
    texts.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(texts, json.dumps([{k: r[k] for k in ("clients", "round", "mode", "texts", "passes",
                                                       "completion_tokens")}
                                    for r in runs], indent=1) + "\n", 0o644)
    out = Path(args.out)
    kept = json.loads(out.read_text()) if out.exists() else {"summary": [], "runs": []}
    mine = (verifier.name, args.workload)
    kept["summary"] = [r for r in kept["summary"] if (r["verifier"], r.get("workload", "revision")) != mine] + rows
    kept["runs"] = [r for r in kept["runs"] if (r["verifier"], r.get("workload", "revision")) != mine] + \
        [{k: v for k, v in r.items() if k != "texts"} for r in runs]
    write_atomic(out, json.dumps(kept, indent=1) + "\n", 0o644)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()

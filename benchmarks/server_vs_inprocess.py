"""Tokens/s through `serve` (HTTP, SSE, the worker queue) versus the in-process Session.

    python benchmarks/server_vs_inprocess.py [--model smollm2-135m] [--draft auto] [-k 8]
        [--max-tokens 32] [--prompts 6] [--rounds 3] [--arms inproc,server,json,control]

Starts `python -m olifant_mlx serve` in a subprocess on a free loopback port, loads the same
verifier here, and runs every prompt through four arms back to back, one block per prompt:

    inproc   the in-process Session (`Session.stream`, the whole generation)
    server   the server, streamed (SSE, `stream_options.include_usage`)
    json     the server, one whole JSON answer (stream false)
    control  the in-process Session again, with its own drafter: the A/A control

Within a block the arms run in a rotated order, reversed every other round, so each arm runs
in each place and before and after each other arm equally often; one full-length warm-up per
arm first. The server is timed at the client from sending the request to the last byte
(`data: [DONE]` or the JSON body); in-process, the whole generation. The texts must be equal.

What it reports, each as the ratio of an arm to `inproc`:
- over all tokens and time (the headline, as issue 14 asks), the median of the per-block
  ratios, and their min and max; the control's shows how far the same code drifts here;
- the engine's own time (`usage.seconds`, `stats.seconds`: prefill and verifier passes) and
  the time outside it (encoding, detokenising, the queue, HTTP, SSE), so that what the server
  adds is measured apart from how fast the engine happened to run: the "load-adjusted" ratio is
  in-process time / (in-process time + the server's extra time outside the engine);
- CPU seconds (the server process plus this client, against this process in-process), which a
  loaded machine changes far less than wall time;
- time to first text and the gaps between text events, at the client and in-process.

On a machine shared with other work tokens/s swing with its load from one minute to the next;
the control (the same code twice) says how much of a ratio's distance from 1 is that swing.
Writes benchmarks/out/server_vs_inprocess.json (numbers only: no prompt or output text).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ARMS = ("inproc", "server", "json", "control")
SERVER_ARMS = ("server", "json")
TICK = os.sysconf("SC_CLK_TCK")
WARM_UP = "The parties agree that this Agreement shall be governed by the laws of"
PROMPTS = [
    "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING",
    "Article 1\nThis Regulation lays down rules relating to the protection of natural persons with regard to",
    "Patients were randomised to receive either the study drug or placebo, and the primary endpoint was",
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and",
    "The Licensee shall indemnify and hold harmless the Licensor against all claims arising from",
    "Discharge summary: the patient was admitted with community-acquired pneumonia and treated with",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def self_cpu() -> float:
    return time.process_time()


def has_openblas(pid: int) -> bool | None:
    try:
        return "libopenblas" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None


def start_server(model, draft, k, port, log):
    cmd = [sys.executable, "-m", "olifant_mlx", "serve", "--model", model, "--draft", draft, "-k", str(k),
           "--port", str(port), "--energy", "none", "--no-access-log"]
    # the server's stderr goes to a file: a pipe nobody reads would stall it once full
    proc = subprocess.Popen(cmd, stderr=log, stdout=subprocess.DEVNULL)
    import httpx

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"the server exited: {log.read().decode(errors='replace')[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url, " ".join(cmd[1:])
        except httpx.TransportError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the server did not start in 15 minutes")


def through_server(client, url, prompt, max_tokens, stream, pid):
    """One request timed at the client: a dict of text, tokens, wall, engine and CPU seconds,
    time to first text and gaps between text events (streamed)."""
    body = {"prompt": prompt, "max_tokens": max_tokens}
    c0, s0 = self_cpu(), proc_cpu(pid)
    t0 = time.perf_counter()
    times = []
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
        text, usage = [], None
        with client.stream("POST", url + "/v1/completions", json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk["choices"] and chunk["choices"][0]["text"]:
                    times.append(time.perf_counter())
                    text.append(chunk["choices"][0]["text"])
                usage = chunk.get("usage") or usage
        text = "".join(text)
    else:
        r = client.post(url + "/v1/completions", json=body)
        r.raise_for_status()
        out = r.json()
        text, usage = out["choices"][0]["text"], out["usage"]
    dt = time.perf_counter() - t0
    return {"text": text, "tokens": usage["completion_tokens"], "s": dt, "engine_s": usage["seconds"],
            "passes": usage["verifier_passes"], "queue_s": usage["queue_s"],
            "cpu_s": proc_cpu(pid) - s0 + self_cpu() - c0, "times": [t - t0 for t in times]}


def in_process(session, options, prompt):
    c0 = self_cpu()
    t0 = time.perf_counter()
    text, times, last = [], [], None
    for r in session.stream(session.plan(prompt, options)):
        if r.text:
            times.append(time.perf_counter())
            text.append(r.text)
        last = r
    dt = time.perf_counter() - t0
    st = last.stats
    return {"text": "".join(text), "tokens": st.tokens, "s": dt, "engine_s": st.seconds, "passes": st.steps,
            "queue_s": None, "cpu_s": self_cpu() - c0, "times": [t - t0 for t in times]}


def ratio(a, b):
    return round(a / b, 4) if b else None


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--draft", default="auto", help="drafter spec, the same on both sides (default auto)")
    ap.add_argument("-k", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"how many prompts (1-{len(PROMPTS)})")
    ap.add_argument("--rounds", type=int, default=3, help="times through the prompts (default 3)")
    ap.add_argument("--arms", default=",".join(ARMS),
                    help=f"which arms, comma-separated (default {','.join(ARMS)}; inproc is always run)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "server_vs_inprocess.json"))
    return ap.parse_args()


def block_row(rnd, j, order, got, arms) -> dict:
    """One block's row: every arm's times for the same prompt, and whether their texts agree."""
    base = got["inproc"]
    row = {"round": rnd, "prompt": j, "order": list(order), "tokens": base["tokens"],
           "same_text": all(g["text"] == base["text"] and g["tokens"] == base["tokens"]
                            for g in got.values())}
    for arm, g in got.items():
        row[arm] = {"s": round(g["s"], 4), "engine_s": round(g["engine_s"], 4),
                    "outside_s": round(g["s"] - g["engine_s"], 4), "cpu_s": round(g["cpu_s"], 3),
                    "passes": g["passes"], "tps": round(g["tokens"] / g["s"], 3),
                    "ttft_s": round(g["times"][0], 4) if g["times"] else None,
                    "gaps_ms": [round(1e3 * (b - a), 2) for a, b in zip(g["times"], g["times"][1:])]}
        if g["queue_s"] is not None:
            row[arm]["queue_s"] = g["queue_s"]
    for arm in arms[1:]:
        row[arm]["ratio"] = ratio(row[arm]["tps"], row["inproc"]["tps"])
    return row


def measure(args, arms, proc, url) -> tuple:
    """Every block of every arm (the server at `url`, the sessions in this process): (rows,
    whether the server has OpenBLAS)."""
    import httpx

    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.verifier import load_verifier

    verifier = load_verifier(args.model)
    # the control arm is the same Session code again, with its own drafter (A/A)
    sessions = {arm: Session(verifier, args.draft, GenerationOptions(k=args.k))
                for arm in arms if arm not in SERVER_ARMS}
    options = GenerationOptions(k=args.k, max_tokens=args.max_tokens)
    client = httpx.Client(timeout=3600)

    def run(arm, prompt, max_tokens=args.max_tokens):
        if arm in SERVER_ARMS:
            return through_server(client, url, prompt, max_tokens, arm == "server", proc.pid)
        return in_process(sessions[arm], options.replace(max_tokens=max_tokens), prompt)

    for arm in arms:                 # first-call costs, and the adaptive drafters' pass-time model
        run(arm, "Warm-up.", 4)
        run(arm, WARM_UP)
    prompts = PROMPTS[:max(1, min(args.prompts, len(PROMPTS)))]
    blocks = [(r, j, p) for r in range(max(1, args.rounds)) for j, p in enumerate(prompts)]
    rows = []
    for i, (rnd, j, prompt) in enumerate(blocks):
        n = len(arms)
        order = arms[i % n:] + arms[:i % n]
        if rnd % 2:
            order = order[::-1]
        row = block_row(rnd, j, order, {arm: run(arm, prompt) for arm in order}, arms)
        rows.append(row)
        print(f"round {rnd} prompt {j}: {row['tokens']} tokens, tokens/s "
              + "  ".join(f"{a} {row[a]['tps']:.2f}" + (f" ({row[a]['ratio']:.3f})" if a != "inproc" else "")
                          for a in arms)
              + f"  {'same text' if row['same_text'] else 'TEXT DIFFERS'}  (order {', '.join(order)})",
              flush=True)
    return rows, has_openblas(proc.pid)


def arm_summaries(arms, rows, tokens) -> dict:
    """Each arm's totals over the blocks, and its ratios to inproc."""
    def total(arm, key="s"):
        return sum(r[arm][key] for r in rows)

    t_in, e_in, o_in = total("inproc"), total("inproc", "engine_s"), total("inproc", "outside_s")
    out = {}
    for arm in arms:
        s = {"tokens_per_s": round(tokens / total(arm), 3),
             "engine_tokens_per_s": round(tokens / total(arm, "engine_s"), 3),
             "cpu_s_per_token": round(total(arm, "cpu_s") / tokens, 4),
             "outside_engine_ms_per_request": round(1e3 * total(arm, "outside_s") / len(rows), 2),
             "passes": sum(r[arm]["passes"] for r in rows),
             "ttft_s": spread(r[arm]["ttft_s"] for r in rows),
             "gap_ms": spread(g for r in rows for g in r[arm]["gaps_ms"])}
        if arm != "inproc":
            extra = total(arm, "outside_s") - o_in
            s.update(ratio_total=ratio(t_in, total(arm)),
                     ratio_runs=spread(r[arm]["ratio"] for r in rows),
                     engine_ratio=ratio(e_in, total(arm, "engine_s")),
                     cpu_ratio=ratio(total("inproc", "cpu_s"), total(arm, "cpu_s")),
                     extra_outside_engine_ms_per_request=round(1e3 * extra / len(rows), 2),
                     load_adjusted_ratio=ratio(t_in, t_in + extra))
        out[arm] = s
    return out


def print_summary(summary, arms, rows, tokens, blas, load0) -> None:
    print(f"\n{len(rows)} blocks of {', '.join(arms)}; {tokens} tokens per arm; outputs identical: "
          f"{'yes' if summary['all_same_text'] else 'NO'}; server has OpenBLAS: {blas}")
    print(f"{'arm':8} {'tok/s':>7} {'ratio':>6} {'median':>7} {'min-max':>13} {'engine':>7} {'cpu':>6} "
          f"{'+out ms':>8} {'adjusted':>8} {'ttft s':>7} {'gap ms':>7}")
    for arm in arms:
        s = summary["arm"][arm]
        runs = s.get("ratio_runs") or {}
        print(f"{arm:8} {s['tokens_per_s']:7.3f} {s.get('ratio_total') or 1:6.3f} {runs.get('median', 1):7.3f} "
              f"{runs.get('min', 1):6.3f}-{runs.get('max', 1):6.3f} {s.get('engine_ratio') or 1:7.3f} "
              f"{s.get('cpu_ratio') or 1:6.3f} {s.get('extra_outside_engine_ms_per_request', 0):8.1f} "
              f"{s.get('load_adjusted_ratio') or 1:8.4f} {(s['ttft_s'] or {}).get('median', 0):7.3f} "
              f"{(s['gap_ms'] or {}).get('median', 0):7.1f}")
    print(f"ratios are the arm's tokens/s over inproc's (target >= 0.95 for server); engine: the same over "
          f"the engine's own seconds; cpu: over CPU seconds; +out ms: time outside the engine per "
          f"request beyond inproc's; adjusted: inproc time / (inproc time + that). Load average "
          f"{load0[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def main():
    args = parse_args()
    arms = tuple(a for a in ARMS if a == "inproc" or a in args.arms.split(","))
    load0 = os.getloadavg()
    log = tempfile.TemporaryFile()
    proc, url, command = start_server(args.model, args.draft, args.k, free_port(), log)
    try:
        rows, blas = measure(args, arms, proc, url)
    finally:
        proc.terminate()
        proc.wait(60)
    tokens = sum(r["tokens"] for r in rows)
    summary = {"command": " ".join(["python"] + sys.argv), "server": command,
               "model": args.model, "draft": args.draft, "k": args.k, "max_tokens": args.max_tokens,
               "prompts": len(rows) // max(1, args.rounds), "rounds": args.rounds, "arms": list(arms),
               "tokens_per_arm": tokens, "server_has_openblas": blas,
               "load_average": [list(load0), list(os.getloadavg())], "cpus": os.cpu_count(),
               "all_same_text": all(r["same_text"] for r in rows), "arm": arm_summaries(arms, rows, tokens)}
    summary["rows"] = rows
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print_summary(summary, arms, rows, tokens, blas, load0)
    return 0 if summary["all_same_text"] else 1


if __name__ == "__main__":
    sys.exit(main())

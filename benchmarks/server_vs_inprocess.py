"""Tokens/s through `serve` (HTTP, SSE, the worker queue) versus the in-process Session.

    python benchmarks/server_vs_inprocess.py [--model smollm2-135m] [--draft auto]
        [--max-tokens 32] [--prompts 6] [--rounds 2] [--no-stream]

Starts `python -m olifant_mlx serve` in a subprocess on a free loopback port, loads the same
verifier here, and runs the same prompts `--rounds` times through three arms: the in-process
Session, the server, and a control that is the in-process Session again (its own drafter, the
same verifier), each arm first, second and third in turn, after one warm-up each. The server is
timed at the client, from sending the request to the last byte of `data: [DONE]` (streamed, the
default) or of the JSON answer; in-process, the whole `Session.generate`. The texts must be
equal. Prints per-run tokens/s and the ratio server / in-process over all tokens and time (the
headline) and as the median of the runs.

On a machine shared with other work, tokens/s swing with its load from one minute to the next;
the control's ratio to the in-process arm (the same code twice, A/A) shows how far, and the
client's tokens/s over the server's own engine figure (`usage.tokens_per_s`) in the same
request isolates what the HTTP path adds. Writes benchmarks/out/server_vs_inprocess.json.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ARMS = ("inproc", "server", "control")
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


def start_server(model, draft, k, port):
    cmd = [sys.executable, "-m", "olifant_mlx", "serve", "--model", model, "--draft", draft, "-k", str(k),
           "--port", str(port), "--energy", "none", "--no-access-log"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    import httpx

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.stderr.read()}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url, " ".join(cmd[1:])
        except httpx.TransportError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the server did not start in 15 minutes")


def through_server(client, url, prompt, max_tokens, stream):
    """(text, tokens, seconds, server-side tokens/s) for one request, timed at the client."""
    body = {"prompt": prompt, "max_tokens": max_tokens}
    t0 = time.perf_counter()
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
        text, usage = [], None
        with client.stream("POST", url + "/v1/completions", json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk["choices"]:
                    text.append(chunk["choices"][0]["text"])
                usage = chunk.get("usage") or usage
        dt = time.perf_counter() - t0
        return "".join(text), usage["completion_tokens"], dt, usage["tokens_per_s"]
    r = client.post(url + "/v1/completions", json=body)
    dt = time.perf_counter() - t0
    r.raise_for_status()
    out = r.json()
    return out["choices"][0]["text"], out["usage"]["completion_tokens"], dt, out["usage"]["tokens_per_s"]


def in_process(session, options, prompt):
    t0 = time.perf_counter()
    r = session.generate(prompt, options)
    return r.text, r.stats.tokens, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--draft", default="auto", help="drafter spec, the same on both sides (default auto)")
    ap.add_argument("-k", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"how many prompts (1-{len(PROMPTS)})")
    ap.add_argument("--rounds", type=int, default=2, help="times through the prompts (default 2)")
    ap.add_argument("--no-stream", action="store_true", help="whole JSON answers instead of SSE")
    args = ap.parse_args()
    import httpx

    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.verifier import load_verifier

    stream = not args.no_stream
    load0 = os.getloadavg()
    proc, url, command = start_server(args.model, args.draft, args.k, free_port())
    try:
        verifier = load_verifier(args.model)
        # the control arm is the same Session code again, with its own drafter (A/A)
        sessions = {arm: Session(verifier, args.draft, GenerationOptions(k=args.k)) for arm in ARMS if arm != "server"}
        options = GenerationOptions(k=args.k, max_tokens=args.max_tokens)
        client = httpx.Client(timeout=3600)
        for s in sessions.values():
            in_process(s, options.replace(max_tokens=4), "Warm-up.")          # first-call costs
        through_server(client, url, "Warm-up.", 4, stream)
        rows = []
        prompts = PROMPTS[:max(1, min(args.prompts, len(PROMPTS)))]
        runs = [(r, j, p) for r in range(max(1, args.rounds)) for j, p in enumerate(prompts)]
        for i, (rnd, j, prompt) in enumerate(runs):
            order = ARMS[i % 3:] + ARMS[:i % 3]        # each arm first, second and third in turn
            got = {}
            for arm in order:
                if arm == "server":
                    got[arm] = through_server(client, url, prompt, args.max_tokens, stream)
                else:
                    got[arm] = in_process(sessions[arm], options, prompt)
            (ti, ni, si), (ts, ns, ss, engine_tps), (tc, nc, sc) = got["inproc"], got["server"], got["control"]
            row = {"round": rnd, "prompt": j, "order": list(order), "tokens": ni,
                   "inproc_s": round(si, 4), "server_s": round(ss, 4), "control_s": round(sc, 4),
                   "inproc_tps": round(ni / si, 3), "server_tps": round(ns / ss, 3),
                   "control_tps": round(nc / sc, 3), "server_engine_tps": engine_tps,
                   "ratio": round((ns / ss) / (ni / si), 4), "control_ratio": round((nc / sc) / (ni / si), 4),
                   "client_over_engine": round((ns / ss) / engine_tps, 4) if engine_tps else None,
                   "same_text": ti == ts == tc and ni == ns == nc}
            rows.append(row)
            print(f"round {rnd} prompt {j}: {ni} tokens  in-process {row['inproc_tps']:.2f} tok/s  server "
                  f"{row['server_tps']:.2f} (engine {engine_tps:.2f})  control {row['control_tps']:.2f}  "
                  f"server/in-process {row['ratio']:.3f}  control/in-process {row['control_ratio']:.3f}  "
                  f"{'same text' if row['same_text'] else 'TEXT DIFFERS'}  (order {', '.join(order)})", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)

    def total(arm):
        return sum(r["tokens"] for r in rows) / sum(r[f"{arm}_s"] for r in rows)

    summary = {"command": " ".join(["python"] + sys.argv), "server": command,
               "model": args.model, "draft": args.draft, "k": args.k, "max_tokens": args.max_tokens,
               "rounds": args.rounds, "stream": stream,
               "ratio_total": round(total("server") / total("inproc"), 4),
               "ratio_median": round(statistics.median(r["ratio"] for r in rows), 4),
               "control_ratio_total": round(total("control") / total("inproc"), 4),
               "control_ratio_median": round(statistics.median(r["control_ratio"] for r in rows), 4),
               "server_over_both_in_process": round(2 * total("server") / (total("inproc") + total("control")), 4),
               "client_over_engine_median": round(statistics.median(r["client_over_engine"] for r in rows), 4),
               "load_average": [load0, os.getloadavg()], "cpus": os.cpu_count(),
               "all_same_text": all(r["same_text"] for r in rows), "rows": rows}
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "server_vs_inprocess.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"server / in-process tokens/s: {summary['ratio_total']:.3f} over all tokens (median of the "
          f"runs {summary['ratio_median']:.3f}; target >= 0.95); outputs identical: "
          f"{'yes' if summary['all_same_text'] else 'NO'}")
    print(f"control (in-process again) / in-process: {summary['control_ratio_total']:.3f} (median "
          f"{summary['control_ratio_median']:.3f}): how far the same code drifts here; server over the "
          f"mean of both in-process arms: {summary['server_over_both_in_process']:.3f}")
    print(f"client tokens/s over the server's engine tokens/s (median): "
          f"{summary['client_over_engine_median']:.3f}; load average {load0} -> {os.getloadavg()} "
          f"on {os.cpu_count()} CPUs")
    return 0 if summary["all_same_text"] else 1


if __name__ == "__main__":
    sys.exit(main())

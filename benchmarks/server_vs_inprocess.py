"""Tokens/s through `serve` (HTTP, SSE, the worker queue) versus the in-process Session.

    python benchmarks/server_vs_inprocess.py [--model smollm2-135m] [--draft auto]
        [--max-tokens 48] [--prompts 6] [--no-stream]

Starts `python -m olifant_mlx serve` in a subprocess on a free loopback port, loads the same
verifier here, and runs the same prompts on both, interleaved (in-process first on even
prompts, the server first on odd ones) so drift on a shared machine falls on both alike,
after one warm-up each. The server is timed at the client, from sending the request to the
last byte of `data: [DONE]` (streamed, the default) or of the JSON answer; in-process, the
whole `Session.generate`. The texts must be equal. Prints per-prompt tokens/s and the ratio
server / in-process: over all tokens and time (the headline), and the median of the pairs.

On a machine shared with other work, wall-clock tokens/s swing with its load from one minute to
the next, so two more figures come with it: the ratio of CPU seconds per token (the server
process's, read from /proc, HTTP and event loop included, against this process's around
`generate`; Linux only), which the load barely moves, and the client's tokens/s over the
server's own engine figure (`usage.tokens_per_s`) in the same request, which isolates what the
HTTP path adds. Writes benchmarks/out/server_vs_inprocess.json.
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


def cpu_seconds(pid=None):
    """CPU seconds (user + system, all threads) of a process: this one, or `pid` from /proc."""
    if pid is None:
        return time.process_time()
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    c0, t0 = cpu_seconds(), time.perf_counter()
    r = session.generate(prompt, options)
    return r.text, r.stats.tokens, time.perf_counter() - t0, cpu_seconds() - c0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--draft", default="auto", help="drafter spec, the same on both sides (default auto)")
    ap.add_argument("-k", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"how many prompts (1-{len(PROMPTS)})")
    ap.add_argument("--no-stream", action="store_true", help="whole JSON answers instead of SSE")
    args = ap.parse_args()
    import httpx

    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.verifier import load_verifier

    stream = not args.no_stream
    load0 = os.getloadavg()
    proc, url, command = start_server(args.model, args.draft, args.k, free_port())
    try:
        session = Session(load_verifier(args.model), args.draft, GenerationOptions(k=args.k))
        options = GenerationOptions(k=args.k, max_tokens=args.max_tokens)
        client = httpx.Client(timeout=3600)
        in_process(session, options.replace(max_tokens=4), "Warm-up.")          # first-call costs
        through_server(client, url, "Warm-up.", 4, stream)
        rows = []
        for i, prompt in enumerate(PROMPTS[:max(1, min(args.prompts, len(PROMPTS)))]):
            order = ("inproc", "server") if i % 2 == 0 else ("server", "inproc")
            got = {}
            for side in order:
                if side == "inproc":
                    got[side] = in_process(session, options, prompt)
                else:
                    c0 = cpu_seconds(proc.pid)
                    got[side] = through_server(client, url, prompt, args.max_tokens, stream)
                    c1 = cpu_seconds(proc.pid)
                    got["server_cpu"] = None if c0 is None or c1 is None else c1 - c0
            (ti, ni, si, ci), (ts, ns, ss, engine_tps), cs = got["inproc"], got["server"], got["server_cpu"]
            row = {"prompt": i, "first": order[0], "tokens": ni, "inproc_s": round(si, 4),
                   "server_s": round(ss, 4), "inproc_tps": round(ni / si, 3), "server_tps": round(ns / ss, 3),
                   "server_engine_tps": engine_tps, "ratio": round((ns / ss) / (ni / si), 4),
                   "client_over_engine": round((ns / ss) / engine_tps, 4) if engine_tps else None,
                   "inproc_cpu_s": round(ci, 3), "server_cpu_s": None if cs is None else round(cs, 3),
                   "cpu_ratio": round(ci / cs, 4) if cs else None, "same_text": ti == ts and ni == ns}
            rows.append(row)
            cpu = f"  cpu ratio {row['cpu_ratio']:.3f}" if row["cpu_ratio"] else ""
            print(f"prompt {i}: {ni} tokens  in-process {row['inproc_tps']:.2f} tok/s  server "
                  f"{row['server_tps']:.2f} tok/s (engine {engine_tps:.2f})  ratio {row['ratio']:.3f}{cpu}  "
                  f"{'same text' if row['same_text'] else 'TEXT DIFFERS'}  ({order[0]} first)", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    tokens_i = sum(r["tokens"] for r in rows)
    ratio = (tokens_i / sum(r["server_s"] for r in rows)) / (tokens_i / sum(r["inproc_s"] for r in rows))
    cpu = [r for r in rows if r["cpu_ratio"]]
    cpu_ratio = sum(r["inproc_cpu_s"] for r in cpu) / sum(r["server_cpu_s"] for r in cpu) if cpu else None
    summary = {"command": " ".join(["python"] + sys.argv), "server": command,
               "model": args.model, "draft": args.draft, "k": args.k, "max_tokens": args.max_tokens,
               "stream": stream, "ratio_total": round(ratio, 4),
               "ratio_median": round(statistics.median(r["ratio"] for r in rows), 4),
               "cpu_ratio_total": None if cpu_ratio is None else round(cpu_ratio, 4),
               "client_over_engine_median": round(statistics.median(r["client_over_engine"] for r in rows), 4),
               "load_average": [load0, os.getloadavg()], "cpus": os.cpu_count(),
               "all_same_text": all(r["same_text"] for r in rows), "rows": rows}
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "server_vs_inprocess.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"server / in-process tokens/s: {summary['ratio_total']:.3f} over all tokens "
          f"(median of pairs {summary['ratio_median']:.3f}; target >= 0.95); outputs identical: "
          f"{'yes' if summary['all_same_text'] else 'NO'}")
    if cpu_ratio is not None:
        print(f"tokens per CPU second, server / in-process: {cpu_ratio:.3f}")
    print(f"client tokens/s over the server's engine tokens/s (median): "
          f"{summary['client_over_engine_median']:.3f}; load average {load0} -> {os.getloadavg()} "
          f"on {os.cpu_count()} CPUs")
    return 0 if summary["all_same_text"] else 1


if __name__ == "__main__":
    sys.exit(main())

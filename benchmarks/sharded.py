"""Speculative decoding on a sharded verifier, on this machine: plain vs speculative tokens/s,
what one step costs in communication, and the calculator's prediction of that cost.

    python benchmarks/sharded.py [--model smollm2-135m] [-n 3] [--sharded tensor]
        [--draft adaptive:hybrid:MODEL.olif] [-k 8] [-m 40] [--prompt TEXT] [--out FILE.json]
    python benchmarks/sharded.py --report FILE.json      # a saved run, reported again
    mlx.launch --hostfile hosts.json -- python benchmarks/sharded.py --worker --model M ...
                                                          # on a cluster: rank 0 prints RESULT {...}

It starts `mlx.launch --backend ring -n N` on localhost itself (every rank runs this file with
--worker) and reports, from rank 0:

- one plain and one speculative generation of the same prompt on the sharded verifier
  (tokens/s and their ratio; the outputs must be identical);
- the traffic of one verifier pass of g = 1..9 new tokens, counted by wrapping MLX's
  collectives (mx.distributed.all_sum, all_gather, send, recv_like) during real passes, and
  the time those collectives take alone on this group (the same shapes, replayed);
- olifant_mlx's own collectives per step (rank 0's drafts and choices) and their time;
- the sharded pass-cost curve (a g-token pass in 1-token passes, measured), and the
  calculator's (olifant_mlx.measure.calc): link latency and bandwidth fitted to all-reduces of
  several sizes, the model's collectives from pass_traffic, pass_comm_ms per g, and
  speedup_fast_path from the measured acceptance and that curve.

Several ranks on one box share its cores: the ratio and the traffic are what this measures;
the absolute times are this machine's, under its load, not a Mac cluster's.
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import olifant_mlx.mlx_setup  # noqa: F401  (OpenBLAS before MLX)

ROOT = Path(__file__).resolve().parent.parent

PROMPT = ("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, "
          "INCLUDING BUT NOT LIMITED TO")
GS = (1, 2, 4, 8)          # pass sizes measured (k = 8 verifies 8 drafts in one pass)
LAUNCH = "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())"   # mlx.launch
COUNTED = {}        # this rank's collectives per pass size, from count_job (replayed as they were)


# -- jobs every rank runs (rank 0 announces them with shard.everywhere) ---------------------

def count_job(verifier, prompt, gs):
    """The collectives of one KV-cached pass of g new tokens, by wrapping MLX's."""
    from olifant_mlx.engine.cache import make_cache, prefill
    from olifant_mlx.mlx_setup import mx

    d = mx.distributed
    seen = []
    originals = {name: getattr(d, name) for name in ("all_sum", "all_gather", "send", "recv_like")}

    def wrap(name, fn):
        def counted(x, *a, **kw):
            seen.append((name, list(x.shape), str(x.dtype), x.nbytes))
            return fn(x, *a, **kw)
        return counted

    model = verifier.model
    ids = verifier.encode(prompt)
    cache = make_cache(model)
    mx.eval(prefill(model, cache, ids))
    out = {}
    try:
        for name, fn in originals.items():
            setattr(d, name, wrap(name, fn))
        for g in gs:
            seen.clear()
            mx.eval(model(mx.array(ids[-g:])[None], cache=cache))
            from mlx_lm.models.cache import trim_prompt_cache

            trim_prompt_cache(cache, g)
            out[int(g)] = list(seen)
    finally:
        for name, fn in originals.items():
            setattr(d, name, fn)
    COUNTED.clear()
    COUNTED.update(out)
    return out


def replay_job(verifier, repeats):
    """Time this rank's collectives of each pass (count_job's) alone, on this group:
    {g: median ms}, with single all-reduces of several sizes and one of olifant_mlx's own."""
    from olifant_mlx.mlx_setup import mx

    shard = verifier.shard
    group = shard.group
    rank, size = shard.rank, shard.size
    out = {}
    for g, calls in sorted(COUNTED.items()):
        arrays = [mx.zeros(shape, dtype=getattr(mx, dtype.split(".")[-1])) for _, shape, dtype, _ in calls]
        mx.eval(arrays)
        times = []
        for _ in range(repeats):
            shard.barrier()
            t = time.perf_counter()
            for (name, _, _, _), x in zip(calls, arrays):
                if name == "all_sum":
                    mx.eval(mx.distributed.all_sum(x, group=group))
                elif name == "all_gather":
                    mx.eval(mx.distributed.all_gather(x, group=group))
                elif name == "send":      # the pipeline's stage boundaries: rank r -> r - 1
                    mx.eval(mx.distributed.send(x, (rank - 1) % size, group=group))
                elif name == "recv_like":
                    mx.eval(mx.distributed.recv_like(x, (rank + 1) % size, group=group))
            times.append((time.perf_counter() - t) * 1e3)
        out[g] = min(times)          # the least disturbed by the other processes on this box
    # single all-reduces of several sizes, for the link fit; and one of ours (SLOT int32)
    sizes = [verifier.model.args.hidden_size * 4 * t for t in (1, 8, 64, 512)]
    single = []
    for nbytes in sizes:
        x = mx.zeros((nbytes // 4,), dtype=mx.float32)
        mx.eval(x)
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            mx.eval(mx.distributed.all_sum(x, group=group))
            ts.append((time.perf_counter() - t) * 1e3)
        single.append((nbytes, size, min(ts)))
    ours = []
    for _ in range(repeats):
        t = time.perf_counter()
        shard.share_ints([1, 2, 3])
        ours.append((time.perf_counter() - t) * 1e3)
    return {"pass_ms": out, "all_reduce": single, "ours_ms": min(ours),
            "ours_median_ms": statistics.median(ours)}


HANDLERS = {"count": count_job, "replay": replay_job}


def default_draft(model) -> str:
    """Adaptive hybrid over the demo's draft model for this verifier (trained once, cached)."""
    from olifant_mlx.cli.generate import demo_draft_model
    from olifant_mlx.verifier import load_tokenizer

    _, path = demo_draft_model(load_tokenizer(model), model, ["builtin:licenses"])
    return f"adaptive:hybrid:{path}"


def command(args) -> int:
    """Rank 0 (or a single process): everything measured, one JSON line."""
    args.draft = args.draft or default_draft(args.model)
    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.measure.bench import calibrate
    from olifant_mlx.verifier import load_verifier

    v = load_verifier(args.model, shard=args.shard)
    shard = v.shard
    ranks = shard.size if shard else 1
    cfg = v.model.args
    res = {"verifier": v.name, "ranks": ranks, "mode": shard.mode if shard else None,
           "backend": shard.backend if shard else None, "draft": args.draft, "k": args.k,
           "max_tokens": args.max_tokens, "prompt": args.prompt,
           "hidden": cfg.hidden_size, "layers": cfg.num_hidden_layers, "gs": list(GS)}
    warm = GenerationOptions(k=0, max_tokens=3)
    Session(v, "none", warm).generate("Warm-up.")
    runs = res["runs"] = timed_runs(v, args)
    res["identical"] = runs["plain"]["tokens"] == runs["speculative"]["tokens"]
    res["speedup"] = runs["speculative"]["tokens_per_s"] / runs["plain"]["tokens_per_s"]
    res["traffic"] = traffic(v, args, ranks)
    if shard is not None:
        res.update(communication(v, args, ranks, res["traffic"][1]["bytes_each"]))
    cal = calibrate(v, args.prompt, max_new=max(GS), repeats=args.repeats)
    res["pass_ms"] = {int(g): ms for g, ms in cal["kv_ms"].items()}
    res["verify_costs_measured"] = {int(g): x for g, x in cal["kv_relative"].items()}
    predict(res, runs, args.k, shard is not None)
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def timed_runs(v, args) -> dict:
    """Plain, then speculative decoding of the prompt (or the other way round): each one's
    numbers, and the collectives and bytes our code sent per step."""
    from olifant_mlx.engine import GenerationOptions, Session

    shard, runs = v.shard, {}
    order = [("plain", "none", 0), ("speculative", args.draft, args.k)]
    for label, spec, k in (order if not args.speculative_first else order[::-1]):
        before = (shard.traffic.collectives, shard.traffic.bytes) if shard else (0, 0)
        r = Session(v, spec, GenerationOptions(k=k, max_tokens=args.max_tokens)).generate(args.prompt)
        st = r.stats
        after = (shard.traffic.collectives, shard.traffic.bytes) if shard else (0, 0)
        runs[label] = {"tokens": r.tokens, "n": st.tokens, "steps": st.steps,
                       "seconds": st.seconds, "decode_s": st.decode_s, "tokens_per_s": st.tokens_per_s,
                       "acceptance": st.acceptance, "drafted": st.drafted, "accepted": st.accepted,
                       "fast_path_steps": st.fast_path_steps, "draft_s": st.draft_s,
                       "forward_tokens": st.forward_tokens,
                       "our_collectives_per_step": (after[0] - before[0]) / max(st.steps, 1),
                       "our_bytes_per_step": (after[1] - before[1]) / max(st.steps, 1)}
        print(f"{label}: {st.tokens} tokens in {st.seconds:.1f} s ({st.tokens_per_s:.3f} tok/s), "
              f"{st.steps} passes, acceptance {st.acceptance:.0%}", file=sys.stderr, flush=True)
    return runs


def traffic(v, args, ranks: int) -> dict:
    """The collectives one pass of each length in GS makes (counted on every rank)."""
    from olifant_mlx.measure import calc

    shard, cfg = v.shard, v.model.args
    if shard is not None:
        shard.everywhere("count", prompt=args.prompt, gs=list(GS))
    counts = count_job(v, args.prompt, GS)
    return {g: {"collectives": len(c), "bytes_each": c[0][3] if c else 0,
                "kinds": sorted({x[0] for x in c}),
                "bytes_sent_per_rank": calc.pass_traffic(
                    g, cfg.hidden_size, cfg.num_hidden_layers, ranks, shard.mode if shard else "tensor",
                    c[0][3] // (g * cfg.hidden_size) if c else 4)["bytes"]}
            for g, c in counts.items()}


def communication(v, args, ranks: int, bytes_each: int) -> dict:
    """A sharded verifier's communication per pass, replayed on every rank, and the link model
    fitted to it."""
    from olifant_mlx.measure import calc

    shard, cfg = v.shard, v.model.args
    shard.everywhere("replay", repeats=args.repeats)
    rep = replay_job(v, args.repeats)
    lat, bw = calc.fit_link(rep["all_reduce"])
    dtype_bytes = bytes_each // cfg.hidden_size
    return {"comm_ms": {int(g): ms for g, ms in rep["pass_ms"].items()},
            "all_reduce_ms": rep["all_reduce"], "our_collective_ms": rep["ours_ms"],
            "link_fit": {"latency_ms": lat, "bytes_per_ms": bw},
            "comm_ms_predicted": {g: calc.pass_comm_ms(g, cfg.hidden_size, cfg.num_hidden_layers, ranks,
                                                       lat, bw, shard.mode, dtype_bytes, shared_values=0)
                                  for g in GS}}


def predict(res: dict, runs: dict, k_max: int, sharded: bool) -> None:
    """The verify costs a sharded pass would have, and the speedup the calculator gives from the
    measured (and those) costs, into `res`."""
    from olifant_mlx.measure import calc

    spec = runs["speculative"]
    if sharded:
        comm, pred = res["comm_ms"], res["comm_ms_predicted"]
        compute = {g: max(res["pass_ms"][g] - comm[g], 0.0) for g in GS}
        res["verify_costs_predicted"] = calc.sharded_verify_costs(compute, pred)
    if spec["drafted"] and k_max >= 1:
        alpha = calc.alpha_from_acceptance(min(spec["acceptance"], 1.0), k_max)
        plain_step = runs["plain"]["decode_s"] / max(runs["plain"]["steps"], 1)
        c = (spec["draft_s"] / max(spec["steps"], 1)) / plain_step / k_max
        k = k_max if k_max in GS else max(g for g in GS if g <= k_max)
        res["predicted_speedup"] = {
            "alpha": alpha, "c": c,
            "measured_curve": calc.speedup_fast_path(alpha, k_max, c, res["verify_costs_measured"][k]),
        }
        if "verify_costs_predicted" in res:
            res["predicted_speedup"]["predicted_curve"] = calc.speedup_fast_path(
                alpha, k_max, c, res["verify_costs_predicted"][k])


def derive(res) -> dict:
    """What follows from the measurements without running anything (again): the speedup a
    latency-bound link predicts, from the passes and the collectives per step alone (every
    collective costs the same, whatever its size), and the calculator's fast-path model with a
    flat curve (a k-token pass costs what a 1-token pass does)."""
    from olifant_mlx.measure import calc

    p, s = res["runs"]["plain"], res["runs"]["speculative"]
    model = res["traffic"]["1"]["collectives"] if "1" in res["traffic"] else res["traffic"][1]["collectives"]
    out = {"latency_bound": (p["steps"] * (model + p["our_collectives_per_step"]))
           / (s["steps"] * (model + s["our_collectives_per_step"]))}
    ps = res.get("predicted_speedup")
    if ps:
        out["flat_curve"] = calc.speedup_fast_path(ps["alpha"], res["k"], ps["c"], 1.0)
    return out


def worker(argv) -> int:
    from olifant_mlx.cli.sharding import add_sharding_args, run_sharded

    p = _parser()
    add_sharding_args(p)
    args = p.parse_args(argv)
    handlers = dict(HANDLERS, calibrate=lambda v, **kw: __import__(
        "olifant_mlx.measure.bench", fromlist=["calibrate"]).calibrate(v, **kw))
    return run_sharded(args, command, handlers=handlers)


def _parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--draft", default=None, help="drafter spec (default: adaptive:hybrid over "
                                                 "the demo's draft model)")
    p.add_argument("-k", type=int, default=8)
    p.add_argument("-m", "--max-tokens", type=int, default=40)
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--repeats", type=int, default=3, help="timings per pass size (the least is kept)")
    p.add_argument("--speculative-first", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main():
    if "--worker" in sys.argv[1:]:
        sys.exit(worker([a for a in sys.argv[1:] if a != "--worker"]))
    if sys.argv[1:2] == ["--report"]:       # a saved result, reported again
        res = json.loads(Path(sys.argv[2]).read_text())
        res["derived"] = derive(res)
        report(res)
        return
    p = _parser()
    p.add_argument("-n", "--ranks", type=int, default=3)
    p.add_argument("--sharded", choices=["tensor", "pipeline"], default=None)
    p.add_argument("--out", help="write the result as JSON here")
    p.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args()
    draft = args.draft or default_draft(args.model)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-c", LAUNCH, "--backend", "ring", "-n", str(args.ranks),
           "--starting-port", str(port), "--env", "OPENBLAS_NUM_THREADS=1", "--",
           sys.executable, str(Path(__file__).resolve()), "--worker", "--model", args.model,
           "--draft", draft, "-k", str(args.k), "-m", str(args.max_tokens), "--prompt", args.prompt,
           "--repeats", str(args.repeats)] + (["--sharded", args.sharded] if args.sharded else []) \
        + (["--speculative-first"] if args.speculative_first else [])
    t = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    sys.stderr.write("\n".join(x for x in proc.stderr.splitlines() if "[ring]" not in x) + "\n")
    if not lines:
        sys.exit(f"no result (mlx.launch exited {proc.returncode}):\n{proc.stdout[-2000:]}")
    res = json.loads(lines[-1][7:])
    res["wall_s"] = time.time() - t
    res = json.loads(json.dumps(res))       # keys as in the file
    res["derived"] = derive(res)
    report(res)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


def report(res):
    p, s = res["runs"]["plain"], res["runs"]["speculative"]
    print(f"{res['verifier']}, {res['mode']} parallel over {res['ranks']} ranks ({res['backend']}, "
          f"localhost), k={res['k']}, {res['draft']}")
    print(f"plain       {p['n']:4d} tokens {p['tokens_per_s']:8.3f} tok/s  {p['steps']:3d} passes")
    print(f"speculative {s['n']:4d} tokens {s['tokens_per_s']:8.3f} tok/s  {s['steps']:3d} passes, "
          f"acceptance {s['acceptance']:.1%}")
    print(f"speedup {res['speedup']:.2f}x (one run each); outputs identical: {res['identical']}")
    print(f"our collectives per step: plain {p['our_collectives_per_step']:.2f}, speculative "
          f"{s['our_collectives_per_step']:.2f} ({s['our_bytes_per_step']:.0f} bytes); one takes "
          f"{res.get('our_collective_ms', 0):.2f} ms")
    lf = res.get("link_fit")
    if lf:
        print(f"link fit: latency {lf['latency_ms']:.3f} ms per hop, {lf['bytes_per_ms'] / 1e3:.1f} MB/s")
    print(" g  collectives  bytes each  sent/rank   comm ms (meas)  comm ms (calc)  pass ms  cost (meas)  cost (calc)")
    for g in map(str, res["gs"]):
        t = res["traffic"][g]
        cm = res.get("comm_ms", {}).get(g)
        cp = res.get("comm_ms_predicted", {}).get(g)
        vp = res.get("verify_costs_predicted", {}).get(g)
        print(f"{g:>2}  {t['collectives']:11d}  {t['bytes_each']:10d}  {t['bytes_sent_per_rank']:9.0f}   "
              f"{cm if cm is not None else float('nan'):14.1f}  {cp if cp is not None else float('nan'):14.1f}  "
              f"{res['pass_ms'][g]:7.1f}  {res['verify_costs_measured'][g]:11.2f}  "
              f"{vp if vp is not None else float('nan'):11.2f}")
    ps = res.get("predicted_speedup")
    if ps:
        print(f"calculator: alpha {ps['alpha']:.3f}, c {ps['c']:.4f}: predicted speedup "
              f"{ps['measured_curve']:.2f}x with the measured cost curve"
              + (f", {ps['predicted_curve']:.2f}x with the calculated one" if "predicted_curve" in ps else "")
              + (f", {res['derived']['flat_curve']:.2f}x with a flat one"
                 if "flat_curve" in res.get("derived", {}) else ""))
    d = res.get("derived")
    if d:
        print(f"latency-bound link (every collective the same cost): passes x collectives predict "
              f"{d['latency_bound']:.2f}x")


if __name__ == "__main__":
    main()

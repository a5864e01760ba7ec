"""IGTree in C (olifant_mlx) versus TiMBL 6.5 (`timbl -a1`) on the same data, in one run.

    python benchmarks/igtree_vs_timbl.py [--train-instances 10000000] [--queries 250000]
                                         [--threads 1] [--compare-threads 2]
    python benchmarks/igtree_vs_timbl.py --latency-only    # query latencies again, same model

Data: the shared EUR-Lex-Sum corpus (../shared/corpora/legal), tokenised with the
Mistral-7B-v0.1 tokenizer; training = the first N windows of the train split (width 4,
documents padded), queries = a seeded sample of windows of the validation split.
Both systems train from the same prepared instances: TiMBL from its text instance
file, olifant from the same ids in a .npy file; each trains in a child process whose
CPU time and peak RSS come from wait4(). olifant builds once more with --compare-threads
threads (its model must be byte-identical) to show what threads buy in wall time.
Installs Debian's `timbl` when missing (root).
Prints the comparison table and writes JSON to benchmarks/out/.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from olifant_mlx.draftmodel.corpus import iter_documents, tokenized_batches, windows
from olifant_mlx.draftmodel.igtree import IGTree
from olifant_mlx.measure.processes import run_measured
from olifant_mlx.verifier import load_tokenizer

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))


def run_child(cmd, stdout_path=None):
    """Run cmd measured (measure.processes.run_measured); return (exit status, wall s, CPU s
    user+sys, peak RSS MB, stderr)."""
    if stdout_path:
        with open(stdout_path, "wb") as f:
            m = run_measured(cmd, stdout=f)
    else:
        m = run_measured(cmd, stdout=subprocess.DEVNULL)
    return m["code"], m["wall_s"], m["cpu_s"], m["peak_rss_mb"], m["stderr"].decode()


def ensure_timbl():
    if shutil.which("timbl"):
        return
    if os.geteuid() != 0:
        sys.exit("timbl is not installed: apt-get install timbl (needs root)")
    print("installing Debian's timbl ...", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "timbl"], check=True)


def windows_of(spec, tok, limit=None):
    ctx_parts, tgt_parts, n = [], [], 0
    for tokens, starts in tokenized_batches(iter_documents(spec), tok):
        c, t = windows(tokens, starts, 4, tok.vocab_size)
        ctx_parts.append(c)
        tgt_parts.append(t)
        n += t.size
        if limit and n >= limit:
            break
    ctx, tgt = np.concatenate(ctx_parts), np.concatenate(tgt_parts)
    return (ctx[:limit], tgt[:limit]) if limit else (ctx, tgt)


def write_instances(path, ctx, tgt, chunk=1_000_000):
    with open(path, "w") as f:
        for i in range(0, tgt.size, chunk):
            rows = np.column_stack([ctx[i:i + chunk], tgt[i:i + chunk]])
            np.savetxt(f, rows, fmt="%d", delimiter=" ")


BUILD_CHILD = """
import sys, numpy as np
from olifant_mlx.draftmodel.igtree import Builder
b = Builder(vocab_size=int(sys.argv[3]), window=4, threads=int(sys.argv[4]))
with open(sys.argv[1], "rb") as f:  # raw uint32 rows, read in 1M-row chunks
    while True:
        chunk = np.fromfile(f, dtype=np.uint32, count=5 << 20)
        if chunk.size == 0:
            break
        b.add_instances(chunk.reshape(-1, 5))
m = b.build()
m.save(sys.argv[2])
"""


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-instances", type=int, default=10_000_000)
    ap.add_argument("--queries", type=int, default=250_000)
    ap.add_argument("--work", default=str(ROOT / "benchmarks" / "out" / "igtree_vs_timbl"))
    ap.add_argument("--threads", type=int, default=1, help="olifant build threads (0: all CPUs)")
    ap.add_argument("--compare-threads", type=int, default=2,
                    help="a second olifant build with this many threads (0: skip)")
    ap.add_argument("--latency-only", action="store_true",
                    help="re-measure only the query latencies, on the model and queries in --work")
    return ap.parse_args()


def write_inputs(work: Path, tok, train_instances: int, queries: int):
    """The training windows (for both learners) and the held-out queries, written into `work`:
    (the queries' contexts, their targets, how many training instances)."""
    print("tokenising ...", file=sys.stderr)
    ctx, tgt = windows_of(str(SHARED / "corpora/legal/eurlexsum.train.txt.xz"), tok, train_instances)
    qctx_all, qtgt_all = windows_of(str(SHARED / "corpora/legal/eurlexsum.valid.txt.xz"), tok)
    pick = np.sort(np.random.default_rng(1).choice(qtgt_all.size, queries, replace=False))
    qctx, qtgt = qctx_all[pick], qtgt_all[pick]
    rows = np.column_stack([ctx, tgt]).astype(np.uint32)
    rows.tofile(work / "train.u32")
    write_instances(work / "train.inst", ctx, tgt)
    write_instances(work / "test.inst", qctx, qtgt)
    write_instances(work / "one.inst", qctx[:1], qtgt[:1])
    return qctx, qtgt, int(tgt.size)


def run_timbl(work: Path, n_train: int) -> dict:
    """TiMBL's training, its run over the queries and over one query (its load): each run's
    (wall, CPU, peak RSS)."""
    print(f"TiMBL training on {n_train:,} instances ...", file=sys.stderr)
    ib = work / "timbl.ibase"
    _, *train = run_child(["timbl", "-a1", "-f", str(work / "train.inst"), "-I", str(ib), "-p", "100000000"])
    if not ib.exists():
        sys.exit("TiMBL did not write its instance base")
    _, *test = run_child(["timbl", "-a1", "-i", str(ib), "-t", str(work / "test.inst"),
                          "-o", str(work / "timbl_test.out"), "+v", "di+md", "-p", "100000000"])
    _, *one = run_child(["timbl", "-a1", "-i", str(ib), "-t", str(work / "one.inst"), "-o", str(work / "one.out"),
                         "-p", "100000000"])
    return {"ibase": ib, "train": train[:3], "test": test[:3], "one": one[:3]}


def build_olifant(work: Path, vocab_size: int, threads: int, compare_threads: int):
    """The olifant build (and one with `compare_threads`, if any) in a child: ((wall, CPU, peak
    RSS), what the threaded build gave or None)."""
    print("olifant training ...", file=sys.stderr)
    code, o_wall, o_cpu, o_rss, err = run_child(
        [sys.executable, "-c", BUILD_CHILD, str(work / "train.u32"), str(work / "olifant.olif"), str(vocab_size),
         str(threads)])
    if code != 0:
        sys.exit(f"olifant build failed: {err}")
    if not compare_threads:
        return (o_wall, o_cpu, o_rss), None
    other = work / "olifant_threads.olif"
    code, t2_wall, t2_cpu, t2_rss, err = run_child(
        [sys.executable, "-c", BUILD_CHILD, str(work / "train.u32"), str(other),
         str(vocab_size), str(compare_threads)])
    if code != 0:
        sys.exit(f"olifant build with {compare_threads} threads failed: {err}")
    return (o_wall, o_cpu, o_rss), {"threads": compare_threads, "train_cpu_s": round(t2_cpu, 2),
                                    "train_wall_s": round(t2_wall, 2), "train_peak_rss_mb": round(t2_rss),
                                    "same_model": other.read_bytes() == (work / "olifant.olif").read_bytes()}


def mismatches(ans, lines) -> dict:
    """How many of olifant's predictions differ from TiMBL's output lines: class, depth, leaf
    flag, distance."""
    mism = {"class": 0, "depth": 0, "leaf": 0, "distance": 0}
    for a, line in zip(ans, lines):
        f = line.split()
        pred, dist, (depth, flag) = int(f[5]), float(f[6]), f[7].split(":")
        mism["class"] += pred != int(a["token"])
        mism["depth"] += int(depth) != int(a["depth"])
        mism["leaf"] += (flag == "L") != bool(a["leaf"])
        mism["distance"] += abs(dist - a["distance"]) > 1e-9 * max(1.0, abs(dist))
    return {k: int(v) for k, v in mism.items()}


def main():
    args = parse_args()
    if args.latency_only:
        return remeasure(Path(args.work))
    ensure_timbl()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer("mistral")
    qctx, qtgt, n_train = write_inputs(work, tok, args.train_instances, args.queries)
    timbl = run_timbl(work, n_train)
    (t_wall, t_cpu, t_rss), (_, c_cpu, _), (_, l_cpu, l_rss) = timbl["train"], timbl["test"], timbl["one"]
    ib, model_path = timbl["ibase"], work / "olifant.olif"
    (o_wall, o_cpu, o_rss), threaded = build_olifant(work, tok.vocab_size, args.threads, args.compare_threads)
    t0 = time.perf_counter()
    model = IGTree.load(model_path)
    o_load = time.perf_counter() - t0
    # predictions: class, depth, leaf flag, distance
    ans = model.predict_batch(qctx)
    lines = (work / "timbl_test.out").read_text().splitlines()
    mism, compared = mismatches(ans, lines), min(len(lines), len(ans))

    # latency: C (one batch call over shuffled queries) and one Python call per query
    shuffled = np.ascontiguousarray(qctx[np.random.default_rng(2).permutation(qtgt.size)])
    best_c, cpu_c = latency(lambda: model.predict_batch(shuffled), 5, qtgt.size)
    best_py, cpu_py = python_call_latency(model, shuffled[:50_000])
    acc = float(np.mean(ans["token"] == qtgt))

    timbl_size = ib.stat().st_size + (Path(str(ib) + ".wgt").stat().st_size if Path(str(ib) + ".wgt").exists() else 0)
    timbl_query_us = (c_cpu - l_cpu) / qtgt.size * 1e6
    res = {
        "corpus": "shared/corpora/legal (EUR-Lex-Sum), Mistral-7B-v0.1 tokens, window 4",
        "olifant_threads": args.threads, "olifant_compare_threads": threaded,
        "train_instances": n_train, "queries": int(qtgt.size), "compared": compared,
        "mismatches": mism, "heldout_accuracy": round(acc, 4), "olifant_nodes": model.n_nodes,
        "timbl": {"train_cpu_s": round(t_cpu, 1), "train_wall_s": round(t_wall, 1),
                  "train_peak_rss_mb": round(t_rss), "model_bytes": timbl_size,
                  "load_cpu_s": round(l_cpu, 2), "loaded_rss_mb": round(l_rss),
                  "query_cpu_us": round(timbl_query_us, 2)},
        "olifant": {"train_cpu_s": round(o_cpu, 2), "train_wall_s": round(o_wall, 2),
                    "train_peak_rss_mb": round(o_rss), "model_bytes": model.file_size,
                    "load_s": round(o_load, 4),
                    "query_c_us": round(best_c * 1e6, 3), "query_python_call_us": round(best_py * 1e6, 2),
                    "query_c_cpu_us": round(cpu_c * 1e6, 3), "query_python_call_cpu_us": round(cpu_py * 1e6, 2)},
        "load1_after": round(os.getloadavg()[0], 2),
    }
    res["olifant"]["load_s_fresh_process"] = round(float(_child_stdout(model_path)), 4)
    res["speedup_train_cpu"] = round(t_cpu / o_cpu, 1)
    res["memory_ratio_train"] = round(o_rss / t_rss, 3)
    (work / "result.json").write_text(json.dumps(res, indent=2))
    print_table(res)
    print(json.dumps(res))


def _child_stdout(model_path):
    r = subprocess.run([sys.executable, "-c",
                        "import sys,time;from olifant_mlx.draftmodel.igtree import IGTree;"
                        "t=time.perf_counter();IGTree.load(sys.argv[1]);"
                        "print(time.perf_counter()-t)", str(model_path)],
                       capture_output=True, text=True, check=True)
    return r.stdout.strip()


def latency(fn, repeat: int, n: int) -> tuple:
    """Best wall and best CPU (this process) seconds per item of `repeat` runs of fn over n
    items: on a shared machine the CPU time is the one that does not move with the load."""
    walls, cpus = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls) / n, min(cpus) / n


def python_call_latency(model, queries) -> tuple:
    """One Python call per query (predict_token on a list of ids): best wall, best CPU s each."""
    qlist = queries.tolist()
    predict = model.predict_token
    return latency(lambda: [predict(q) for q in qlist], 3, len(qlist))


def remeasure(work: Path) -> None:
    """--latency-only: the query latencies again, on the model and queries of the last run."""
    model = IGTree.load(work / "olifant.olif")
    q = np.loadtxt(work / "test.inst", dtype=np.uint32)[:, :model.window]
    shuffled = np.ascontiguousarray(q[np.random.default_rng(2).permutation(q.shape[0])])
    c, c_cpu = latency(lambda: model.predict_batch(shuffled), 5, q.shape[0])
    py, py_cpu = python_call_latency(model, shuffled[:50_000])
    print(json.dumps({"query_c_us": round(c * 1e6, 3), "query_c_cpu_us": round(c_cpu * 1e6, 3),
                      "query_python_call_us": round(py * 1e6, 2),
                      "query_python_call_cpu_us": round(py_cpu * 1e6, 2),
                      "load1": round(os.getloadavg()[0], 2)}))


def print_table(r):
    from rich.console import Console
    from rich.table import Table

    t, o = r["timbl"], r["olifant"]
    tab = Table(title=f"IGTree: olifant (C) vs TiMBL 6.5 -a1 — {r['train_instances']:,} training "
                      f"instances, {r['queries']:,} held-out queries")
    tab.add_column("measure")
    tab.add_column("TiMBL", justify="right")
    tab.add_column("olifant", justify="right")
    tab.add_column("ratio", justify="right")
    m = r["mismatches"]
    tab.add_row("prediction mismatches (class/depth/leaf/distance)", "-",
                f"{m['class']}/{m['depth']}/{m['leaf']}/{m['distance']} of {r['compared']:,}", "")
    tab.add_row("training CPU s", f"{t['train_cpu_s']}", f"{o['train_cpu_s']}",
                f"{t['train_cpu_s'] / o['train_cpu_s']:.1f}x faster")
    tab.add_row("training peak RSS MB", f"{t['train_peak_rss_mb']}", f"{o['train_peak_rss_mb']}",
                f"{o['train_peak_rss_mb'] / t['train_peak_rss_mb']:.2f}")
    tab.add_row("model size on disk MB", f"{t['model_bytes'] / 1e6:.1f}", f"{o['model_bytes'] / 1e6:.1f}",
                f"{o['model_bytes'] / t['model_bytes']:.2f}")
    tab.add_row("load s (TiMBL CPU; olifant read + validate, fresh process)", f"{t['load_cpu_s']}",
                f"{o['load_s_fresh_process']}", "")
    tab.add_row("query µs (TiMBL CLI CPU; olifant C wall / CPU)", f"{t['query_cpu_us']}",
                f"{o['query_c_us']} / {o.get('query_c_cpu_us', '-')}", "")
    tab.add_row("query µs, one Python call (wall / CPU)", "11–52 (anchor, python3-timbl)",
                f"{o['query_python_call_us']} / {o.get('query_python_call_cpu_us', '-')}", "")
    tab.add_row("held-out next-token accuracy", "", f"{r['heldout_accuracy']:.2%}", "")
    c = r.get("olifant_compare_threads")
    if c:
        tab.add_row(f"olifant training, {r['olifant_threads']} vs {c['threads']} threads: CPU s",
                    "", f"{o['train_cpu_s']} / {c['train_cpu_s']}", "")
        tab.add_row(f"olifant training, {r['olifant_threads']} vs {c['threads']} threads: wall s",
                    "", f"{o['train_wall_s']} / {c['train_wall_s']}",
                    "same model" if c["same_model"] else "MODELS DIFFER")
    Console().print(tab)


if __name__ == "__main__":
    main()

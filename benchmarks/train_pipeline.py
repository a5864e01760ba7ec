"""End-to-end `train`: tokens/s, where the time goes, and 1 vs 2 tokeniser workers.

    python benchmarks/train_pipeline.py [--corpus PATH] [--tokenizer mistral] [--workers 0 1 2]
        [--baseline DIR] [--repeat 2] [--tokenise-only]

Each run is `python -m olifant_mlx train --corpus PATH --tokenizer T --out TMP --json --quiet
[--workers N]` in a fresh process; wall time, CPU time (user + sys) and peak RSS come from the
child's own rusage (os.wait4), the phases from its JSON summary. `--baseline DIR` also runs a
source tree of an earlier commit (e.g. `git archive dcf565f | tar -x -C DIR`, with the built
extension copied in) as "before"; its summary has no phase split, so `phases` measures that
apart for any tree: reading alone (iter_documents), then tokenising the documents read (the
tokenizer's own encode_batch, in batches as train makes them), then the build.
`--tokenise-only` compares ways to parallelise tokenising on documents already in memory:
inline, N threads (ordered_map, as train does) and N worker processes.

The machine may be shared: the 1-minute load average before and after every run is recorded
with it. Writes benchmarks/out/train_pipeline.json.
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from olifant_mlx.measure.processes import load1, run_child

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))
DEFAULT_CORPUS = SHARED / "corpora/legal/eurlexsum.train.txt.xz"

PHASES = r"""
import json, sys, time
from olifant_mlx.draftmodel.corpus import iter_documents
from olifant_mlx.draftmodel.igtree import Builder
from olifant_mlx.verifier import load_tokenizer
spec, tokenizer = sys.argv[1], sys.argv[2]
tok = load_tokenizer(tokenizer)
out = {}
def phase(name, fn):
    t, c = time.perf_counter(), time.process_time()   # CPU of all threads: load-independent
    r = fn()
    out[name + "_s"] = round(time.perf_counter() - t, 2)
    out[name + "_cpu_s"] = round(time.process_time() - c, 2)
    return r
docs = phase("read", lambda: list(iter_documents(spec)))
try:
    from olifant_mlx.draftmodel.corpus import text_batches
    batches = list(text_batches(docs))
except ImportError:                       # before the streaming pipeline: 256 documents a batch
    batches = [docs[i:i + 256] for i in range(0, len(docs), 256)]
ids = phase("tokenise", lambda: [i for b in batches for i in tok.encode_batch(b)])
b = Builder(vocab_size=tok.vocab_size)
for i in ids:
    b.add_document(i)
phase("build", b.build)
print(json.dumps({"documents": len(docs), "tokens": sum(map(len, ids)), **out}))
"""

TOKENISE = r"""
import json, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from olifant_mlx.draftmodel.corpus import encode_texts, iter_documents, ordered_map, text_batches
from olifant_mlx.verifier import load_tokenizer
spec, tokenizer, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
tok = load_tokenizer(tokenizer)
batches = list(text_batches(iter_documents(spec)))
_worker_tok = None
def encode_in_worker(texts):
    global _worker_tok
    if _worker_tok is None:
        _worker_tok = load_tokenizer(tokenizer)
    return encode_texts(_worker_tok, texts)
def run(name, count):
    t, c0 = time.perf_counter(), os.times()
    n = count()
    c1 = os.times()                       # children's CPU counts once they are reaped
    cpu = sum(c1[i] - c0[i] for i in range(4))
    out[name] = {"tokens": int(n), "wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(cpu, 2)}
def total(results):
    return sum(tokens.size for tokens, _ in results)
def in_processes():
    with ProcessPoolExecutor(workers) as pool:
        return total(pool.map(encode_in_worker, batches))
out = {}
run("inline", lambda: total(encode_texts(tok, b) for b in batches))
run(f"threads_{workers}", lambda: total(ordered_map(lambda b: encode_texts(tok, b), batches, workers)))
run(f"processes_{workers}", in_processes)
print(json.dumps(out))
"""


def train_run(corpus, tokenizer, workers=None, tree=None) -> dict:
    with tempfile.TemporaryDirectory() as d:
        argv = [sys.executable, "-m", "olifant_mlx", "train", "--corpus", str(corpus), "--tokenizer",
                tokenizer, "--out", str(Path(d) / "m.olif"), "--json", "--quiet"]
        if workers is not None:
            argv += ["--workers", str(workers)]
        before = load1()
        out, usage = run_child(argv, tree)
    s = json.loads(out)
    tokens = s.get("tokens", s["instances"])
    keep = ("read_tokenize_s", "read_s", "tokenize_s", "feed_s", "build_s", "load_s")
    return {"tree": str(tree) if tree else "this checkout", "workers": workers, "tokens": tokens,
            **usage, "tokens_per_s": round(tokens / usage["wall_s"]),
            **{k: s[k] for k in keep if k in s}, "load1_before": before, "load1_after": load1()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    ap.add_argument("--tokenizer", default="mistral")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--baseline", help="source tree of an earlier commit, run as 'before'")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tokenise-only", action="store_true")
    ap.add_argument("--no-phases", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/out/train_pipeline.json"))
    args = ap.parse_args()
    result = {"corpus": args.corpus, "tokenizer": args.tokenizer, "cpus": os.cpu_count(),
              "runs": [], "phases": []}
    for _ in range(args.repeat):          # interleaved, so a busy spell hits every variant
        if args.baseline:
            result["runs"].append(train_run(args.corpus, args.tokenizer, tree=args.baseline))
            print(json.dumps(result["runs"][-1]), flush=True)
        for w in args.workers:
            result["runs"].append(train_run(args.corpus, args.tokenizer, w))
            print(json.dumps(result["runs"][-1]), flush=True)
    if not args.no_phases:
        for tree in ([args.baseline] if args.baseline else []) + [None]:
            out, usage = run_child([sys.executable, "-c", PHASES, args.corpus, args.tokenizer], tree)
            result["phases"].append({"tree": tree or "this checkout", **json.loads(out), **usage,
                                     "load1_after": load1()})
            print(json.dumps(result["phases"][-1]), flush=True)
    if args.tokenise_only:
        w = max(args.workers)
        out, usage = run_child([sys.executable, "-c", TOKENISE, args.corpus, args.tokenizer, str(w)])
        result["tokenise_only"] = {**json.loads(out), "load1_after": load1()}
        print(json.dumps(result["tokenise_only"]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

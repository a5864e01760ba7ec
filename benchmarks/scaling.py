"""Draft-model scaling: acceptance versus corpus size and model size.

    python benchmarks/scaling.py [--tokenizer smollm2-135m] [--sizes 1000000 4000000 0] [--prompts 20]

Trains olifant draft models on growing prefixes of the shared legal train split (0 = all of it)
and on legal + medical combined, then measures each one's acceptance and mean accepted length
at k = 3 and 8 against the real continuations of held-out legal and medical documents
(`bench --verifier reference`: a simulated verifier, no speed is claimed). Prints a table and
writes benchmarks/out/scaling.json.
"""
import argparse
import json
import os
import tempfile
from pathlib import Path

from olifant_mlx.drafters import OlifantDrafter
from olifant_mlx.draftmodel.igtree import IGTree
from olifant_mlx.draftmodel.train import train
from olifant_mlx.measure.bench import ReferenceRunner, aggregate, continuations_of, read_prompts, sweep
from olifant_mlx.verifier import load_tokenizer

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))
C = SHARED / "corpora"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default="smollm2-135m")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 4_000_000, 0])
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=100)
    args = ap.parse_args()
    tok = load_tokenizer(args.tokenizer)
    out_dir = ROOT / "benchmarks" / "out" / "scaling"
    out_dir.mkdir(parents=True, exist_ok=True)
    models = {}
    for n in args.sizes:
        path = out_dir / f"legal-{n or 'all'}.olif"
        if not path.is_file():
            train([str(C / "legal/eurlexsum.train.txt.xz")], tok, path, max_tokens=n or None,
                  show_progress=False)
        models[f"legal {n / 1e6:.0f}M" if n else "legal all"] = path
    both = out_dir / "legal+medical.olif"
    if not both.is_file():
        train([str(C / "legal/eurlexsum.train.txt.xz"), str(C / "medical/sumpubmed.train.txt.xz")],
              tok, both, show_progress=False)
    models["legal+medical"] = both
    tasks = {}
    for task, valid in (("legal", "legal/eurlexsum.valid.txt.xz"), ("medical", "medical/sumpubmed.valid.txt.xz")):
        prompts = read_prompts(str(C / task / "prompts.dev.jsonl"))[: args.prompts]
        tasks[task] = (prompts, continuations_of(prompts, str(C / valid)))
    results = []
    for name, path in models.items():
        m = IGTree.load(path)
        for task, (prompts, conts) in tasks.items():
            ref = ReferenceRunner(tok, conts)
            with tempfile.TemporaryDirectory() as tmp:
                rows = sweep(ref, {task: prompts}, {"olifant": OlifantDrafter(m)}, [3, 8], ["kv"],
                             args.max_tokens, Path(tmp) / "r.jsonl")
            for c in aggregate(rows):
                if c["strategy"] == "olifant":
                    results.append({"model": name, "train_tokens": m.n_instances, "nodes": m.n_nodes,
                                    "file_mb": round(m.file_size / 1e6, 1), "task": task, "k": c["k"],
                                    "acceptance": round(c["acceptance"], 4),
                                    "mean_accepted_length": round(c["mean_accepted_length"], 3)})
    (ROOT / "benchmarks" / "out" / "scaling.json").write_text(json.dumps(results, indent=2))
    print("| model | train tokens | nodes | file MB | task | k | acceptance | MAL |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['model']} | {r['train_tokens']:,} | {r['nodes']:,} | {r['file_mb']} | {r['task']} | "
              f"{r['k']} | {r['acceptance']:.1%} | {r['mean_accepted_length']:.2f} |")


if __name__ == "__main__":
    main()

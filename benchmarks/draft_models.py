"""Train a draft model per shared corpus and print held-out next-token accuracy.

    python benchmarks/draft_models.py [--tokenizer mistral] [--max-tokens N] [--out-dir models/]

Each domain trains on its train split and is scored on its validation split
(documents never shared between the two), with the verifier's tokenizer
(Mistral-7B-v0.1 by default). Prints a table and writes benchmarks/out/draft_models.json.
"""
import argparse
import json
import os
from pathlib import Path

from olifant_mlx.verifier import load_tokenizer
from olifant_mlx.draftmodel.train import train

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))
DOMAINS = {
    "legal": ("legal/eurlexsum.train.txt.xz", "legal/eurlexsum.valid.txt.xz"),
    "medical": ("medical/sumpubmed.train.txt.xz", "medical/sumpubmed.valid.txt.xz"),
    "general": ("general/general.train.txt.xz", "general/wikitext103.valid.txt.xz"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default="mistral")
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("--out-dir", default=str(ROOT / "models"))
    ap.add_argument("--domains", nargs="+", default=list(DOMAINS))
    args = ap.parse_args()
    tok = load_tokenizer(args.tokenizer)
    results = {}
    for name in args.domains:
        tr, va = DOMAINS[name]
        out = Path(args.out_dir) / f"{name}.{tok.name}.olif"
        results[name] = train([str(SHARED / "corpora" / tr)], tok, out, max_tokens=args.max_tokens,
                              eval_specs=[str(SHARED / "corpora" / va)], show_progress=True)
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Olifant draft models, tokenizer {tok.name}: held-out next-token accuracy")
    for col in ("domain", "train tokens", "nodes", "file MB", "build s", "eval split",
                "eval tokens", "accuracy"):
        t.add_column(col, justify="left" if col in ("domain", "eval split") else "right")
    for name, s in results.items():
        (spec, e), = s["eval"].items()
        t.add_row(name, f"{s['instances']:,}", f"{s['nodes']:,}", f"{s['file_bytes'] / 1e6:.1f}",
                  f"{s['build_s']:.1f}", Path(spec).name, f"{e['instances']:,}", f"{e['accuracy']:.2%}")
    Console().print(t)
    out = ROOT / "benchmarks" / "out" / "draft_models.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

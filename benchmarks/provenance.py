"""Provenance cost: milliseconds per 1,000 output tokens to find every verbatim span of an
output in a library, in C (the suffix index's matching statistics) against a Python
brute-force search (numpy: every occurrence of each position's first id, narrowed id by id),
both in this process, on the same texts, over rounds.

    python benchmarks/provenance.py                       # the legal validation split, SmolLM2 tokens
    python benchmarks/provenance.py --docs 60 --rounds 3

The library is built once (library.build, as `library build`) from the split's documents but
the last `--fresh` ones, in OUT_DIR/cache (reused when present). Each output text is 1,000
tokens of a fresh document with library passages of 5..80 tokens spliced in (about a third
copied). Prints one JSON object: the library's size, the load average before and after, and
per method the median and range over the rounds of ms per 1,000 tokens; `find_sources` adds
the Source and Place records to the C pass.
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import random
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))


def documents(path: Path, count: int) -> list[str]:
    docs, lines = [], []
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line.rstrip("\n"))
            elif lines:
                docs.append("\n".join(lines))
                lines = []
                if len(docs) == count:
                    break
    return docs + (["\n".join(lines)] if lines and len(docs) < count else [])


def brute_ms(text: np.ndarray, at: dict, out) -> list[int]:
    """The matching statistics by scanning: for each position, the occurrences of its first id,
    narrowed by each next id until none is left."""
    ms = []
    for i in range(len(out)):
        cand, length = at.get(int(out[i]), np.zeros(0, np.int64)), 0
        while cand.size:
            length += 1
            if i + length == len(out):
                break
            cand = cand[text[np.minimum(cand + length, len(text) - 1)] == out[i + length]]
        ms.append(length)
    return ms


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=187, help="documents of the split read (default: all 187)")
    ap.add_argument("--fresh", type=int, default=12, help="of them kept out of the library (default 12)")
    ap.add_argument("--texts", type=int, default=10, help="output texts of 1,000 tokens (default 10)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--brute-texts", type=int, default=2, help="texts the brute force runs on (default 2)")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out" / "provenance")
    return ap.parse_args(argv)


def library_of(name, texts, out_dir: Path, tok):
    """The library of `texts` (built into the cache the first time): (it, seconds the build took
    or None)."""
    from olifant_mlx import library

    try:
        return library.load(name), None
    except library.LibraryError:
        folder = out_dir / "acts"
        folder.mkdir(parents=True, exist_ok=True)
        for k, t in enumerate(texts):
            (folder / f"act{k:03d}.txt").write_text(t.replace("\n", "\n\n") + "\n")
        t0 = time.perf_counter()
        library.build(name, folder, tok)
        return library.load(name), round(time.perf_counter() - t0, 1)


def outputs(li, fresh, count: int, rng) -> list:
    """`count` outputs of 1,000 tokens: fresh text with spans of the library between."""
    outs = []
    for _ in range(count):
        f = rng.choice([x for x in fresh if len(x) > 1200])
        at, out = rng.randrange(len(f) - 1200), []
        while len(out) < 1000:
            out += f[at:at + rng.randrange(10, 60)]
            at += 60
            row = rng.choice(li.indexed)
            n = rng.randrange(5, 80)
            s = row["start"] + rng.randrange(max(row["tokens"] - n, 1))
            out += [int(t) for t in li.stream[s:s + n]]
        outs.append(np.asarray(out[:1000], dtype=np.uint32))
    return outs


def timed(fn, items, rounds: int) -> dict:
    """Milliseconds per 1,000 output tokens of `fn` over `items`, `rounds` times."""
    per_round = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for o in items:
            fn(o)
        per_round.append((time.perf_counter() - t0) * 1000 / (sum(len(o) for o in items) / 1000))
    return {"median_ms_per_1k": round(statistics.median(per_round), 3),
            "min": round(min(per_round), 3), "max": round(max(per_round), 3),
            "rounds": rounds, "tokens_per_round": sum(len(o) for o in items)}


def brute_index(li):
    """The library's documents as one array (-1 between them) and each token's positions in it."""
    parts = []
    for row in li.indexed:
        parts += [li.stream[row["start"]:row["start"] + row["tokens"]].astype(np.int64), np.array([-1])]
    text = np.concatenate(parts)
    order = np.argsort(text, kind="stable")
    ids, first = np.unique(text[order], return_index=True)
    return text, {int(t): order[a:b] for t, a, b in zip(ids, first, list(first[1:]) + [len(order)])}


def main(argv=None) -> int:
    args = parse_args(argv)
    from olifant_mlx.verifier import load_tokenizer
    tok = load_tokenizer("smollm2-135m")             # from the shared cache, before $OLIFANT_CACHE moves
    cache = args.out_dir / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    os.environ["OLIFANT_CACHE"] = str(cache)
    from olifant_mlx.provenance import find_sources, index_of

    texts = documents(SHARED / "corpora" / "legal" / "eurlexsum.valid.txt.xz", args.docs)
    name = f"legal-valid-{len(texts) - args.fresh}"
    lib, built_s = library_of(name, texts[:-args.fresh], args.out_dir, tok)
    li = index_of(lib)
    outs = outputs(li, [tok.encode(t) for t in texts[-args.fresh:]], args.texts, random.Random(1))
    total = sum(len(o) for o in outs)

    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = {"c_matching_stats": timed(li.index.matching_stats, outs, args.rounds),
            "find_sources": timed(lambda o: find_sources(li, o), outs, args.rounds)}
    text, at = brute_index(li)
    brute = outs[:args.brute_texts]
    assert all(brute_ms(text, at, o) == li.index.matching_stats(o)["length"].tolist() for o in brute)
    rows["python_brute_force"] = timed(lambda o: brute_ms(text, at, o), brute, min(args.rounds, 2))
    print(json.dumps({"library": name, "documents": len(li.indexed), "library_tokens": int(li.index.n_tokens),
                      "build_s": built_s, "texts": len(outs), "output_tokens": total,
                      "load_average_before": load_before,
                      "load_average_after": [round(x, 2) for x in os.getloadavg()],
                      "methods": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

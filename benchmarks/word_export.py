"""The Word export's time against the text's length (issue 45 item 11): `exports.docx_bytes` over
one text block of N lines, without copied marks and with one mark on every line, in this
process. Linear export keeps seconds per 10,000 lines flat as N grows.

    python benchmarks/word_export.py                       # 5,000, 10,000 and 20,000 lines
    python benchmarks/word_export.py --lines 1000 40000

Prints one JSON object; the figures in docs/robustness.md come from it.
"""
from __future__ import annotations

import argparse
import json
import os
import time

from olifant_mlx.exports import docx_bytes


def text_and_marks(lines: int) -> tuple[str, list]:
    """`lines` lines of a clause, and one copied mark inside each (characters 10 to 40)."""
    line = "The supplier shall deliver the goods to the warehouse within thirty days of the order."
    text = "\n".join(f"{i}. {line}" for i in range(lines))
    marks, pos = [], 0
    for part in text.split("\n"):
        marks.append((pos + 10, pos + 40))
        pos += len(part) + 1
    return text, marks


def measure(lines: int, marked: bool) -> dict:
    text, marks = text_and_marks(lines)
    t0 = time.perf_counter()
    data = docx_bytes("Export", [("text", text, marks if marked else [])], [])
    took = time.perf_counter() - t0
    return {"lines": lines, "marks": len(marks) if marked else 0, "seconds": round(took, 2),
            "s_per_10k_lines": round(took * 10_000 / lines, 2), "bytes": len(data)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, nargs="+", default=[5_000, 10_000, 20_000])
    args = ap.parse_args()
    load = os.getloadavg()
    rows = [measure(n, marked) for n in args.lines for marked in (False, True)]
    print(json.dumps({"rows": rows, "load_average_before": [round(x, 2) for x in load],
                      "load_average_after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()},
                     indent=1))


if __name__ == "__main__":
    main()

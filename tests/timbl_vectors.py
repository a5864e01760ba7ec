"""Read TiMBL's IGTree test vectors (shared/timbl-vectors) into id arrays."""
import csv

import numpy as np


class Interner:
    """One id space for feature and class strings, in first-appearance order."""

    def __init__(self):
        self.ids, self.strings = {}, []

    def add(self, s):
        if s not in self.ids:
            self.ids[s] = len(self.strings)
            self.strings.append(s)
        return self.ids[s]


def load_set(root, name):
    vec = root / "timbl-vectors"
    interner = Interner()
    rows = [[interner.add(f) for f in line.split()]
            for line in (vec / f"{name}_train.inst").read_text().splitlines() if line.strip()]
    vocab = len(interner.strings)
    unknown = vocab + 1  # never matches any level
    with open(vec / f"{name}_expected.tsv", newline="") as f:
        expected = list(csv.DictReader(f, delimiter="\t"))
    queries = [[interner.ids.get(r[c], unknown) for c in ("t1", "t2", "t3", "t4")] for r in expected]
    return interner, np.array(rows, dtype=np.uint32), vocab, np.array(queries, dtype=np.uint32), expected


def expected_nodes(root, name):
    for line in (root / "timbl-vectors" / f"{name}_train.log").read_text().splitlines():
        if line.startswith("Size of InstanceBase"):
            return int(line.split("=")[1].split()[0])
    raise ValueError("no node count in log")

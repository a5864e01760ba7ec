"""Apple's IOReport "Energy Model" channels: which rows make which domain, in joules.

Pure Python, so the rules are tested on Linux with recorded traces: `ioreport` feeds it rows read
through CoreFoundation, `replay` rows read from a JSON trace. Rules as in macmon and
zeus-apple-silicon: `CPU Energy` already totals the CPU (per-core and per-cluster rows are parts
of it and are ignored); Ultra chips prefix rows with `DIE_n_`, and dies, ANE and DRAM instances
are summed; every row carries its own unit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

GROUP = "Energy Model"
DOMAINS = ("cpu", "gpu", "ane", "dram", "gpu_sram")
HEADLINE = ("cpu", "gpu", "ane")   # powermetrics' "combined power", the paper's total
SCOPE = "SoC CPU+GPU+ANE"
UNIT_J = {"J": 1.0, "mJ": 1e-3, "uJ": 1e-6, "\u00b5J": 1e-6, "\u03bcJ": 1e-6, "nJ": 1e-9}
_DIE = re.compile(r"^DIE_\d+_")


@dataclass(frozen=True)
class Row:
    """One item of a sample's `IOReportChannels` array."""
    group: str
    subgroup: str
    channel: str
    unit: str
    value: int


def channel_domain(channel: str) -> str | None:
    """The domain a channel adds to, or None for rows that are parts of another row."""
    name = _DIE.sub("", channel)
    if name.endswith("CPU Energy"):
        return "cpu"
    if name == "GPU Energy":
        return "gpu"
    if name.startswith("GPU SRAM"):
        return "gpu_sram"
    if name.startswith("ANE"):
        return "ane"
    if name.startswith("DRAM"):
        return "dram"
    return None


def unit_scale(unit: str) -> float | None:
    """Joules per unit of a row's label ("mJ", " nJ", ...), None when unknown."""
    return UNIT_J.get(unit.strip())


def classify(rows) -> tuple[list, list]:
    """Per row, (domain, joules per unit) when it counts, else None; and warnings (units)."""
    plan, warnings = [], []
    for r in rows:
        d = channel_domain(r.channel) if r.group == GROUP else None
        scale = None if d is None else unit_scale(r.unit)
        if d is not None and scale is None:
            warnings.append(f"IOReport channel {r.channel!r} has an unknown unit {r.unit!r}; "
                            "left out")
        plan.append(None if scale is None else (d, scale))
    return plan, warnings


def joules(rows) -> tuple[dict, list]:
    """Joules per domain in one sample (raw or delta) and the warnings about it.

    Only domains with a row appear: a chip without GPU SRAM rows reports no gpu_sram at all
    rather than 0 J.
    """
    plan, warnings = classify(rows)
    out = {}
    for r, p in zip(rows, plan):
        if p is not None:
            out[p[0]] = out.get(p[0], 0.0) + r.value * p[1]
    return {d: out[d] for d in DOMAINS if d in out}, warnings


def headline(domains) -> tuple[str, ...]:
    return tuple(d for d in HEADLINE if d in domains)

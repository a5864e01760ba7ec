"""The speedup over rounds: the median and range of per-round ratios, and whether to trust them.

One run on a busy machine means little (four demo runs here gave 0.99x to 1.57x). So `demo`
and the TUI's Compare tab warm up, then alternate plain and speculative runs for several
rounds and report the median of the per-round speedups with their range and the load average.
The spread rule: the median is not to be trusted when the highest round's speedup is more than
SPREAD_LIMIT times the lowest's, or when there are fewer than MIN_ROUNDS rounds.
"""
from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

SPREAD_LIMIT = 1.25     # max/min of the round speedups: beyond it, rounds disagree by > 25 %
MIN_ROUNDS = 3


@dataclass(frozen=True)
class Speedups:
    values: tuple[float, ...]          # one speculative / plain tokens/s ratio per round

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    @property
    def spread(self) -> float:
        """max/min of the rounds (inf when a round measured nothing)."""
        return self.high / self.low if self.low > 0 else float("inf")

    @property
    def trusted(self) -> bool:
        return len(self.values) >= MIN_ROUNDS and self.spread <= SPREAD_LIMIT


def speedups(plain_tps, spec_tps) -> Speedups:
    """Per-round ratios from paired tokens/s (round i: plain_tps[i], spec_tps[i])."""
    if len(plain_tps) != len(spec_tps) or not plain_tps:
        raise ValueError("one plain and one speculative rate per round, at least one round")
    return Speedups(tuple(s / p if p > 0 else 0.0 for p, s in zip(plain_tps, spec_tps)))


def load_average() -> str:
    """The 1-minute load average and the core count, or '' where the platform has none."""
    try:
        one = os.getloadavg()[0]
    except (AttributeError, OSError):
        return ""
    return f"load average {one:.2f} on {os.cpu_count()} cores"


def summary(s: Speedups, load: str = "") -> list[str]:
    """The lines to print: median and range over the rounds, with the load; then a warning
    when the spread rule says the median is not to be trusted."""
    n = len(s.values)
    lines = [f"speedup {s.median:.2f}x (median of {n} round{'s' if n != 1 else ''}, range "
             f"{s.low:.2f}-{s.high:.2f}x{', ' + load if load else ''})"]
    if n < MIN_ROUNDS:
        lines.append(f"too few rounds to trust: give --rounds {MIN_ROUNDS} or more")
    elif not s.trusted:
        lines.append(f"spread too wide to trust: the fastest round's speedup is {s.spread:.2f}x the "
                     f"slowest's (over {SPREAD_LIMIT:.2f}x); the machine is busy or the run too short "
                     f"(more --rounds or --max-tokens)")
    return lines

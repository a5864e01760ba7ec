"""Replay a recorded IOReport trace (`olifant-ioreport-replay/1` JSON) as a meter.

For demos and tests: a window measured between two clock times gets exactly the energy the
trace recorded between them. The trace's `t_ns` are relative; time starts when the meter
opens, a reading takes the last sample at or before that moment (never interpolated), and with
`loop` the trace repeats, counters continuing from where it ended. Inject `clock` for
deterministic tests.
"""
from __future__ import annotations

import bisect
import json
import time
from pathlib import Path

from olifant_mlx.energy import apple
from olifant_mlx.energy.meter import CounterMeter, EnergyUnavailable, MeterInfo

FORMAT = "olifant-ioreport-replay/1"


def load_trace(path) -> tuple[list[int], list[dict], list[str]]:
    """(t_ns per sample, cumulative joules per domain per sample, warnings)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise EnergyUnavailable(f"cannot read replay trace {path}: {e}") from None
    if data.get("format", FORMAT) != FORMAT:
        raise EnergyUnavailable(f"{path}: format {data.get('format')!r}, expected {FORMAT!r}")
    samples = sorted(data.get("samples", ()), key=lambda s: s["t_ns"])
    if len(samples) < 2:
        raise EnergyUnavailable(f"{path}: a replay trace needs at least two samples")
    times, totals, warnings = [], [], []
    for s in samples:
        j, w = apple.joules([apple.Row(r["group"], r.get("subgroup", ""), r["channel"], r["unit"],
                                       r["value"]) for r in s["rows"]])
        times.append(int(s["t_ns"]))
        totals.append(j)
        warnings.extend(w)
    return times, totals, list(dict.fromkeys(warnings))


class ReplaySource:
    """Counter deltas read off a trace at the clock's time since opening."""

    def __init__(self, path, clock=time.monotonic_ns, loop: bool = True):
        self.times, self.totals, self.warnings = load_trace(path)
        self.domains = tuple(d for d in apple.DOMAINS if any(d in t for t in self.totals))
        self.span = self.times[-1] - self.times[0]
        if self.span <= 0:
            raise EnergyUnavailable(f"{path}: the trace's samples all have the same t_ns")
        self.clock = clock
        self.loop = loop
        self.t0 = clock()
        self.prev = self.at(0)

    def at(self, elapsed_ns: int) -> dict:
        """Cumulative joules per domain `elapsed_ns` after the trace's first sample."""
        laps, pos = divmod(elapsed_ns, self.span) if self.loop else (0, min(elapsed_ns, self.span))
        i = bisect.bisect_right(self.times, self.times[0] + pos) - 1
        first, last, now = self.totals[0], self.totals[-1], self.totals[i]
        lap = {d: last.get(d, 0.0) - first.get(d, 0.0) for d in self.domains}
        return {d: laps * lap[d] + now.get(d, 0.0) - first.get(d, 0.0) for d in self.domains}

    def __call__(self):
        t = self.clock()
        cur = self.at(max(0, t - self.t0))
        deltas = {d: cur[d] - self.prev[d] for d in self.domains}
        self.prev = cur
        warnings = list(self.warnings)
        if not self.loop and t - self.t0 > self.span:
            warnings.append(f"replay trace ended after {self.span / 1e9:g} s")
        return t, deltas, warnings


def open_meter(path, *, clock=time.monotonic_ns, loop: bool = True, sync=None, **_):
    src = ReplaySource(path, clock, loop)
    info = MeterInfo("replay", src.domains, apple.headline(src.domains), "replay",
                     f"recorded trace, not this machine: {apple.SCOPE}", estimate=True,
                     source=str(path))
    return CounterMeter(info, src, clock=clock, watch=("cpu",) if "cpu" in src.domains else (),
                        sync=sync)

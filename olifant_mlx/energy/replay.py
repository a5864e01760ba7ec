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
import math
import time

from olifant_mlx.energy import apple
from olifant_mlx.energy.meter import CounterMeter, EnergyUnavailable, MeterInfo
from olifant_mlx.files import read_regular

FORMAT = "olifant-ioreport-replay/1"
ROW_TEXT = ("group", "channel", "unit")


class TraceError(EnergyUnavailable):
    """A replay trace that is not one: the message names the file and the place."""


def _finite_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _row(r, where) -> apple.Row:
    """One row of a sample, checked: text fields are strings, the value a finite number."""
    if not isinstance(r, dict):
        raise TraceError(f"{where}: a row must be an object, got {type(r).__name__}")
    for key in ROW_TEXT:
        if not isinstance(r.get(key), str):
            raise TraceError(f"{where}: {key!r} must be a string, got {r.get(key)!r}")
    if not isinstance(r.get("subgroup", ""), str):
        raise TraceError(f"{where}: 'subgroup' must be a string, got {r['subgroup']!r}")
    if not _finite_number(r.get("value")):
        raise TraceError(f"{where}: 'value' must be a finite number, got {r.get('value')!r}")
    return apple.Row(r["group"], r.get("subgroup", ""), r["channel"], r["unit"], r["value"])


def _sample(s, where) -> tuple[int, list]:
    if not isinstance(s, dict):
        raise TraceError(f"{where}: a sample must be an object, got {type(s).__name__}")
    if not _finite_number(s.get("t_ns")):
        raise TraceError(f"{where}: 't_ns' must be a finite number, got {s.get('t_ns')!r}")
    if not isinstance(s.get("rows"), list):
        raise TraceError(f"{where}: 'rows' must be a list, got {s.get('rows')!r}")
    return int(s["t_ns"]), [_row(r, f"{where}, row {i}") for i, r in enumerate(s["rows"])]


def _samples(data, path) -> list:
    """The trace's (t_ns, rows) in time order, every field checked (TraceError names it)."""
    if not isinstance(data, dict):
        raise TraceError(f"{path}: a replay trace is a JSON object, got {type(data).__name__}")
    if data.get("format", FORMAT) != FORMAT:
        raise TraceError(f"{path}: format {data.get('format')!r}, expected {FORMAT!r}")
    samples = data.get("samples", [])
    if not isinstance(samples, list):
        raise TraceError(f"{path}: 'samples' must be a list, got {type(samples).__name__}")
    checked = [_sample(s, f"{path}: sample {i}") for i, s in enumerate(samples)]
    if len(checked) < 2:
        raise TraceError(f"{path}: a replay trace needs at least two samples")
    return sorted(checked, key=lambda s: s[0])


def load_trace(path) -> tuple[list[int], list[dict], list[str]]:
    """(t_ns per sample, cumulative joules per domain per sample, warnings)."""
    try:
        data = json.loads(read_regular(path).decode("utf-8"))
    except (OSError, ValueError) as e:      # NotARegularFile and bad UTF-8 are ValueErrors
        raise EnergyUnavailable(f"cannot read replay trace {path}: {e}") from None
    times, totals, warnings = [], [], []
    for t, rows in _samples(data, path):
        j, w = apple.joules(rows)
        times.append(t)
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

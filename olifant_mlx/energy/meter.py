"""The meter interface and what it returns.

A meter gives cumulative joules per domain (cpu, gpu, ane, dram, package-0, gpu0, ...) with a
monotonic timestamp (`read`), the mean power since the previous `power` call for live display,
and the energy of a window between two marks (`mark` / `between`, or `start` / `stop`). Counter
meters read their counters at the window's edges, so windows add up exactly. A meter that
measures nothing says so with None, never with 0.0.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass


class EnergyError(Exception):
    """A meter failed while measuring."""


class EnergyUnavailable(EnergyError):
    """A backend cannot run here; the message says why."""


@dataclass(frozen=True)
class MeterInfo:
    """What a meter measures; every result carries it."""
    backend: str                 # ioreport | powermetrics | rapl | nvml | replay | none
    domains: tuple[str, ...]     # every domain reported
    headline: tuple[str, ...]    # domains summed into the headline total (never overlapping)
    method: str                  # counter | sampled-power | replay | none
    scope: str                   # what the headline covers, in words
    estimate: bool = False       # a model-based estimate (Apple), not a measurement
    source: str = ""             # the file, command or zones read

    @property
    def measured(self) -> bool:
        return self.method != "none"

    @property
    def label(self) -> str:
        if not self.measured:
            return "not measured"
        return " · ".join([self.backend, self.scope, self.method] + ["estimate"] * self.estimate)

    def as_dict(self) -> dict:
        return {"backend": self.backend, "label": self.label, "headline": list(self.headline),
                "domains": list(self.domains), "method": self.method, "scope": self.scope,
                "estimate": self.estimate, "source": self.source}


def measurable(deltas: dict) -> tuple[dict, list]:
    """The joules that count, and why others do not: a meter never reports a non-finite or
    negative quantity as a measurement. A NaN reading or a counter that went back (a reset, a
    trace whose values decrease) adds nothing to the totals; a warning says so."""
    kept, warnings = {}, []
    for d, j in deltas.items():
        if not isinstance(j, (int, float)) or not math.isfinite(j):
            warnings.append(f"{d} energy reading {j!r} is not a finite number: this interval is not counted")
        elif j < 0:
            warnings.append(f"{d} energy counter went back by {-j:.6g} J (reset?): this interval is not counted")
        else:
            kept[d] = float(j)
    return kept, warnings


def headline_sum(values: dict | None, info: MeterInfo):
    return None if values is None else sum(values.get(d, 0.0) for d in info.headline)


@dataclass(frozen=True)
class Reading:
    """Cumulative joules per domain since the meter opened, at monotonic time t_ns."""
    info: MeterInfo
    t_ns: int
    joules: dict | None
    warnings: tuple[str, ...] = ()

    @property
    def total_j(self) -> float | None:
        return headline_sum(self.joules, self.info)


@dataclass(frozen=True)
class Power:
    """Mean watts per domain over the `seconds` before t_ns."""
    info: MeterInfo
    t_ns: int
    seconds: float
    watts: dict | None
    warnings: tuple[str, ...] = ()

    @property
    def total_w(self) -> float | None:
        return headline_sum(self.watts, self.info)


@dataclass(frozen=True)
class Mark:
    """A window edge: the time and, for counter meters, the cumulative joules then."""
    t_ns: int
    joules: dict | None = None


@dataclass(frozen=True)
class Window:
    """Energy spent between two marks."""
    info: MeterInfo
    t0_ns: int
    t1_ns: int
    joules: dict | None
    warnings: tuple[str, ...] = ()
    coverage: float | None = None   # share of the window the readings cover (1.0 for counters)

    @property
    def seconds(self) -> float:
        return (self.t1_ns - self.t0_ns) / 1e9

    @property
    def total_j(self) -> float | None:
        return headline_sum(self.joules, self.info)

    @property
    def mean_power_w(self) -> float | None:
        j = self.total_j
        return None if j is None or self.seconds <= 0 else j / self.seconds

    def j_per_100_tokens(self, n_tokens: int) -> float | None:
        j = self.total_j
        return None if j is None or n_tokens <= 0 else 100.0 * j / n_tokens

    def tokens_per_joule(self, n_tokens: int) -> float | None:
        j = self.total_j
        return None if not j else n_tokens / j

    def as_dict(self, n_tokens: int | None = None) -> dict:
        d = {**self.info.as_dict(), "seconds": self.seconds, "energy_j": self.total_j,
             "energy_j_by_domain": self.joules, "mean_power_w": self.mean_power_w,
             "coverage": self.coverage, "warnings": list(self.warnings)}
        if n_tokens is not None:
            d.update(n_tokens=n_tokens, j_per_100_tokens=self.j_per_100_tokens(n_tokens),
                     tokens_per_joule=self.tokens_per_joule(n_tokens))
        return d


class WarningLog:
    """Warnings with the time span over which they held, so windows collect theirs."""

    def __init__(self):
        self._spans = []     # [message, first t_ns, last t_ns]
        self._open = {}      # message -> its span while it keeps being raised

    def note(self, t_ns: int, messages):
        for m in messages:
            span = self._open.get(m)
            if span is None:
                span = self._open[m] = [m, t_ns, t_ns]
                self._spans.append(span)
            span[2] = t_ns
        for m in [m for m in self._open if m not in messages]:
            del self._open[m]

    def between(self, t0_ns: int, t1_ns: int) -> tuple[str, ...]:
        out = [m for m, first, last in self._spans if last > t0_ns and first <= t1_ns]
        return tuple(dict.fromkeys(out))


class StallWatch:
    """Flags a domain whose counter stops while the others keep counting.

    On the macOS 27 betas IOReport's `CPU Energy` froze while `GPU Energy` kept counting
    (macmon#76); the CPU then reads 0 W. Real CPU energy never stands still for half a second.
    """

    def __init__(self, domain: str, t0_ns: int, after_s: float = 0.5):
        self.domain = domain
        self.after_ns = int(after_s * 1e9)
        self.moved_ns = t0_ns
        self.others = False

    def update(self, t_ns: int, deltas: dict) -> str | None:
        if deltas.get(self.domain, 0.0) != 0.0:
            self.moved_ns, self.others = t_ns, False
            return None
        self.others |= any(v != 0.0 for d, v in deltas.items() if d != self.domain)
        if self.others and t_ns - self.moved_ns >= self.after_ns:
            return (f"{self.domain} energy counter stopped advancing while other domains kept "
                    f"counting (a known macOS 27 beta fault): {self.domain} energy is missing here")
        return None


class BaseMeter:
    """start / stop and the context manager, over `mark` and `between`."""
    info: MeterInfo
    skipped: tuple = ()      # (backend, reason) tried before this one by auto-detection

    def start(self) -> Mark:
        self._start = self.mark()
        return self._start

    def stop(self) -> Window:
        return self.between(self._start, self.mark())

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class CounterMeter(BaseMeter):
    """A meter over cumulative counters, or over nothing (`source=None`: not measured).

    `source()` returns (t_ns, {domain: joules since its previous call}, warnings); the meter
    adds them up. A lock serialises reads so a live ticker and window marks can share a meter.
    `sync` (e.g. `mlx.core.synchronize`) runs before every mark, so queued GPU work lands in the
    window that issued it.
    """

    def __init__(self, info: MeterInfo, source=None, *, clock=time.monotonic_ns, on_close=None,
                 watch=(), stall_after_s: float = 0.5, sync=None):
        self.info = info
        self._source = source
        self._clock = clock
        self._on_close = on_close
        self._sync = sync
        self._lock = threading.Lock()
        self._log = WarningLog()
        self._total = None if source is None else dict.fromkeys(info.domains, 0.0)
        t0 = clock() if source is None else source()[0]   # the baseline
        self._watches = [StallWatch(d, t0, stall_after_s) for d in watch]
        self._last = Reading(info, t0, None if source is None else dict(self._total))
        self._start = Mark(t0, self._last.joules)

    def read(self) -> Reading:
        if self._source is None:
            return Reading(self.info, self._clock(), None)
        with self._lock:
            t, deltas, warnings = self._source()
            deltas, refused = measurable(deltas)
            warnings = list(warnings) + refused
            for d, j in deltas.items():
                self._total[d] = self._total.get(d, 0.0) + j
            stalls = (s.update(t, deltas) for s in self._watches)
            warnings = list(warnings) + [w for w in stalls if w]
            self._log.note(t, warnings)
            return Reading(self.info, t, dict(self._total), tuple(warnings))

    def power(self) -> Power:
        r = self.read()
        prev, self._last = self._last, r
        dt = (r.t_ns - prev.t_ns) / 1e9
        if r.joules is None or dt <= 0:
            return Power(self.info, r.t_ns, dt, None, r.warnings)
        watts = {d: (j - prev.joules.get(d, 0.0)) / dt for d, j in r.joules.items()}
        return Power(self.info, r.t_ns, dt, watts, r.warnings)

    def mark(self) -> Mark:
        if self._sync is not None:
            self._sync()
        r = self.read()
        return Mark(r.t_ns, r.joules)

    def between(self, a: Mark, b: Mark) -> Window:
        if a.joules is None or b.joules is None:
            return Window(self.info, a.t_ns, b.t_ns, None)
        joules = {d: j - a.joules.get(d, 0.0) for d, j in b.joules.items()}
        warnings = self._log.between(a.t_ns, b.t_ns)
        if b.t_ns > a.t_ns and not any(joules.values()):
            warnings += ("no energy counter advanced during this window (shorter than the "
                         "counters' update period?)",)
        return Window(self.info, a.t_ns, b.t_ns, joules, warnings, coverage=1.0)

    def close(self):
        if self._on_close is not None:
            self._on_close()
            self._on_close = None


NOT_MEASURED = MeterInfo("none", (), (), "none", "not measured")


def none_meter(clock=time.monotonic_ns, sync=None) -> CounterMeter:
    """The meter that measures nothing: every value is None."""
    return CounterMeter(NOT_MEASURED, None, clock=clock, sync=sync)

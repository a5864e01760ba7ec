"""powermetrics (macOS, needs root): CPU/GPU/ANE power samples, integrated over a window.

`sudo -n powermetrics --samplers cpu_power,gpu_power,ane_power -i 250 -f plist` writes one plist
document per sample, NUL-separated. Each document covers the `elapsed_ns` before it arrived;
`processor.*_energy` is mJ over the sample and `*_power` mW. A window's energy is the
overlap-weighted sum of the samples covering it (power constant within a sample), reported with
its coverage. sudo never prompts (`-n`): without passwordless sudo the backend is unavailable.
The parsers are pure and tested on recorded captures without macOS.
"""
from __future__ import annotations

import bisect
import math
import os
import platform
import plistlib
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from olifant_mlx.energy.meter import (BaseMeter, EnergyUnavailable, Mark, MeterInfo, Power,
                                      Reading, Window, WarningLog)

PATH = "/usr/bin/powermetrics"
DOMAINS = ("cpu", "gpu", "ane", "dram", "package")   # dram / package only in macOS 12 logs
HEADLINE = ("cpu", "gpu", "ane")                     # = its "combined power"; never package
SCOPE = "SoC CPU+GPU+ANE"


@dataclass(frozen=True)
class Sample:
    """Energy per domain over one powermetrics sample of `elapsed_ns`, ending at `t_end_ns`."""
    elapsed_ns: int
    joules: dict
    t_end_ns: int | None = None     # monotonic arrival time; None when parsed from a file

    @property
    def watts(self) -> dict:
        if self.elapsed_ns <= 0:
            return {}
        return {d: j / (self.elapsed_ns / 1e9) for d, j in self.joules.items()}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def make_sample(elapsed_ns, joules: dict, t_end_ns: int | None = None) -> Sample:
    """A Sample, refused (ValueError) unless it covers some time and every energy is a finite
    number >= 0: a meter never reports anything else as a measurement."""
    if not _finite(elapsed_ns) or elapsed_ns <= 0:
        raise ValueError(f"powermetrics sample with elapsed time {elapsed_ns!r} ns")
    bad = {d: j for d, j in joules.items() if not _finite(j) or j < 0}
    if bad or not joules:
        raise ValueError(f"powermetrics sample with energies {bad or 'none'} (J)")
    return Sample(int(elapsed_ns), {d: float(j) for d, j in joules.items()}, t_end_ns)


def sample_from_plist(doc: bytes, t_end_ns: int | None = None) -> Sample:
    """One `-f plist` document: `processor.<d>_energy` mJ, else `<d>_power` mW x elapsed."""
    d = plistlib.loads(doc)
    if not isinstance(d, dict) or not isinstance(d.get("processor"), dict):
        raise ValueError("powermetrics document without a processor dictionary")
    p, elapsed = d["processor"], d.get("elapsed_ns")
    if not _finite(elapsed):
        raise ValueError(f"powermetrics document with elapsed_ns {elapsed!r}")
    joules = {}
    for dom in DOMAINS:
        if _finite(p.get(f"{dom}_energy")):
            joules[dom] = p[f"{dom}_energy"] / 1e3
        elif _finite(p.get(f"{dom}_power")):
            joules[dom] = p[f"{dom}_power"] / 1e3 * elapsed / 1e9
    return make_sample(elapsed, joules, t_end_ns)


class PlistSplitter:
    """Cuts the NUL-separated plist stream into whole documents as bytes arrive."""

    def __init__(self):
        self.buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        *docs, self.buf = (self.buf + chunk).split(b"\0")
        # a finished document goes out at once: its NUL may only come with the next sample
        if self.buf.rstrip().endswith(b"</plist>"):
            docs.append(self.buf)
            self.buf = b""
        return [d.strip() for d in docs if d.strip()]

    def finish(self) -> bytes:
        """What is left at the end of the stream: a truncated document, or b""."""
        tail, self.buf = self.buf.strip(), b""
        return tail


def truncated_warning(tail: bytes) -> str:
    return f"ignored a truncated powermetrics document at the end of the stream ({len(tail)} bytes)"


def parse_documents(docs, times=None):
    """Samples from plist documents; bad documents become warnings, never exceptions."""
    samples, warnings = [], []
    for i, doc in enumerate(docs):
        try:
            samples.append(sample_from_plist(doc, None if times is None else times[i]))
        except Exception as e:   # plistlib fails on damaged bytes in many ways (Expat, Index, Lookup...)
            warnings.append(f"ignored an unreadable powermetrics document "
                            f"({type(e).__name__}: {e})")
    return samples, warnings


def samples_from_stream(data: bytes) -> tuple[list[Sample], list[str]]:
    """All samples in a recorded `-f plist` stream, and warnings (a truncated tail, ...)."""
    split = PlistSplitter()
    samples, warnings = parse_documents(split.feed(data))
    tail = split.finish()
    if tail:
        warnings.append(truncated_warning(tail))
    return samples, warnings


_HEADER = re.compile(r"\*\*\* Sampled system activity \(.*?\) "
                     r"\((?P<ms>[\d.]+)\s*ms elapsed\) \*\*\*")
_POWER = re.compile(r"^(?P<dom>CPU|GPU|ANE|DRAM|Package) Power:\s*(?P<mw>[\d.]+)\s*mW", re.M)


def samples_from_text(text: str) -> list[Sample]:
    """Samples from a text log (the paper's `powermetrics -i 1000` style).

    The first `X Power:` line of each sample counts: with the gpu_power sampler `GPU Power`
    appears again under "GPU usage". `Package Power` is not CPU+GPU+ANE(+DRAM) and stays apart.
    A sample whose numbers do not parse, or that covers no time, is left out.
    """
    samples = []
    heads = list(_HEADER.finditer(text))
    for h, nxt in zip(heads, heads[1:] + [None]):
        block = text[h.end():nxt.start() if nxt else len(text)]
        try:
            samples.append(_text_sample(h["ms"], _POWER.finditer(block)))
        except ValueError:
            continue
    return samples


def _text_sample(ms: str, powers) -> Sample:
    elapsed = int(round(float(ms) * 1e6))
    joules = {}
    for m in powers:
        joules.setdefault(m["dom"].lower(), float(m["mw"]) / 1e3 * elapsed / 1e9)
    return make_sample(elapsed, {d: joules[d] for d in DOMAINS if d in joules})


class SampleLog:
    """Samples on the monotonic clock, in arrival order; the energy of any window by overlap."""

    def __init__(self):
        self.samples: list[Sample] = []
        self.ends: list[int] = []
        self.total: dict = {}

    def add(self, s: Sample):
        self.samples.append(s)
        self.ends.append(s.t_end_ns)
        for d, j in s.joules.items():
            self.total[d] = self.total.get(d, 0.0) + j

    def energy(self, t0_ns: int, t1_ns: int) -> tuple[dict | None, float]:
        """(joules per domain, share of [t0, t1] covered by samples); None when none covers it."""
        joules, covered = {}, 0
        for s in self.samples[bisect.bisect_right(self.ends, t0_ns):]:
            start = s.t_end_ns - s.elapsed_ns
            if start >= t1_ns:
                break
            overlap = min(s.t_end_ns, t1_ns) - max(start, t0_ns)
            covered += overlap
            for d, j in s.joules.items():
                joules[d] = joules.get(d, 0.0) + j * overlap / s.elapsed_ns
        span = t1_ns - t0_ns
        coverage = min(1.0, covered / span) if span > 0 else 0.0
        return (joules if covered else None), coverage


class PowermetricsMeter(BaseMeter):
    """A sampled-power meter fed with powermetrics' stream (`feed`, from a reader thread)."""

    def __init__(self, info: MeterInfo, *, clock=time.monotonic_ns, interval_ms: int = 250,
                 proc=None, sync=None):
        self.info = info
        self.interval_ms = interval_ms
        self._clock = clock
        self._sync = sync
        self._proc = proc
        self._log = SampleLog()
        self._split = PlistSplitter()
        self._warnings = WarningLog()
        self._cond = threading.Condition()
        self._eof = False
        self._start = Mark(clock())

    def feed(self, chunk: bytes):
        """Bytes from the stream; each complete document is stamped with its arrival time."""
        with self._cond:
            docs = self._split.feed(chunk)
            t = self._clock()
            samples, warnings = parse_documents(docs, [t] * len(docs))
            for s in samples:
                self._log.add(s)
            self._warnings.note(t, warnings)
            self._cond.notify_all()

    def end_of_stream(self):
        with self._cond:
            tail = self._split.finish()
            warnings = [truncated_warning(tail)] if tail else []
            if self._proc is not None:     # not closed by us: powermetrics died
                warnings.append("powermetrics stopped sending samples")
            self._warnings.note(self._clock(), warnings)
            self._eof = True
            self._cond.notify_all()

    def read(self) -> Reading:
        """Joules of every sample received, up to the end of the newest one."""
        with self._cond:
            if not self._log.samples:
                return Reading(self.info, self._clock(), None, ("no powermetrics sample yet",))
            return Reading(self.info, self._log.ends[-1], dict(self._log.total))

    def power(self) -> Power:
        """The newest sample's mean power."""
        with self._cond:
            if not self._log.samples:
                return Power(self.info, self._clock(), 0.0, None, ("no powermetrics sample yet",))
            s = self._log.samples[-1]
            return Power(self.info, s.t_end_ns, s.elapsed_ns / 1e9, s.watts)

    def mark(self) -> Mark:
        if self._sync is not None:
            self._sync()
        return Mark(self._clock())

    def between(self, a: Mark, b: Mark, timeout_s: float | None = None) -> Window:
        """Waits (up to `timeout_s`) for a sample that covers b, then integrates by overlap."""
        if timeout_s is None:
            timeout_s = 3 * self.interval_ms / 1e3 + 1.0
        with self._cond:
            if self._proc is not None:
                self._cond.wait_for(lambda: self._eof or self._log.ends[-1:] >= [b.t_ns],
                                    timeout_s)
            joules, coverage = self._log.energy(a.t_ns, b.t_ns)
            warnings = self._warnings.between(a.t_ns, b.t_ns)
        if coverage < 0.995:
            warnings += (f"powermetrics samples cover {coverage:.0%} of this window",)
        return Window(self.info, a.t_ns, b.t_ns, joules, warnings, coverage)

    def close(self):
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc is not None:
            proc.stdout.close()


def _platform() -> str:
    return f"{sys.platform}/{platform.machine()}"


def _command(args) -> list[str]:
    return ([] if os.geteuid() == 0 else ["sudo", "-n"]) + [PATH] + args


def probe() -> tuple[str | None, str]:
    """(why powermetrics cannot run here or None, its help text). Never prompts for a password."""
    if sys.platform != "darwin":
        return f"powermetrics is macOS-only (this is {_platform()})", ""
    if platform.machine() != "arm64":
        return f"powermetrics' CPU/GPU/ANE energy needs Apple Silicon (this is {_platform()})", ""
    if not os.path.exists(PATH):
        return f"{PATH} not found", ""
    try:
        r = subprocess.run(_command(["-h"]), stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run {PATH}: {e}", ""
    text = r.stdout + r.stderr
    if "samplers" not in text:
        said = r.stderr.strip().splitlines()[0] if r.stderr.strip() else f"exit {r.returncode}"
        user = os.environ.get("USER", "you")
        return (f"powermetrics needs root and sudo -n would prompt ({said}); allow it with "
                f"visudo: '{user} ALL=(root) NOPASSWD: {PATH}'", text)
    return None, text


def unavailable() -> str | None:
    return probe()[0]


def open_meter(arg=None, *, clock=time.monotonic_ns, interval_ms: int = 250, sync=None, **_):
    reason, help_text = probe()
    if reason:
        raise EnergyUnavailable(reason)
    # cpu_power already reports ANE energy; the ane_power sampler only exists on newer macOS
    samplers = "cpu_power,gpu_power" + (",ane_power" if "ane_power" in help_text else "")
    cmd = _command(["--samplers", samplers, "-i", str(interval_ms), "-f", "plist"])
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, bufsize=0)
    info = MeterInfo("powermetrics", HEADLINE, HEADLINE, "sampled-power", SCOPE, estimate=True,
                     source=" ".join(cmd))
    meter = PowermetricsMeter(info, clock=clock, interval_ms=interval_ms, proc=proc, sync=sync)

    def pump():
        fd = proc.stdout.fileno()
        try:
            while chunk := os.read(fd, 1 << 16):
                meter.feed(chunk)
        finally:                   # whatever stops the reader, windows stop waiting for it
            meter.end_of_stream()

    threading.Thread(target=pump, name="powermetrics", daemon=True).start()
    return meter

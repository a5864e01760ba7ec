"""RAPL through Linux powercap (Intel and AMD): cumulative µJ counters in sysfs.

`<root>/class/powercap/intel-rapl:N` are the top-level zones (package-N, psys, dram on servers),
`intel-rapl:N:M` their subzones (core, uncore, dram); AMD exposes package and core zones through
the same `intel-rapl` type. The headline sums the package zones; DRAM and psys (which contains
the packages) are reported apart, core/uncore (parts of a package) not at all. Newer laptops
repeat package-0 under `intel-rapl-mmio`: the MSR zone, which every kernel has, is kept.
Counters wrap at `max_energy_range_uj`: at most one wrap between reads is assumed, so read more
often than the range lasts at full power (minutes). Since CVE-2020-8694 (PLATYPUS) `energy_uj`
is root-only on most distributions; that is reported, with the ways round it.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from olifant_mlx.energy.meter import CounterMeter, EnergyError, EnergyUnavailable, MeterInfo

_ZONE = re.compile(r"^(?P<type>[a-z0-9-]*rapl[a-z0-9-]*):(?P<zone>\d+)(?::(?P<sub>\d+))?$")
PERMISSION_HINT = ("energy_uj is root-only since CVE-2020-8694 (PLATYPUS): run as root, or "
                   "'sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj' (until reboot), "
                   "or a udev / sysfsutils rule that sets mode 0444")
WRAP_POWER_W = 1000.0   # warn when a wrap could have been missed below this power


@dataclass(frozen=True)
class Zone:
    path: str         # the zone's directory
    key: str          # "package-0", "psys", "package-0/dram": unique per machine
    domain: str       # what it adds to: "package-0", "dram", "psys"
    max_uj: int       # the counter wraps here


def _read_int(opener, path) -> int:
    with opener(path) as f:
        return int(f.read().strip())


def _read_name(opener, path) -> str:
    with opener(os.path.join(path, "name")) as f:
        return f.read().strip()


def _zone_domain(name: str, subzone: bool) -> str | None:
    if subzone:
        return "dram" if name == "dram" else None
    if name.startswith("package") or name in ("dram", "psys"):
        return name
    return None


def find_zones(root="/sys", opener=open) -> list[Zone]:
    """The zones to read, MSR before MMIO, duplicates and package parts left out."""
    base = os.path.join(root, "class", "powercap")
    if not os.path.isdir(base):
        raise EnergyUnavailable(f"no {base}: not Linux, or powercap is hidden (containers "
                                "usually hide it)")
    found = []
    for entry in os.listdir(base):
        m = _ZONE.match(entry)
        if m and os.path.isdir(os.path.join(base, entry)):
            found.append((m["type"] != "intel-rapl", m["type"], int(m["zone"]),
                          -1 if m["sub"] is None else int(m["sub"]), entry))
    zones, keys_by_type = [], {}
    try:
        for _, ctype, zone, sub, entry in sorted(found):
            path = os.path.join(base, entry)
            name = _read_name(opener, path)
            domain = _zone_domain(name, sub >= 0)
            if domain is None:
                continue
            if sub >= 0:
                name = f"{_read_name(opener, os.path.join(base, f'{ctype}:{zone}'))}/{name}"
            if any(name in keys for t, keys in keys_by_type.items() if t != ctype):
                continue     # the same zone through another interface (MMIO after MSR)
            keys_by_type.setdefault(ctype, set()).add(name)
            zones.append(Zone(path, name, domain,
                              _read_int(opener, os.path.join(path, "max_energy_range_uj"))))
    except (OSError, ValueError) as e:
        raise EnergyUnavailable(f"cannot read RAPL zones under {base}: {e}") from None
    if not any(z.domain.startswith("package") for z in zones):
        raise EnergyUnavailable(f"no RAPL package zone under {base}")
    return zones


def counter_delta(prev: int, cur: int, max_uj: int) -> int:
    """µJ between two readings of a counter that wraps at max_uj (at most once)."""
    return cur - prev if cur >= prev else cur + max_uj - prev


class RaplSource:
    """Each call returns the joules per domain since the previous call."""

    def __init__(self, root="/sys", opener=open, clock=time.monotonic_ns):
        self.zones = find_zones(root, opener)
        self.opener = opener
        self.clock = clock
        self.domains = tuple(dict.fromkeys(z.domain for z in self.zones))
        try:
            self.prev = self._read()
        except PermissionError as e:
            raise EnergyUnavailable(f"cannot read {e.filename or 'energy_uj'}: permission "
                                    f"denied; {PERMISSION_HINT}") from None
        except (OSError, ValueError) as e:
            raise EnergyUnavailable(f"cannot read RAPL energy_uj: {e}") from None
        self.t_prev = clock()

    def _read(self) -> list[int]:
        return [_read_int(self.opener, os.path.join(z.path, "energy_uj")) for z in self.zones]

    def __call__(self):
        try:
            cur = self._read()
        except (OSError, ValueError) as e:
            raise EnergyError(f"RAPL read failed: {e}") from None
        t = self.clock()
        deltas, warnings = dict.fromkeys(self.domains, 0.0), []
        for z, p, c in zip(self.zones, self.prev, cur):
            deltas[z.domain] += counter_delta(p, c, z.max_uj) / 1e6
            if (t - self.t_prev) / 1e9 > z.max_uj / 1e6 / WRAP_POWER_W:
                warnings.append(f"RAPL {z.key} read {(t - self.t_prev) / 1e9:.0f} s apart: its "
                                f"counter may have wrapped more than once; read more often")
        self.prev, self.t_prev = cur, t
        return t, deltas, warnings


def open_meter(arg=None, *, clock=time.monotonic_ns, rapl_root="/sys", rapl_opener=open,
               sync=None, **_):
    src = RaplSource(rapl_root, rapl_opener, clock)
    headline = tuple(d for d in src.domains if d.startswith("package"))
    info = MeterInfo("rapl", src.domains, headline, "counter",
                     f"CPU {'+'.join(headline)} only",
                     source=", ".join(f"{z.key}={z.path}" for z in src.zones))
    return CounterMeter(info, src, clock=clock, sync=sync)


def materialise(src, dst) -> Path:
    """Copy a saved powercap tree whose `class/powercap` symlinks were flattened into text files
    holding their targets (as in the shared fixtures) and make them symlinks again."""
    dst = Path(dst)
    shutil.copytree(src, dst, symlinks=True)
    for d, _, files in os.walk(dst):     # fixtures are read-only; tests rewrite counters
        for p in [d, *(os.path.join(d, f) for f in files)]:
            os.chmod(p, os.stat(p).st_mode | 0o200)
    for p in (dst / "class" / "powercap").iterdir():
        if p.is_file() and not p.is_symlink():
            target = p.read_text().strip()
            p.unlink()
            p.symlink_to(target)
    return dst

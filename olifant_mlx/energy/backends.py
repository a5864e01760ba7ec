"""Choosing a backend: by argument, by $OLIFANT_ENERGY, or the first that works here.

Auto-detection tries ioreport, powermetrics, rapl, nvml, then none, and keeps the reason each
one was passed over (`meter.skipped`). A backend asked for by name that cannot run raises
`EnergyUnavailable`; it never falls back silently. `replay:PATH` is only used when asked for.
"""
from __future__ import annotations

import importlib
import os

from olifant_mlx.energy.meter import EnergyUnavailable, none_meter

ENV = "OLIFANT_ENERGY"
# name -> (the argument it needs or None, tried by auto-detection, in this order). A backend is
# its module olifant_mlx/energy/NAME.py (with open_meter) plus one entry here; every list of
# choices (parse_spec, `energy --backend`, `--meter` help) is derived from this table.
BACKENDS = {
    "ioreport": (None, True),
    "powermetrics": (None, True),
    "rapl": (None, True),
    "nvml": (None, True),
    "replay": ("PATH", False),
    "none": (None, True),
}


def order() -> tuple[str, ...]:
    """The backends auto-detection tries, first to last."""
    return tuple(name for name, (_, auto) in BACKENDS.items() if auto)


def choices() -> str:
    """'auto | ioreport | ... | replay:PATH | none', for help texts and errors."""
    return " | ".join(["auto"] + [f"{n}:{a}" if a else n for n, (a, _) in BACKENDS.items()])


ORDER = order()
CHOICES = choices()


def parse_spec(spec: str) -> tuple[str, str | None]:
    """'replay:/x.json' -> ('replay', '/x.json'); 'rapl' -> ('rapl', None)."""
    name, _, arg = spec.strip().partition(":")
    name = name.lower()
    if name != "auto" and name not in BACKENDS:
        raise ValueError(f"unknown energy backend {spec!r}; choose {choices()}")
    needs = BACKENDS.get(name, (None, False))[0]
    if needs and not arg:
        raise ValueError(f"{name} needs {'a trace' if name == 'replay' else 'an argument'}: {name}:{needs}")
    return name, arg or None


def open_backend(name: str, arg=None, **options):
    """Open one backend by name; options go to it (clock, sync, rapl_root, pynvml, ...)."""
    if name == "none":
        return none_meter(**{k: options[k] for k in ("clock", "sync") if k in options})
    module = importlib.import_module(f"olifant_mlx.energy.{name}")
    return module.open_meter(arg, **options)


def open_meter(backend: str | None = None, **options):
    """A meter: `backend` (a spec), else $OLIFANT_ENERGY, else the first backend that works."""
    name, arg = parse_spec(backend or os.environ.get(ENV) or "auto")
    if name != "auto":
        return open_backend(name, arg, **options)
    skipped = []
    for name in order():
        try:
            meter = open_backend(name, **options)
        except EnergyUnavailable as e:
            skipped.append((name, str(e)))
            continue
        meter.skipped = tuple(skipped)
        return meter
    raise AssertionError("the none backend always opens")


def probe(name: str, **options) -> str | None:
    """Why a backend cannot run here, or None when it can."""
    if name == "powermetrics":    # opening would start a sampler under sudo; its probe does not
        from olifant_mlx.energy import powermetrics

        return powermetrics.unavailable()
    try:
        open_backend(name, **options).close()
    except EnergyUnavailable as e:
        return str(e)
    return None


def detect(**options) -> list[tuple[str, str | None]]:
    """Every auto-detected backend with the reason it cannot run here (None: it can)."""
    return [(name, probe(name, **options)) for name in order()]

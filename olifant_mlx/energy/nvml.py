"""NVML (NVIDIA GPUs, Volta or newer): the total-energy counter, mJ since the driver loaded.

Needs nvidia-ml-py (`pip install 'olifant_mlx[nvml]'`, module `pynvml`), imported only here. The
counter updates every few tens of ms, so a shorter window can read 0 J: the window then says so.
"""
from __future__ import annotations

import time

from olifant_mlx.energy.meter import CounterMeter, EnergyError, EnergyUnavailable, MeterInfo


def _name(nv, handle) -> str:
    name = nv.nvmlDeviceGetName(handle)
    return name.decode() if isinstance(name, bytes) else str(name)


class NvmlSource:
    """Each call returns the joules per GPU since the previous call."""

    def __init__(self, pynvml=None, clock=time.monotonic_ns):
        if pynvml is None:
            try:
                import pynvml
            except ImportError:
                raise EnergyUnavailable("nvidia-ml-py is not installed "
                                        "(pip install 'olifant_mlx[nvml]')") from None
        self.nv, self.clock = pynvml, clock
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise EnergyUnavailable(f"NVML did not start (no NVIDIA driver?): {e}") from None
        try:
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                            for i in range(pynvml.nvmlDeviceGetCount())]
            if not self.handles:
                raise EnergyUnavailable("NVML found no NVIDIA GPU")
            self.names = [_name(pynvml, h) for h in self.handles]
            self.prev = []
            for i, h in enumerate(self.handles):
                try:
                    self.prev.append(pynvml.nvmlDeviceGetTotalEnergyConsumption(h))
                except pynvml.NVMLError as e:
                    raise EnergyUnavailable(f"gpu{i} ({self.names[i]}) has no total-energy "
                                            f"counter (Volta or newer needed): {e}") from None
        except BaseException:
            pynvml.nvmlShutdown()
            raise
        self.domains = tuple(f"gpu{i}" for i in range(len(self.handles)))

    def __call__(self):
        try:
            cur = [self.nv.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles]
        except self.nv.NVMLError as e:
            raise EnergyError(f"NVML read failed: {e}") from None
        t = self.clock()
        deltas, warnings = {}, []
        for d, p, c in zip(self.domains, self.prev, cur):
            if c < p:
                warnings.append(f"{d} energy counter went back (driver reloaded?): this interval "
                                "is not counted")
            deltas[d] = max(c - p, 0) / 1e3
        self.prev = cur
        return t, deltas, warnings

    def close(self):
        self.nv.nvmlShutdown()


def open_meter(arg=None, *, clock=time.monotonic_ns, pynvml=None, sync=None, **_):
    src = NvmlSource(pynvml, clock)
    info = MeterInfo("nvml", src.domains, src.domains, "counter",
                     "NVIDIA GPU board only",
                     source=", ".join(f"{d}={n}" for d, n in zip(src.domains, src.names)))
    return CounterMeter(info, src, clock=clock, on_close=src.close, sync=sync)

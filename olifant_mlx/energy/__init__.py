"""Energy meters: joules per generation, tokens per joule, mean power, honestly labelled.

    from olifant_mlx.energy import open_meter

    with open_meter(sync=mx.synchronize) as meter:   # $OLIFANT_ENERGY or auto-detected
        meter.start()
        ...generate...
        w = meter.stop()
    w.total_j, w.j_per_100_tokens(n), w.info.label   # None everywhere when not measured

Backends: ioreport and powermetrics (macOS), rapl and nvml (Linux), replay:PATH (a recorded
trace) and none. Platform libraries are imported only by the backend that needs them, so this
package imports anywhere.
"""
from olifant_mlx.energy.backends import ENV, ORDER, detect, open_meter, parse_spec, probe
from olifant_mlx.energy.meter import (EnergyError, EnergyUnavailable, Mark, MeterInfo, Power,
                                      Reading, Window)

__all__ = ["ENV", "ORDER", "EnergyError", "EnergyUnavailable", "Mark", "MeterInfo", "Power",
           "Reading", "Window", "detect", "open_meter", "parse_spec", "probe"]

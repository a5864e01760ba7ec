"""`python -m olifant_mlx energy`: which meter this machine has, and a few seconds of it."""
from __future__ import annotations

import json
import math
import os
import time

from olifant_mlx.energy.backends import ENV, choices, detect, open_meter, parse_spec
from olifant_mlx.energy.meter import Mark

NOT_MEASURED = "not measured"
MIN_INTERVAL = 0.01         # seconds: the meters update no faster (RAPL ~1 ms, NVML and IOReport slower)
MAX_READINGS = 100_000      # one run's readings, each kept and printed


def add_energy(e):
    e.add_argument("--backend", help=f"{choices()} (default: ${ENV}, else auto)")
    e.add_argument("--seconds", type=float, default=3.0, help="how long to read (default 3)")
    e.add_argument("--interval", type=float, default=0.5, help=f"seconds between readings (at least {MIN_INTERVAL})")
    e.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    e.set_defaults(func=cmd_energy)


def sample(meter, seconds: float, interval: float, on_tick=None) -> tuple[list[dict], object]:
    """Readings every `interval` for `seconds`: watts since the last one, joules since start."""
    start, t0 = meter.start(), time.monotonic()
    ticks = []
    for i in range(1, max(1, round(seconds / interval)) + 1):
        time.sleep(max(0.0, t0 + i * interval - time.monotonic()))
        p, r = meter.power(), meter.read()
        # up to the newest reading: a sampled meter then has a sample covering it, no wait
        since = None if r.joules is None else meter.between(start, Mark(r.t_ns, r.joules))
        ticks.append({"t_s": (r.t_ns - start.t_ns) / 1e9, "watts": p.watts, "total_w": p.total_w,
                      "joules": since and since.joules, "total_j": since and since.total_j,
                      "warnings": list(dict.fromkeys(p.warnings + r.warnings))})
        if on_tick:
            on_tick(ticks)
    return ticks, meter.stop()


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.3f}"


def _readings_table(info, ticks):
    from rich.table import Table

    t = Table(title="live readings", caption=f"total = {'+'.join(info.headline)}; "
              "(apart) = not in the total" if info.measured else None)
    t.add_column("t s", justify="right")
    if not info.measured:
        t.add_column("energy")
        for k in ticks:
            t.add_row(f"{k['t_s']:.2f}", NOT_MEASURED)
        return t
    for d in info.domains:
        t.add_column(f"{d} W" + ("" if d in info.headline else " (apart)"), justify="right")
    t.add_column("total W", justify="right", style="bold")
    t.add_column("total J", justify="right")
    for k in ticks:
        w = k["watts"] or {}
        t.add_row(f"{k['t_s']:.2f}", *(_fmt(w.get(d)) for d in info.domains), _fmt(k["total_w"]),
                  _fmt(k["total_j"]))
    return t


def _summary(window) -> str:
    if window.total_j is None:
        return f"window {window.seconds:.2f} s: energy {NOT_MEASURED}"
    apart = {d: j for d, j in window.joules.items() if d not in window.info.headline}
    return (f"window {window.seconds:.2f} s: {window.total_j:.3f} J "
            f"({'+'.join(window.info.headline)}), mean {window.mean_power_w:.3f} W"
            + "".join(f"; {d} {j:.3f} J apart" for d, j in apart.items()))


def cmd_energy(args) -> int:
    spec = args.backend or os.environ.get(ENV) or "auto"
    parse_spec(spec)                       # a bad name fails before anything is probed
    if not (MIN_INTERVAL <= args.interval < math.inf and 0 <= args.seconds < math.inf):   # NaN fails both
        raise ValueError(f"--interval must be a positive number (at least {MIN_INTERVAL} s) and --seconds a "
                         f"number >= 0, "
                         f"got --interval {args.interval} --seconds {args.seconds}")
    if args.seconds / args.interval > MAX_READINGS:
        raise ValueError(f"--seconds {args.seconds} / --interval {args.interval} is over {MAX_READINGS:,} "
                         f"readings: read less often (a longer --interval)")
    status = detect()
    meter = open_meter(spec)
    used = meter.info.backend
    if used not in dict(status):
        status.append((used, None))
    backends = [{"name": n, "available": r is None, "used": n == used, "reason": r}
                for n, r in status]
    with meter:
        if args.json:
            ticks, window = sample(meter, args.seconds, args.interval)
            print(json.dumps({**meter.info.as_dict(), "measured": meter.info.measured,
                              "backends": backends, "readings": ticks,
                              "window": window.as_dict()}, indent=2, allow_nan=False))
            return 0
        from rich.console import Console
        from rich.live import Live
        from rich.markup import escape
        from rich.table import Table

        console = Console()
        t = Table(title="energy backends")
        for col in ("backend", "status", "why not"):
            t.add_column(col)
        for b in backends:
            state = "used" if b["used"] else "available" if b["available"] else "unavailable"
            t.add_row(b["name"], state, escape(b["reason"] or ""))
        console.print(t)
        console.print(f"meter: [bold]{escape(meter.info.label)}[/bold]")
        if meter.info.source:
            console.print(f"reads: {escape(meter.info.source)}")
        if console.is_terminal:
            with Live(_readings_table(meter.info, []), console=console, auto_refresh=False) as live:
                ticks, window = sample(meter, args.seconds, args.interval, lambda ks: live.update(
                    _readings_table(meter.info, ks), refresh=True))
        else:
            ticks, window = sample(meter, args.seconds, args.interval)
            console.print(_readings_table(meter.info, ticks))
        console.print(_summary(window))
        for w in window.warnings:
            console.print(f"[yellow]warning:[/yellow] {escape(w)}")
    return 0

"""Pure helpers for the TUI: the live numbers, energy, the comparison, the calculator chart.

Nothing here touches MLX or Textual widgets, so it is cheap to test. (The provenance marks
are drawn by the widgets in flow.py, from the theme.)
"""
from __future__ import annotations

from rich.text import Text

from olifant_mlx.bindings import BINDINGS, TUI, applies
from olifant_mlx.engine.options import OptionsError, options
from olifant_mlx.measure import calc


def option_label(name: str) -> str:
    """An option as the TUI names it: its settings row's label, else the option's own name."""
    if name in BINDINGS and applies(name, TUI):
        return BINDINGS[name].label
    return options()[name].what if name in options() else name


def option_error(e: OptionsError) -> str:
    """An OptionsError as the TUI says it: the option's settings row in front of the engine's
    message, unless the message starts with it already ("max tokens must be ...")."""
    label, text = option_label(e.option) if e.option else "", str(e)
    said = not label or text.lower().startswith(label.lower())
    return text if said else f"{label}: {text}"


def context_error(e) -> str:
    """An engine.request.ContextError as the TUI says it: the options it advises changing by
    their settings rows."""
    return e.worded(lambda option: option_label(option) or option.replace("_", " "))


def fmt(value, spec: str, unit: str = "", missing: str = "not measured") -> str:
    return missing if value is None else f"{value:{spec}}{unit}"


def passes_saved(stats) -> int:
    """Verifier passes drafting saved: tokens a plain run would have needed one pass each for,
    minus the passes this one took."""
    return max(stats.tokens - stats.steps, 0)


def stats_text(stats, elapsed: float | None = None) -> str:
    """The live statistics panel (the paper's definitions: acceptance = accepted / drafted,
    mean accepted length = accepted drafts per verifier pass)."""
    lines = [f"tokens/s        {stats.tokens_per_s:8.1f}",
             f"tokens          {stats.tokens:8d}",
             f"acceptance      {stats.acceptance:8.1%}",
             f"mean acc. len.  {stats.mean_accepted_length:8.2f}",
             f"verifier passes {stats.steps:8d}",
             f"passes saved    {passes_saved(stats):8d}"]
    if elapsed is not None:
        lines.append(f"elapsed         {elapsed:7.2f}s")
    return "\n".join(lines)


def status_line(stats, state: str = "", energy_j: float | None = None) -> str:
    """The same numbers in one line, for the status bar under the output."""
    parts = [state] if state else []
    saved = passes_saved(stats)
    parts += [f"{stats.tokens} tok, {stats.tokens_per_s:.1f}/s", f"acc {stats.acceptance:.0%}",
              f"MAL {stats.mean_accepted_length:.2f}", f"{saved} {'pass' if saved == 1 else 'passes'} saved"]
    if energy_j is not None:
        parts.append(f"{energy_j:.2f} J")
    return " · ".join(parts)


def energy_text(window, n_tokens: int, label: str, live_j: float | None = None,
                live_w: float | None = None) -> str:
    """Joules, J/100 tokens, tokens/J and mean power for one generation (a meter Window), or
    while it runs the energy so far from the power samples; the meter's label last."""
    if window is None or window.total_j is None:
        if live_j is not None:
            return (f"energy so far ≈{live_j:7.2f} J\n"
                    f"power now     {fmt(live_w, '8.2f', ' W')}\n"
                    f"meter: {label}")
        return f"energy: not measured\nmeter: {label}"
    return (f"energy      {window.total_j:8.2f} J\n"
            f"J/100 tok   {fmt(window.j_per_100_tokens(n_tokens), '8.2f')}\n"
            f"tokens/J    {fmt(window.tokens_per_joule(n_tokens), '8.2f')}\n"
            f"mean power  {fmt(window.mean_power_w, '8.2f', ' W')}\n"
            f"meter: {label}")


def compare_text(plain, spec, plain_j=None, spec_j=None, same: bool | None = None, measured=None,
                 rates=()) -> str:
    """The Compare tab's result. With `measured` (rounds.Speedups over the rounds after the shown
    pair) and `rates` (their median tokens/s), the speedup is their median and range, with the
    load and the spread rule's warning; without, the shown pair's single ratio."""
    from olifant_mlx.measure import rounds

    plain_rate, spec_rate = rates or (plain.tokens_per_s, spec.tokens_per_s)
    speedup = spec_rate / plain_rate if plain_rate else None
    ratio = plain_j / spec_j if plain_j and spec_j else None
    rows = [f"plain        {plain_rate:8.1f} tok/s  {plain.tokens} tokens",
            f"speculative  {spec_rate:8.1f} tok/s  {spec.tokens} tokens, "
            f"acceptance {spec.acceptance:.1%}"]
    if measured is not None:
        rows += rounds.summary(measured, rounds.load_average())
    else:
        rows.append(f"speedup      {fmt(speedup, '.2f', 'x', 'n/a')} (measured)")
    rows.append(f"energy ratio {fmt(ratio, '.2f', 'x')} (plain J / speculative J)")
    if same is not None:
        rows.append(f"outputs identical: {'yes' if same else 'NO'}")
    return "\n".join(rows)


def calculator(alpha: float, gamma: int, c: float, verify_cost: float = 1.0,
               max_gamma: int = 12) -> dict:
    """Everything the calculator panel shows (olifant_mlx.measure.calc.report, the `calc`
    command's numbers); raises ValueError on bad input."""
    r = calc.report(alpha, gamma, c, verify_cost, max_gamma=max_gamma)
    return {"expected_tokens": r["expected_tokens"], "cost": r["cost_per_step"],
            "speedup": r["speedup"], "best": (r["best_gamma"], r["best_speedup"]),
            "curve": list(r["curve"].items()), "fast_path": r["fast_path_speedup"],
            "fast_best": (r["fast_path_best_gamma"], r["fast_path_best_speedup"])}


def calc_chart(result: dict, gamma: int, width: int = 30) -> Text:
    """Speedup vs gamma as unicode bars, marking 'you', 'best' and the 1.0x break-even."""
    top = max(max(s for _, s in result["curve"]), 1.0)
    t = Text()
    even = round(width / top)
    for g, s in result["curve"]:
        n = s / top * width
        full = int(n)
        bar = "█" * full + (" ▏▎▍▌▋▊▉"[int((n - full) * 8)] if full < width else "")
        style = "green" if s >= 1.0 else "red"
        if g == result["best"][0]:
            style = "bold magenta"
        line = bar.ljust(width)
        if 0 < even <= width and line[even - 1] == " ":
            line = line[:even - 1] + "┆" + line[even:]
        mark = " ◀ you" if g == gamma else ""
        mark += " ★ best" if g == result["best"][0] else ""
        t.append(f"γ={g:>2} ")
        t.append(line, style=style)
        t.append(f" {s:5.2f}x{mark}\n")
    t.append("┆ = 1.0x break-even; E counts the verifier's own token", style="dim")
    return t


def calc_summary(result: dict, alpha: float, gamma: int, c: float) -> str:
    g, s = result["best"]
    fg, fs = result["fast_best"]
    return (f"α={alpha:g}  γ={gamma}  c={c:g}\n"
            f"expected tokens/step E = {result['expected_tokens']:.4f}\n"
            f"cost per step          = {result['cost']:.4f}\n"
            f"speedup                = {result['speedup']:.4f}x\n"
            f"best γ in 1..12        = {g} ({s:.4f}x)\n"
            f"KV fast-path speedup   = {fmt(result['fast_path'], '.4f', 'x', 'n/a')}"
            f" (best γ {fg}: {fs:.4f}x)")


FAST_PATH_LINE = "Why the two differ: " + calc.FAST_PATH_NOTE + "."

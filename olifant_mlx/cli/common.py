"""What every command shares: argument spellings, output tables, the verifier argument."""
from __future__ import annotations

import json
import sys

from olifant_mlx.drafters.registry import help_text

MODEL_HELP = ("verifier: alias (smollm2-135m, gemma3-270m), GGUF file, MLX folder or hub id "
              "(default: Mistral-7B-v0.1 if cached, else smollm2-135m)")


def draft_tokens(value: str) -> int:
    """argparse type of -k: a whole number of draft tokens, 0..MAX_K (a usage error otherwise)."""
    import argparse

    from olifant_mlx.engine.loop import MAX_K

    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be a whole number, got {value!r}") from None
    if not 0 <= k <= MAX_K:
        raise argparse.ArgumentTypeError(f"k must be between 0 and {MAX_K}, got {k}")
    return k


def whole_number(minimum: int):
    """argparse type: a whole number >= minimum (a usage error naming the flag otherwise)."""
    import argparse

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {n}")
        return n

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def draft_help() -> str:
    return f"drafter: {help_text()}"


def table(title, rows) -> None:
    """A two-column table of (label, value) for people, on stdout."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_header=False)
    t.add_column("", style="bold")
    t.add_column("", justify="right")
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


def print_json(obj, indent=None) -> None:
    """JSON for machines on stdout (finite numbers only)."""
    sys.stdout.write(json.dumps(obj, indent=indent, allow_nan=False) + "\n")
    sys.stdout.flush()


def mb(n) -> str:
    return f"{n / 1e6:.2f} MB"

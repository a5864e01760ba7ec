"""How the server words an engine error for its clients: the request field, never a flag.

An OptionsError carries the option's field and a message of no surface's (engine/options.py);
the server puts the request field the option is in front of it and names it as `param`, as
every answer in OpenAI's error shape does."""
from __future__ import annotations

from olifant_mlx.bindings import BINDINGS, request_field


def option_error(e) -> tuple[str, str | None]:
    """An OptionsError as the server says it: (message, param), the request field the option is
    (its name where it is none) in front of the engine's message, unless the message names the
    field already ("precedent[2]: no such document ...")."""
    param = request_field(e.option) if e.option in BINDINGS else e.option or None
    said = param is None or str(e).startswith((f"{param}:", f"{param}["))
    return (str(e) if said else f"{param}: {e}"), param

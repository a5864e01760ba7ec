"""The errors of generation options, below every layer that raises them (the engine, precedents,
libraries) and every surface that words them (cli.common.option_error, server.wording.option_error,
tui.render.option_error): each carries the option's field, and a message in no surface's words."""
from __future__ import annotations


class OptionsError(ValueError):
    """A generation option out of range or out of place. `option` is its field; the message is
    the engine's, in words of no surface (options named as people say them: "max tokens", "KV
    bits"): each surface words the error with its own spelling of `option` in front (the CLI
    its flag, the server its request field, the TUI its settings row: cli.common.option_error,
    server.schemas.option_error, tui.render.option_error)."""

    def __init__(self, message: str, option: str = ""):
        super().__init__(message)
        self.option = option


class LibraryOptionError(OptionsError):
    """An OptionsError about a library named by an option (`library`) that cannot be used: missing,
    damaged, or built for another tokenizer. Its message, for the machine's own user, names files
    and the fix; a server answers every one alike, naming nothing but the name it was sent."""

    def __init__(self, message: str, option: str, library: str):
        super().__init__(message, option)
        self.library = library


class OptionFileError(OptionsError):
    """A file an option names that is not there or cannot be read (`--precedent FILE`): the
    user's error, as every other missing or unreadable file is (the CLI's status 1), not the
    command line's (an OptionsError's 2)."""

"""`python -m olifant_mlx COMMAND` (also the `olifant-mlx` console script).

`COMMANDS` lists every command once: its name, its module and its help line; the parser, its
`--help` listing and the choices are derived from it. A command is a function
`add_NAME(parser)` in `olifant_mlx/cli/MODULE.py` (`-` in NAME becomes `_`) that adds its
arguments and sets `func`; commands are thin: they validate arguments, then call the library
(draftmodel, verifier, engine.Session, measure, energy)."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class Command:
    """One command: `add_NAME` in olifant_mlx.cli.MODULE adds its arguments; `help` is its line
    in `--help`."""
    name: str
    module: str
    help: str

    def add_to(self, sub) -> argparse.ArgumentParser:
        parser = sub.add_parser(self.name, help=self.help)
        module = import_module(f"olifant_mlx.cli.{self.module}")
        getattr(module, "add_" + self.name.replace("-", "_"))(parser)
        return parser


# in the order of the --help listing
COMMANDS: dict[str, Command] = {c.name: c for c in (
    Command("train", "train", "train a draft model on a corpus"),
    Command("info", "train", "describe a model file (and the verifier it is for)"),
    Command("draft", "train", "draft k tokens after a prompt with a model alone"),
    Command("generate", "generate", "generate text with speculative decoding (drafting on by default)"),
    Command("chat", "generate", "a multi-turn conversation with an instruct verifier (kept in memory)"),
    Command("revise", "revise", "revise a document's clauses on instruction: the redline as Word tracked "
                                "changes, CriticMarkup or a word diff"),
    Command("cache-prompt", "generate", "a prompt's KV cache in a file, for generate --prompt-cache-file "
                                        "(mlx-lm's cache_prompt)"),
    Command("demo", "generate", "plain vs speculative on a legal prompt with the offline verifier"),
    Command("models", "models", "list verifiers and draft models, pull one from the hub, remove one, "
                                "show the cache size"),
    Command("energy", "energy", "show the energy meter and a few seconds of live readings"),
    Command("build-rest", "rest", "build the corpus retrieval drafters' files: a suffix index (rest:PATH), "
                                  "llama.cpp's static n-gram cache (ngram-cache:PATH)"),
    Command("rest-info", "rest", "describe a suffix index or n-gram cache file"),
    Command("library", "library", "precedent libraries: build one from a folder of documents, list, "
                                  "describe, remove"),
    Command("calc", "analysis", "speculative decoding speedup calculator"),
    Command("analyze", "analysis", "redundancy of a set of texts (paper's Table 5)"),
    Command("bench", "bench", "the paper's sweep: strategies x tasks x k x regimes"),
    Command("tui", "tui", "terminal UI: conversations and documents drafted live, export, energy, "
                          "calculator, draft models"),
    Command("serve", "serve", "an OpenAI-compatible local HTTP server (completions, chat, per-request "
                              "drafters, stats and energy in usage)"),
    Command("audit", "audit", "check an audit log (--audit-log): its hash chain, and the first line changed, "
                              "removed, inserted or reordered"),
)}


def register(command: Command) -> None:
    """Add a command (or replace the one of that name)."""
    COMMANDS[command.name] = command


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    from olifant_mlx import __version__

    p = argparse.ArgumentParser(prog=prog or _prog(),
                                description="Olifant: private on-device drafting with "
                                            "memory-based speculative decoding on MLX")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_to(sub)
    for command in sub.choices.values():     # `generate --version` too, as mlx-lm's commands
        command.add_argument("--version", action="version", version=f"{p.prog} {__version__}")
    p.set_defaults(commands=sub.choices)
    return p


def parse_args(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """parse_args, but a flag the command does not know is reported with that command's own
    usage (argparse leaves unknown flags to the top-level parser, whose usage says nothing of
    the command's flags)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser_of = args.commands.get(args.command, parser)
        parser_of.error(f"unrecognized arguments: {' '.join(unknown)}")
    del args.commands
    return args


def _prog() -> str:
    """How the user called us: the console script's name, or python -m olifant_mlx (also from
    python -c, as in a pytest-xdist worker, where argv[0] is "-c")."""
    import os

    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python -m olifant_mlx" if name in ("__main__.py", "-m", "-c", "") else name


def main(argv=None) -> int:
    from olifant_mlx.draftmodel.corpus import CorpusError
    from olifant_mlx.draftmodel.igtree import IGTreeError, TokenizerMismatch
    from olifant_mlx.draftmodel.suffix import SuffixError
    from olifant_mlx.energy import EnergyError
    from olifant_mlx.engine import ContextError, OptionsError
    from olifant_mlx.verifier import TokenizerError, VerifierError

    args = parse_args(build_parser(), argv)
    if getattr(args, "weights", None):     # read where the verifier is resolved, in any worker too
        import os

        os.environ["OLIFANT_GGUF_WEIGHTS"] = args.weights
    try:
        return args.func(args)
    except OptionsError as e:      # a usage error, said with the flag that caused it
        from olifant_mlx.cli.common import option_error
        from olifant_mlx.option_errors import OptionFileError

        sys.stderr.write(f"error: {option_error(e)}\n")
        return 1 if isinstance(e, OptionFileError) else 2     # a file not there: as every other one
    except ContextError as e:      # the options it advises changing, said as flags
        from olifant_mlx.bindings import flag_of

        sys.stderr.write(f"error: {e.worded(lambda option: flag_of(option) or option)}\n")
        return 1
    except BrokenPipeError:        # `... --json | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (IGTreeError, SuffixError, TokenizerMismatch, TokenizerError, CorpusError, VerifierError,
            ValueError, OSError, EnergyError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130

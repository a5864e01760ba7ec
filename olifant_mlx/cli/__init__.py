"""`python -m olifant_mlx COMMAND` (also the `olifant-mlx` console script).

Each command module has `add_parsers(sub)`; commands are thin: they validate arguments, then
call the library (draftmodel, verifier, engine.Session, measure, energy)."""
from __future__ import annotations

import argparse
import sys
from importlib import import_module

COMMAND_MODULES = ("olifant_mlx.cli.train", "olifant_mlx.cli.generate", "olifant_mlx.cli.models",
                   "olifant_mlx.cli.energy", "olifant_mlx.cli.rest", "olifant_mlx.cli.library",
                   "olifant_mlx.cli.analysis", "olifant_mlx.cli.bench", "olifant_mlx.cli.tui",
                   "olifant_mlx.cli.serve")


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    from olifant_mlx import __version__

    p = argparse.ArgumentParser(prog=prog or _prog(),
                                description="Olifant: private on-device drafting with "
                                            "memory-based speculative decoding on MLX")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        import_module(module).add_parsers(sub)
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
    """How the user called us: the console script's name, or python -m olifant_mlx."""
    import os

    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python -m olifant_mlx" if name in ("__main__.py", "-m", "") else name


def main(argv=None) -> int:
    from olifant_mlx.draftmodel.corpus import CorpusError
    from olifant_mlx.draftmodel.igtree import IGTreeError, TokenizerMismatch
    from olifant_mlx.draftmodel.suffix import SuffixError
    from olifant_mlx.energy import EnergyError
    from olifant_mlx.engine import OptionsError
    from olifant_mlx.verifier import TokenizerError, VerifierError

    args = parse_args(build_parser(), argv)
    if getattr(args, "weights", None):     # read where the verifier is resolved, in any worker too
        import os

        os.environ["OLIFANT_GGUF_WEIGHTS"] = args.weights
    try:
        return args.func(args)
    except OptionsError as e:      # a usage error, said with the flag that caused it
        from olifant_mlx.engine.options import flag_of

        flag = flag_of(e.option)
        sys.stderr.write(f"error: {flag + ': ' if flag else ''}{e}\n")
        return 2
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

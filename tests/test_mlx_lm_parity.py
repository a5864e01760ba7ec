"""docs/mlx-lm-parity.md cannot drift: every flag of the installed mlx-lm's generate, chat and
server parsers has a row, and every flag a row calls ours is accepted by our command."""
import ast
import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest

from olifant_mlx.cli import build_parser

DOC = Path(__file__).resolve().parent.parent / "docs" / "mlx-lm-parity.md"
SECTIONS = {"generate": "generate", "chat": "chat", "server": "serve"}      # theirs -> our command
PENDING = "(prompt-cache work)"       # rows whose flags another branch adds


def module(name):
    importlib.import_module(f"mlx_lm.{name}")
    return sys.modules[f"mlx_lm.{name}"]      # mlx_lm.generate is also a function's name


def their_flags(command: str) -> set:
    """The option strings of mlx-lm's parser for a command. generate and chat build theirs in
    setup_arg_parser(); the server builds its parser inside main(), so its add_argument calls
    are read from the source."""
    mod = module(command)
    if hasattr(mod, "setup_arg_parser"):
        parser = mod.setup_arg_parser()
        return {s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help")}
    flags = set()
    for node in ast.walk(ast.parse(inspect.getsource(mod))):
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument":
                    flags |= {a.value for a in call.args if isinstance(a, ast.Constant)
                              and str(a.value).startswith("-")}
    assert flags, f"no flags found in mlx_lm.{command}'s main()"
    return flags


def table_rows(command: str) -> list:
    """(their flags, our flags, note) of a section's table."""
    text = DOC.read_text()
    m = re.search(rf"^## {command} .*?$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"no '## {command}' section in {DOC.name}"
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            ours = [] if cells[1] == "no" else re.findall(r"`(-[^`]+)`", cells[1])
            assert cells[1] == "no" or ours, f"{line}: ours is 'no' or our flags in backticks"
            rows.append((re.findall(r"`(-[^`]+)`", cells[0]), ours, cells[2]))
    return rows


@pytest.mark.parametrize("command", list(SECTIONS))
def test_every_mlx_lm_flag_has_a_row(command):
    listed = {f for theirs, _, _ in table_rows(command) for f in theirs}
    missing = their_flags(command) - listed
    assert not missing, f"mlx_lm.{command} flags missing from {DOC.name}: {sorted(missing)}"


@pytest.mark.parametrize("command", list(SECTIONS))
def test_every_flag_called_ours_is_accepted(command):
    ours = build_parser("olifant")._subparsers._group_actions[0].choices[SECTIONS[command]]
    known = {s for a in ours._actions for s in a.option_strings}
    for theirs, flags, note in table_rows(command):
        if PENDING in note:
            continue
        assert all(f in known for f in flags), (theirs, flags)
        assert flags or note, f"{theirs}: an unsupported flag needs its reason"


def test_the_pending_rows_are_exactly_the_prompt_cache_flags():
    pending = {f for c in SECTIONS for theirs, _, note in table_rows(c) if PENDING in note for f in theirs}
    assert pending == {"--kv-bits", "--kv-group-size", "--prompt-cache-file"}


def test_a_missing_row_fails(monkeypatch, tmp_path):
    """The check can fail: a table without one of mlx-lm's flags is caught."""
    cut = tmp_path / DOC.name
    cut.write_text("\n".join(line for line in DOC.read_text().splitlines()
                             if not line.startswith("| `--xtc-threshold`")))
    monkeypatch.setattr(sys.modules[__name__], "DOC", cut)
    with pytest.raises(AssertionError, match="xtc-threshold"):
        test_every_mlx_lm_flag_has_a_row("generate")

"""The drafter and command registries: a new drafter kind or command is one entry (plus its
module), and every surface (--draft help, describe(), the TUI's drafter list, the parser,
`--help`) shows it with no other edit; the built-in kinds' properties are the entries'."""
import asyncio
import os
import subprocess
import sys
import types

import pytest

from olifant_mlx import cli
from olifant_mlx.drafters import registry
from olifant_mlx.drafters.base import DrafterBase
from olifant_mlx.drafters.ngram import WordNgramDrafter
from olifant_mlx.drafters.registry import (KINDS, DrafterKind, DrafterSpec, DrafterSpecError, build_drafter,
                                           describe, help_text, parse_spec, uses_history)
from olifant_mlx.engine import GenerationOptions, Session
from tiny_models import CharTok, tiny_verifier


class RepeatDrafter(DrafterBase):
    """Proposes the last token again, n times."""

    def __init__(self, n=2):
        self.name, self.n = "repeat", n

    def draft(self, context, k):
        return [context[-1]] * min(k, self.n) if context else []


@pytest.fixture
def repeat_kind(monkeypatch):
    """`repeat[:N]`: one registry entry with its builder (a drafter module's from_spec), undone after."""
    def from_spec(spec, tokenizer, history):
        return RepeatDrafter(spec.number)

    kinds, aliases = dict(KINDS), dict(registry.ALIASES)
    registry.register(DrafterKind("repeat", "int", "the last token again, N times (default 2)", from_spec, 2,
                                  aliases=("again",)))
    yield KINDS["repeat"]
    KINDS.clear()
    KINDS.update(kinds)
    registry.ALIASES.clear()
    registry.ALIASES.update(aliases)


def help_of(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 0
    return capsys.readouterr().out


def test_a_drafter_kind_in_one_entry_is_on_every_surface(repeat_kind, capsys):
    summary = repeat_kind.summary
    assert help_text().endswith(" | repeat[:N]") and ("repeat[:N]", summary) in describe()
    assert parse_spec("repeat:3") == DrafterSpec("repeat", "3") and parse_spec("again").text == "repeat"
    with pytest.raises(DrafterSpecError, match="1 to 16"):
        parse_spec("repeat:40")
    d = build_drafter("repeat")
    assert isinstance(d, RepeatDrafter) and d.n == 2 and build_drafter("repeat:5").n == 5
    # a hybrid's source and adaptive's inner, like any kind that proposes drafts itself
    assert parse_spec("hybrid:+repeat:2").sources == (DrafterSpec("repeat", "2"),)
    assert build_drafter("adaptive:repeat").inner.n == 2 and not uses_history(parse_spec("repeat"))
    # the command-line help (generate/tui --draft, bench --strategy), argparse's own, one parser
    for command in ("generate", "tui", "bench"):
        assert "repeat[:N]" in " ".join(help_of([command, "--help"], capsys).split()), command
    # the TUI's drafter list and its Select
    from olifant_mlx.tui.settings_tab import SettingsTab, compose_spec, drafters, split_spec

    assert ("repeat", "repeat[:N]", summary) in drafters()
    assert split_spec("adaptive:repeat:3") == ("repeat", "3", "adaptive")
    assert compose_spec("repeat", "3", "fixed") == "repeat:3"
    assert select_options(SettingsTab(None, "repeat:4", GenerationOptions())) == [u for u, _ in describe()]
    # a session drafts with it, losslessly
    options = GenerationOptions(k=3, max_tokens=12)
    plain = Session(tiny_verifier(), "none", options).generate("abcabc").tokens
    assert Session(tiny_verifier(), "repeat:3", options).generate("abcabc").tokens == plain


def select_options(tab) -> list:
    """The usages the Settings tab's drafter Select offers, the tab mounted alone."""
    from textual.app import App

    class One(App):
        def compose(self):
            yield tab

    async def go():
        app = One()
        async with app.run_test() as pilot:
            await pilot.pause()
            select = app.query_one("#set-drafter")
            return [str(o[0]) for o in select._options if o[1] is not None], select.value

    options, value = asyncio.run(go())
    assert value == "repeat"
    return options


def test_the_built_in_kinds_properties_are_their_entries():
    """What used to be lists of names (non-sources, history readers, aliases) is now fields;
    these are the same kinds as before."""
    assert {n for n, k in KINDS.items() if not k.source} == {"auto", "none", "hybrid", "adaptive", "prediction"}
    assert {n for n, k in KINDS.items() if k.history} == {"hybrid", "auto", "library", "prediction"}
    assert {n for n, k in KINDS.items() if k.own_length} == {"auto", "adaptive", "prediction"}
    assert [n for n, k in KINDS.items() if not k.drafts] == ["none"]
    assert registry.ALIASES == {"plain": "none", "": "none"}
    assert {n: k.default for n, k in KINDS.items() if k.arg == "int"} == {"ngram": 4, "ngram-words": 4, "lookup": 3}
    assert build_drafter("ngram").n == 4 and build_drafter("lookup").max_ngram == 3
    for bad in ("auto", "none", "hybrid", "adaptive:ngram"):
        with pytest.raises(DrafterSpecError, match=f"{bad.split(':')[0]} cannot be a hybrid's source"):
            parse_spec(f"hybrid:+{bad}")
    with pytest.raises(DrafterSpecError, match="ngram-words needs the verifier's tokenizer"):
        build_drafter("ngram-words:2")
    words = build_drafter("ngram-words:2", CharTok())           # built by ngram:words_from_spec
    assert isinstance(words, WordNgramDrafter) and words.n == 2 and build_drafter("ngram-words", CharTok()).n == 4


def test_a_non_source_kind_in_its_entry_is_refused_as_a_source(repeat_kind):
    registry.register(DrafterKind("picker", "", "chooses among candidates", lambda *a: RepeatDrafter(),
                                  source=False, history=True))
    with pytest.raises(DrafterSpecError, match="picker cannot be a hybrid's source"):
        parse_spec("hybrid:+picker")
    assert uses_history(parse_spec("adaptive:picker"))


@pytest.fixture
def hello_command(monkeypatch):
    """`hello`: a module olifant_mlx.cli.hello and one COMMANDS entry, undone after."""
    module = types.ModuleType("olifant_mlx.cli.hello")

    def add_hello(p):
        p.add_argument("--name", default="world")
        p.set_defaults(func=lambda args: print(f"hello {args.name}") or 0)

    module.add_hello = add_hello
    monkeypatch.setitem(sys.modules, module.__name__, module)
    commands = dict(cli.COMMANDS)
    cli.register(cli.Command("hello", "hello", "say hello to NAME"))
    yield
    cli.COMMANDS.clear()
    cli.COMMANDS.update(commands)


def test_a_command_in_one_entry_is_listed_parsed_and_run(hello_command, capsys):
    listing = help_of(["--help"], capsys)
    assert "say hello to NAME" in listing and ",hello}" in listing
    assert "--name NAME" in help_of(["hello", "--help"], capsys)
    assert cli.main(["hello", "--name", "you"]) == 0 and capsys.readouterr().out == "hello you\n"
    with pytest.raises(SystemExit):
        cli.main(["hello", "--bogus"])
    err = capsys.readouterr().err
    assert "hello [-h]" in err and "unrecognized arguments: --bogus" in err    # the command's own usage


def test_the_help_listing_is_the_commands_table():
    """`python -m olifant_mlx --help` lists COMMANDS, in order, each with its help line."""
    out = subprocess.run([sys.executable, "-m", "olifant_mlx", "--help"], capture_output=True, text=True,
                         check=True, env={**os.environ, "COLUMNS": "400"}).stdout
    listed = [line.split(None, 1) for line in out.splitlines() if line.startswith("    ")]
    assert listed == [[c.name, c.help] for c in cli.COMMANDS.values()]


def test_the_drafter_kind_table_is_the_dataclass():
    """docs/architecture.md's DrafterKind table (generated from the class's source, compared by
    tests/test_architecture.py) lists DrafterKind's fields, in order, each with its comment."""
    import dataclasses

    import architecture  # tools/architecture.py

    rows = architecture.class_fields(architecture.PACKAGE / "drafters" / "registry.py", "DrafterKind")
    assert [r[0] for r in rows] == [f.name for f in dataclasses.fields(DrafterKind)]
    assert all(comment for name, _, _, comment in rows if name != "name")

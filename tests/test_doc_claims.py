"""Statements of the docs that the code can contradict, each checked against the code (issue 38,
item 9): a statement a test cannot keep true is taken out of the docs instead.

- every flag a doc names after a command (`serve --drafters ...`) is one that command takes;
- docs/architecture.md's exit statuses are the ones `main` returns."""
import argparse
import re
from pathlib import Path

import pytest

from olifant_mlx.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def commands():
    """{command name: its parser} of `python -m olifant_mlx`."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    raise AssertionError("no subcommands")


def flags_of(parser) -> set:
    """Every option string of a parser and of its own subcommands (`library build`, `models pull`)."""
    found = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= flags_of(sub)
    return found


def named_flags(text, names):
    """(command, flag, the code span) for each `--flag` in an inline code span that starts with a
    command (`serve --x`, `python -m olifant_mlx serve --x`, `olifant-mlx serve --x`)."""
    for span in re.findall(r"`([^`\n]+)`", text):
        words = span.split()
        if words[:3] == ["python", "-m", "olifant_mlx"]:
            words = words[3:]
        elif words[:1] == ["olifant-mlx"]:
            words = words[1:]
        if words and words[0] in names:
            for word in words[1:]:
                if word.startswith("--"):
                    yield words[0], word.split("=")[0], span


def test_named_flags_reads_commands_and_their_flags():
    text = "a `serve --sources NAME` b `python -m olifant_mlx generate --json` c `--json` `calc`"
    assert list(named_flags(text, {"serve", "generate"})) == [
        ("serve", "--sources", "serve --sources NAME"), ("generate", "--json", "python -m olifant_mlx generate --json")]


def test_every_flag_the_docs_give_a_command_exists():
    parsers = commands()
    known = {name: flags_of(p) for name, p in parsers.items()}
    wrong = [f"{path.relative_to(ROOT)}: `{span}`: {name} has no {flag}"
             for path in DOCS for name, flag, span in named_flags(path.read_text(), parsers)
             if flag not in known[name]]
    assert not wrong, "\n".join(wrong)


def exit_status(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.fixture
def no_model_loads(monkeypatch):
    import mlx_lm

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded for a bad option")

    monkeypatch.setattr(mlx_lm, "load", refuse)


def test_architecture_md_exit_statuses_are_mains(no_model_loads, capsys, tmp_path):
    text = (ROOT / "docs" / "architecture.md").read_text()
    errors = text[text.index("## Errors"):]
    assert "`OptionsError` is a usage\nerror: one line naming the flag, exit status 2" in errors
    assert "(`error: ...`, exit status 1)" in errors
    # an OptionsError: a usage error (2), naming the flag
    code, err = exit_status(["generate", "--model", "smollm2-135m", "-p", "x", "-k", "99"], capsys)
    assert code == 2 and err.startswith("error: -k") and "Traceback" not in err
    # a drafter spec is an option: one the registry cannot parse is a usage error too
    code, err = exit_status(["generate", "--model", "smollm2-135m", "-p", "x", "--draft", "foo"], capsys)
    assert code == 2 and err.startswith("error: --draft: unknown drafter 'foo'")
    # a ValueError of another layer (a drafter spec's file that is not there): 1
    code, err = exit_status(["generate", "--model", "smollm2-135m", "-p", "x", "--draft",
                             f"olifant:{tmp_path / 'missing.olif'}"], capsys)
    assert code == 1 and "missing.olif cannot be read" in err


README_MAX_LINES = 249          # issue 38, item 8: the README stays under 250 lines
# a test's or CI's duration (`20 minutes`, `17.3 min`, `168 s`): it belongs in CONTRIBUTING.md or docs/
TIMING = re.compile(r"\b\d+(?:[.,]\d+)?\s*(?:s|sec|seconds?|min|minutes?|h|hours?)\b")


def test_readme_is_short_and_carries_no_timings():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, len(text.splitlines())
    assert not TIMING.findall(text), TIMING.findall(text)


def test_readme_explains_its_terms_once_and_lists_library_drafters():
    text = (ROOT / "README.md").read_text()
    for term in ("IGTree", "verifier pass", "mean accepted length"):
        assert text.count(f"*{term}*") == 1, f"the README explains {term!r} (in italics) once"
    drafters = text[text.index("Drafters (`--draft`"):]
    drafters = drafters[:drafters.index("\n\n")]
    assert "`library:NAME`" in drafters

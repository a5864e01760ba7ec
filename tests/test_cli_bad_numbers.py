"""The CLI reproductions of issue 37, item 13: a number no command can use, or a path that is not
there, is a one-line error (argparse's usage error, exit 2, or ours, exit 1) before any slow
work, never a traceback, a hang or a silent exit 0. The real CLI entry point, real files."""
import pytest

from olifant_mlx.cli import main


def run(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:            # argparse's usage errors
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


@pytest.mark.parametrize("argv,said", [
    (["library", "build", "x", ".", "--model", "smollm2-135m", "--window", "-3"], "--window: must be 1 to"),
    (["analyze", "README.md", "--tokenizer", "smollm2-135m", "--max-texts", "-1"], "--max-texts: must be >= 1"),
    (["analyze", "README.md", "--tokenizer", "smollm2-135m", "--n", "0"], "--n: must be >= 1"),
    # issue 45 item 10: was an OverflowError traceback from SQLite
    (["library", "search", "firm", "confidential", "-n", "99999999999999999999"], "-n: must be from 1 to 100,000"),
    (["library", "search", "firm", "confidential", "-n", "0"], "-n: must be from 1 to 100,000"),
])
def test_numbers_no_command_can_use_are_usage_errors(capsys, argv, said):
    code, err = run(argv, capsys)
    assert code == 2 and said in err, err


def test_a_search_for_more_passages_than_sqlite_counts_is_a_clear_error(tmp_path, monkeypatch):
    from olifant_mlx import passages

    class Lib:                      # search refuses before it opens anything
        name, path, meta = "firm", tmp_path, {}

    for n in (2 ** 64, 0, 10 ** 20, True):
        with pytest.raises(passages.PassageError, match="number of passages must be from 1 to 100,000"):
            passages.search(Lib(), "confidential", n=n)


def test_energy_refuses_millions_of_readings_instead_of_hanging(capsys):
    code, err = run(["energy", "--backend", "none", "--interval", "1e-9", "--seconds", "0.01"], capsys)
    assert code == 1 and "--interval must be a positive number (at least 0.01 s)" in err
    code, err = run(["energy", "--backend", "none", "--interval", "0.01", "--seconds", "1e9"], capsys)
    assert code == 1 and "readings" in err


def test_analyze_a_path_that_is_not_there_or_holds_nothing_fails(capsys, tmp_path):
    code, err = run(["analyze", "/nonexistent", "--tokenizer", "no-such-tokenizer"], capsys)
    assert code == 1 and "/nonexistent" in err and "does not exist" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, err = run(["analyze", str(empty), "--tokenizer", "no-such-tokenizer"], capsys)
    assert code == 1 and "holds no texts" in err

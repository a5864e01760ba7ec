"""The command line as mlx-lm users expect it, and every argument checked before any model
loads (asserted by making the loaders fail if called, not by a clock)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import olifant_mlx
from olifant_mlx.cli import build_parser, main
from olifant_mlx.draftmodel.igtree import Builder


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any attempt to load verifier weights fails the test."""
    import mlx_lm

    import olifant_mlx.verifier.loader as loader

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(mlx_lm, "load", refuse)
    monkeypatch.setattr(loader, "load_verifier", refuse)
    return refuse


@pytest.fixture
def foreign_model(tmp_path):
    b = Builder(vocab_size=64, tokenizer_name="other", tokenizer_digest=bytes(range(32)))
    b.add_document(np.random.default_rng(0).integers(0, 64, 200).tolist())
    path = tmp_path / "other.olif"
    b.build().save(str(path))
    return path


def run_main(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:            # argparse usage errors
        code = e.code
    err = capsys.readouterr().err
    return code, err


def test_argument_errors_come_before_any_model_load(no_model_loads, capsys, tmp_path, foreign_model):
    base = ["generate", "--model", "smollm2-135m", "-p", "x"]
    (tmp_path / "text.olif").write_text("plain text")
    os.mkfifo(tmp_path / "fifo")
    cases = [
        (["--draft", "foo"], "unknown drafter 'foo'"),
        (["--draft", f"olifant:{tmp_path / 'missing.olif'}"], "missing.olif cannot be read"),
        (["--draft", f"hybrid:{tmp_path / 'text.olif'}"], "text.olif is not an olifant draft model"),
        (["--top-p", "1.5"], "top-p must be in (0, 1]"),
        (["--temp", "-1"], "temperature must be"),
        (["--max-kv-size", "-5"], "max KV size"),
        (["--max-kv-size", "0"], "max KV size"),
        (["-m", "-3"], "max tokens"),
        (["--min-p", "2"], "min-p"),
        (["--top-k", "-1"], "top-k"),
        (["--repetition-penalty", "0"], "repetition penalty"),
        (["--history", str(tmp_path / "no-such-dir" / "h.bin")], "does not exist"),
        (["--history", str(tmp_path / "fifo")], "not a regular file"),
        (["--history", str(tmp_path / "h.bin"), "--draft", "lookup"], "--history needs a hybrid drafter"),
        (["--chat-template-config", "{not json"], "--chat-template-config is not JSON"),
        (["--energy", "bogus"], "unknown energy backend"),
        (["-k", "99"], "k must be between 0 and 64"),
    ]
    for extra, why in cases:
        code, err = run_main(base + extra, capsys)
        assert code in (1, 2) and why in err, (extra, code, err)
        assert "Traceback" not in err
    # an empty prompt (issue 48: `-p ''` ran): refused as the usage error it is, before any load
    for empty in ("", "  \n"):
        code, err = run_main(["generate", "--model", "smollm2-135m", "-p", empty], capsys)
        assert code == 2 and "the prompt (-p) is empty" in err, (empty, code, err)
    code, err = run_main(["cache-prompt", "--model", "smollm2-135m", "-p", "", "--prompt-cache-file",
                          str(tmp_path / "c.safetensors")], capsys)
    assert code == 2 and "the prompt (-p) is empty" in err, err
    # a draft model for another tokenizer: refused from the tokenizer alone (no weights)
    code, err = run_main(base + ["--draft", f"olifant:{foreign_model}"], capsys)
    assert code == 1 and "trained for tokenizer 'other'" in err and "train --model smollm2-135m" in err


def test_mlx_lm_spellings_are_accepted():
    p = build_parser("olifant")
    a = p.parse_args(["generate", "--draft-model", "m", "--num-draft-tokens", "4", "-m", "7", "--temp",
                      "0.5", "--min-p", "0.1", "--top-k", "3", "--system-prompt", "s", "--ignore-chat-template",
                      "--extra-eos-token", "<|im_end|>", "--repetition-penalty", "1.1"])
    assert (a.draft_model, a.k, a.max_tokens, a.temperature, a.min_p, a.top_k) == ("m", 4, 7, 0.5, 0.1, 3)
    assert a.ignore_chat_template and a.extra_eos_token == ["<|im_end|>"] and a.system_prompt == "s"
    g = p.parse_args(["generate"])
    assert g.prompt == "hello" and g.draft == "auto" and g.k == 8     # mlx-lm's default prompt; drafting on
    assert p.parse_args(["chat"]).draft == "auto"
    from olifant_mlx.cli.common import options_from

    assert options_from(p.parse_args(["generate", "--truncate"])).truncate       # the flag reaches the Session
    assert not options_from(g).truncate


def test_version_and_the_console_scripts_name(capsys):
    with pytest.raises(SystemExit):
        build_parser("olifant-mlx").parse_args(["--version"])
    assert capsys.readouterr().out.strip() == f"olifant-mlx {olifant_mlx.__version__}"
    for command in ("generate", "chat", "train", "serve", "tui", "bench", "models", "build-rest"):
        with pytest.raises(SystemExit):
            build_parser("olifant-mlx").parse_args([command, "--version"])
        assert capsys.readouterr().out.strip() == f"olifant-mlx {olifant_mlx.__version__}", command
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "--help"], capture_output=True, text=True)
    assert r.stdout.startswith("usage: python -m olifant_mlx")


def test_a_closed_pipe_is_not_an_error(tmp_path):
    b = Builder(vocab_size=64)
    b.add_document(list(range(60)))
    model = tmp_path / "m.olif"
    b.build().save(str(model))
    code = (f"import sys; sys.argv=['olifant', 'info', {str(model)!r}, '--json']\n"
            "from olifant_mlx.cli import main\nsys.exit(main())")
    r = subprocess.run(f"{sys.executable} -c \"{code}\" | head -c 5", shell=True, capture_output=True, text=True)
    assert r.stdout == "{\n  \"" and "Broken pipe" not in r.stderr and "Traceback" not in r.stderr


def test_models_command_lists_removes_and_refuses(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    b = Builder(vocab_size=64, tokenizer_name="tiny", tokenizer_digest=bytes(32))
    b.add_document(list(range(60)))
    b.build().save(str(tmp_path / "models" / "tiny.olif"))
    (tmp_path / "cache" / "models" / "smollm2-135m").mkdir(parents=True)
    (tmp_path / "cache" / "models" / "smollm2-135m" / "w.bin").write_bytes(b"0" * 1000)
    assert main(["models", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    drafts = listing["draft_models"]
    assert [d["tokenizer"] for d in drafts] == ["tiny"] and drafts[0]["vocab_size"] == 64
    smol = next(v for v in listing["verifiers"] if v["name"] == "smollm2-135m")
    assert smol["bytes"] == 1000 and listing["cache"]["bytes"] >= 1000
    assert main(["models", "rm", "smollm2-135m"]) == 0
    assert not (tmp_path / "cache" / "models" / "smollm2-135m").exists()
    outside = tmp_path / "elsewhere.olif"
    outside.write_bytes(b"x")
    code, err = run_main(["models", "rm", str(outside)], capsys)
    assert code == 1 and "not removed" in err and outside.exists()
    assert main(["models", "rm", str(tmp_path / "models" / "tiny.olif")]) == 0
    assert not (tmp_path / "models" / "tiny.olif").exists()


def test_auto_finds_the_draft_model_for_the_verifiers_tokenizer(tmp_path, monkeypatch):
    from olifant_mlx.drafters import resolve_auto

    class Ident:
        name, vocab_size, digest = "tiny", 64, bytes(32)

    monkeypatch.setenv("OLIFANT_MODELS", str(tmp_path))
    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path / "cache"))
    assert resolve_auto(Ident()).text == "adaptive:hybrid"          # nothing for this tokenizer yet
    for name, digest, n in (("small", bytes(32), 50), ("big", bytes(32), 400), ("foreign", bytes(range(32)), 900)):
        b = Builder(vocab_size=64, tokenizer_name="tiny", tokenizer_digest=digest)
        b.add_document((list(range(60)) * 10)[:n])
        b.build().save(str(tmp_path / f"{name}.olif"))
    assert resolve_auto(Ident()).text == f"adaptive:hybrid:{tmp_path / 'big.olif'}"


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_no_pytorch_notice_from_transformers(tmp_path):
    """olifant_mlx uses only transformers' tokenizers: its "PyTorch was not found" advisory is
    silenced at the source (olifant_mlx/__init__.py), for every command (train: a real one)."""
    notice = "PyTorch was not found"
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}
    alone = subprocess.run([sys.executable, "-c", "import transformers"], capture_output=True, text=True,
                           env=env, timeout=120)
    if notice not in alone.stderr:
        pytest.skip("transformers prints no PyTorch notice here (PyTorch is installed)")
    ours = subprocess.run([sys.executable, "-c", "import olifant_mlx, transformers"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert notice not in ours.stderr
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "train", "--model", "smollm2-135m", "--out",
                        str(tmp_path / "m.olif")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and notice not in r.stderr, r.stderr[-2000:]


def test_drafting_line_gives_tokens_per_pass_and_dashes_where_nothing_was_drafted():
    from olifant_mlx.cli.common import drafting_line
    from olifant_mlx.engine.stats import Stats

    plain = drafting_line("none", Stats(tokens=80, steps=80, stop_reason="max_tokens"))
    assert "1.00 tokens per verifier pass (80 passes for 80 tokens, 0 saved)" in plain
    assert "acceptance —, mean accepted length — (draft tokens accepted per verifier pass)" in plain
    assert "0.0%" not in plain and "0.00" not in plain.split("pass (")[1]
    drafted = drafting_line("lookup", Stats(tokens=80, steps=50, drafted=100, accepted=30))
    assert "1.60 tokens per verifier pass (50 passes for 80 tokens, 30 saved);" in drafted
    assert "acceptance 30.0% (30 of 100 drafted tokens), mean accepted length 0.60" in drafted
    # issue 48: 20 % acceptance and nothing saved, said so that the numbers add up
    even = drafting_line("auto", Stats(tokens=120, steps=120, drafted=35, accepted=7, stop_reason="max_tokens"))
    assert ("1.00 tokens per verifier pass (120 passes for 120 tokens, 0 saved: 7 draft tokens accepted, 7 "
            "passes with no token of their own); acceptance 20.0% (7 of 35 drafted tokens), mean accepted "
            "length 0.06 (draft tokens accepted per verifier pass)") in even
    worse = drafting_line("auto", Stats(tokens=10, steps=12, drafted=8, accepted=1))
    assert "(12 passes for 10 tokens, 2 more passes than tokens: 1 draft token accepted, 3 passes" in worse


def test_kv_window_note_when_the_window_is_smaller_than_the_run():
    from olifant_mlx.cli.common import kv_window_note
    from olifant_mlx.engine import GenerationOptions

    small = GenerationOptions(k=8, max_tokens=80, max_kv_size=64)
    note = kv_window_note(20, small)
    assert note.startswith("warning: --max-kv-size 64 is below prompt + max tokens + k (20 + 80 + 8 = 108)")
    assert "give --max-kv-size 108 or more" in note
    assert kv_window_note(20, small.replace(max_kv_size=108)) is None     # exactly enough
    assert kv_window_note(20, small.replace(max_kv_size=None)) is None
    assert kv_window_note(20, small.replace(k=0)) is None                 # plain: nothing to lose


@pytest.mark.slow
def test_generate_warns_about_a_small_kv_window():
    base = [sys.executable, "-m", "olifant_mlx", "generate", "--model", "smollm2-135m", "-m", "8",
            "-p", "THE SOFTWARE IS PROVIDED", "--max-kv-size", "16"]
    r = subprocess.run(base, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "warning: --max-kv-size 16 is below prompt + max tokens + k" in r.stderr
    plain = subprocess.run(base + ["--draft", "none"], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and "warning: --max-kv-size" not in plain.stderr


def test_models_table_keeps_paths_whole_at_80_columns(tmp_path):
    """At 80 columns a long draft-model path folds onto more lines; it is never cut with "…"."""
    import glob
    import shutil

    found = sorted(glob.glob(str(olifant_mlx_cache() / "drafts" / "*.olif")))
    if not found:
        pytest.skip("no draft model in the cache yet")
    cache = tmp_path / ("a-rather-long-cache-folder-name-for-this-test" * 2)
    (cache / "drafts").mkdir(parents=True)
    shutil.copy(found[0], cache / "drafts" / "legal-contracts-for-smollm2.olif")
    env = {**os.environ, "OLIFANT_CACHE": str(cache), "COLUMNS": "80"}
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "models"], capture_output=True, text=True,
                       env=env, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in r.stdout
    table = lines[next(i for i, line in enumerate(lines) if "┃ path" in line):]
    first_cells = "".join(line.split("│")[1].strip() for line in table if line.startswith("│"))
    assert str(cache / "drafts" / "legal-contracts-for-smollm2.olif") in first_cells


def olifant_mlx_cache():
    from olifant_mlx.files import cache_dir

    return cache_dir()

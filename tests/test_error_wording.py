"""One engine error, each surface's words: the engine raises an OptionsError with the option's
field and a message of no surface's (no flag, no request field); the command line puts the
flag in front, the server the request field (and names it as `param`, in a real HTTP answer),
the TUI the settings row (its label, or the option's name where it has none)."""
import asyncio

import pytest
from tui_fakes import fake_app, static_text

from olifant_mlx.engine.options import GenerationOptions, OptionsError

# the engine's words for a quantized cache with a sliding window (engine/options.py)
BOTH = ("a quantized KV cache cannot be a sliding window (mlx-lm has no quantized rotating cache): give KV "
        "bits or a max KV size, not both")


def test_the_engine_says_it_in_no_surfaces_words():
    with pytest.raises(OptionsError) as e:
        GenerationOptions(kv_bits=4, max_kv_size=64)
    assert (str(e.value), e.value.option) == (BOTH, "kv_bits")


def test_each_surface_words_an_options_error_its_own_way():
    from olifant_mlx.cli.common import option_error as cli
    from olifant_mlx.server.wording import option_error as server
    from olifant_mlx.tui.render import option_error as tui

    e = OptionsError("the engine's words", "max_tokens")
    assert cli(e) == "--max-tokens: the engine's words"
    assert server(e) == ("max_tokens: the engine's words", "max_tokens")
    assert tui(e) == "max tokens: the engine's words"
    # a message that names the option as the surface does already is not named twice
    assert tui(OptionsError("max tokens must be ...", "max_tokens")) == "max tokens must be ..."
    assert server(OptionsError("precedent[2]: no such document", "precedent_documents")) == (
        "precedent[2]: no such document", "precedent")
    # an option no surface spells (the engine's alone, or no option at all) keeps the message as it is
    assert cli(OptionsError("x", "pass_cost")) == "x" and server(OptionsError("x")) == ("x", None)


def test_the_command_line_says_the_flag(monkeypatch, capsys):
    import mlx_lm

    import olifant_mlx.verifier.loader as loader
    from olifant_mlx.cli import main

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr(mlx_lm, "load", refuse)
    monkeypatch.setattr(loader, "load_verifier", refuse)
    code = main(["generate", "--model", "smollm2-135m", "-p", "x", "--kv-bits", "4", "--max-kv-size", "64"])
    assert (code, capsys.readouterr().err) == (2, f"error: --kv-bits: {BOTH}\n")


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from server_helpers import DEFAULTS, LIMITS
    from tiny_models import tiny_chat_verifier

    from olifant_mlx.drafters.registry import parse_spec
    from olifant_mlx.server.app import start
    from olifant_mlx.server.config import DrafterChoice

    run = start(tiny_chat_verifier(), DrafterChoice({"lookup": parse_spec("lookup")}, "lookup"), DEFAULTS, LIMITS)
    yield run
    run.stop()


def test_the_server_says_the_request_field(server):
    """Over loopback HTTP: the options' own conflict (made when the request is planned) and an
    error the engine raises once the request is queued (engine.request.plan, via the queue)."""
    httpx = pytest.importorskip("httpx")
    with httpx.Client(base_url=server.url, timeout=120) as client:
        r = client.post("/v1/completions", json={"prompt": "x", "kv_bits": 4, "max_kv_size": 64})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["message"], error["param"], error["code"]) == (f"kv_bits: {BOTH}", "kv_bits", "invalid_value")
        r = client.post("/v1/completions", json={"prompt": "x", "max_verbatim": 5, "max_tokens": 4})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == "max_verbatim" and error["message"].startswith(
            "max_verbatim: max verbatim needs a library to compare with"), error
        assert "--" not in error["message"], error          # no flag reaches an HTTP client


def test_a_tui_run_that_fails_on_an_option_says_its_settings_row():
    """A generation's failure (the engine's plan raising once the run starts) in the TUI's words:
    the settings row's label, never the exception type or a flag."""
    from olifant_mlx.tui.workers import failure

    budget = OptionsError("a precedent budget of 20 tokens holds no passage", "precedent_tokens")
    assert failure(budget) == "precedent tokens: a precedent budget of 20 tokens holds no passage"
    assert failure(RuntimeError("boom")) == "RuntimeError: boom"


def test_the_tui_says_the_settings_row():
    async def go():
        app = fake_app(options=GenerationOptions(kv_bits=4, max_tokens=6))
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("f7")
            app.query_one("#set-max-kv").value = "64"
            await pilot.pause()
            assert static_text(app, "#set-check") == f"✗ KV bits: {BOTH}"

    asyncio.run(go())


def test_a_context_error_advises_each_surfaces_options():
    """A prompt that does not fit: the engine says the numbers and what to change (max tokens,
    truncate) in no surface's words; the CLI names the flags, the TUI its settings rows."""
    from tiny_models import Tok, tiny_llama

    from olifant_mlx.bindings import flag_of
    from olifant_mlx.engine import ContextError, Session
    from olifant_mlx.tui.render import context_error, option_label
    from olifant_mlx.verifier import Verifier

    session = Session(Verifier(tiny_llama(0), Tok(), Tok(), "tiny", context_length=40), "none")
    with pytest.raises(ContextError) as e:
        session.plan("x" * 35, GenerationOptions(max_tokens=10))
    tail = "ask for fewer tokens ({}), or {} to keep the prompt's last 30 tokens"
    assert str(e.value).endswith(tail.format("max tokens", "truncate")) and "--" not in str(e.value)
    assert e.value.worded(lambda o: flag_of(o) or o).endswith(tail.format("--max-tokens", "--truncate"))
    assert context_error(e.value).endswith(tail.format(option_label("max_tokens"), option_label("truncate")))

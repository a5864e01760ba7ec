"""One option, stated once: a field added to GenerationOptions (here a subclass standing in
for the edited dataclass) is a command-line flag, a server request field and a TUI settings
row with no other edit, and a bad value gives the same message from the same check on each
surface, after the surface's own spelling of the option."""
import asyncio
import json
from dataclasses import dataclass

import pytest
from tui_fakes import fake_app, static_text

import olifant_mlx.engine.options as table
from olifant_mlx.engine.options import GenerationOptions, OptionsError, check_option, option


@dataclass(frozen=True)
class Wider(GenerationOptions):
    widgets: int = option(2, what="widgets", low=1, high=9, flags=("--widgets",),
                          help="widgets per pass (default 2)", server="widgets", tui="widgets",
                          tui_section="sampling")


@pytest.fixture
def wider(monkeypatch):
    """The options table as it is once `widgets` is a field."""
    monkeypatch.setattr(table, "GenerationOptions", Wider)
    monkeypatch.setattr(table, "_OPTIONS", {})
    assert "widgets" in table.options()
    with pytest.raises(OptionsError) as e:
        check_option("widgets", 0)
    return str(e.value)          # the one message a bad value gets


def test_a_new_field_is_a_flag(wider, monkeypatch, capsys):
    import mlx_lm

    import olifant_mlx.verifier.loader as loader
    from olifant_mlx.cli import build_parser, main
    from olifant_mlx.cli.common import options_from

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(mlx_lm, "load", refuse)
    monkeypatch.setattr(loader, "load_verifier", refuse)
    assert wider == "widgets must be between 1 and 9 (a whole number), got 0"
    parser = build_parser("olifant")
    for command in ("generate", "chat", "tui"):
        args = parser.parse_args([command, "--widgets", "3"])
        assert options_from(args).widgets == 3, command
    assert options_from(parser.parse_args(["generate"])).widgets == 2      # the field's default
    generate = parser._subparsers._group_actions[0].choices["generate"]
    assert "widgets per pass (default 2)" in generate.format_help()
    code = main(["generate", "--model", "smollm2-135m", "-p", "x", "--widgets", "0"])
    assert code == 2 and capsys.readouterr().err == f"error: --widgets: {wider}\n"


def test_a_new_field_is_a_request_field(wider):
    from olifant_mlx.server import schemas
    from olifant_mlx.server.config import Limits
    from olifant_mlx.server.queue import ModelInfo

    info = ModelInfo("tiny", 128, 64, False, ("none",), "none", "none")
    for body in (schemas.CompletionBody, schemas.ChatBody):
        assert "widgets" in schemas.with_option_fields(body).model_fields
    request = schemas.with_option_fields(schemas.CompletionBody)

    def plan(fields):
        req = schemas.parse_body(json.dumps({"prompt": "x", **fields}).encode(), request)
        return schemas.plan_completion(req, info, Wider(), Limits())

    assert plan({"widgets": 4}).options.widgets == 4 and plan({}).options.widgets == 2
    with pytest.raises(schemas.ApiError) as e:
        plan({"widgets": 0})
    assert e.value.status == 400 and e.value.body() == {"error": {
        "message": f"widgets: {wider}", "type": "invalid_request_error", "param": "widgets",
        "code": "invalid_value"}}
    with pytest.raises(schemas.ApiError) as e:
        plan({"widgets": "4"})                      # strict, as every field: "4" is no number
    assert e.value.param == "widgets" and e.value.code == "invalid_type"


def test_a_new_field_is_a_settings_row(wider):
    async def go():
        app = fake_app(options=Wider(max_tokens=6))
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("f7")
            field = app.query_one("#set-widgets")
            assert field.value == "2"
            field.value = "0"
            await pilot.pause()
            assert static_text(app, "#set-check") == f"✗ {wider}"
            field.value = "5"
            await pilot.pause()
            from olifant_mlx.tui.settings_tab import SettingsTab

            assert app.query_one(SettingsTab).read().options.widgets == 5

    asyncio.run(go())

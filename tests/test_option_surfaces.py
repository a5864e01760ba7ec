"""One option, stated once: a field added to GenerationOptions (here a subclass standing in
for the edited dataclass) and its row in the binding table (olifant_mlx.bindings) is a
command-line flag, a server request field and a TUI settings row with no other edit, and a bad
value gives the same message from the same check on each surface, after the surface's own
spelling of the option. The table covers every field, each surface it names can spell the
option, and k's default lives in one place."""
import asyncio
import json
from dataclasses import dataclass

import pytest
from tui_fakes import fake_app, static_text

import olifant_mlx.engine.options as table
from olifant_mlx import bindings
from olifant_mlx.architecture import k_defaults, k_defaults_in
from olifant_mlx.bindings import GENERATE, SERVE, TUI, bind
from olifant_mlx.engine.options import GenerationOptions, OptionsError, check_option, option


@dataclass(frozen=True)
class Wider(GenerationOptions):
    widgets: int = option(2, what="widgets", low=1, high=9)
    gadget: str | None = option(None, what="the gadget", kind="text", optional=True, rank_local=True)


WIDGETS = bind(GENERATE, SERVE, TUI, flags=("--widgets",), help="widgets per pass (default %(default)s)",
               label="widgets", section="sampling")


@pytest.fixture
def wider(monkeypatch):
    """The options as they are once `widgets` is a field, and its row in the binding table."""
    monkeypatch.setattr(table, "GenerationOptions", Wider)
    monkeypatch.setattr(table, "_OPTIONS", {})
    monkeypatch.setitem(bindings.BINDINGS, "widgets", WIDGETS)
    monkeypatch.setitem(bindings.BINDINGS, "gadget", bind())
    assert "widgets" in table.options()
    assert bindings.table_problems(table.options()) == []
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


def test_a_new_field_travels_to_the_ranks_unless_rank_local(wider):
    """Whether the other ranks of a sharded verifier get an option is the option's (`rank_local`),
    not the binding table's: a new field travels, a rank-local one stays on rank 0."""
    from olifant_mlx.engine.distributed import options_dict

    sent = options_dict(Wider(widgets=7, gadget="rank0.bin", history="rank0.hist"))
    assert sent["widgets"] == 7 and sent["k"] == 8
    assert "gadget" not in sent and "history" not in sent and "precedents" not in sent
    assert set(sent) == {n for n, o in table.options().items() if not o.rank_local}


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


def test_the_binding_table_is_the_options():
    """A row per field, in order; every surface a row names can spell it (flags, a label)."""
    assert bindings.table_problems(table.options()) == []


def test_the_binding_table_check_can_fail():
    broken = {"k": bind(GENERATE, "fax"), "seed": bind(TUI, after="k"), "top_k": bind(SERVE, flags=("--top-k",))}
    assert bindings.table_problems(["k", "top_k", "seed"], broken) == [
        "the table's rows are not the fields ['k', 'top_k', 'seed']",
        "k: no surface ['fax']",
        "k: a flag of ['generate'] needs its flags",
        "seed: a settings row needs a label",
        "seed: follows 'k', which has no settings row"]


def test_ks_default_lives_in_one_place():
    """GenerationOptions.k's default is the one literal; every surface (flags, the TUI's and the
    server's defaults, the commands without options) reads it (olifant_mlx.architecture's scan)."""
    places = [(f, where) for f, where, *_ in k_defaults()]
    assert places == [("olifant_mlx/engine/options.py", "GenerationOptions.k")], places


def test_the_k_default_scan_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f(x, k=8):\n    pass\nK_ = 3\nclass A:\n    k: int = field(8)\n"
                 "p.add_argument('-k', type=int, default=8)\np.add_argument('--gamma', '-k', default=4)\n"
                 "def g(k=None, *, num_draft_tokens=5):\n    pass\n")
    assert [what for _, what, _ in k_defaults_in(f)] == [
        "parameter k=", "the field's default", "-k default=", "parameter num_draft_tokens="]


# issue 45 item 9: repetition_context_size has an upper bound, in its definition, so every surface
# refuses 2^40 before any model loads (was: a 500 from the server; "Slice indices must be 32-bit
# integers" on the CLI after the model loaded)
def test_repetition_context_size_is_bounded_on_every_surface(monkeypatch, capsys):
    import olifant_mlx.verifier.loader as loader
    from olifant_mlx.cli import main
    from olifant_mlx.server import schemas
    from olifant_mlx.server.config import Limits
    from olifant_mlx.server.queue import ModelInfo

    with pytest.raises(OptionsError, match="repetition context size must be between 1 and 1048576 "):
        GenerationOptions(repetition_context_size=2 ** 40)
    check_option("repetition_context_size", table.MAX_REPETITION_CONTEXT)
    monkeypatch.setattr(loader, "load_verifier", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main(["generate", "--model", "smollm2-135m", "-p", "x", "--repetition-context-size", str(2 ** 40)]) == 2
    assert capsys.readouterr().err.startswith("error: --repetition-context-size: repetition context size must be")
    request = schemas.with_option_fields(schemas.CompletionBody)
    req = schemas.parse_body(json.dumps({"prompt": "x", "repetition_context_size": 2 ** 40}).encode(), request)
    with pytest.raises(schemas.ApiError) as e:
        schemas.plan_completion(req, ModelInfo("tiny", 128, 64, False, ("none",), "none", "none"),
                                GenerationOptions(), Limits())
    assert e.value.status == 400 and e.value.param == "repetition_context_size"

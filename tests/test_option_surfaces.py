"""One option, stated once: the binding table (olifant_mlx.bindings) covers every field of
GenerationOptions, each surface it names can spell the option, a bound in the option's
definition holds on every surface, and k's default lives in one place. A new option reaching
every surface from its field and its row is tests/test_extensions.py's."""
import json

import pytest
from architecture import k_defaults, k_defaults_in  # tools/architecture.py

import olifant_mlx.engine.options as table
from olifant_mlx import bindings
from olifant_mlx.bindings import GENERATE, SERVE, TUI, bind
from olifant_mlx.engine.options import GenerationOptions, OptionsError, check_option


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
    server's defaults, the commands without options) reads it (tools/architecture.py's scan)."""
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


# issue 46 item 4: the drafter spec is a row of the table like every other option: a field (a
# spec, checked by the registry without reading its files; None: the Session's own drafter), the
# flag --draft on every command that generates (with mlx-lm's --draft-model MODEL as its alias),
# the server's "draft" field (tests/test_serve_options.py: a configured name, never a spec) and
# the TUI's drafter row; never sent to a sharded verifier's other ranks (rank 0 drafts)
def test_the_drafter_spec_is_an_option_with_a_flag_on_every_command():
    from olifant_mlx.cli import build_parser
    from olifant_mlx.cli.common import options_from
    from olifant_mlx.engine.distributed import options_dict

    assert GenerationOptions().draft is None
    with pytest.raises(OptionsError) as e:
        GenerationOptions(draft="foo")
    assert e.value.option == "draft" and str(e.value).startswith("unknown drafter 'foo'")
    with pytest.raises(OptionsError, match="the drafter must be a drafter spec"):
        check_option("draft", 3)
    assert GenerationOptions(draft="olifant:/nowhere/x.olif").draft == "olifant:/nowhere/x.olif"  # read when built
    parser = build_parser("olifant")
    for command in ("generate", "chat", "tui", "serve"):
        assert options_from(parser.parse_args([command, "--draft", "lookup:2"])).draft == "lookup:2", command
        assert options_from(parser.parse_args([command, "--draft-model", "m"])).draft == "neural:m", command
    for command in ("generate", "chat", "tui"):       # the commands draft unless told not to
        assert options_from(parser.parse_args([command])).draft == "auto", command
    assert options_from(parser.parse_args(["serve"])).draft is None     # serve's: parse_drafters' auto
    assert table.options()["draft"].rank_local
    assert "draft" not in options_dict(GenerationOptions(draft="lookup"))


def test_a_sessions_drafter_comes_from_the_options_unless_given():
    """Session(verifier, drafter, options): the drafter given (a spec or an object), else
    options.draft, else none; a plan's drafter: the one given, else options.draft where it asks
    for another than the Session's default one, else the Session's own (built once)."""
    from tiny_models import tiny_verifier

    from olifant_mlx.drafters.base import NoDrafter
    from olifant_mlx.drafters.registry import parse_spec
    from olifant_mlx.engine import Session

    v = tiny_verifier()
    assert Session(v).spec.kind == "none"
    session = Session(v, options=GenerationOptions(draft="lookup", max_tokens=4))
    assert session.spec.kind == "lookup"
    assert Session(v, "ngram", GenerationOptions(draft="lookup")).spec.kind == "ngram"
    obj = NoDrafter()
    assert Session(v, obj, GenerationOptions(draft="lookup")).drafter is obj
    assert session.plan("abc").drafting is session.drafting
    assert session.plan("abc", GenerationOptions(max_tokens=4)).drafting is session.drafting
    assert session.plan("abc", session.options.replace(k=2)).drafting is session.drafting
    assert session.plan("abc", GenerationOptions(draft="ngram:2")).drafting.spec.text == "ngram:2"
    assert session.plan("abc", GenerationOptions(draft="ngram:2"), drafter="none").drafting.spec.kind == "none"
    # a Session made with a drafter (the TUI's: "none", then with_drafter) drafts with it for options naming it
    other = Session(v, "none").with_drafter(parse_spec("adaptive:ngram:3"))
    assert other.plan("abc", GenerationOptions(draft="adaptive:ngram:3")).drafting is other.drafting
    assert other.plan("abc", GenerationOptions(draft="lookup")).drafting.spec.text == "lookup"
    made = Session(v, obj, GenerationOptions(draft="auto"))
    assert made.plan("abc", GenerationOptions(draft="auto", k=2)).drafter is obj


def test_the_drafter_is_a_settings_row_made_from_its_binding():
    """The TUI's drafter row: the row's label and id, its value the option's (checked as the
    option is, a bad spec named beside it), the spec the next generation drafts with."""
    import asyncio

    from textual.widgets import Checkbox, Input, Label, Select
    from tui_fakes import fake_app, static_text

    from olifant_mlx.tui.settings_tab import SettingsTab, option_rows, row_id

    assert option_rows()["generation"][0] == "draft" and row_id("draft") == "set-drafter"

    async def go():
        app = fake_app(draft="adaptive:ngram:3", options=GenerationOptions(k=5))
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("f7")
            row = app.query_one("#set-drafter", Select)
            assert row.value == "ngram" and str(row.parent.query_one(Label).content) == bindings.BINDINGS["draft"].label
            assert app.query_one("#set-draft-arg", Input).value == "3"
            assert app.query_one("#set-adaptive", Checkbox).value
            s = app.query_one(SettingsTab).read()
            assert s.options.draft == s.draft.text == "adaptive:ngram:3" and s.options.k == 5
            app.query_one("#set-draft-arg", Input).value = "99"
            await pilot.pause()
            assert "N must be a whole number from 1 to 16" in static_text(app, "#set-draft-arg-error")
            assert static_text(app, "#set-check").startswith("✗")
            app.query_one("#set-draft-arg", Input).value = "2"
            await pilot.pause()
            assert app.query_one(SettingsTab).read().options.draft == "adaptive:ngram:2"

    asyncio.run(go())

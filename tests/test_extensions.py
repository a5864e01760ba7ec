"""Toy extensions, registered while a test runs and undone after it: an option, a drafter kind
and a TUI tab, each checked on every surface it should reach with no other edit — the command
line (a real flag parsed, a real generation on the tiny model), the server (a real loopback
server, a body accepted and a bad one refused with 400 naming the field), the TUI (its settings
rows, its drafter list, its tabs and keys) and the request a generation runs with. What adding
one takes is these tests passing (issue 46), not a count of the places that name the entries."""
import asyncio
import json
from dataclasses import dataclass

import pytest
from textual.widgets import Input, Select, Static, TabbedContent, TabPane
from tiny_models import tiny_chat_verifier, tiny_verifier
from tui_fakes import fake_app, static_text

import olifant_mlx.engine as engine
import olifant_mlx.engine.options as table
import olifant_mlx.verifier
from olifant_mlx import bindings
from olifant_mlx.bindings import GENERATE, SERVE, TUI
from olifant_mlx.cli import build_parser, main
from olifant_mlx.cli.common import options_from
from olifant_mlx.drafters import registry
from olifant_mlx.drafters.base import DrafterBase
from olifant_mlx.engine import GenerationOptions, Session
from olifant_mlx.engine.options import OptionsError, check_option, option

httpx = pytest.importorskip("httpx")


def requests_planned(monkeypatch) -> list:
    """The Requests the commands plan from now on (Session.plan, wrapped): what a generation runs with."""
    planned, real = [], engine.Session.plan

    def spy(*args, **kw):
        planned.append(real(*args, **kw))
        return planned[-1]

    monkeypatch.setattr(engine.Session, "plan", spy)
    return planned


def generate(monkeypatch, capsys, *argv) -> dict:
    """`generate --json` on the tiny verifier (what --model names is not loaded): its JSON."""
    monkeypatch.setattr(olifant_mlx.verifier, "load_verifier", lambda *a, **k: tiny_verifier())
    assert main(["generate", "--model", "tiny", "-p", "abcabcabc", "-m", "12", "-k", "3", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out.split("\n==========")[0])


def post(run, path, body) -> httpx.Response:
    return httpx.post(run.url + path, json={"model": "tiny", **body}, timeout=120)


# ---- a toy option ----------------------------------------------------------------------------

@dataclass(frozen=True)
class WithToy(GenerationOptions):
    """GenerationOptions once `toy_widgets` is a field (a subclass standing in for the edit)."""
    toy_widgets: int = option(2, what="toy widgets", low=1, high=9)
    toy_gadget: str | None = option(None, what="the toy gadget", kind="text", optional=True, rank_local=True)


@pytest.fixture
def toy_option(monkeypatch):
    """The option: its field and its row in the binding table (and a rank-local one, bound to no
    surface); the one message a bad value gets."""
    monkeypatch.setattr(table, "GenerationOptions", WithToy)
    monkeypatch.setattr(table, "_OPTIONS", {})
    monkeypatch.setitem(bindings.BINDINGS, "toy_widgets",
                        bindings.bind(GENERATE, SERVE, TUI, flags=("--toy-widgets",), label="toy widgets",
                                      help="toy widgets a pass (default %(default)s)", section="sampling"))
    monkeypatch.setitem(bindings.BINDINGS, "toy_gadget", bindings.bind())
    assert bindings.table_problems(table.options()) == []
    with pytest.raises(OptionsError) as e:
        check_option("toy_widgets", 10)
    return str(e.value)


def test_a_toy_option_travels_to_the_ranks_unless_rank_local(toy_option):
    """Whether the other ranks of a sharded verifier get an option is the option's (`rank_local`),
    not the binding table's: a new field travels, a rank-local one stays on rank 0."""
    from olifant_mlx.engine.distributed import options_dict

    sent = options_dict(WithToy(toy_widgets=7, toy_gadget="rank0.bin", history="rank0.hist"))
    assert sent["toy_widgets"] == 7 and sent["k"] == 8
    assert "toy_gadget" not in sent and "history" not in sent and "precedents" not in sent
    assert set(sent) == {n for n, o in table.options().items() if not o.rank_local}


def test_a_toy_option_is_a_flag_and_reaches_the_request(toy_option, monkeypatch, capsys):
    parser = build_parser("olifant")
    for command in ("generate", "chat", "tui", "serve"):
        assert options_from(parser.parse_args([command, "--toy-widgets", "7"])).toy_widgets == 7, command
    assert options_from(parser.parse_args(["generate"])).toy_widgets == 2
    assert "toy widgets a pass (default 2)" in parser._subparsers._group_actions[0].choices["generate"].format_help()
    planned = requests_planned(monkeypatch)
    assert generate(monkeypatch, capsys, "--toy-widgets", "5")["stats"]["tokens"] == 12
    assert [r.options.toy_widgets for r in planned] == [5]
    monkeypatch.setattr(olifant_mlx.verifier, "load_verifier", lambda *a, **k: pytest.fail("loaded before the check"))
    assert main(["generate", "--model", "tiny", "-p", "x", "--toy-widgets", "10"]) == 2
    assert capsys.readouterr().err == f"error: --toy-widgets: {toy_option}\n" and len(planned) == 1


def test_a_toy_option_is_a_request_field_of_a_real_server(toy_option):
    from olifant_mlx.server import schemas
    from olifant_mlx.server.app import start
    from olifant_mlx.server.config import DrafterChoice, Limits
    from olifant_mlx.server.queue import ModelInfo

    body = schemas.with_option_fields(schemas.ChatBody)
    req = schemas.parse_body(json.dumps({"messages": [{"role": "user", "content": "x"}], "toy_widgets": 4}).encode(),
                             body)
    info = ModelInfo("tiny", 2048, 64, True, ("none",), "none", "none")
    assert schemas.plan_chat(req, info, WithToy(), Limits()).options.toy_widgets == 4
    run = start(tiny_chat_verifier(), DrafterChoice({}, "none"), WithToy(max_tokens=8), Limits())
    try:
        assert post(run, "/v1/completions", {"prompt": "abc", "toy_widgets": 4}).status_code == 200
        for value, code, said in ((10, "invalid_value", f"toy_widgets: {toy_option}"),
                                  ("4", "invalid_type", "toy_widgets: Input should be a valid integer")):
            r = post(run, "/v1/completions", {"prompt": "abc", "toy_widgets": value})
            assert r.status_code == 400 and r.json()["error"] == {
                "message": said, "type": "invalid_request_error", "param": "toy_widgets", "code": code}
    finally:
        run.stop()


def test_a_toy_option_is_a_settings_row(toy_option):
    from olifant_mlx.tui.settings_tab import SettingsTab

    async def go():
        app = fake_app(options=WithToy(toy_widgets=3))
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("f7")
            row = app.query_one("#set-toy-widgets", Input)
            assert row.value == "3"
            row.value = "10"
            await pilot.pause()
            assert static_text(app, "#set-check") == f"✗ {toy_option}"
            row.value = "6"
            await pilot.pause()
            assert app.query_one(SettingsTab).read().options.toy_widgets == 6

    asyncio.run(go())


# ---- a toy drafter ---------------------------------------------------------------------------

class EchoDrafter(DrafterBase):
    """Drafts the last token again, up to n times; records its drafts (in a list its
    per-generation states share: drafters.base's default open is a shallow copy)."""

    def __init__(self, n):
        self.name, self.n, self.drafts = "echo", n, []

    def draft(self, context, k):
        self.drafts.append(k)
        return [context[-1]] * min(k, self.n) if context else []


@pytest.fixture
def toy_drafter(monkeypatch):
    """`echo[:N]`: its entry in the registry, with its builder (a drafter module's from_spec); the
    drafters it built."""
    built = []

    def from_spec(spec, tokenizer, history):
        built.append(EchoDrafter(spec.number))
        return built[-1]

    monkeypatch.setitem(registry.KINDS, "echo", registry.DrafterKind("echo", "int", "the last token again",
                                                                     from_spec, 2))
    return built


def test_draft_echo_builds_the_toy_and_drafts_in_a_real_generation(toy_drafter, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "echo[:N]" in " ".join(capsys.readouterr().out.split())
    planned = requests_planned(monkeypatch)
    out = generate(monkeypatch, capsys, "--draft", "echo:3")
    assert [d.n for d in toy_drafter] == [3] and planned[0].drafter is toy_drafter[0]
    assert len(toy_drafter[0].drafts) > 0 and out["stats"]["drafter"] == "echo" and out["stats"]["drafted"] > 0
    plain = Session(tiny_verifier(), "none", GenerationOptions(k=3, max_tokens=12)).generate("abcabcabc")
    assert out["tokens"] == plain.tokens                          # lossless, as every drafter
    assert main(["generate", "--model", "tiny", "-p", "x", "--draft", "echo:40"]) != 0
    assert "echo" in capsys.readouterr().err and len(toy_drafter) == 1


def test_a_server_configured_with_the_toy_drafter_drafts_with_it(toy_drafter):
    from olifant_mlx.server.app import start
    from olifant_mlx.server.config import Limits, parse_drafters

    run = start(tiny_chat_verifier(), parse_drafters(None, ["toy=echo:3"]), GenerationOptions(max_tokens=12, k=3),
                Limits())
    try:
        r = post(run, "/v1/completions", {"prompt": "abcabcabc", "max_tokens": 12, "draft": "toy"})
        assert r.status_code == 200 and r.json()["usage"]["drafter"] == "toy"
        assert r.json()["usage"]["drafted_tokens"] > 0 and toy_drafter and len(toy_drafter[-1].drafts) > 0
        plain = Session(tiny_chat_verifier(), "none", GenerationOptions(k=3, max_tokens=12)).generate("abcabcabc")
        assert r.json()["choices"][0]["text"] == plain.text
        refused = post(run, "/v1/completions", {"prompt": "abc", "draft": "echo:3"})     # a spec, not a name
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "draft"
    finally:
        run.stop()


def test_the_tui_lists_the_toy_drafter_and_keeps_it_chosen(toy_drafter):
    from olifant_mlx.tui.settings_tab import SettingsTab, drafters

    assert ("echo", "echo[:N]", "the last token again") in drafters()

    async def go():
        app = fake_app(draft="echo:2")
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("f7")
            await pilot.pause()
            select = app.query_one("#set-drafter", Select)
            assert select.value == "echo" and "echo[:N]" in [str(o[0]) for o in select._options]
            assert app.query_one(SettingsTab).read().draft.text == "echo:2"

    asyncio.run(go())


# ---- a toy TUI tab ---------------------------------------------------------------------------

class ToyTab(TabPane):
    """A tab defined here: an input, and its own key that copies it below."""
    BINDINGS = [("ctrl+y", "copy_down", "Copy down")]

    def __init__(self):
        super().__init__("F11 Toy", id="toy")

    def compose(self):
        yield Input(id="toy-in")
        yield Static("", id="toy-out")

    def action_copy_down(self) -> None:
        self.query_one("#toy-out", Static).update(self.query_one("#toy-in", Input).value)


def toy_pane():
    from olifant_mlx.tui.panes import Pane

    return Pane("toy", "Toy", "f11", lambda app: ToyTab(), "#toy-in", nav=True)


async def check_toy_tab(app, pilot, panes) -> None:
    """The toy tab is among the tabs, its key opens it and focuses its input, its own key works,
    and the conversation list shows beside it (its entry's nav; the App is wide enough for both
    side panels)."""
    tabs = app.query_one("#tabs", TabbedContent)
    assert [p.id for p in tabs.query(TabPane)] == [p.id for p in panes]
    await pilot.press("f11")
    await pilot.pause()
    assert tabs.active == "toy" and app.focused is app.query_one("#toy-in")
    await pilot.press("o", "k", "ctrl+y")
    await pilot.pause()
    assert static_text(app, "#toy-out") == "ok"
    assert app.query_one("#nav").display and not app.query_one("#live").display


def test_a_toy_tab_given_to_the_app_is_a_tab_with_its_keys():
    from olifant_mlx.tui.panes import PANES

    panes = PANES + (toy_pane(),)

    async def go():
        app = fake_app(panes=panes)
        async with app.run_test(size=(150, 40)) as pilot:
            await check_toy_tab(app, pilot, panes)

    asyncio.run(go())


def test_a_toy_tab_added_to_the_registry_reaches_the_app(monkeypatch):
    from olifant_mlx.tui import panes as registry_of_panes

    panes = registry_of_panes.PANES + (toy_pane(),)
    monkeypatch.setattr(registry_of_panes, "PANES", panes)

    async def go():
        app = fake_app()                       # as the `tui` command makes it: no panes given
        async with app.run_test(size=(150, 40)) as pilot:
            await check_toy_tab(app, pilot, panes)

    asyncio.run(go())

"""The TUI's workspace as one service the App owns (issue 25): the Session, the meter, the
conversations and their store, the tokenizer, the jobs and the last run's numbers live on a
plain object (tui/workspace.py) that runs here without an App, and the App forwards none of it
(issue 39); the generation workers (tui/workers.py) are plain functions posting to the `post`
they are given, and what a chat answer keeps is tui/chat_tab.py's plain functions."""
import asyncio
import inspect
import os
import stat
from types import SimpleNamespace

import pytest
from textual.app import App
from textual.dom import DOMNode
from tui_fakes import FAKE_IDENTITY, FakeSession, fake_app, fake_session, fake_text, static_text

from olifant_mlx.drafters.registry import parse_spec
from olifant_mlx.engine import GenerationOptions
from olifant_mlx.tui import chat_tab, workers
from olifant_mlx.tui.app import OlifantApp
from olifant_mlx.tui.messages import Chunk, Done, Loaded, Status
from olifant_mlx.tui.settings_tab import Settings
from olifant_mlx.tui.workspace import Workspace


def settings(draft="ngram:3", k=3, max_tokens=8):
    return Settings(None, parse_spec(draft), GenerationOptions(k=k, max_tokens=max_tokens), None, None)


def workspace(**kw):
    ws = Workspace(energy="none", session_factory=fake_session, tokenizer_fn=lambda m: FAKE_IDENTITY, **kw)
    assert ws.open_meter() is None and not ws.meter.info.measured
    return ws


def test_the_app_owns_the_workspace_and_inherits_no_part_of_it():
    assert OlifantApp.__bases__ == (App,)
    own = [c for c in OlifantApp.__mro__ if c.__module__.startswith("olifant_mlx.tui")]
    assert own == [OlifantApp], own                    # no workspace mixin left
    assert not issubclass(Workspace, DOMNode) and Workspace.__bases__ == (object,)
    for cls in (OlifantApp, Workspace):
        lines = len(inspect.getsourcelines(cls)[0])
        assert lines <= 250, f"{cls.__name__} has {lines} lines"   # every class: test_tui_panes.py
    app = fake_app()                                   # made, not run: the state is the service's
    ws = app.workspace
    assert isinstance(ws, Workspace) and ws.session is None and ws.loads == 0 and ws.editing is None
    for name in ("session", "current", "editing", "generating", "meter", "loads", "prompt_cache",
                 "last_stats", "last_window", "generation", "results"):
        assert not hasattr(app, name), name            # no attribute of the App's forwards to it
    assert not any(type(v).__name__ == "Forward" for c in OlifantApp.__mro__ for v in vars(c).values())


def test_conversations_and_their_store_without_the_app(tmp_path):
    path = str(tmp_path / "conversations.json")
    ws = workspace(conversations=path, system_prompt="be brief")
    assert ws.open() is None                           # no file yet: nothing to read
    assert set(ws.current) == {"chat", "document"} and ws.current["chat"].system_prompt == "be brief"
    conv = chat_tab.ask(ws, "hello", "be brief")
    assert [t.content for t in conv.turns] == ["hello"] and ws.save_store() is None
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and ws.store_line() == f"kept in {path}"
    again = workspace(conversations=path)
    assert again.open() is None
    assert [t.content for t in again.current["chat"].turns] == ["hello"]
    assert again.current["chat"] in again.listed()
    ws.editing = 0                                     # an edited message replaces the old one
    assert [t.content for t in chat_tab.ask(ws, "hi", None).turns] == ["hi"] and ws.editing is None
    error = ws.use_store(str(tmp_path))                # a folder is no conversations file
    assert error and ws.store_line().startswith("not saved: ")
    assert ws.use_store(None) is None and ws.store_line() == "kept in memory only"


def test_one_verifier_and_the_drafters_switched_without_the_app():
    ws, posted = workspace(), []
    session = ws.session_for(settings("ngram:3"), posted.append)
    assert [type(m) for m in posted] == [Status, Loaded] and posted[0].loading and ws.loads == 1
    other = ws.session_for(settings("adaptive:ngram:3"), posted.append)
    assert other is ws.session and other.verifier is session.verifier and session.spec.text == "ngram:3"
    assert other.spec.text == "adaptive:ngram:3" and ws.loads == 1 and len(posted) == 2
    assert ws.tokenizer(None) is FAKE_IDENTITY


def test_a_chat_answer_written_by_the_worker_function_without_the_app():
    """The worker function posts; what the Chat tab keeps of it (tui/chat_tab.py's plain
    functions) is kept without the App."""
    ws, posted = workspace(), []
    ws.open()
    conv = chat_tab.ask(ws, "hello", None)
    s = settings(k=3, max_tokens=8)
    job = chat_tab.answer(ws, conv, s)
    ws.start(job)
    assert ws.generating and ws.last_k == 3 and ws.last_prompt == ("chat", job.prompt)
    workers.generate(ws, job, posted.append, lambda: False)     # on its own thread, and back
    chunks = [m for m in posted if isinstance(m, Chunk)]
    done = posted[-1]
    assert chunks and isinstance(done, Done), posted
    for m in chunks:
        chat_tab.keep_chunk(ws.jobs[abs(m.run)], m)
    assert conv.turns[-1].content == fake_text(8)
    chat_tab.keep_done(ws, ws.end(done.run), done)
    assert not ws.generating and ws.last_stats.tokens == 8 and conv.turns[-1].finish_reason == done.finish_reason
    assert FakeSession.caches[-1] is ws.prompt_cache             # chat turns reuse the KV cache
    failing = chat_tab.answer(ws, conv, s)
    assert chat_tab.drop_failed(failing) and conv.turns[-1].role == "assistant" and conv.turns[-1].content


def test_live_power_without_the_app():
    readings = [{"cpu": 2.0}, {"cpu": 2.0}, {"cpu": 0.0}]

    class Meter:
        info = SimpleNamespace(measured=True, label="fake meter")

        def power(self):
            watts = readings.pop(0)
            return SimpleNamespace(watts=watts, total_w=sum(watts.values()), seconds=0.5)

    ws = Workspace(meter=Meter())
    assert ws.power_tick() is None                               # nothing generating
    job = ws.job("document", None, settings(), "text")
    ws.start(job)                                                # the first reading: the baseline
    watts, line = ws.power_tick()
    assert watts == {"cpu": 2.0} and job.live_j == 1.0 and "fake meter" in line
    assert ws.power_tick() == (None, None)                       # no counter advanced


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_the_list_and_settings_handle_their_own_buttons(tmp_path):
    """"+ doc" and "+ chat" (the conversation list's) start one in the workspace; "keep chats"
    (Settings') starts keeping them at once."""
    path = tmp_path / "chats.json"

    async def go():
        app = fake_app()
        async with app.run_test(size=(160, 48)) as pilot:
            ws = app.workspace
            chat, doc = ws.current["chat"], ws.current["document"]
            await pilot.click("#new-doc")
            await pilot.pause()
            assert ws.current["document"] is not doc and app.tabs.active == "document"
            await pilot.click("#new-chat")
            await pilot.pause()
            assert ws.current["chat"] is not chat and app.tabs.active == "chat"
            await pilot.press("f7")
            app.query_one("#set-store").value = str(path)
            app.query_one("#set-store-on").value = True
            await pilot.pause()
            assert ws.store_path == str(path) and stat.S_IMODE(path.stat().st_mode) == 0o600
            assert static_text(app, "#conv-store") == f"kept in {path}"

    asyncio.run(go())

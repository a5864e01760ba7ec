"""The Textual UI (tui/), headless with App.run_test(): conversations and documents drafted live
over the real Session (a fake verifier and a scripted engine, tests/tui_fakes.py), exports,
the drafter changing without a verifier reload, draft models refused for their tokenizer,
the replay meter, SVG snapshots; and the real offline instruct verifier (slow).

Snapshots live in tests/snapshots/ (Textual 8.2.8, .ci/constraints.txt);
OLIFANT_UPDATE_SNAPSHOTS=1 (re)writes them.
"""
import asyncio
import json
import re
import stat
import time

import pytest
from tui_fakes import (FAKE_IDENTITY, FakeSession, FakeVerifier, Identity, check_snapshot, fake_app, fake_text,
                       replay_spec, settle, static_text, train_tiny, wait_for)

from olifant_mlx.tui import render
from olifant_mlx.tui.app import OlifantApp
from olifant_mlx.tui.flow import DocEditor, FlowText

SIZE = (120, 36)
MIT = ('THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, '
       "INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR "
       "PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE "
       "FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR "
       "OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER "
       "DEALINGS IN THE SOFTWARE.")
CUT = MIT.index(" THE WARRANTIES")      # a document's beginning that ends at a word's end


def run(coro):
    return asyncio.run(coro)


async def type_message(pilot, app, text):
    app.chat_tab.composer.text = text
    await pilot.pause()


async def send(pilot, app, text, timeout=60):
    await type_message(pilot, app, text)
    await pilot.press("ctrl+g")
    await settle(pilot, app, timeout)


# ---- conversations ---------------------------------------------------------------------

@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_two_turn_conversation_regenerate_and_edit():
    async def go():
        app = fake_app(max_tokens=12, k=3)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert app.focused is app.chat_tab.composer          # focus starts in the prompt
            await send(pilot, app, "Draft a confidentiality clause.")
            await send(pilot, app, "Shorter, please.")
            conv = app.workspace.current["chat"]
            assert [t.role for t in conv.turns] == ["user", "assistant"] * 2
            assert conv.turns[1].content == conv.turns[3].content == fake_text(12)
            assert conv.turns[3].stats["tokens"] == 12 and conv.turns[3].drafter
            # every turn went to the verifier: the second prompt holds the whole conversation
            assert len(FakeSession.prompts[-1]) > len(FakeSession.prompts[-2])
            assert len(app.chat_tab.views()) == 4
            assert "done" in static_text(app, "#chat-status")
            # regenerate: the last answer is written again, nothing else changes
            n = FakeSession.streams
            await pilot.press("ctrl+r")
            await settle(pilot, app)
            assert FakeSession.streams == n + 1 and len(conv.turns) == 4
            # edit and resend: the first message is replaced, the answers after it rewritten
            app.chat_tab.view(0).focus()
            await pilot.press("ctrl+t")
            assert app.workspace.editing == 0 and app.chat_tab.composer.text == "Draft a confidentiality clause."
            app.chat_tab.composer.text = "Draft an indemnity clause."
            await pilot.press("ctrl+g")
            await settle(pilot, app)
            assert [t.content for t in conv.turns if t.role == "user"] == ["Draft an indemnity clause."]
            assert len(conv.turns) == 2 and len(app.chat_tab.views()) == 2
            # esc cancels an edit
            await pilot.press("ctrl+t")
            await pilot.press("escape")
            assert app.workspace.editing is None and app.chat_tab.composer.text == ""

    run(go())


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_chat_turns_keep_a_prompt_cache_and_compare_reads_afresh():
    """Chat turns hand the app's prefix cache to the Session (the next turn prefills only its
    new tokens: exactness is tested in test_prompt_cache*.py); the Compare tab never does."""
    async def go():
        app = fake_app(max_tokens=6, k=3)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await send(pilot, app, "Draft a confidentiality clause.")
            await send(pilot, app, "Shorter, please.")
            assert FakeSession.caches[-2:] == [app.workspace.prompt_cache] * 2
            n = len(FakeSession.caches)
            await pilot.press("ctrl+b")
            await settle(pilot, app)
            assert "speedup" in static_text(app, "#compare-result")
            assert len(FakeSession.caches) > n and set(FakeSession.caches[n:]) == {None}

    run(go())


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_answer_streams_with_provenance_and_markdown_toggle():
    async def go():
        app = fake_app(max_tokens=100000, delay=0.01)
        async with app.run_test(size=SIZE) as pilot:
            await type_message(pilot, app, "hello")
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: len(app.workspace.current["chat"].turns[-1].content) > 100)
            writing = app.chat_tab.view(1)
            assert writing.writing and writing.query(FlowText)      # live: marked text
            await pilot.press("escape")
            await settle(pilot, app)
            view = app.chat_tab.view(1)
            assert view.query("Markdown") and not view.query(FlowText)    # finished: Markdown
            await pilot.press("ctrl+f")                                  # toggled off: marks
            flow = app.chat_tab.view(1).query_one(FlowText)
            assert flow.text == app.workspace.current["chat"].turns[1].content
            kinds = {k for t in app.workspace.current["chat"].turns[1].segments for k in [t[1]]}
            assert {"accepted", "correction", "bonus"} <= kinds
            # the marks do not rely on colour: each kind has its own weight or underline
            cues = {k: (s.bold, s.italic, s.underline) for k in ("accepted", "correction", "bonus")
                    if (s := flow.prov_style(k)) is not None}
            assert len(set(cues.values())) == 3 and cues["accepted"][2]
            await pilot.press("f10")                                     # style only
            mono = flow.prov_style("accepted")
            assert mono.color is None and mono.underline
            await pilot.press("f10")                                     # off
            assert flow.prov_style("accepted") is None
            assert "marks off" in static_text(app, "#chat-legend")

    run(go())


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_copy_answer_to_clipboard():
    async def go():
        app = fake_app(max_tokens=9)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "hello")
            await pilot.press("ctrl+o")
            assert app.clipboard == fake_text(9)
            await pilot.press("f3", "ctrl+o")
            assert app.clipboard == app.doc_tab.editor.text

    run(go())


def test_base_model_conversation_is_refused_with_a_hint(monkeypatch):
    monkeypatch.setattr(FakeVerifier, "has_chat_template", False)

    async def go():
        app = fake_app(max_tokens=9)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "hello")
            assert any("Document tab" in n.message for n in app._notifications)
            assert [t.role for t in app.workspace.current["chat"].turns] == ["user"]   # no empty answer

    run(go())


# ---- documents -------------------------------------------------------------------------

@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_document_continuation_marks_regenerate_and_undo():
    async def go():
        app = fake_app(max_tokens=15, mode="document", prompt="This Agreement is made between")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            ed = app.doc_tab.editor
            assert app.focused is ed
            await pilot.press("ctrl+g")
            await settle(pilot, app)
            start = len("This Agreement is made between")
            assert ed.text == "This Agreement is made between" + fake_text(15)
            assert not ed.read_only
            marks = ed.marks_list
            assert marks and marks[0][0] == start and marks[-1][1] == len(ed.text)
            assert {k for *_, k in marks} >= {"accepted", "correction", "bonus"}
            conv = app.workspace.current["document"]
            assert conv.runs[-1].start == start and conv.runs[-1].stats["tokens"] == 15
            assert "passes saved" in static_text(app, "#doc-status")
            # the marks follow your edits: typing at the start moves them along
            ed.insert("Draft: ", (0, 0))
            await pilot.pause()
            assert ed.marks_list[0][0] == start + len("Draft: ")
            ed.undo()
            await pilot.pause()
            assert ed.marks_list[0][0] == start
            # the last continuation written again (the text is unchanged since)
            await pilot.press("ctrl+r")
            await settle(pilot, app)
            assert ed.text == "This Agreement is made between" + fake_text(15) and len(conv.runs) == 1
            # continue again: the continuation of the continuation
            await pilot.press("ctrl+g")
            await settle(pilot, app)
            assert ed.text.startswith("This Agreement is made between" + fake_text(15))
            assert len(conv.runs) == 2
            assert FakeSession.prompts[-1] == list(range(len(conv.text[:conv.runs[-1].start].split())))

    run(go())


# ---- exports and the saved-conversations file --------------------------------------------

@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
def test_exports_are_0600_with_the_right_content(tmp_path):
    async def go():
        app = fake_app(max_tokens=9)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "Draft a clause.")
            answer = fake_text(9)
            for name in ("chat.md", "chat.txt", "chat.json"):       # the path typed, as a person does
                await pilot.press("ctrl+s")
                await pilot.pause()
                await pilot.press(*str(tmp_path / name), "enter")
                await pilot.pause()
            md, txt = (tmp_path / "chat.md").read_text(), (tmp_path / "chat.txt").read_text()
            assert "## You\n\nDraft a clause." in md and answer in md and "acceptance" in md
            assert txt.startswith("You:\nDraft a clause.") and "Assistant:\n" + answer in txt
            data = json.loads((tmp_path / "chat.json").read_text())
            assert data["format"] == "olifant_mlx.export" and data["kind"] == "chat"
            reply = data["messages"][1]
            assert reply["content"] == answer and reply["stats"]["tokens"] == 9
            assert reply["stats"]["acceptance"] > 0 and data["settings"]["drafter"] == "auto"
            assert "".join(t for t, _ in reply["segments"]) == answer
            # a document, by the format chosen in the dialog
            await pilot.press("f3", "ctrl+g")
            await settle(pilot, app)
            await pilot.press("ctrl+s")
            await pilot.pause()
            app.screen.query_one("#save-path").value = str(tmp_path / "contract")
            app.screen.query_one("#fmt-json").value = True
            await pilot.click("#save-ok")
            await pilot.pause()
            doc = json.loads((tmp_path / "contract").read_text())
            assert doc["kind"] == "document" and doc["text"] == app.doc_tab.editor.text
            assert doc["continuations"][0]["stats"]["tokens"] == 9
            # an existing file is replaced only when asked twice
            await pilot.press("ctrl+s")
            await pilot.pause()
            app.screen.query_one("#save-path").value = str(tmp_path / "chat.md")
            await pilot.press("enter")
            await pilot.pause()
            assert "exists" in static_text(app.screen, "#save-note")
            # a path that cannot be a new file is refused in the dialog, which stays open
            app.screen.query_one("#save-path").value = str(tmp_path / "no" / "such.md")
            await pilot.press("enter")
            await pilot.pause()
            assert "folder does not exist" in static_text(app.screen, "#save-note")
            assert type(app.screen).__name__ == "ExportScreen"
            await pilot.press("escape")
            assert (tmp_path / "chat.md").read_text() == md
        for p in tmp_path.iterdir():
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p

    run(go())


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_nothing_written_unless_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    async def go():
        app = fake_app(max_tokens=9)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "private matter")
            await pilot.press("f3", "ctrl+g")
            await settle(pilot, app)
            commands = [c.title for c in app.get_system_commands(app.screen)]
            assert commands and not any("screenshot" in c.lower() for c in commands)
        assert list(tmp_path.iterdir()) == []

    run(go())


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_saved_conversations_are_opt_in_0600_and_reloaded(tmp_path):
    path = tmp_path / "chats.json"

    async def go():
        app = fake_app(max_tokens=9, conversations=str(path))
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "first matter")
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        saved = json.loads(path.read_text())
        assert saved["format"] == "olifant_mlx.conversations" and saved["version"] == 1
        app = fake_app(max_tokens=9, conversations=str(path))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            conv = app.workspace.current["chat"]
            assert conv.turns[0].content == "first matter" and conv.turns[1].content == fake_text(9)
            assert len(app.chat_tab.views()) == 2
            assert any("first matter" in str(o.prompt) for o in app.query_one("#conv-list").options)
        # a damaged file is reported, and left alone
        path.write_text('{"format": "olifant_mlx.conversations", "version": 99}')
        app = fake_app(max_tokens=9, conversations=str(path))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()     # the report is a notification of 10 s: read it before typing
            assert any("version 99" in n.message for n in app._notifications)
            await send(pilot, app, "hello")
        assert json.loads(path.read_text())["version"] == 99

    run(go())


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_conversation_list_switches_between_conversations():
    async def go():
        app = fake_app(max_tokens=6)
        async with app.run_test(size=(160, 48)) as pilot:
            await send(pilot, app, "first")
            first = app.workspace.current["chat"]
            await pilot.press("ctrl+n")
            await send(pilot, app, "second")
            assert app.workspace.current["chat"] is not first and len(app.chat_tab.views()) == 2
            options = app.query_one("#conv-list")
            assert options.option_count >= 3          # two chats and the document
            index = next(i for i in range(options.option_count) if options.get_option_at_index(i).id == first.id)
            options.highlighted = index
            options.focus()
            await pilot.press("enter")
            await pilot.pause()
            assert app.workspace.current["chat"] is first
            assert app.chat_tab.view(0).turn.content == "first"
            # the list highlights the conversation or document of the tab in use
            await pilot.press("f3")
            await pilot.pause()
            assert options.get_option_at_index(options.highlighted).id == app.workspace.current["document"].id
            await pilot.press("f2")
            await pilot.pause()
            assert options.get_option_at_index(options.highlighted).id == first.id

    run(go())


# ---- the drafter, the verifier, draft models --------------------------------------------

@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_changing_the_drafter_never_reloads_the_verifier():
    async def go():
        FakeVerifier.loads = 0
        app = fake_app(max_tokens=6)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "one")
            assert app.workspace.loads == FakeVerifier.loads == 1
            session = app.workspace.session
            assert str(session.requested) == "auto" and session.spec.text.startswith("adaptive:hybrid")
            # as a person does: F7, Tab to the drafter list, open it, "ng" for ngram, Tab to its
            # argument, 3, Tab to the draft length, space to turn adaptive off
            await pilot.press("f7", "tab", "enter", "n", "g", "enter", "tab", "3", "tab", "space")
            await pilot.pause()
            assert "drafter ngram:3" in static_text(app, "#set-check")
            await pilot.press("ctrl+g")                  # from the Settings tab: writes in Chat
            await pilot.pause()
            assert app.tabs.active == "chat"
            await send(pilot, app, "two")
            session = app.workspace.session
            assert session.spec.text == "ngram:3" and session.drafter.name.startswith("ngram")
            await pilot.press("f7")
            app.query_one("#set-adaptive").focus()
            await pilot.press("space", "f2")
            await send(pilot, app, "three")
            assert app.workspace.session.spec.text == "adaptive:ngram:3"
            assert app.workspace.loads == FakeVerifier.loads == 1          # one verifier, three drafters
            assert "adaptive:ngram:3" in static_text(app, "#live-session")

    run(go())


def test_settings_are_validated_before_anything_runs():
    async def go():
        app = fake_app(max_tokens=6)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f7")
            app.query_one("#set-top-p").value = "1.5"
            await pilot.pause()
            assert "top-p must be in (0, 1]" in static_text(app, "#set-check")
            assert "top-p must be in (0, 1]" in static_text(app, "#set-top-p-error")     # beside it
            assert app.query_one("#set-top-p-error").display and not app.query_one("#set-model-error").display
            n = FakeSession.streams
            await type_message(pilot, app, "hi")
            await pilot.press("ctrl+g")
            await pilot.pause()
            assert FakeSession.streams == n and not app.workspace.generating
            assert any("top-p" in m.message for m in app._notifications)
            app.query_one("#set-top-p").value = "0.9"
            app.query_one("#set-drafter").value = "olifant"
            await pilot.pause()
            assert "olifant needs an argument" in static_text(app, "#set-check")
            assert not app.query_one("#set-top-p-error").display
            assert "olifant needs an argument" in static_text(app, "#set-draft-arg-error")
            app.query_one("#set-drafter").value = "lookup"
            app.query_one("#set-history-on").value = True
            app.query_one("#set-history").value = "/tmp/h.bin"
            await pilot.pause()
            assert "hybrid" in static_text(app, "#set-check")
            # every registry drafter is offered, auto first and preselected at start
            from olifant_mlx.drafters.registry import describe

            options = [str(o[0]) for o in app.query_one("#set-drafter")._options if o[1] is not None]
            assert options[0] == "auto" and set(options) == {u for u, _ in describe()}

    run(go())


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_incompatible_draft_model_is_marked_and_refused(tmp_path):
    good = train_tiny(tmp_path / "good.olif", FAKE_IDENTITY)
    bad = train_tiny(tmp_path / "other.olif", Identity("other-tok", 256, bytes(32)))

    async def go():
        app = fake_app(max_tokens=6, model_dirs=[tmp_path], draft=f"olifant:{bad}")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f6")
            await wait_for(pilot, lambda: app.query_one("ModelsTab").identity is not None)
            table = app.query_one("#model-table")
            rows = {table.get_row(k)[0]: table.get_row(k)[2] for k in table.rows}
            assert rows["good.olif"].startswith("✓") and rows["other.olif"].startswith("✗")
            n = FakeSession.streams
            FakeVerifier.loads = 0
            await pilot.press("f2")
            await send(pilot, app, "hello")
            assert FakeSession.streams == n                  # refused before any generation ...
            assert FakeVerifier.loads == 0                   # ... and before loading the verifier
            assert any("trained for tokenizer 'other-tok'" in m.message for m in app._notifications)
            assert [t.role for t in app.workspace.current["chat"].turns] == ["user"]
            # the Models list refuses it too, and takes the one that fits: with keys, the
            # arrows to its row, Tab to "Use as drafter", Enter
            async def use(path):
                await pilot.press("f6")
                assert app.focused is table
                await pilot.press("home", *["down"] * table.get_row_index(str(path)))
                assert app.query_one("ModelsTab").selected().path == path
                await pilot.press("tab")
                assert app.focused.id == "use-model"
                await pilot.press("enter")
                await pilot.pause()

            await use(bad)
            assert app.query_one("#set-draft-arg").value == str(bad)     # unchanged
            assert any("not used" in m.message for m in app._notifications)
            await use(good)
            assert app.query_one("#set-draft-arg").value == str(good)
            await pilot.press("f2", "ctrl+r")                  # answer the waiting message
            await settle(pilot, app)
            assert FakeSession.streams == n + 1 and app.workspace.session.spec.text == f"olifant:{good}"

    run(go())


def _retrieval_files(tmp_path, identity):
    """A suffix index and an n-gram cache built for `identity`'s tokenizer (one id per byte)."""
    from olifant_mlx.draftmodel.suffix import Corpus

    ids = list(MIT.encode())
    c = Corpus(identity.vocab_size, identity.name, identity.digest)
    c.add_documents(ids, [0])
    c.build_index().save(tmp_path / f"{identity.name}.sfx")
    c.build_ngram(2).save(tmp_path / f"{identity.name}.ngc")
    return tmp_path / f"{identity.name}.sfx", tmp_path / f"{identity.name}.ngc"


@pytest.mark.parametrize("kind", ["rest", "ngram-cache"])
@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_tui_drafts_with_rest_and_ngram_cache_files(kind, tmp_path):
    """`tui --draft rest:PATH` and `ngram-cache:PATH`: on fa4fc7f the TUI loaded every file spec
    as an IGTree and refused these with "not an olifant model file (bad magic)"."""
    sfx, ngc = _retrieval_files(tmp_path, FAKE_IDENTITY)
    other_sfx, other_ngc = _retrieval_files(tmp_path, Identity("other-tok", 256, bytes(32)))
    good, bad = (sfx, other_sfx) if kind == "rest" else (ngc, other_ngc)

    async def go():
        app = fake_app(max_tokens=6, draft=f"{kind}:{good}")
        async with app.run_test(size=SIZE) as pilot:
            n = FakeSession.streams
            await send(pilot, app, "hello")
            assert FakeSession.streams == n + 1, [m.message for m in app._notifications]
            assert app.workspace.session.spec.text == f"{kind}:{good}"
            assert app.workspace.session.drafter.name.startswith(kind.split("-")[0])
            assert not any(m.severity == "error" for m in app._notifications)
        app = fake_app(max_tokens=6, draft=f"{kind}:{bad}")
        async with app.run_test(size=SIZE) as pilot:
            n = FakeSession.streams
            await send(pilot, app, "hello")
            assert FakeSession.streams == n                  # another tokenizer's file: refused
            assert any("built for tokenizer 'other-tok'" in m.message for m in app._notifications)

    run(go())


# ---- the rest of the app -----------------------------------------------------------------

@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_replay_energy_live_numbers_and_power_chart(shared):
    async def go():
        app = fake_app(energy=replay_spec(shared), max_tokens=40,   # the trace runs 20x faster
                       meter_clock=lambda: time.monotonic_ns() * 20, delay=0.02)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "hello")
            assert app.workspace.last_stats.tokens == 40
            stats = static_text(app, "#stats")
            assert "tokens                40" in stats and "passes saved" in stats
            assert f"passes saved    {40 - app.workspace.last_stats.steps:8d}" in stats
            energy = static_text(app, "#energy")
            assert "J/100 tok" in energy and "replay" in energy, energy
            assert app.workspace.last_window.total_j > 0
            assert " J" in static_text(app, "#chat-status")
            assert app.query(".power")

    run(go())


def test_power_skips_readings_where_no_counter_advanced(shared):
    """A trace's counters step once a second; a tick between two steps is not 0 W."""
    now = [0]

    async def go():
        app = fake_app(energy=replay_spec(shared), meter_clock=lambda: now[0])
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            domain = app.workspace.meter.info.domains[0]
            app.workspace.generating = True                        # as while a generation runs
            app.workspace.meter.power()                            # the baseline, at 0 s
            now[0] = 1_500_000_000                       # past the trace's step at 1 s
            app.live.tick()
            label = str(app.query_one(f"#power-label-{domain}").content)
            assert f"{domain}   0.00 W" not in label and app.live.series[domain]
            points = len(app.live.series[domain])
            now[0] = 1_900_000_000                       # no step since: nothing to show
            app.live.tick()
            assert str(app.query_one(f"#power-label-{domain}").content) == label
            assert len(app.live.series[domain]) == points
            app.workspace.generating = False

    run(go())


def test_none_meter_says_not_measured():
    async def go():
        app = fake_app(max_tokens=6)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "hello")
            assert "not measured" in static_text(app, "#energy")
            assert app.workspace.last_window.total_j is None

    run(go())


def test_escape_stops_generation():
    async def go():
        app = fake_app(max_tokens=100000, delay=0.01)
        async with app.run_test(size=SIZE) as pilot:
            await type_message(pilot, app, "hello")
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: app.workspace.current["chat"].turns[-1].content)
            await pilot.press("escape")
            await settle(pilot, app, timeout=10)
            assert "stopped" in static_text(app, "#chat-status")
            assert app.workspace.last_stats.tokens < 100000
            assert app.workspace.current["chat"].turns[-1].finish_reason == "stopped"

    run(go())


def test_errors_are_notifications_not_tracebacks():
    def broken(model, meter):
        raise RuntimeError("no such verifier: nope")

    async def go():
        app = OlifantApp(session_factory=broken, model_dirs=[], energy="replay:/no/such.json",
                         tokenizer_fn=lambda m: FAKE_IDENTITY)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "hello")
            messages = [n.message for n in app._notifications]
            assert any("no such verifier" in m for m in messages), messages
            assert not app.workspace.meter.info.measured                             # fell back to none
            assert "generation failed" in static_text(app, "#chat-status")
            assert app.is_running

    run(go())


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_compare_plain_vs_speculative_fake():
    async def go():
        app = fake_app(max_tokens=12)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "hello")
            await pilot.press("ctrl+b")
            await settle(pilot, app)
            result = static_text(app, "#compare-result")
            assert re.search(r"speedup \d+\.\d\dx \(median of 3 rounds, range \d+\.\d\d-\d+\.\d\dx", result), result
            assert "energy ratio not measured" in result
            assert app.query_one("#compare-spec", FlowText).text == fake_text(12)
            assert app.query_one("#compare-plain", FlowText).text == fake_text(12, k=0)

    run(go())


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_calculator_panel_explains_the_fast_path_and_uses_measured():
    async def go():
        app = fake_app(max_tokens=30, k=3)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f5")
            app.query_one("#calc-alpha").value = "0.6"
            app.query_one("#calc-gamma").value = "3"
            app.query_one("#calc-c").value = "0.2"
            await pilot.pause()
            summary = static_text(app, "#calc-summary")
            assert "speedup                = 1.3600x" in summary and "KV fast-path speedup" in summary
            note = static_text(app, "#calc-note")
            assert note.startswith("Why the two differ") and "\n" not in note
            app.query_one("#calc-gamma").value = "x"
            await pilot.pause()
            assert "check the inputs" in static_text(app, "#calc-summary")
            await pilot.press("f7")
            app.query_one("#set-drafter").value = "ngram"
            app.query_one("#set-adaptive").value = False
            await pilot.pause()
            await pilot.press("f2")
            await send(pilot, app, "hello")
            await pilot.press("f5")
            await pilot.click("#calc-measured")
            await pilot.pause()
            assert app.query_one("#calc-gamma").value == "3"
            assert 0 < float(app.query_one("#calc-alpha").value) <= 1

    run(go())


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_ctrl_a_selects_all_in_editors():
    async def go():
        app = fake_app(max_tokens=6)
        async with app.run_test(size=SIZE) as pilot:
            await type_message(pilot, app, "one\ntwo")
            await pilot.press("ctrl+a")
            assert app.chat_tab.composer.selected_text == "one\ntwo"
            await pilot.press("f3", "ctrl+a")
            assert app.doc_tab.editor.selected_text == app.doc_tab.editor.text
            await pilot.press("f7")
            field = app.query_one("#set-model")
            field.value = "smollm2-135m"
            field.focus()
            await pilot.press("ctrl+a")
            assert field.selected_text == "smollm2-135m"

    run(go())


def test_themes_are_textuals():
    async def go():
        app = fake_app(theme="nord")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert app.theme == "nord"
            app.theme = "gruvbox"             # as the palette's "Change theme" does
            await pilot.pause()
            assert app.chat_tab.query_one("Legend").prov_style("accepted").underline

    run(go())


# ---- snapshots of the deterministic screens -----------------------------------------------

@pytest.mark.parametrize("tab,size", [("chat", (80, 24)), ("document", (80, 24)), ("settings", (80, 24)),
                                      ("calculator", (120, 36)), ("compare", (120, 36))])
def test_snapshot(tab, size):
    async def go():
        app = fake_app(model="smollm2-135m", draft="auto", max_tokens=9)
        async with app.run_test(size=size) as pilot:
            await pilot.press({"chat": "f2", "document": "f3", "compare": "f4", "calculator": "f5",
                               "settings": "f7"}[tab])
            if tab == "chat":
                await send(pilot, app, "Draft a short confidentiality clause.")
            if tab == "document":
                await pilot.press("ctrl+g")
                await settle(pilot, app)
            app.set_focus(None)              # no cursor; the footer then recomposes: let it
            for _ in range(3):
                await pilot.pause(0.1)
            await pilot.wait_for_scheduled_animations()
            return app.export_screenshot(title=f"olifant_mlx {tab}")

    check_snapshot(f"tui_{tab}_{size[0]}x{size[1]}", run(go()))


# ---- real verifier, real olifant model ------------------------------------------------------

@pytest.fixture(scope="module")
def real_draft(tmp_path_factory):
    from olifant_mlx.draftmodel.train import train
    from olifant_mlx.verifier import load_tokenizer

    d = tmp_path_factory.mktemp("tui")
    corpus = d / "mit.txt"
    corpus.write_text("\n\n".join([MIT] * 3))
    tok = load_tokenizer("smollm2-135m")
    out = d / "mit.olif"
    train([str(corpus)], tok, str(out), show_progress=False)
    return corpus, out


@pytest.mark.slow
def test_real_two_turn_conversation_drafted_equals_plain(real_draft, smol, monkeypatch):
    """Two turns with the offline instruct verifier at 80x24, typed and sent with keys: the
    first drafted by an adaptive hybrid over a real draft model, then the drafter changed in
    Settings (keys again) to an adaptive olifant drafter for the second, without loading the
    verifier again. Each answer is the plain (undrafted) answer, token for token. The app's
    load_verifier call is counted and answered with the session's loaded SmolLM2 (conftest's
    smol: the same load, done once per test session)."""
    from olifant_mlx import verifier
    from olifant_mlx.engine import Session

    _, model_path = real_draft
    loads = []
    monkeypatch.setattr(verifier, "load_verifier",
                        lambda *a, **kw: loads.append(a) or (smol if a == ("smollm2-135m",) else None))

    async def go():
        app = OlifantApp(model="smollm2-135m", draft=f"adaptive:hybrid:{model_path}", k=4,
                         max_tokens=16, energy="none", model_dirs=[model_path.parent])
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert app.focused is app.chat_tab.composer
            await pilot.press(*"Write one sentence about software warranties.", "ctrl+g")
            await settle(pilot, app, 300)
            assert app.workspace.session.spec.text == f"adaptive:hybrid:{model_path}"
            # Settings: drafter list, "o" for olifant, its argument the same model
            await pilot.press("f7", "tab", "enter", "o", "enter", "tab", "ctrl+a", *str(model_path))
            await pilot.pause()
            assert f"drafter adaptive:olifant:{model_path}" in static_text(app, "#set-check")
            await pilot.press("f2", *"Now say it more formally.", "ctrl+g")
            await settle(pilot, app, 300)
            assert app.workspace.session.spec.text == f"adaptive:olifant:{model_path}"
            conv = app.workspace.current["chat"]
            assert [t.role for t in conv.turns] == ["user", "assistant"] * 2
            assert conv.turns[2].content == "Now say it more formally."
            assert all(t.content for t in conv.turns), conv.turns
            assert all(t.stats["drafted"] > 0 for t in conv.turns[1::2])
            assert len(loads) == 1 and app.workspace.loads == 1           # one verifier, two drafters
            plain = Session(app.workspace.session.verifier, "none")      # the same verifier, no reload
            for i in (1, 3):
                expected = plain.generate(conv.chat(i), app.workspace.session.options.replace(k=0, max_tokens=16))
                assert conv.turns[i].content == expected.text, i

    run(go())


@pytest.mark.slow
def test_real_document_continuation_and_compare(real_draft, smol, monkeypatch):
    """The real verifier (the session's loaded SmolLM2, conftest's smol, is what the app's
    load_verifier call gets) continuing a document, then plain and speculative compared."""
    from olifant_mlx import verifier

    monkeypatch.setattr(verifier, "load_verifier", lambda name, **kw: smol if name == "smollm2-135m" else None)
    _, model_path = real_draft

    async def go():
        app = OlifantApp(model="smollm2-135m", draft=f"olifant:{model_path}", k=4, max_tokens=16,
                         energy="none", model_dirs=[model_path.parent], mode="document")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            ed = app.query_one(DocEditor)
            assert app.focused is ed
            await pilot.press("ctrl+a", *MIT[:CUT])          # the document typed over the default one
            assert ed.text == MIT[:CUT]
            await pilot.press("ctrl+g")
            await settle(pilot, app, 300)
            assert "failed" not in static_text(app, "#doc-status"), static_text(app, "#doc-status")
            continuation = ed.text[CUT:]
            assert continuation.strip() and ed.marks_list
            s = app.workspace.last_stats
            assert s.tokens > 0 and s.accepted > 0
            # joined to the text as the verifier reads them together (the first space kept)
            session = app.workspace.session
            v = session.verifier
            out = list(session.stream(session.plan(MIT[:CUT], session.options.replace(max_tokens=16, k=0),
                                                   continuation=True)))
            tokens = [t for r in out for t in r.tokens]
            ids = [t for t in v.encode(MIT[:CUT]) if t != v.bos_id]
            assert "".join(r.text for r in out) == continuation
            assert v.identity.decode(ids + tokens) == v.identity.decode(ids) + continuation
            # the same prompt, plain then speculative: identical output
            await pilot.press("ctrl+b")
            await settle(pilot, app, 300)
            result = static_text(app, "#compare-result")
            assert "outputs identical: yes" in result, result
            assert app.query_one("#compare-spec", FlowText).text == continuation

    run(go())


@pytest.mark.slow
def test_models_panel_lists_and_trains(real_draft, tmp_path):
    corpus, model_path = real_draft

    async def go():
        from tui_fakes import fake_session

        app = OlifantApp(model="smollm2-135m", energy="none", model_dirs=[model_path.parent, tmp_path],
                         session_factory=fake_session)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f6")
            table = app.query_one("#model-table")
            drafts = lambda: [k for k in table.rows if not k.value.startswith("library:")]  # noqa: E731 (libraries: the cache's)
            assert len(drafts()) == 1
            await wait_for(pilot, lambda: app.query_one("ModelsTab").identity is not None, 120)
            assert table.get_row(str(model_path))[2].startswith("✓")
            await pilot.click("#use-model")
            assert app.query_one("#set-draft-arg").value == str(model_path)
            app.query_one("#corpus").value = str(corpus)
            app.query_one("#train-out").value = "mine"
            await pilot.click("#train-go")
            await wait_for(pilot, lambda: len(drafts()) == 2, timeout=120)
            assert (tmp_path / "mine.olif").is_file()
            assert "trained" in static_text(app, "#train-status")
            assert not app.query_one("#train-progress").display

    run(go())


def test_render_helpers():
    from olifant_mlx.engine import Stats, Step

    s = Stats()
    s.add(Step(index=0, drafted=[1, 2], accepted=2, emitted=[1, 2, 3], verifier_token=3,
               fast_path=False, forward_tokens=2, draft_s=0, verify_s=0.001, step_s=0.001))
    assert render.passes_saved(s) == 2
    assert "2 passes saved" in render.status_line(s, "done", 1.5) and "1.50 J" in render.status_line(s, "x", 1.5)
    r = render.calculator(0.8, 4, 0.1)
    assert r["speedup"] == pytest.approx(2.4011, abs=1e-4)
    assert r["best"][0] == 6 and r["best"][1] == pytest.approx(2.4696, abs=1e-4)
    assert render.calculator(0.6, 3, 0.2)["speedup"] == pytest.approx(1.36, abs=1e-4)
    chart = render.calc_chart(r, 4).plain
    assert "◀ you" in chart.splitlines()[3] and "★ best" in chart.splitlines()[5]


def test_document_cursor_starts_at_the_end_of_the_text():
    """Typing continues the document: the cursor starts after its text, at 80x24 as at 120x36."""
    prompt = "THE SOFTWARE IS PROVIDED\n\"AS IS\", WITHOUT WARRANTY"

    async def go():
        app = fake_app(mode="document", prompt=prompt)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("f3")
            await pilot.pause()
            ed = app.doc_tab.editor
            assert ed.text == prompt
            assert ed.cursor_location == ed.document.end == (1, len("\"AS IS\", WITHOUT WARRANTY"))
            await pilot.press("x")
            assert ed.text == prompt + "x"

    run(go())

"""The TUI's pure parts: word wrapping that never breaks mid-word and re-wraps only the last
line, provenance marks that follow edits, conversations and their exports, the opt-in
saved-conversations file, the settings' drafter specs, and the Session's continuation text."""
import json
import os
import random
import stat

import pytest
from tui_fakes import FakeDetok

from olifant_mlx.engine import Session, Step
from olifant_mlx.tui import store
from olifant_mlx.conversation import (Conversation, ConversationError, Run, Turn, export_text,
                                          format_for)
from olifant_mlx.tui.flow import add_marks, changed_span, shift_marks, wrap_starts
from olifant_mlx.tui.settings_tab import SettingsModel, compose_spec, drafters, split_spec

# ---- wrapping ---------------------------------------------------------------------------


def lines(text, width):
    starts = wrap_starts(text, width)
    return [text[a:b].rstrip() for a, b in zip(starts, starts[1:] + [len(text)])]


def test_wrap_keeps_words_whole_and_fits():
    text = "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED"
    for width in (10, 17, 30, 80):
        out = lines(text, width)
        assert " ".join(out) == text
        assert all(len(line) <= width for line in out)
        words = set(text.split())
        assert all(w in words for line in out for w in line.split())      # no word cut
    assert lines("merchantability", 5) == ["merch", "antab", "ility"]     # too long: folded
    assert lines("日本語の文", 4) == ["日本", "語の", "文"]                     # by cells


def test_wrap_from_the_last_line_equals_wrapping_everything():
    rng = random.Random(7)
    pieces = ["a", "bb", "warranty", "merchantability", "x" * 23, " ", "  ", ",", "é", "日本"]
    for _ in range(500):
        width = rng.randint(1, 30)
        text, starts = "", [0]
        for _ in range(rng.randint(1, 12)):
            text += "".join(rng.choice(pieces) + rng.choice(["", " "]) for _ in range(rng.randint(1, 3)))
            starts = starts[:-1] + wrap_starts(text, width, starts[-1])
            assert starts == wrap_starts(text, width), (width, text)


# ---- marks following edits ---------------------------------------------------------------

def test_changed_span_and_marks_follow_edits():
    rng = random.Random(3)
    for _ in range(500):
        a = "".join(rng.choice("ab \n") for _ in range(rng.randint(0, 20)))
        b = "".join(rng.choice("ab \n") for _ in range(rng.randint(0, 20)))
        s, e, n = changed_span(a, b)
        assert a[:s] + b[s:s + n] + a[e:] == b
    text = "Dear Sir, the warranties of merchantability"
    marks = [(10, 25, "accepted"), (25, 26, "correction"), (26, 43, "accepted")]
    # typing before the marks moves them; typing inside splits one; deleting removes
    assert shift_marks(marks, 0, 0, 5)[0] == (15, 30, "accepted")
    assert shift_marks(marks, 12, 12, 3)[:2] == [(10, 12, "accepted"), (15, 28, "accepted")]
    assert shift_marks(marks, 24, 27, 0) == [(10, 24, "accepted"), (24, 40, "accepted")]
    assert add_marks(shift_marks(marks, 24, 27, 0), []) == [(10, 40, "accepted")]
    assert text


# ---- conversations and exports -----------------------------------------------------------

def chat():
    c = Conversation(kind="chat", system_prompt="You are a careful lawyer.")
    c.turns = [Turn("user", "Draft a clause."),
               Turn("assistant", "The Parties agree.", [("The Parties", "accepted"), (" agree.", "bonus")],
                    stats={"tokens": 4, "tokens_per_s": 10.0, "acceptance": 0.5, "mean_accepted_length": 1.0,
                           "steps": 3}, energy={"energy_j": 1.25, "label": "replay"}, finish_reason="eos",
                    verifier="v", drafter="auto")]
    c.touch()
    return c


def test_chat_prompt_and_exports():
    c = chat()
    assert c.chat().messages[0] == {"role": "system", "content": "You are a careful lawyer."}
    assert [m["role"] for m in c.chat(1).messages] == ["system", "user"]
    md = export_text(c, "md")
    assert md.startswith("# Draft a clause.") and "## You\n\nDraft a clause." in md
    assert "## Assistant (v · drafter auto)\n\nThe Parties agree." in md and "1.25 J (replay)" in md
    assert export_text(c, "txt") == ("System: You are a careful lawyer.\n\nYou:\nDraft a clause.\n\n"
                                     "Assistant:\nThe Parties agree.\n")
    data = json.loads(export_text(c, "json", {"k": 8}))
    assert data["format"] == "olifant_mlx.export" and data["settings"] == {"k": 8}
    assert data["messages"][1]["stats"]["tokens"] == 4
    assert Conversation.from_dict(data).turns[1].segments == c.turns[1].segments
    assert format_for("a/b.TXT") == "txt" and format_for("a.md") == "md" and format_for("x") == "md"
    assert format_for("x.md", "json") == "json"
    with pytest.raises(ValueError):
        export_text(c, "pdf")


def test_document_exports_and_last_answer():
    d = Conversation(kind="document", text="This Agreement is made between the Parties.",
                     marks=[(30, 43, "accepted")])
    d.runs.append(Run(30, 43, {"tokens": 3}))
    assert export_text(d, "txt") == d.text + "\n" and d.last_answer() == " the Parties."
    assert json.loads(export_text(d, "json"))["continuations"][0]["stats"] == {"tokens": 3}
    assert chat().last_answer() == "The Parties agree."


@pytest.mark.parametrize("bad", [
    {"kind": "poem", "id": "x"},
    {"kind": "chat", "id": "x", "messages": [{"role": "root", "content": "hi"}]},
    {"kind": "chat", "id": "x", "messages": [{"role": "assistant", "content": "hi",
                                               "segments": [["ho", "accepted"]]}]},
    {"kind": "chat", "id": "x", "messages": [{"role": "assistant", "content": "hi",
                                               "segments": [["hi", "guessed"]]}]},
    {"kind": "document", "id": "x", "text": "abc", "marks": [[0, 9, "accepted"]]},
    {"kind": "document", "id": "x", "text": "abc", "continuations": [{"start": 2, "end": 1}]},
    {"kind": "chat", "id": "", "messages": []},
])
def test_conversations_are_validated(bad):
    with pytest.raises(ConversationError):
        Conversation.from_dict(bad)


# ---- the saved-conversations file ----------------------------------------------------------

def test_store_round_trip_0600_and_refusals(tmp_path):
    path = tmp_path / "chats.json"
    assert store.load(str(path)) == []
    store.save(str(path), [chat(), Conversation(kind="document")])       # the empty one is left out
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = store.load(str(path))
    assert len(loaded) == 1 and loaded[0].turns[1].content == "The Parties agree."
    data = json.loads(path.read_text())
    for broken, message in [("not json", "not a saved-conversations file"),
                            (json.dumps({"format": "other"}), "no 'olifant_mlx.conversations'"),
                            (json.dumps({**data, "version": 2}), "version 2"),
                            (json.dumps({**data, "conversations": data["conversations"] * 2}), "twice"),
                            (json.dumps({**data, "conversations": [{"kind": "chat"}]}), "conversation 1")]:
        path.write_text(broken)
        with pytest.raises(store.StoreError, match=message):
            store.load(str(path))
    with pytest.raises(store.StoreError, match="not a regular file"):
        store.load(str(tmp_path))
    with pytest.raises(store.StoreError, match="does not exist"):
        store.save(str(tmp_path / "no" / "such.json"), [])
    fifo, dangling = tmp_path / "fifo.json", tmp_path / "link.json"
    os.mkfifo(fifo)
    dangling.symlink_to(tmp_path / "nothing.json")
    for bad, message in [(fifo, "a FIFO"), (dangling, "link to nothing")]:    # refused, never opened
        with pytest.raises(store.StoreError, match=message):
            store.load(str(bad))
        with pytest.raises(store.StoreError, match=message):
            store.save(str(bad), [chat()])
    assert not (tmp_path / "nothing.json").exists()


# ---- the settings' drafter specs -----------------------------------------------------------

def test_drafter_specs_of_the_settings_form():
    kinds = [k for k, _, _ in drafters()]
    assert kinds[0] == "auto" and {"hybrid", "adaptive", "olifant", "ngram", "lookup", "neural"} <= set(kinds)
    assert split_spec("auto") == ("auto", "", "adaptive")
    assert split_spec("adaptive:hybrid:m.olif") == ("hybrid", "m.olif", "adaptive")
    assert split_spec("ngram:3") == ("ngram", "3", "fixed")
    assert compose_spec("hybrid", "m.olif", "adaptive") == "adaptive:hybrid:m.olif"
    assert compose_spec("ngram", "", "fixed") == "ngram"
    assert compose_spec("auto", "ignored", "fixed") == "auto"
    assert compose_spec("adaptive", "lookup", "adaptive") == "adaptive:lookup"


def test_the_settings_model_checks_each_field_as_it_is_set():
    """Each field is checked when it is set (its error named by the field); what a run reads
    is the Settings made then, the same object until a field changes."""
    from olifant_mlx.drafters.registry import parse_spec
    from olifant_mlx.engine import GenerationOptions

    m = SettingsModel.start(None, "ngram:3", GenerationOptions(k=3, max_tokens=8))
    s = m.settings
    assert s.draft.text == "ngram:3" and s.options.k == 3 and s.model is None and m.error is None
    m.set("top_p", lambda: 1.5)
    assert m.settings is None and m.error.name == "top_p" and "top-p must be in (0, 1]" in str(m.error)
    m.set("temperature", lambda: float("x"))                       # a second field wrong
    assert m.error.name == "temperature" and set(m.errors) == {"top_p", "temperature"}   # the form's order
    m.set("top_p", lambda: 0.9)
    m.set("temperature", lambda: 0.5)
    assert m.settings.options.top_p == 0.9 and m.settings.options.temperature == 0.5
    m.set("history", lambda: "/tmp/h.bin")                         # read only by a hybrid drafter
    assert m.settings is None and m.error.name == "history" and "hybrid" in str(m.error)
    m.set("draft", lambda: parse_spec("adaptive:ngram:3"))
    assert m.error.name == "history"
    m.set("history", lambda: None)
    settings = m.settings
    assert settings.draft.text == "adaptive:ngram:3" and m.settings is settings     # read, not made again


# ---- the Session: a continuation keeps its first space ---------------------------------------

class TrimmingDetok(FakeDetok):
    """Like mlx-lm's streaming detokenizers: the space before the first word is dropped."""
    PIECES = {1: "NOT", 2: " LIMITED", 3: " TO", 4: " THE", 5: " WARRANTIES"}

    def __init__(self):
        self.reset()

    def add_token(self, t):
        piece = self.PIECES[t]
        if not self.text:
            piece = piece.lstrip(" ")
        self.text += piece
        self._seg += piece


class Ident:
    name, vocab_size, digest = "t", 6, bytes(32)

    def decode(self, ids):
        return "".join(TrimmingDetok.PIECES[t] for t in ids).lstrip(" ")


class TextVerifier:
    name, eos_ids, bos_id, model, context_length, has_chat_template = "t", (0,), None, None, None, False
    identity = Ident()

    def encode(self, text):
        return [1, 2, 3]

    def detokenizer(self):
        return TrimmingDetok()


class Scripted(Session):
    def _steps(self, ids, drafter, opts, stats, on_prefill, eos_ids, cache=None, constraint=None, batched=False):
        for i, t in enumerate((4, 5)):
            step = Step(index=i, drafted=[], accepted=0, emitted=[t], verifier_token=t, fast_path=False,
                        forward_tokens=1, draft_s=0, verify_s=0, step_s=0, finished=i == 1,
                        stop_reason="max_tokens" if i == 1 else "")
            stats.add(step)
            yield step


def test_a_continuation_keeps_the_space_before_its_first_word():
    s = Scripted(TextVerifier())
    text = "".join(r.text for r in s.stream(s.plan("NOT LIMITED TO", continuation=False)))
    assert text == "THE WARRANTIES"                                                       # mlx-lm's
    ids = list(s.encode("NOT LIMITED TO"))
    assert "".join(r.text for r in s.stream(s.plan(ids))) == "THE WARRANTIES"          # ids: as is
    out = list(s.stream(s.plan("NOT LIMITED TO")))          # a text prompt: a continuation by default
    assert "".join(r.text for r in out) == " THE WARRANTIES"
    assert out[0].segments == [(" THE", "plain")]


# ---- the flowing text in an app --------------------------------------------------------------

def test_flow_text_grows_with_new_paragraphs_and_marks_words_not_spaces():
    import asyncio

    from textual.app import App
    from textual.containers import VerticalScroll

    from olifant_mlx.tui.flow import FlowText

    class Host(App):
        def compose(self):
            with VerticalScroll():
                yield FlowText()

    async def go():
        app = Host()
        async with app.run_test(size=(40, 20)) as pilot:
            flow = app.query_one(FlowText)
            for seg in [("Here are", "correction"), (" three exceptions:", "accepted"), ("\n\n", "plain"),
                        ("1. **Non-disclosure**", "accepted"), (" to", "accepted"), ("\n2.", "plain")]:
                flow.append([seg])
                await pilot.pause()
            await pilot.pause()
            assert flow.visual_lines() == ["Here are three exceptions:", "", "1. **Non-disclosure** to", "2."]
            assert flow.region.height == flow.line_count == 4          # the area grew with the text
            strip = flow.render_line(2)
            underlined = [seg.text for seg in strip if seg.style and seg.style.underline]
            assert "".join(underlined).replace(" ", "") == "1.**Non-disclosure**to"
            assert all(" " not in t for t in underlined)

    asyncio.run(go())


def test_an_answer_view_takes_text_before_and_after_it_is_composed():
    """On a busy machine the first pieces of an answer can arrive while its view is mounted but
    not yet composed (CI saw NoMatches for FlowText): they are kept by the turn, and compose()
    shows them; pieces after that go to the FlowText."""
    import asyncio

    from textual.app import App

    from olifant_mlx.tui.chat_tab import MessageView
    from olifant_mlx.tui.flow import FlowText

    turn = Turn("assistant", "")
    view = MessageView(1, turn, markdown=False, writing=True)
    turn.segments += [("early", "accepted")]
    view.append([("early", "accepted")])            # no FlowText yet: nothing to do, no error

    class One(App):
        def compose(self):
            yield view

    async def go():
        async with One().run_test() as pilot:
            await pilot.pause()
            flow = view.query_one(FlowText)
            assert flow.text == "early"
            view.append([(" late", "bonus")])
            assert flow.text == "early late"

    asyncio.run(go())

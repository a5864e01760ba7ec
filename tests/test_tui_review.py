"""The Review tab (issue 44): a Word document opened by its path, an instruction typed, clauses
checked (by hand, by the instruction's search, all), revised live on the tab's own worker, the
changes stepped through, accepted and rejected, and the redline exported with exactly the kept
changes as tracked changes (0600); bad paths, damaged files and an empty selection said under
their fields. The real Session over a fake verifier whose answers are known revisions, so the
changes are the same every run; the real SmolLM2 verifier (slow) for one clause."""
import asyncio
import os
import stat

import pytest
from textual.widgets import Input, SelectionList
from tui_fakes import (FAKE_IDENTITY, FakeDetok, FakeSession, FakeVerifier, Identity, check_snapshot, settle,
                       static_text, wait_for)

from olifant_mlx import redline, revise
from olifant_mlx.drafters.prediction import PREDICTION_K
from olifant_mlx.engine import GenerationOptions, Step
from olifant_mlx.tui.app import OlifantApp
from olifant_mlx.tui.review import Clause, Review, redline as redline_text, revise_options
from olifant_mlx.tui.review_tab import ReviewTab

NOTICE = ("1.1 The Customer shall notify the Supplier of any claim within thirty (30) days of becoming "
          "aware of it.")
POST = "1.2 Notices shall be in writing and delivered by hand or by registered post."
CAP = ("2.1 The Supplier's total liability shall not exceed the fees paid in the twelve (12) months "
       "preceding the claim.")
CONTRACT = [("Title", "Master Services Agreement"), ("Heading 1", "1. Notices"), ("Normal", NOTICE),
            ("Normal", POST), ("Heading 1", "2. Liability"), ("Normal", CAP), ("Normal", "Signed:")]
# what the fake verifier answers for each clause (any other: the clause as it was)
ANSWERS = {NOTICE: NOTICE.replace("Supplier of", "Supplier in writing of").replace("thirty (30)", "sixty (60)"),
           CAP: CAP.replace("exceed the", "exceed twice the")}
INSTRUCTION = "change thirty (30) days to sixty (60) days"


def write_contract(path):
    import docx

    d = docx.Document()
    for style, text in CONTRACT:
        d.add_paragraph(text, style=style)
    d.save(path)
    return path


class WordIdentity(Identity):
    def encode(self, text):
        return list(range(len(redline.tokenize(text))))


class RevisingVerifier(FakeVerifier):
    """Answers each revision prompt with ANSWERS' revision of its clause (the clause is what
    follows the prompt's first blank line)."""
    identity = WordIdentity()

    def chat_ids(self, messages, template_kwargs=None):
        clause = messages[-1]["content"].split("\n\n", 1)[1]
        self.pieces = redline.tokenize(ANSWERS.get(clause, clause))
        return super().chat_ids(messages, template_kwargs)

    def detokenizer(self):
        d = FakeDetok(self.pieces)          # id i: the answer's i-th piece
        d.reset()
        return d


class RevisingSession(FakeSession):
    """The real Session; the engine loop scripted: the answer's pieces three a pass (two accepted
    drafts and the verifier's correction), then the end of the answer. `gates`: the i-th clause
    revised waits after its first pass until gates[i] is set (the test looks meanwhile)."""
    gates: list = []
    clauses = 0

    def _steps(self, ids, drafter, opts, stats, on_prefill, eos_ids, cache=None, constraint=None, batched=False):
        gate = RevisingSession.gates[RevisingSession.clauses] if RevisingSession.clauses < len(self.gates) else None
        RevisingSession.clauses += 1
        n = min(len(self.verifier.pieces), opts.max_tokens)
        for i, at in enumerate(range(0, n, 3)):
            emitted = list(range(at, min(at + 3, n)))
            done = at + 3 >= n
            step = Step(index=i, drafted=emitted[:2] + [0], accepted=min(2, len(emitted)), emitted=emitted,
                        verifier_token=emitted[-1] if len(emitted) > 2 else None, fast_path=False,
                        forward_tokens=3, draft_s=0.0001, verify_s=0.001, step_s=0.0011, finished=done,
                        stop_reason=("eos" if n == len(self.verifier.pieces) else "max_tokens") if done else "")
            stats.add(step)
            yield step
            if gate is not None:
                assert gate.wait(timeout=60), "the test never opened the gate"


def review_app(gates=(), **kw):
    RevisingSession.gates, RevisingSession.clauses = list(gates), 0
    return OlifantApp(session_factory=lambda model, meter: RevisingSession(RevisingVerifier(), "none", meter=meter),
                      tokenizer_fn=lambda model: FAKE_IDENTITY, energy="none", model_dirs=[], **kw)


async def type_into(pilot, app, selector, text, typed=True):
    """Focus the field, type the text key by key as a person does (`typed` False: put it there
    at once) and press enter."""
    field = app.query_one(selector, Input)
    field.focus()
    field.value = "" if typed else text
    await pilot.pause()
    await pilot.press(*([{" ": "space"}.get(c, c) for c in text] if typed else []), "enter")
    await pilot.pause()


async def open_document(pilot, app, path, typed=False):
    tab = app.query_one(ReviewTab)
    await pilot.press("f12")
    await type_into(pilot, app, "#review-path", str(path), typed)
    await wait_for(pilot, lambda: tab.review is not None or app.query_one("#review-path-error").has_class("-shown")
                   and "reading" not in static_text(app, "#review-path-error"))
    await pilot.pause()
    return tab


def checked(app) -> list:
    return sorted(app.query_one("#review-clauses", SelectionList).selected)


def go(coro):
    return asyncio.run(coro)


# ---- the pure parts --------------------------------------------------------------------------

def contract_doc(tmp_path):
    return revise.read_document(write_contract(tmp_path / "msa.docx"))


def test_changes_are_stepped_through_across_clauses_and_kept_unless_rejected(tmp_path):
    doc = contract_doc(tmp_path)
    review = Review(doc)
    p = {x.text: x for x in doc.paragraphs}
    review.begin([p[NOTICE], p[POST], p[CAP]])
    for text in (NOTICE, POST, CAP):
        review.done(revise.finish(p[text], ANSWERS.get(text, text)))
    notice, post, cap = p[NOTICE].index, p[POST].index, p[CAP].index
    assert review.stops() == [(notice, 0), (notice, 1), (notice, 2), (cap, 0)]
    assert [review.move(1) for _ in range(5)] == [(notice, 0), (notice, 1), (notice, 2), (cap, 0), None]
    assert review.move(-1) == (notice, 2)
    review.goto(post)                        # a clause without changes: n and p go on from it
    assert review.at == (post, None) and review.move(1) == (cap, 0)
    review.goto(post)
    assert review.move(-1) == (notice, 2)
    review.at = (notice, 0)
    assert review.decide(False) == 1
    assert review.keep() == {notice: {1, 2}, cap: {0}}           # the no-change clause is not written
    review.at = (cap, 0)
    assert review.decide(False, whole_clause=True) == 1 and review.decide(True) == 1
    assert review.counts() == {"accepted": 1, "rejected": 1, "pending": 2}
    assert review.summary() == "3 revised: 2 changed, 1 no change · 1 accepted, 1 rejected, 2 to review"


def test_the_redline_reads_without_colour():
    p = revise.Paragraph(0, "pay within thirty days")
    c = Clause(p, revise.finish(p, "pay promptly within sixty days"))
    c.states = {0: "accepted", 1: "rejected"}
    t = redline_text(c, current=1)
    assert t.plain == "pay {+promptly +}✓within [-thirty-]{+sixty+}✗ days"
    styles = {t.plain[s.start:s.end]: s.style for s in t.spans}
    assert styles["{+promptly +}"].underline and styles["[-thirty-]"].strike
    assert styles["[-thirty-]"].reverse and styles["[-thirty-]"].dim      # the change shown, rejected
    assert not styles["{+promptly +}"].reverse


def test_the_list_says_no_change_flags_failures_and_what_cannot_be_checked():
    from olifant_mlx.tui.review import label

    clause = revise.Paragraph(2, "The Customer shall notify the Supplier of any claim within thirty days.")
    cut = Clause(clause, revise.finish(clause, "The Customer shall notify."))         # most of it deleted
    same = Clause(clause, revise.finish(clause, clause.text))
    long = Clause(clause, error="the prompt is 9,000 tokens")
    lines = {name: label(clause, c, 60).plain for name, c in
             (("cut", cut), ("same", same), ("long", long), ("none", None))}
    assert lines["cut"].startswith("¶3 [1 change; ⚑ ") and "deleted" in lines["cut"]
    assert lines["same"].startswith("¶3 [no change] The Customer")
    assert lines["long"].startswith("¶3 [not revised: the prompt is 9,000 tokens]")
    assert lines["none"] == "¶3 " + clause.text[:56] + "…" and len(lines["none"]) == 60    # cut to the width
    assert label(revise.Paragraph(0, "1. Notices", heading=1), None, 60).plain == "¶1 [heading 1] 1. Notices"
    assert "tracked changes of its own (2)" in label(revise.Paragraph(1, clause.text, tracked=2), None, 90).plain


def test_k_is_predictions_unless_the_settings_ask_for_another():
    assert revise_options(GenerationOptions()) == (GenerationOptions(k=PREDICTION_K), None)
    assert revise_options(GenerationOptions(k=4, max_tokens=100)) == (GenerationOptions(k=4, max_tokens=100), 100)


# ---- the tab, driven by keys ---------------------------------------------------------------------

@pytest.mark.slow   # a whole App run, over 1.4 s on two cores: out of the 3-minute default loop
def test_review_a_word_document_accept_reject_and_export_the_kept_changes(tmp_path):
    path = write_contract(tmp_path / "msa.docx")
    out = tmp_path / "out" / "msa-redline.docx"
    out.parent.mkdir()

    async def run():
        app = review_app()
        async with app.run_test(size=(80, 24)) as pilot:
            tab = await open_document(pilot, app, path, typed=True)
            doc = tab.review.doc
            idx = {p.text: p.index for p in doc.paragraphs}
            assert app.focused.id == "review-instruction"
            await type_into(pilot, app, "#review-instruction", INSTRUCTION)
            assert checked(app) == [idx[NOTICE]]              # the instruction's search preselects
            assert app.focused.id == "review-clauses"
            await pilot.press("plus")                         # every clause (not headings, not "Signed:")
            assert checked(app) == [idx[NOTICE], idx[POST], idx[CAP]]
            await pilot.press("minus")
            assert checked(app) == []
            await pilot.press("home")              # the first clause: headings and "Signed:" are passed over
            assert app.query_one("#review-clauses", SelectionList).highlighted == idx[NOTICE]
            await pilot.press("space", "down", "down", "space")
            assert checked(app) == [idx[NOTICE], idx[CAP]]
            await pilot.press("plus", "ctrl+g")
            await settle(pilot, app)
            r = tab.review
            assert [c.revision.status for c in r.revised()] == ["changed", "no change", "changed"]
            assert static_text(app, "#review-status").startswith("3 revised: 2 changed, 1 no change · ")
            assert "no change" in str(app.query_one("#review-clauses", SelectionList).get_option_at_index(
                idx[POST]).prompt)
            # the first change is shown: "in writing" inserted
            assert r.at == (idx[NOTICE], 0) and app.focused.id == "review-clauses"
            assert "{+in writing +}" in static_text(app, "#review-redline")
            assert "change 1 of 3" in static_text(app, "#review-title")
            await pilot.press("r")                            # rejected; on to the next change
            assert r.at == (idx[NOTICE], 1)
            assert "{+in writing +}✗" in static_text(app, "#review-redline")
            await pilot.press("a", "a")                       # thirty -> sixty, 30 -> 60
            assert r.at == (idx[CAP], 0)                      # past the no-change clause
            await pilot.press("p", "n", "A")
            assert r.counts() == {"accepted": 3, "rejected": 1, "pending": 0}
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert type(app.screen).__name__ == "ExportScreen"
            box = app.screen.query_one("#save-path", Input)
            assert box.value == str(tmp_path / "msa-redline.docx")     # suggested beside the document
            box.value = str(out)
            await pilot.press("enter")
            await pilot.pause()
            assert type(app.screen).__name__ != "ExportScreen"
        return idx

    idx = go(run())
    data = out.read_bytes()
    accepted, original = redline.accepted_text(data), redline.original_text(data)
    want = [t for _, t in CONTRACT]
    assert original == want                                   # reject-all: the document as it was
    kept = want[:]
    kept[idx[NOTICE]] = NOTICE.replace("thirty (30)", "sixty (60)")      # "in writing" rejected
    kept[idx[CAP]] = ANSWERS[CAP]
    assert accepted == kept
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["msa.docx", "out"] and os.listdir(out.parent) == ["msa-redline.docx"]


@pytest.mark.slow   # a whole App run, over 1.4 s on two cores: out of the 3-minute default loop
def test_markdown_and_text_exports_mark_the_kept_changes(tmp_path):
    path = write_contract(tmp_path / "msa.docx")

    async def run():
        app = review_app()
        async with app.run_test(size=(80, 24)) as pilot:
            tab = await open_document(pilot, app, path)
            await type_into(pilot, app, "#review-instruction", INSTRUCTION, typed=False)
            await pilot.press("ctrl+g")
            await settle(pilot, app)
            await pilot.press("r")                    # "in writing" rejected, the others kept unseen
            for name in ("msa.md", "msa.txt"):
                await pilot.press("ctrl+s")
                await pilot.pause()
                app.screen.query_one("#save-path", Input).value = str(tmp_path / name)
                await pilot.press("enter")
                await pilot.pause()
            return tab.review.counts()

    assert go(run()) == {"accepted": 0, "rejected": 1, "pending": 2}
    md, txt = (tmp_path / "msa.md").read_text(), (tmp_path / "msa.txt").read_text()
    assert "{~~thirty~>sixty~~} ({~~30~>60~~})" in md and "writing" not in md.split("\n\n")[2]
    assert "[-thirty-]{+sixty+} ([-30-]{+60+})" in txt
    assert stat.S_IMODE(os.stat(tmp_path / "msa.md").st_mode) == 0o600


@pytest.mark.slow   # a whole App run, over 1.4 s on two cores: out of the 3-minute default loop
def test_bad_paths_damaged_files_and_empty_choices_are_said_under_their_fields(tmp_path):
    """Each as `revise` says it (a file: the CLI's own words), nothing run, nothing written."""
    import re

    missing, damaged, empty = tmp_path / "gone.docx", tmp_path / "damaged.docx", tmp_path / "empty.docx"
    damaged.write_bytes(b"PK\x03\x04 not really a zip")
    empty.write_bytes(b"")
    path = write_contract(tmp_path / "msa.docx")

    async def run():
        app = review_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("f12", "ctrl+g")
            await pilot.pause()
            said = {"no document": static_text(app, "#review-path-error")}
            for bad in (missing, damaged, empty):
                tab = await open_document(pilot, app, bad)
                assert tab.review is None
                said[bad] = static_text(app, "#review-path-error")
            await open_document(pilot, app, path)
            assert not app.query_one("#review-path-error").has_class("-shown")
            await pilot.press("ctrl+g")
            await pilot.pause()
            said["no instruction"] = static_text(app, "#review-instruction-error")
            await type_into(pilot, app, "#review-instruction", "the weather in Lisbon", typed=False)
            said["the search's"] = static_text(app, "#review-clauses-error")
            await pilot.press("ctrl+g")
            await pilot.pause()
            said["nothing checked"] = static_text(app, "#review-clauses-error")
            assert not app.workspace.generating and app.workspace.session is None   # nothing ran
            return said

    said = go(run())
    assert "open a document first" in said["no document"]
    for bad, words in ((missing, "no such file"), (damaged, "not a complete ZIP|damaged|truncated"),
                       (empty, "empty")):
        with pytest.raises(revise.RevisionError) as e:            # the CLI's words
            revise.read_document(bad)
        assert said[bad] == str(e.value) and re.search(words, said[bad]) and said[bad].startswith(str(bad))
    assert "give the instruction" in said["no instruction"]
    assert "finds no clause" in said["the search's"] and "finds no clause" in said["nothing checked"]
    assert sorted(os.listdir(tmp_path)) == ["damaged.docx", "empty.docx", "msa.docx"]


@pytest.mark.slow   # a whole App run, over 1.4 s on two cores: out of the 3-minute default loop
def test_clauses_with_tracked_changes_of_their_own_cannot_be_checked(tmp_path):
    from word_files import write_tracked_docx

    write_tracked_docx(tmp_path / "tracked.docx")

    async def run():
        app = review_app()
        async with app.run_test(size=(80, 24)) as pilot:
            tab = await open_document(pilot, app, tmp_path / "tracked.docx")
            await pilot.press("tab", "plus")
            prompts = [str(o.prompt) for o in tab.view.clauses.options]
            tracked = [p.tracked for p in tab.review.doc.paragraphs]
            return checked(app), tracked, prompts, static_text(app, "#review-head")

    got, tracked, prompts, head = go(run())
    assert tracked[1] == 0 and all(tracked[i] for i in (0, 2, 3))
    assert got == [1]                                     # the one clause without tracked changes
    assert all("tracked changes of its own" in prompts[i] for i in (0, 2, 3))
    assert "3 with tracked changes of their own are left as they are" in head


@pytest.mark.slow   # a whole App run, over 1.4 s on two cores: out of the 3-minute default loop
def test_each_clause_is_drafted_live_and_esc_stops_keeping_those_done(tmp_path, monkeypatch):
    import threading

    monkeypatch.setattr("olifant_mlx.tui.workers.FLUSH_S", 0.0)      # every pass shown as it comes
    path = write_contract(tmp_path / "msa.docx")
    gates = [threading.Event(), threading.Event()]

    async def run():
        app = review_app(gates)
        async with app.run_test(size=(80, 24)) as pilot:
            tab = await open_document(pilot, app, path)
            await type_into(pilot, app, "#review-instruction", INSTRUCTION, typed=False)
            await pilot.press("plus", "ctrl+g")
            draft = tab.query_one("#review-draft")
            await wait_for(pilot, lambda: draft.text == "1.1 The")          # the first pass, drafted live
            assert draft.display and not tab.query_one("#review-redline").display
            assert static_text(app, "#review-title") == "¶3 (1 of 3): revising …"
            assert [kind for _, kind in draft._paras[0]] == ["accepted", "correction"]   # drafts marked
            assert "[revising …]" in str(tab.view.clauses.get_option_at_index(2).prompt)
            assert {w.node for w in app.workers if w.group == "generate" and w.is_running} == {tab}
            gates[0].set()
            await wait_for(pilot, lambda: draft.text == "1.2 Notices")      # the second clause's first pass
            assert [c.paragraph.text for c in tab.review.revised()] == [NOTICE]
            await pilot.press("escape")
            gates[1].set()
            await settle(pilot, app)
            assert "stopped" in static_text(app, "#review-status")
            return [c.paragraph.text for c in tab.review.revised()], list(tab.review.clauses), draft.display

    done, clauses, drafting = go(run())
    assert done == [NOTICE] and len(clauses) == 1 and not drafting


# ---- snapshots ---------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [(80, 24), pytest.param((160, 48), marks=pytest.mark.slow)])   # over 1.4 s
def test_snapshot_review(size, tmp_path, monkeypatch):
    """The tab after a run: the clauses with what became of each, a change shown in its redline
    (one rejected), the keys; the document's path is the same on every machine."""
    monkeypatch.chdir(tmp_path)
    write_contract(tmp_path / "msa.docx")

    async def run():
        app = review_app(model="smollm2-135m")
        async with app.run_test(size=size) as pilot:
            await open_document(pilot, app, "msa.docx")
            await type_into(pilot, app, "#review-instruction", INSTRUCTION, typed=False)
            await pilot.press("plus", "ctrl+g")
            await settle(pilot, app)
            await pilot.press("r")
            if size[0] >= 110:
                await pilot.press("f9")       # the live numbers hold the time the run took: not in a snapshot
            app.set_focus(app.query_one("#review-clauses"))
            for _ in range(3):
                await pilot.pause(0.1)
            await pilot.wait_for_scheduled_animations()
            return app.export_screenshot(title="olifant_mlx review")

    check_snapshot(f"tui_review_{size[0]}x{size[1]}", go(run()))


# ---- the real verifier ---------------------------------------------------------------------------

@pytest.mark.slow
def test_real_verifier_revises_a_clause_as_revise_does(tmp_path, smol):
    """SmolLM2-135M through the tab: the redline is the one the library makes of plain decoding's
    answer (drafting never changes the text)."""
    path = write_contract(tmp_path / "msa.docx")
    from olifant_mlx.engine import Session

    async def run():
        app = OlifantApp(model="smollm2-135m", energy="none", model_dirs=[])
        async with app.run_test(size=(80, 24)) as pilot:
            tab = await open_document(pilot, app, path)
            await type_into(pilot, app, "#review-instruction", INSTRUCTION, typed=False)
            await pilot.press("ctrl+g")
            await settle(pilot, app, timeout=600)
            return tab.review.revised()

    (clause,) = go(run())
    session = Session(smol, "none")
    request = revise.plan_revision(session, clause.paragraph, INSTRUCTION, GenerationOptions(k=0))
    plain = "".join(r.text for r in session.stream(request))
    assert clause.revision.after == revise.finish(clause.paragraph, plain).after
    assert clause.revision.stats["tokens"] > 0

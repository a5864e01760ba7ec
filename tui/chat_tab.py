"""The Chat tab: a conversation with an instruct verifier, through its chat template.

The transcript is one scrolling column of messages; the answer being written flows into its
message as it is drafted, marked by provenance. Finished answers are rendered as Markdown
when that is on (ctrl+f), else they keep their marks. You write in the editor below. The tab
writes its own answers: ctrl+g sends your message, ctrl+r writes the last answer again,
ctrl+t edits a message of yours; each answer runs on the tab's own worker (tui/writing.py) and
the tab handles what it posts (`on_chunk`, `on_done`, `on_failed`). What an answer keeps in
its conversation is the plain functions below (a test runs them without an App).
"""
from __future__ import annotations

import dataclasses

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Markdown, Static, TextArea

from olifant_mlx.conversation import Conversation, Turn, short_spec
from olifant_mlx.tui.copied import ranges
from olifant_mlx.tui.flow import FlowText, Legend
from olifant_mlx.tui.messages import Chunk, Done, Failed
from olifant_mlx.tui.workers import Job
from olifant_mlx.tui.writing import WritingPane, setting_up

EMPTY = ("Write a message below and press ctrl+g. The verifier answers through its chat template; "
         "ctrl+r regenerates the last answer, ctrl+t edits your last message and sends it again.")


# ---- what an answer keeps in its conversation (no widgets) ---------------------------------

def ask(ws, text: str, system_prompt: str | None) -> Conversation:
    """Your message added to the workspace `ws`'s current chat (in place of the one being
    edited, and the answers after it)."""
    conv = ws.current["chat"]
    if ws.editing is not None:
        del conv.turns[ws.editing:]
        ws.editing = None
    conv.system_prompt = system_prompt
    conv.turns.append(Turn("user", text))
    conv.touch()
    return conv


def answer(ws, conv: Conversation, s, seed: int | None = None) -> Job:
    """A new answer (empty yet) to the chat's last message, and the job that writes it (with
    `seed` in place of the settings' own, when given)."""
    if seed is not None:
        s = dataclasses.replace(s, options=s.options.replace(seed=seed))
    o = s.options
    conv.turns.append(Turn("assistant", "", drafter=short_spec(s.draft.text),
                           seed=o.seed if o.temperature > 0 else None))
    index = len(conv.turns) - 1
    return ws.job("chat", conv, s, conv.chat(index, ws.template_kwargs), index)


def keep_chunk(job: Job, m: Chunk) -> None:
    """A Chunk's text and copied spans kept with its answer."""
    turn = job.conv.turns[job.index]
    turn.content += "".join(t for t, _ in m.segments)
    turn.segments += m.segments
    turn.sources += m.sources


def keep_done(ws, job: Job, m: Done) -> None:
    """A finished answer (a Done) kept in its conversation with its numbers."""
    turn = job.conv.turns[job.index]
    turn.content = m.text
    for name, value in ws.record(job, m).items():
        setattr(turn, name, value)
    turn.precedents = job.precedents
    job.conv.touch()


def drop_failed(job: Job) -> bool:
    """An answer that failed: dropped when it has no text yet (True), else kept and marked an
    error."""
    turn = job.conv.turns[job.index]
    if not turn.content:
        del job.conv.turns[job.index:]
        return True
    turn.finish_reason = "error"
    return False


class MessageView(Vertical):
    """One message: a header line and its text (marked text, or Markdown for a finished answer)."""

    def __init__(self, index: int, turn, markdown: bool, writing: bool = False):
        super().__init__(classes=f"msg -{turn.role}")
        self.index = index
        self.turn = turn
        self.markdown = markdown
        self.writing = writing
        self.can_focus = turn.role == "user"     # focus a message of yours to edit it (ctrl+t)

    def compose(self) -> ComposeResult:
        yield Static(self.header(), classes="msg-head")
        yield from self._body()

    def _body(self):
        if self.turn.role == "assistant" and self.markdown and not self.writing:
            yield Markdown(self.turn.content, classes="msg-body")
        else:
            segments = self.turn.segments if self.turn.role == "assistant" else [(self.turn.content, "")]
            flow = FlowText(segments, classes="msg-body")
            flow.copied = ranges(self.turn.sources) if self.turn.role == "assistant" else []
            yield flow

    def header(self) -> str:
        t = self.turn
        if t.role == "user":
            return "you"
        parts = ["assistant"]
        if self.writing:
            parts.append("writing …")
        elif t.stats:
            s = t.stats
            parts.append(f"{s.get('tokens', 0)} tok, {s.get('tokens_per_s', 0):.1f}/s, "
                         f"acc {s.get('acceptance', 0):.0%}")
            if t.finish_reason and t.finish_reason not in ("eos", "stop"):
                parts.append(t.finish_reason.replace("_", " "))
        if t.seed is not None:
            parts.append(f"seed {t.seed}")
        if t.role == "assistant" and t.sources:
            parts.append(f"{len(t.sources)} copied (^L Sources)")
        if t.drafter:
            parts.append(f"drafter {t.drafter}")
        if t.verifier:
            parts.append(t.verifier)
        return " · ".join(parts)

    def append(self, segments) -> None:
        """New text of the answer being written. A view mounted but not yet composed (a busy
        machine) has no FlowText yet: its compose() builds one from the turn, which already
        holds these segments."""
        flows = self.query(FlowText)
        if flows:
            flows.first().append(segments)

    async def finish(self, markdown: bool) -> None:
        self.writing = False
        await self.set_markdown(markdown, force=True)

    async def set_markdown(self, on: bool, force: bool = False) -> None:
        if self.turn.role != "assistant" or (on == self.markdown and not force) or self.writing:
            return
        self.markdown = on
        heads = self.query(".msg-head")
        if not heads:       # not composed yet (a busy machine): compose() builds it as it is now
            return
        heads.first(Static).update(self.header())
        await self.query(".msg-body").remove()
        await self.mount_all(list(self._body()))

    def set_marks(self, mode: str) -> None:
        for w in self.query(FlowText):
            w.set_marks(mode)

    def show_copied(self) -> None:
        """The answer's copied spans marked (as the tracker finds them) and counted."""
        for w in self.query(FlowText):
            w.set_copied(ranges(self.turn.sources))
        for head in self.query(".msg-head"):
            head.update(self.header())


class ChatTab(WritingPane):
    copies = "the last answer"

    def __init__(self, prompt: str = ""):
        super().__init__("F2 Chat", id="chat")
        self.prompt = prompt
        self.markdown = True
        self.marks = "styled"

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="transcript"):
            yield Static(EMPTY, id="chat-empty")
        yield Legend(id="chat-legend")
        yield Static("", id="chat-status", classes="status")
        yield TextArea(self.prompt, id="composer", soft_wrap=True, compact=True,
                       placeholder="your message (ctrl+g sends; ctrl+a selects all)")

    @property
    def composer(self) -> TextArea:
        return self.query_one("#composer", TextArea)

    @property
    def transcript(self) -> VerticalScroll:
        return self.query_one("#transcript", VerticalScroll)

    def views(self) -> list[MessageView]:
        return list(self.query(MessageView))

    def view(self, index: int) -> MessageView | None:
        return next((v for v in self.views() if v.index == index), None)

    async def show(self, conv) -> None:
        """Show a whole conversation."""
        await self.transcript.remove_children()
        views = [MessageView(i, t, self.markdown) for i, t in enumerate(conv.turns)]
        await self.transcript.mount_all(views or [Static(EMPTY, id="chat-empty")])
        for v in views:
            v.set_marks(self.marks)
        self.transcript.scroll_end(animate=False)

    async def open(self, conv, clear: bool = False) -> None:
        """A conversation chosen in the list (`clear`: a new one, the editor emptied)."""
        await self.show(conv)
        if clear:
            self.composer.clear()

    async def add(self, index: int, turn, writing: bool = False) -> MessageView:
        for w in self.query("#chat-empty"):
            await w.remove()
        view = MessageView(index, turn, self.markdown, writing)
        await self.transcript.mount(view)
        view.set_marks(self.marks)
        self.transcript.scroll_end(animate=False)
        return view

    async def drop_from(self, index: int) -> None:
        """Remove the messages from `index` on (regenerate, edit and resend)."""
        for v in self.views():
            if v.index >= index:
                await v.remove()

    def supersede_from(self, index: int | None) -> None:
        """Dim the messages an edit will replace (index None: none)."""
        for v in self.views():
            v.set_class(index is not None and v.index >= index, "-superseded")

    def append(self, index: int, segments) -> None:
        view = self.view(index)
        if view is None:
            return
        scroll = self.transcript
        follow = scroll.scroll_y >= scroll.max_scroll_y - 1     # only while you are at the end
        view.append(segments)
        if follow:
            scroll.call_after_refresh(scroll.scroll_end, animate=False)

    async def set_markdown(self, on: bool) -> None:
        self.markdown = on
        for v in self.views():
            await v.set_markdown(on)
            v.set_marks(self.marks)

    async def action_toggle_markdown(self) -> None:
        on = not self.markdown
        await self.set_markdown(on)
        self.notify("answers shown as Markdown" if on else
                    "answers shown as text with their provenance marks", timeout=3)

    def set_marks(self, mode: str) -> None:
        self.marks = mode
        self.query_one(Legend).set_marks(mode)
        for v in self.views():
            v.set_marks(mode)

    def show_copied(self, index: int) -> None:
        view = self.view(index)
        if view is not None:
            view.show_copied()

    def status(self, text: str) -> None:
        self.query_one("#chat-status", Static).update(text)

    def show_loading(self, on: bool) -> None:
        job = self.running()
        view = self.view(job.index if job is not None else -1)
        if view is not None:
            view.loading = on

    def text(self) -> str:
        return self.ws.current["chat"].last_answer()

    # ---- writing: send, regenerate, edit and resend -----------------------------------

    @setting_up
    async def action_send(self) -> None:
        s = self.settings()
        if s is None:
            return
        text = self.composer.text.strip()
        if not text:
            self.notify("write a message first", severity="warning")
            return
        if self.ws.editing is not None:
            await self.drop_from(self.ws.editing)
            self.supersede_from(None)
        conv = ask(self.ws, text, s.system_prompt)
        self.composer.clear()
        await self.add(len(conv.turns) - 1, conv.turns[-1])
        await self._answer(conv, s)

    async def _answer(self, conv: Conversation, s, seed: int | None = None) -> None:
        job = answer(self.ws, conv, s, seed)
        await self.add(job.index, conv.turns[job.index], writing=True)
        self.start(job)

    @setting_up
    async def action_regenerate(self) -> None:
        """The last answer again (with sampling, the next seed)."""
        s = self.settings()
        if s is None:
            return
        conv, seed = self.ws.current["chat"], None
        if conv.turns and conv.turns[-1].role == "assistant":
            last = conv.turns.pop()
            await self.drop_from(len(conv.turns))
            if s.options.temperature > 0:
                seed = (last.seed if last.seed is not None else s.options.seed) + 1
        if not conv.turns or conv.turns[-1].role != "user":
            self.notify("no message to answer yet", severity="warning")
            return
        await self._answer(conv, s, seed)

    def action_edit_last(self) -> None:
        """Put your last message (or the one of yours that has focus) back in the editor; the
        next ctrl+g sends it in its place, and the answers after it are written again."""
        if self.ws.generating:
            self.notify("stop the generation first (esc)", severity="warning")
            return
        conv, focused = self.ws.current["chat"], self.app.focused
        if isinstance(focused, MessageView) and focused.turn.role == "user":
            index = focused.index
        else:
            index = next((i for i in range(len(conv.turns) - 1, -1, -1) if conv.turns[i].role == "user"), None)
        if index is None:
            self.notify("no message of yours to edit yet", severity="warning")
            return
        self.ws.editing = index
        self.composer.text = conv.turns[index].content
        self.supersede_from(index)
        self.status("editing your message: ctrl+g sends it in place of the old one "
                    "(the answers after it are written again); esc cancels")
        self.app.set_focus(self.composer)
        self.composer.move_cursor(self.composer.document.end)
        self.app.refresh_bindings()

    def cancel_edit(self) -> bool:
        """esc while editing a message: the edit cancelled; False when there is none."""
        if self.ws.editing is None:
            return False
        self.ws.editing = None
        self.supersede_from(None)
        self.composer.clear()
        self.status("edit cancelled")
        self.app.refresh_bindings()
        return True

    def compare_prompt(self):
        """What Compare runs when nothing was generated yet: the chat and your message."""
        text = self.composer.text.strip()
        if not text:
            self.notify("write a message (or generate once) first", severity="warning")
            return None
        return self.ws.current["chat"].chat(None, self.ws.template_kwargs).then("user", text)

    # ---- what the answer's worker posts ------------------------------------------------

    def on_chunk(self, m: Chunk) -> None:
        job = self.took(m)
        if job is None:
            return
        keep_chunk(job, m)
        view = self.view(job.index)
        if view is not None:
            view.loading = False
        self.append(job.index, m.segments)
        if m.sources:
            self.show_copied(job.index)
        self.writing(m)

    async def on_done(self, m: Done) -> None:
        job = self.ended(m)
        if job is None:
            return
        keep_done(self.ws, job, m)
        view = self.view(job.index)
        if view is not None:
            view.loading = False
            await view.finish(self.markdown)
        at_once = not m.text and m.finish_reason == "eos"
        self.finished(job, m, " · the verifier ended its answer at once" if at_once else "")

    async def on_failed(self, m: Failed) -> None:
        job = self.ended(m)
        if job is not None:
            view = self.view(job.index)
            if drop_failed(job):           # refused or failed before any text: no answer
                await self.drop_from(job.index)
            elif view is not None:
                view.loading = False
                await view.finish(self.markdown)
        self.failed(m, job)

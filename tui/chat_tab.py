"""The Chat tab: a conversation with an instruct verifier, through its chat template.

The transcript is one scrolling column of messages; the answer being written flows into its
message as it is drafted, marked by provenance. Finished answers are rendered as Markdown
when that is on (ctrl+f), else they keep their marks. You write in the editor below.
"""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Markdown, Static, TabPane, TextArea

from olifant_mlx.tui.copied import ranges
from olifant_mlx.tui.flow import FlowText, Legend

EMPTY = ("Write a message below and press ctrl+g. The verifier answers through its chat template; "
         "ctrl+r regenerates the last answer, ctrl+t edits your last message and sends it again.")


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


class ChatTab(TabPane):
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

"""The conversation list: every chat and document of this session (and, when you keep them,
the saved ones), newest first; choosing one opens it in its tab, its buttons (and ctrl+n)
start a new one. The conversations are the workspace's (`self.app.workspace`)."""
from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option


class ConversationList(Vertical):
    def __init__(self):
        super().__init__(id="nav")

    def compose(self) -> ComposeResult:
        yield Static("conversations", classes="heading")
        yield OptionList(id="conv-list", compact=True)
        with Horizontal(id="conv-buttons"):
            yield Button("+ chat", id="new-chat", compact=True)
            yield Button("+ doc", id="new-doc", compact=True)
        yield Static("", id="conv-store")

    def show(self, conversations, current_id: str | None) -> None:
        ol = self.query_one("#conv-list", OptionList)
        ol.clear_options()
        ordered = sorted(conversations, key=lambda c: -c.updated)
        ol.add_options([Option(c.label(), id=c.id) for c in ordered])
        for i, c in enumerate(ordered):
            if c.id == current_id:
                ol.highlighted = i

    def show_store(self, text: str) -> None:
        self.query_one("#conv-store", Static).update(text)

    def show_current(self) -> None:
        """The workspace's conversations, the current tab's highlighted, and where they are kept."""
        ws, mode = self.app.workspace, self.app.mode
        self.show(ws.listed(), ws.current[mode].id if mode in ws.current else None)
        self.show_store(ws.store_line())

    def use_store(self, path: str | None) -> None:
        """Keep the conversations in `path` (None: in memory only) from now on (Settings)."""
        ws = self.app.workspace
        if path == ws.store_path:
            return
        error = ws.use_store(path)
        if error:
            self.notify(error, severity="error", timeout=10)
        self.show_current()

    @on(OptionList.OptionSelected, "#conv-list")
    async def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        await self.choose(event.option.id)

    @on(Button.Pressed, "#new-chat")
    async def _new_chat(self) -> None:
        await self.new("chat")

    @on(Button.Pressed, "#new-doc")
    async def _new_doc(self) -> None:
        await self.new("document")

    async def new(self, kind: str) -> None:
        """A new conversation (or document), opened in its tab."""
        ws = self.app.workspace
        if ws.generating:
            self.app.notify("stop the generation first (esc)", severity="warning")
            return
        self.app.writer("document").stash()
        await self._open(ws.new(kind), clear=True)

    async def choose(self, conv_id: str) -> None:
        """The conversation chosen, now current, opened in its tab."""
        ws, app = self.app.workspace, self.app
        conv = ws.find(conv_id)
        if conv is None or conv is ws.current.get(conv.kind):
            if conv is not None:
                app.action_tab(conv.kind)
            return
        if ws.generating:
            app.notify("stop the generation first (esc)", severity="warning")
            return
        app.writer("document").stash()
        await self._open(ws.choose(conv))

    async def _open(self, conv, clear: bool = False) -> None:
        await self.app.writer(conv.kind).open(conv, clear)
        self.app.action_tab(conv.kind)
        self.show_current()

"""The conversation list: every chat and document of this session (and, when you keep them,
the saved ones), newest first; choosing one opens it in its tab."""
from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option


class ConversationList(Vertical):
    class Chosen(Message):
        def __init__(self, conv_id: str):
            super().__init__()
            self.conv_id = conv_id

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

    @on(OptionList.OptionSelected, "#conv-list")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(self.Chosen(event.option.id))

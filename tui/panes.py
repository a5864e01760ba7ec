"""The TUI's tabs as a registry: each pane is one record here and one module of its own.

The App composes its tabs, their keys, what gets focus and which side panels show beside
each from PANES; a new tab is a module with its TabPane (its own buttons and BINDINGS) and
one entry below. A pane's widget reaches the shared workspace service (session, jobs, storage,
training's tokenizer: tui/workspace.py) as `self.app.workspace`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.binding import Binding
from textual.widgets import TabPane


@dataclass(frozen=True)
class Pane:
    """One tab: its id, the title its key shows in F1, the key that opens it, the widget
    (made from the App), the selector that gets focus, and the side panels beside it."""
    id: str
    title: str
    key: str
    make: Callable[[object], TabPane]
    focus: str
    nav: bool = False         # the conversations list shows beside it
    numbers: bool = False     # the live numbers show beside it

    def binding(self) -> Binding:
        return Binding(self.key, f"tab('{self.id}')", self.title, show=False, priority=True)


def _chat(app):
    from olifant_mlx.tui.chat_tab import ChatTab

    return ChatTab(app.initial_prompt if app.mode == "chat" and app.initial_prompt else "")


def _document(app):
    from olifant_mlx.tui.document_tab import DEFAULT_DOCUMENT, DocumentTab

    return DocumentTab((app.initial_prompt or DEFAULT_DOCUMENT) if app.mode == "document" else DEFAULT_DOCUMENT)


def _compare(app):
    from olifant_mlx.tui.compare_tab import CompareTab

    return CompareTab()


def _calculator(app):
    from olifant_mlx.tui.calculator_tab import CalculatorTab

    return CalculatorTab()


def _models(app):
    from olifant_mlx.tui.models_tab import ModelsTab

    return ModelsTab(app.model_dirs)


def _settings(app):
    from olifant_mlx.tui.settings_tab import SettingsTab

    ws = app.workspace
    return SettingsTab(ws.model_spec, app.draft_spec, app.base_options, ws.system_prompt, ws.store_path)


def _sources(app):
    from olifant_mlx.tui.sources_pane import SourcesTab

    return SourcesTab()


def _precedents(app):
    from olifant_mlx.tui.precedents_pane import PrecedentsTab

    return PrecedentsTab()


def _review(app):
    from olifant_mlx.tui.review_tab import ReviewTab

    return ReviewTab()


PANES = (
    Pane("chat", "Chat", "f2", _chat, "#composer", nav=True, numbers=True),
    Pane("document", "Document", "f3", _document, "#doc-editor", nav=True, numbers=True),
    Pane("compare", "Compare", "f4", _compare, "#compare-go", numbers=True),
    Pane("calculator", "Calculator", "f5", _calculator, "#calc-alpha"),
    Pane("models", "Models", "f6", _models, "#model-table"),
    Pane("settings", "Settings", "f7", _settings, "#set-model"),
    Pane("sources", "Sources", "ctrl+l", _sources, "#sources-table", nav=True),
    # ctrl+p is the command palette; the other free ctrl letters are the editors' keys
    Pane("precedents", "Precedents", "ctrl+j", _precedents, "#precedents-table", nav=True),
    Pane("review", "Review", "f12", _review, "#review-path", numbers=True),
)

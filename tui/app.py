"""The Textual app: a drafting workspace with live speculative decoding.

Two ways to work: a conversation (Chat tab: an instruct verifier's chat template, several
turns, regenerate, edit and resend) and a document (Document tab: the text continued as it
is, in the editor). Beside them: plain vs speculative, the calculator, the draft models, and
one Settings tab. The tabs come from a registry (tui/panes.py), each its own module, and each
tab that generates owns its work (tui/writing.py): it starts its runs on its own thread
worker and handles what they post. The App composes the tabs and keeps what is app-wide: the
layout and the keys (a workspace key goes to the tab it is for), the one workspace service
the tabs share (`app.workspace`, tui/workspace.py: the Session, meter, conversations and
store, tokenizer, jobs), and what a run shows beyond its tab (the live numbers, the session
line, the Sources and Precedents tabs, the conversation list). MLX work runs in thread
workers, which never touch widgets and post batched messages. Changing the drafter never
reloads the verifier. Nothing typed or generated is written to disk unless asked: an export
(ctrl+s, to a path you choose), or the opt-in history and saved-conversations files.
"""
from __future__ import annotations

from olifant_mlx.tui.chat_tab import ChatTab
from olifant_mlx.tui.compare_tab import CompareTab
from olifant_mlx.tui.conversations_panel import ConversationList
from olifant_mlx.tui.document_tab import DEFAULT_DOCUMENT, DocumentTab
from olifant_mlx.tui.flow import MARK_MODES
from olifant_mlx.tui.layout import Body, KeyFooter
from olifant_mlx.tui.live_panel import LivePanel
from olifant_mlx.tui.messages import Loaded
from olifant_mlx.tui.models_tab import ModelsTab
from olifant_mlx.tui import panes as pane_registry
from olifant_mlx.tui.panes import PANES
from olifant_mlx.tui.precedents_pane import PrecedentsTab
from olifant_mlx.tui.sources_pane import SourcesTab
from olifant_mlx.tui.workspace import WORKSPACE, Workspace
from olifant_mlx.tui.writing import WritingPane
from textual import on
from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Header, Input, TabbedContent, TextArea

from olifant_mlx.engine import GenerationOptions

DEFAULT_PROMPT = DEFAULT_DOCUMENT            # the screenshot script's training text starts so
TABS = tuple(p.id for p in PANES)
class OlifantApp(App):
    """The App: the tabs of a pane registry, the layout, the keys (each workspace key sent to
    the tab it is for: `action_writer`), the workspace service (`self.workspace`) and what a
    run shows beyond its tab: the live numbers (`self.live`), the conversation list
    (`self.nav`), the Sources and Precedents tabs (`show_copied`)."""
    TITLE = "olifant_mlx"
    SUB_TITLE = "private on-device drafting"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("ctrl+g", "writer('send')", "Write", priority=True),
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+r", "writer('regenerate')", "Again", priority=True),
        Binding("ctrl+t", "writer('edit_last')", "Edit", priority=True),
        Binding("ctrl+n", "new", "New", priority=True),
        Binding("ctrl+s", "writer('export')", "Export", priority=True),
        Binding("ctrl+o", "writer('copy')", "Copy", priority=True),
        Binding("ctrl+b", "writer('compare')", "Compare", priority=True),
        Binding("ctrl+f", "writer('toggle_markdown')", "Markdown", priority=True),
        Binding("f1", "show_keys", "Keys", priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),      # Textual's own, shown in the footer
        Binding("f8", "toggle_panel('nav')", "List", priority=True),
        Binding("f9", "toggle_panel('live')", "Numbers", priority=True),
        Binding("f10", "cycle_marks", "Marks", priority=True),
        Binding("ctrl+a", "select_all", "Select all", show=False, priority=True),
    ]

    def __init__(self, model: str | None = None, draft: str = "auto", k: int = GenerationOptions.k,
                 max_tokens: int = GenerationOptions.max_tokens, energy: str | None = None, prompt: str | None = None,
                 options: GenerationOptions | None = None, system_prompt: str | None = None,
                 template_kwargs: dict | None = None, mode: str = "chat",
                 conversations: str | None = None, theme: str | None = None, meter=None,
                 session_factory=None, model_dirs=None, train_fn=None, tokenizer_fn=None,
                 meter_clock=None, panes=None):
        super().__init__()
        panes = pane_registry.PANES if panes is None else panes    # the registry as it is now
        self.registry = {p.id: p for p in panes}     # the tabs, in order (tui/panes.py)
        for p in panes:
            b = p.binding()
            self._bindings.bind(b.key, b.action, b.description, b.show, priority=b.priority)
        self.draft_spec = draft                      # the Settings tab's first values
        self.base_options = options or GenerationOptions(k=k, max_tokens=max_tokens)
        self.workspace = Workspace(model, system_prompt=system_prompt, template_kwargs=template_kwargs,
                                   k=self.base_options.k, energy=energy, meter=meter,
                                   meter_clock=meter_clock, conversations=conversations,
                                   session_factory=session_factory, tokenizer_fn=tokenizer_fn,
                                   train_fn=train_fn)
        self.mode = mode if mode in WORKSPACE else "chat"      # the last workspace tab used
        self.initial_prompt = prompt
        self.initial_theme = theme
        self.model_dirs = model_dirs
        self.marks = "styled"

    # ---- layout --------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Body():
            yield ConversationList()
            with TabbedContent(initial=self.mode, id="tabs"):
                for pane in self.registry.values():
                    yield pane.make(self)
            yield LivePanel()
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        if self.initial_theme:
            self.theme = self.initial_theme
        self.chat_tab = self.query_one(ChatTab)
        self.doc_tab = self.query_one(DocumentTab)
        self.live = self.query_one(LivePanel)
        self.nav = self.query_one(ConversationList)
        self.tabs = self.query_one("#tabs", TabbedContent)
        self.body = self.query_one(Body)
        self.body.label_tabs(self.tabs, self.size.width)
        ws = self.workspace
        error = ws.open()
        if error:
            self.notify(error, severity="error", timeout=10)
        ws.current["document"].text = self.doc_tab.editor.text
        self.call_after_refresh(self._show_current)
        self.call_after_refresh(self._focus_tab, self.mode)

    async def _show_current(self) -> None:
        current = self.workspace.current
        await self.chat_tab.show(current["chat"])
        if current["document"].text or current["document"].runs:
            await self.doc_tab.open(current["document"])
        self.nav.show_current()

    def on_resize(self) -> None:
        self._layout()
        if hasattr(self, "body"):
            self.body.label_tabs(self.tabs, self.size.width)
        footer = self.query_one(KeyFooter)
        if footer.hidden() != getattr(self, "_footer_hidden", None):
            self._footer_hidden = footer.hidden()
            self.refresh_bindings()              # the footer recomposes with the keys that fit

    def _layout(self) -> None:
        if hasattr(self, "body"):
            self.body.show_panels(self.size.width, self.registry.get(self.tabs.active))

    def get_system_commands(self, screen):
        # privacy: Textual's "Screenshot" command writes the screen (prompts, output) to disk
        for cmd in super().get_system_commands(screen):
            if "screenshot" not in cmd.title.lower():
                yield cmd

    def check_action(self, action: str, parameters) -> bool | None:
        tab = self.tabs.active if hasattr(self, "tabs") else self.mode
        if action == "writer":
            action = parameters[0]
        if action == "stop":          # hidden (and esc left to the widgets) when nothing to stop
            return self.workspace.generating or self.workspace.editing is not None or self._modal()
        if action in ("edit_last", "toggle_markdown"):
            return tab == "chat"
        if action == "regenerate":
            return tab in WORKSPACE
        if action == "toggle_panel":
            pane = self.registry.get(tab)
            return pane is not None and (pane.nav if parameters[0] == "nav" else pane.numbers)
        return True

    # ---- focus and tabs ---------------------------------------------------------------

    def _modal(self) -> bool:
        return self.screen is not self.screen_stack[0]

    def _focus_tab(self, tab: str) -> None:
        if self.tabs.active != tab:             # another tab was chosen meanwhile
            return
        target = self.query(self.registry[tab].focus)
        if target:
            self.set_focus(target.first())

    def action_tab(self, tab: str) -> None:
        if self._modal():
            raise SkipAction()
        self.tabs.active = tab
        self._focus_tab(tab)
        self._tab_changed(tab)

    @on(TabbedContent.TabActivated, "#tabs")
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        tab = event.pane.id
        focused = self.focused
        if focused is None or event.pane not in focused.ancestors_with_self:
            self.call_after_refresh(self._focus_tab, tab)
        self._tab_changed(tab)

    def _tab_changed(self, tab: str) -> None:
        if tab in WORKSPACE and tab != self.mode:
            self.mode = tab
            if self.workspace.current:
                self.nav.show_current()      # the list highlights this tab's conversation
        self._layout()                # (the focus moving into the tab refreshes the footer)

    def action_toggle_panel(self, panel: str) -> None:
        if self._modal():
            raise SkipAction()
        self.body.toggle(panel, self.size.width)
        self._layout()

    def action_select_all(self) -> None:
        """ctrl+a selects everything in the editor or field that has focus."""
        w = self.focused
        if isinstance(w, TextArea):
            w.select_all()
        elif isinstance(w, Input):
            w.select_all()
        else:
            raise SkipAction()

    def action_show_keys(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    # ---- view keys ------------------------------------------------------------------

    def action_cycle_marks(self) -> None:
        if self._modal():
            raise SkipAction()
        self.marks = MARK_MODES[(MARK_MODES.index(self.marks) + 1) % len(MARK_MODES)]
        for tab in self.query(WritingPane):
            tab.set_marks(self.marks)

    # ---- the workspace's keys: each to the tab it is for ---------------------------------

    def writer(self, kind: str | None = None) -> WritingPane:
        """The tab that writes in the workspace's `kind` of conversation (the last one used)."""
        return self.query_one(f"#{kind or self.mode}", WritingPane)

    async def action_writer(self, action: str) -> None:
        """A workspace key's action, run by the tab it is for: by the tab that shows when it
        runs that key itself (its `own_keys`: the Review tab's ctrl+g, ctrl+s, ctrl+o); ctrl+b's
        by the Compare tab, ctrl+g's there too when it shows; the others' by the Chat or
        Document tab last used (ctrl+g from another tab goes back to it)."""
        if self._modal():
            raise SkipAction()
        shown = self.query_one(f"#{self.tabs.active}")
        if action in getattr(shown, "own_keys", ()):          # the Review tab's ctrl+g, ctrl+s, ctrl+o
            await self.run_action(action, shown)
            return
        tab = self.query_one(CompareTab) if action == "compare" else self.writer()
        if action == "send" and self.tabs.active == "compare":
            tab, action = self.query_one(CompareTab), "compare"
        elif action == "send" and self.tabs.active != self.mode:
            self.action_tab(self.mode)
        await self.run_action(action, tab)

    def action_stop(self) -> None:
        """esc: the dialog closed, else the run in flight stopped, else the edit cancelled."""
        if self._modal():
            self.screen.dismiss(None)
            return
        if self.workspace.generating:
            for tab in self.query(WritingPane):
                tab.stop()
            return
        if not self.chat_tab.cancel_edit():
            raise SkipAction()

    async def action_new(self) -> None:
        if self._modal():
            raise SkipAction()
        await self.query_one(ConversationList).new(self.mode)

    # ---- app-wide: the session, the store, what a run shows beyond its tab ----------------

    def on_loaded(self, m: Loaded) -> None:
        """A verifier loaded (a tab's run posted it): the Models tab marks what fits it."""
        self.workspace.identity = m.identity
        for tab in self.query(ModelsTab):
            tab.set_identity(m.identity)
        self.notify(f"verifier {m.name} loaded", timeout=3)

    def show_copied(self) -> None:
        """The Sources and Precedents tabs show the current conversation's (or document's)."""
        for tab in self.query(SourcesTab):            # none when the registry has no Sources tab
            tab.show_current()
        for tab in self.query(PrecedentsTab):
            tab.show_current()

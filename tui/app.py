"""The Textual app: a drafting workspace with live speculative decoding.

Two ways to work: a conversation (Chat tab: an instruct verifier's chat template, several
turns, regenerate, edit and resend) and a document (Document tab: the text continued as it
is, in the editor). Beside them: plain vs speculative, the calculator, the draft models, and
one Settings tab. The tabs come from a registry (tui/panes.py), each its own module; the App
keeps the layout and the keys, and stands on the workspace the panes share (workspace.py: the one
Session, meter, conversations, store; generation.py, workers.py, results.py: runs and their
messages). MLX work (loading the verifier, generating, training) runs in thread workers, which
never touch widgets and post batched messages. Changing the drafter never
reloads the verifier. Nothing typed or generated is written to disk unless asked: an export
(ctrl+s, to a path you choose), or the opt-in history and saved-conversations files.
"""
from __future__ import annotations

import itertools
import threading

from olifant_mlx.tui.chat_tab import ChatTab
from olifant_mlx.tui.compare_tab import CompareTab
from olifant_mlx.tui.conversation import Conversation
from olifant_mlx.tui.conversations_panel import ConversationList
from olifant_mlx.tui.document_tab import DEFAULT_DOCUMENT, DocumentTab
from olifant_mlx.tui.flow import MARK_MODES
from olifant_mlx.tui.generation import Generation
from olifant_mlx.tui.live_panel import LivePanel
from olifant_mlx.tui.panes import PANES
from olifant_mlx.tui.results import Results
from olifant_mlx.tui.settings_tab import SettingsTab
from olifant_mlx.tui.workers import Job, Workers
from olifant_mlx.tui.workspace import WORKSPACE, Workspace, default_session, default_tokenizer
from textual import on
from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Checkbox, Footer, Header, Input, TabbedContent, TextArea

from olifant_mlx.engine import GenerationOptions, PrefixCache

DEFAULT_PROMPT = DEFAULT_DOCUMENT            # the screenshot script's training text starts so
TABS = tuple(p.id for p in PANES)
PANEL_W = 34            # a side panel's width (30 columns inside)
BOTH_PANELS_FROM = 140   # columns from which the list and the numbers show by default
LIVE_FROM = 110          # ... and the numbers alone
DRAWERS_BELOW = 110      # narrower: a side panel opens over the text, one at a time


class KeyFooter(Footer):
    """The footer, keeping to the keys that fit: the workspace's keys always, then the view
    keys, then the panels and the palette (F1 lists every key whatever the width)."""
    TIERS = ((150, ()), (120, ("toggle_panel", "command_palette")),
             (0, ("toggle_panel", "command_palette", "compare", "toggle_markdown", "cycle_marks")))

    def hidden(self) -> tuple:
        width = self.app.size.width
        return next(h for w, h in self.TIERS if width >= w)

    def compose(self) -> ComposeResult:
        hidden = self.hidden()
        for w in super().compose():
            if getattr(w, "action", "").rpartition(".")[2].partition("(")[0] not in hidden:
                yield w


class OlifantApp(Workspace, Generation, Workers, Results, App):
    """The App: the tabs of a pane registry, the layout, the keys; the workspace's parts are
    mixins (a pane reaches them as self.app), the @on handlers here (Textual registers @on only
    on its own classes)."""
    TITLE = "olifant_mlx"
    SUB_TITLE = "private on-device drafting"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("ctrl+g", "send", "Write", priority=True),
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+r", "regenerate", "Again", priority=True),
        Binding("ctrl+t", "edit_last", "Edit", priority=True),
        Binding("ctrl+n", "new", "New", priority=True),
        Binding("ctrl+s", "export", "Export", priority=True),
        Binding("ctrl+o", "copy", "Copy", priority=True),
        Binding("ctrl+b", "compare", "Compare", priority=True),
        Binding("ctrl+f", "toggle_markdown", "Markdown", priority=True),
        Binding("f1", "show_keys", "Keys", priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),      # Textual's own, shown in the footer
        Binding("f8", "toggle_panel('nav')", "List", priority=True),
        Binding("f9", "toggle_panel('live')", "Numbers", priority=True),
        Binding("f10", "cycle_marks", "Marks", priority=True),
        Binding("ctrl+a", "select_all", "Select all", show=False, priority=True),
    ]

    def __init__(self, model: str | None = None, draft: str = "auto", k: int = 8,
                 max_tokens: int = 256, energy: str | None = None, prompt: str | None = None,
                 options: GenerationOptions | None = None, system_prompt: str | None = None,
                 template_kwargs: dict | None = None, mode: str = "chat",
                 conversations: str | None = None, theme: str | None = None, meter=None,
                 session_factory=None, model_dirs=None, train_fn=None, tokenizer_fn=None,
                 meter_clock=None, panes=PANES):
        super().__init__()
        self.registry = {p.id: p for p in panes}     # the tabs, in order (tui/panes.py)
        for p in panes:
            b = p.binding()
            self._bindings.bind(b.key, b.action, b.description, b.show, priority=b.priority)
        self.model_spec = model
        self.draft_spec = draft
        self.base_options = options or GenerationOptions(k=k, max_tokens=max_tokens)
        self.energy_spec = energy
        self.system_prompt = system_prompt
        self.template_kwargs = dict(template_kwargs or {})
        self.mode = mode if mode in WORKSPACE else "chat"
        self.initial_prompt = prompt
        self.store_path = conversations
        self.initial_theme = theme
        self.session_factory = session_factory or default_session
        self.model_dirs = model_dirs
        self.train_fn = train_fn
        self.tokenizer_fn = tokenizer_fn or default_tokenizer
        self.meter_clock = meter_clock
        self.meter = meter
        self.session = None                 # the shared Session (one verifier held at a time)
        self._session_model = None
        self._history = None
        self.loads = 0                      # verifiers loaded (the drafter never causes one)
        self.identity = None                # the verifier's tokenizer, once known
        self.conversations: list[Conversation] = []
        self.current: dict[str, Conversation] = {}
        self.editing: int | None = None     # the chat turn being edited
        self.jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        # the KV caches of recent chat turns and document runs: the next turn of a conversation
        # prefills only its new tokens (Compare always reads its prompt afresh: it measures)
        self.prompt_cache = PrefixCache(max_entries=4)
        self.generating = False
        # loading a verifier or a tokenizer imports transformers, whose lazy imports are not
        # thread-safe: one load at a time
        self._load_lock = threading.Lock()
        self._starting = False              # a generation is being set up (await in between)
        self.last_stats = None
        self.last_window = None
        self.last_k = self.base_options.k
        self._last_prompt = None            # (kind, prompt) of the last generation
        self.store_error = None
        self.marks = "styled"
        self.panels = {"nav": None, "live": None}    # None: by the width; True/False: yours

    # ---- layout --------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
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
        self.tabs = self.query_one("#tabs", TabbedContent)
        self._open_meter()
        self._open_store()
        for kind in WORKSPACE:
            if kind not in self.current:
                self._add_conversation(Conversation(kind=kind, system_prompt=self.system_prompt))
        self.current["document"].text = self.doc_tab.editor.text
        self.call_after_refresh(self._show_current)
        self.set_interval(0.5, self._tick_power)
        self._tokenizer_worker(self.model_spec)
        self.call_after_refresh(self._focus_tab, self.mode)

    async def _show_current(self) -> None:
        await self.chat_tab.show(self.current["chat"])
        if self.current["document"].text or self.current["document"].runs:
            self.doc_tab.show(self.current["document"])
        self._show_list()

    def on_resize(self) -> None:
        self._layout()
        footer = self.query_one(KeyFooter)
        if footer.hidden() != getattr(self, "_footer_hidden", None):
            self._footer_hidden = footer.hidden()
            self.refresh_bindings()              # the footer recomposes with the keys that fit

    def _layout(self) -> None:
        """Show the side panels that fit: both from BOTH_PANELS_FROM columns, the numbers from
        LIVE_FROM, none below (F8, F9 open them, as a drawer over the text, one at a time, so
        the editor and the tabs keep the whole width); the list only beside a conversation or
        document, the numbers also beside plain vs speculative."""
        width = self.size.width
        tab = self.tabs.active if hasattr(self, "tabs") else self.mode
        auto = {"nav": width >= BOTH_PANELS_FROM, "live": width >= LIVE_FROM}
        show = {p: auto[p] if self.panels[p] is None else self.panels[p] for p in auto}
        pane = self.registry.get(tab)
        show["nav"] &= pane is not None and pane.nav
        show["live"] &= pane is not None and pane.numbers
        drawers = width < DRAWERS_BELOW
        if drawers and show["nav"] and show["live"]:
            show["nav" if self.panels["live"] else "live"] = False
        nav, live = self.query_one(ConversationList), self.query_one(LivePanel)
        nav.display, live.display = show["nav"], show["live"]
        self.query_one("#body").set_class(drawers, "-drawers")

    def get_system_commands(self, screen):
        # privacy: Textual's "Screenshot" command writes the screen (prompts, output) to disk
        for cmd in super().get_system_commands(screen):
            if "screenshot" not in cmd.title.lower():
                yield cmd

    def check_action(self, action: str, parameters) -> bool | None:
        tab = self.tabs.active if hasattr(self, "tabs") else self.mode
        if action == "stop":          # hidden (and esc left to the widgets) when nothing to stop
            return self.generating or self.editing is not None or self._modal()
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
            if self.current:
                self._show_list()     # the list highlights this tab's conversation
        self._layout()                # (the focus moving into the tab refreshes the footer)

    def action_toggle_panel(self, panel: str) -> None:
        if self._modal():
            raise SkipAction()
        shown = self.query_one(ConversationList if panel == "nav" else LivePanel).display
        self.panels[panel] = not shown
        if not shown and self.size.width < DRAWERS_BELOW:
            self.panels["live" if panel == "nav" else "nav"] = False
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

    @on(ConversationList.Chosen)
    async def _chosen(self, event: ConversationList.Chosen) -> None:
        conv = next((c for c in self.conversations if c.id == event.conv_id), None)
        if conv is None or conv is self.current.get(conv.kind):
            if conv is not None:
                self.action_tab(conv.kind)
            return
        if self.generating:
            self.notify("stop the generation first (esc)", severity="warning")
            return
        self._stash_document()
        self.current[conv.kind] = conv
        self.editing = None
        if conv.kind == "chat":
            await self.chat_tab.show(conv)
        else:
            self.doc_tab.show(conv)
        self.action_tab(conv.kind)
        self._show_list()

    @on(Button.Pressed, "#new-chat")
    async def _new_chat(self) -> None:
        await self._new("chat")

    @on(Button.Pressed, "#new-doc")
    async def _new_doc(self) -> None:
        await self._new("document")

    # ---- buttons --------------------------------------------------------------------

    @on(Checkbox.Changed, "#set-store-on")
    @on(Input.Submitted, "#set-store")
    def _store_setting(self) -> None:
        try:
            s = self.query_one(SettingsTab).read()
        except ValueError:
            return
        self._use_store(s.conversations)

    async def action_toggle_markdown(self) -> None:
        if self._modal():
            raise SkipAction()
        on_ = not self.chat_tab.markdown
        await self.chat_tab.set_markdown(on_)
        self.notify("answers shown as Markdown" if on_ else
                    "answers shown as text with their provenance marks", timeout=3)

    def action_cycle_marks(self) -> None:
        if self._modal():
            raise SkipAction()
        self.marks = MARK_MODES[(MARK_MODES.index(self.marks) + 1) % len(MARK_MODES)]
        self.chat_tab.set_marks(self.marks)
        self.doc_tab.set_marks(self.marks)
        self.query_one(CompareTab).set_marks(self.marks)

"""The Textual app: a drafting workspace with live speculative decoding.

Two ways to work: a conversation (Chat tab: an instruct verifier's chat template, several
turns, regenerate, edit and resend) and a document (Document tab: the text continued as it
is, in the editor). Beside them: plain vs speculative, the calculator, the draft models, and
one Settings tab. The tabs come from a registry (tui/panes.py), each its own module; the App
keeps the layout, the keys, the @on handlers and the routing of the workers' messages, and owns
the one workspace service the panes share (`app.workspace`, tui/workspace.py: the Session,
meter, conversations and store, tokenizer, jobs), with two helpers of its own that act on it
(tui/generation.py: ctrl+g and its kin, the workers started; tui/results.py: their messages
shown). MLX work (loading the verifier, generating, training) runs in thread workers, which
never touch widgets and post batched messages. Changing the drafter never
reloads the verifier. Nothing typed or generated is written to disk unless asked: an export
(ctrl+s, to a path you choose), or the opt-in history and saved-conversations files.
"""
from __future__ import annotations

from olifant_mlx.tui.chat_tab import ChatTab
from olifant_mlx.tui.compare_tab import CompareTab
from olifant_mlx.tui.conversations_panel import ConversationList
from olifant_mlx.tui.document_tab import DEFAULT_DOCUMENT, DocumentTab
from olifant_mlx.tui.flow import MARK_MODES
from olifant_mlx.tui.generation import Generation
from olifant_mlx.tui.live_panel import LivePanel
from olifant_mlx.tui.panes import PANES
from olifant_mlx.tui.messages import Chunk, CompareDone, Done, Failed, Loaded, Status, TokenizerKnown
from olifant_mlx.tui.results import Results
from olifant_mlx.tui.workspace import WORKSPACE, Workspace
from textual import on
from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Footer, Header, Input, TabbedContent, TextArea

from olifant_mlx.engine import GenerationOptions

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


class Forward:
    """An App attribute that is the workspace's (read, and set): app.session is
    app.workspace.session. Kept for the tests and scripts that read them on the App."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, app, owner=None):
        return self if app is None else getattr(app.workspace, self.name)

    def __set__(self, app, value) -> None:
        setattr(app.workspace, self.name, value)


class OlifantApp(App):
    """The App: the tabs of a pane registry, the layout, the keys, the @on handlers (Textual
    registers @on only on its own classes) and the workers' messages routed to `results`; the
    state the panes share is the workspace service's (`self.workspace`, tui/workspace.py)."""
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

    session = Forward()
    current = Forward()
    editing = Forward()
    generating = Forward()
    meter = Forward()
    loads = Forward()
    prompt_cache = Forward()
    last_stats = Forward()
    last_window = Forward()

    def __init__(self, model: str | None = None, draft: str = "auto", k: int = GenerationOptions.k,
                 max_tokens: int = GenerationOptions.max_tokens, energy: str | None = None, prompt: str | None = None,
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
        self.draft_spec = draft                      # the Settings tab's first values
        self.base_options = options or GenerationOptions(k=k, max_tokens=max_tokens)
        self.workspace = Workspace(model, system_prompt=system_prompt, template_kwargs=template_kwargs,
                                   k=self.base_options.k, energy=energy, meter=meter,
                                   meter_clock=meter_clock, conversations=conversations,
                                   session_factory=session_factory, tokenizer_fn=tokenizer_fn,
                                   train_fn=train_fn)
        self.generation = Generation(self)           # ctrl+g and its kin (tui/generation.py)
        self.results = Results(self)                 # the workers' messages shown (tui/results.py)
        self.mode = mode if mode in WORKSPACE else "chat"      # the last workspace tab used
        self.initial_prompt = prompt
        self.initial_theme = theme
        self.model_dirs = model_dirs
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
        self._tab_labels()
        ws = self.workspace
        warning = ws.open_meter()
        if warning:
            self.notify(warning, severity="warning")
        self.live.show_meter(ws.meter.info)
        error = ws.open()
        if error:
            self.notify(error, severity="error", timeout=10)
        ws.current["document"].text = self.doc_tab.editor.text
        self.call_after_refresh(self._show_current)
        self.set_interval(0.5, self._tick_power)
        self.generation.load_tokenizer(ws.model_spec)
        self.call_after_refresh(self._focus_tab, self.mode)

    def _tick_power(self) -> None:
        tick = self.workspace.power_tick()
        if tick is not None:
            watts, line = tick
            if watts:
                self.live.add_power(watts)
            if line:
                self.live.show_energy(line)

    async def _show_current(self) -> None:
        current = self.workspace.current
        await self.chat_tab.show(current["chat"])
        if current["document"].text or current["document"].runs:
            self.doc_tab.show(current["document"])
        self.results.show_list()

    def on_resize(self) -> None:
        self._layout()
        self._tab_labels()
        footer = self.query_one(KeyFooter)
        if footer.hidden() != getattr(self, "_footer_hidden", None):
            self._footer_hidden = footer.hidden()
            self.refresh_bindings()              # the footer recomposes with the keys that fit

    def _tab_labels(self) -> None:
        """The tabs' labels with their keys ("F2 Chat") when they all fit beside the side
        panels, else their names alone (F1 and the footer still say the keys)."""
        if not hasattr(self, "tabs"):
            return
        if not hasattr(self, "full_labels"):
            self.full_labels = {p: str(self.tabs.get_tab(p).label) for p in self.registry}
        width = self.size.width      # beside the side panels this width shows (whichever tab)
        room = width - PANEL_W * ((width >= BOTH_PANELS_FROM) + (width >= LIVE_FROM))
        fits = sum(len(label) + 2 for label in self.full_labels.values()) <= room
        for pane, label in self.full_labels.items():
            self.tabs.get_tab(pane).label = label if fits else label.split(" ", 1)[-1]

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
                self.results.show_list()     # the list highlights this tab's conversation
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

    # ---- view keys ------------------------------------------------------------------

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

    # ---- the workspace's actions (tui/generation.py) ---------------------------------

    async def action_send(self) -> None:
        await self.generation.send()

    async def action_regenerate(self) -> None:
        await self.generation.regenerate()

    def action_edit_last(self) -> None:
        self.generation.edit_last()

    def action_compare(self) -> None:
        self.generation.compare()

    def action_stop(self) -> None:
        self.generation.stop()

    async def action_new(self) -> None:
        if self._modal():
            raise SkipAction()
        await self.query_one(ConversationList).new(self.mode)

    def action_export(self) -> None:
        self.generation.export()

    def action_copy(self) -> None:
        self.generation.copy()

    # ---- the workers' messages (tui/results.py) --------------------------------------

    def on_status(self, m: Status) -> None:
        self.results.on_status(m)

    def on_loaded(self, m: Loaded) -> None:
        self.results.on_loaded(m)

    def on_tokenizer_known(self, m: TokenizerKnown) -> None:
        self.results.on_tokenizer_known(m)

    def on_chunk(self, m: Chunk) -> None:
        self.results.on_chunk(m)

    async def on_done(self, m: Done) -> None:
        await self.results.on_done(m)

    async def on_compare_done(self, m: CompareDone) -> None:
        await self.results.on_compare_done(m)

    async def on_failed(self, m: Failed) -> None:
        await self.results.on_failed(m)

"""The Textual app: a drafting workspace with live speculative decoding.

Two ways to work: a conversation (Chat tab: an instruct verifier's chat template, several
turns, regenerate, edit and resend) and a document (Document tab: the text continued as it
is, in the editor). Beside them: plain vs speculative, the calculator, the draft models, and
one Settings tab. The App keeps the bindings, the workers and the one shared Session; each
pane is its own module. MLX work (loading the verifier, generating, training) runs in thread
workers, which never touch widgets and post batched messages. Changing the drafter never
reloads the verifier. Nothing typed or generated is written to disk unless asked: an export
(ctrl+s, to a path you choose), or the opt-in history and saved-conversations files.
"""
from __future__ import annotations

import copy
import itertools
import os
import threading
import time
from dataclasses import dataclass, field

from textual import on, work
from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Checkbox, Footer, Header, Input, ProgressBar, Static, TabbedContent, TextArea
from textual.worker import get_current_worker

from olifant_mlx.engine import GenerationOptions, PrefixCache
from olifant_mlx.teardown import on_own_thread
from olifant_mlx.tui import render, store
from olifant_mlx.tui.calculator_tab import CalculatorTab
from olifant_mlx.tui.chat_tab import ChatTab, MessageView
from olifant_mlx.tui.compare_tab import CompareTab
from olifant_mlx.tui.conversation import Conversation, Run, Turn, export_text
from olifant_mlx.tui.conversations_panel import ConversationList
from olifant_mlx.tui.document_tab import DocumentTab
from olifant_mlx.tui.flow import MARK_MODES, FlowText
from olifant_mlx.tui.live_panel import LivePanel
from olifant_mlx.tui.messages import (Chunk, CompareDone, Done, Failed, Loaded, Status, TokenizerKnown,
                                      TrainDone, TrainProgress)
from olifant_mlx.tui.models_tab import ModelsTab
from olifant_mlx.tui.panes import PANES
from olifant_mlx.tui.save import ExportScreen
from olifant_mlx.tui.settings_tab import Settings, SettingsTab

DEFAULT_DOCUMENT = ("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR "
                    "IMPLIED, INCLUDING BUT NOT LIMITED TO")
DEFAULT_PROMPT = DEFAULT_DOCUMENT            # the screenshot script's training text starts so
FLUSH_S = 0.05          # at most ~20 UI messages a second from a generation
COMPARE_ROUNDS = 3      # measured rounds after the shown pair (measure/rounds.py: fewer are not trusted)
TABS = tuple(p.id for p in PANES)
WORKSPACE = ("chat", "document")         # the two kinds of conversation
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


def default_session(model, meter):
    """A Session on a freshly loaded verifier (runs on a worker thread)."""
    from olifant_mlx.engine import Session
    from olifant_mlx.verifier import load_verifier

    return Session(load_verifier(model), "none", meter=meter)


def default_tokenizer(model):
    from olifant_mlx.verifier import default_model, load_tokenizer

    return load_tokenizer(model or default_model())


@dataclass
class Job:
    """One generation in flight: where its text goes."""
    id: int
    kind: str                         # chat | document | compare
    conv: Conversation | None
    settings: Settings
    prompt: object
    index: int = 0                    # chat: the answer's turn; document: where it starts
    t0: float = field(default_factory=time.perf_counter)
    live_j: float | None = None


class OlifantApp(App):
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

    # ---- energy ---------------------------------------------------------------------

    def _open_meter(self) -> None:
        from olifant_mlx.energy import EnergyError, open_meter

        if self.meter is None:
            opts = {"clock": self.meter_clock} if self.meter_clock else {}
            try:
                self.meter = open_meter(self.energy_spec, **opts)
            except (EnergyError, ValueError, OSError) as e:
                self.notify(f"energy meter: {e}; not measuring", severity="warning")
                self.meter = open_meter("none")
        self.live.show_meter(self.meter.info)

    def _tick_power(self) -> None:
        if not self.generating or self.meter is None or not self.meter.info.measured:
            return
        p = self.meter.power()
        if not p.watts:
            return
        # no counter advanced since the last tick (counters that update less often than the
        # tick, as a replayed trace's): not 0 W; the next reading holds that energy
        advanced = any(p.watts.values())
        if advanced:
            self.live.add_power(p.watts)
        for job in self.jobs.values():
            if p.total_w is not None:
                job.live_j = (job.live_j or 0.0) + p.total_w * p.seconds
                if advanced:
                    self.live.show_energy(render.energy_text(None, 0, self.meter.info.label, job.live_j,
                                                             p.total_w))

    # ---- conversations and the opt-in store ------------------------------------------

    def _add_conversation(self, conv: Conversation) -> Conversation:
        self.conversations.append(conv)
        self.current[conv.kind] = conv
        return conv

    def _open_store(self) -> None:
        if not self.store_path:
            return
        try:
            loaded = store.load(self.store_path)
        except (store.StoreError, OSError) as e:
            self.store_error = str(e)
            self.notify(f"{e}; conversations are not saved to it", severity="error", timeout=10)
            return
        known = {c.id for c in self.conversations}
        self.conversations += [c for c in loaded if c.id not in known]
        for kind in WORKSPACE:
            latest = [c for c in self.conversations if c.kind == kind]
            if latest and kind not in self.current:
                self.current[kind] = max(latest, key=lambda c: c.updated)

    def _use_store(self, path: str | None) -> None:
        """Start (or stop) keeping conversations in `path` (the Settings tab's opt-in)."""
        if path == self.store_path:
            return
        self.store_path, self.store_error = path, None
        if path:
            self._open_store()
            self._save_store()
        self._show_list()

    def _save_store(self) -> None:
        if not self.store_path or self.store_error:
            return
        try:
            store.save(self.store_path, self.conversations)
        except (store.StoreError, OSError, ValueError) as e:
            self.store_error = str(e)
            self.notify(f"cannot save conversations: {e}", severity="error")

    def _show_list(self) -> None:
        nav = self.query_one(ConversationList)
        nav.show([c for c in self.conversations if c.turns or c.text or c is self.current.get(c.kind)],
                 self.current[self.mode].id if self.mode in self.current else None)
        if self.store_error:
            nav.show_store(f"not saved: {self.store_error}")
        else:
            nav.show_store(f"kept in {self.store_path}" if self.store_path else "kept in memory only")

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

    def _stash_document(self) -> None:
        """Keep what the editor holds in the current document."""
        conv = self.current.get("document")
        if conv is not None:
            ed = self.doc_tab.editor
            conv.text, conv.marks = ed.text, list(ed.marks_list)

    @on(Button.Pressed, "#new-chat")
    async def _new_chat(self) -> None:
        await self._new("chat")

    @on(Button.Pressed, "#new-doc")
    async def _new_doc(self) -> None:
        await self._new("document")

    async def action_new(self) -> None:
        if self._modal():
            raise SkipAction()
        await self._new(self.mode)

    async def _new(self, kind: str) -> None:
        if self.generating:
            self.notify("stop the generation first (esc)", severity="warning")
            return
        self._stash_document()
        conv = self._add_conversation(Conversation(kind=kind, system_prompt=self.system_prompt))
        self.editing = None
        if kind == "chat":
            await self.chat_tab.show(conv)
            self.chat_tab.composer.clear()
        else:
            self.doc_tab.show(conv)
        self.action_tab(kind)
        self._show_list()

    # ---- settings and the session --------------------------------------------------

    def _prepare(self) -> Settings | None:
        """The settings for a new run, or None (with a notification) when one cannot start."""
        if self.generating:
            self.notify("already generating; esc stops it", severity="warning")
            return None
        try:
            s = self.query_one(SettingsTab).read()
        except ValueError as e:
            self.notify(str(e), title="settings", severity="error")
            return None
        self._use_store(s.conversations)
        return s

    def _check_draft(self, spec, identity) -> None:
        """Refuse a draft model trained for another tokenizer (before any generation, and
        before the verifier's weights load when the tokenizer alone is known)."""
        path = spec.model_file
        if not path or identity is None:
            return
        from olifant_mlx.draftmodel.open import check_model_tokenizer

        # every file spec the CLI takes: olifant/hybrid models, rest: indexes, ngram-cache: caches
        check_model_tokenizer(path, identity.name, identity.vocab_size, identity.digest,
                              fix="choose a model marked ✓ in the Models tab (F6), or train one there")

    def _session_for(self, s: Settings):
        """The shared Session for these settings. Loads a verifier only when the verifier
        setting changes; a new drafter is switched in (set_drafter), an opt-in history gets a
        Session around the same verifier. Call on a worker thread."""
        if self.session is None or self._session_model != s.model:
            if s.draft.model_file:
                self._check_draft(s.draft, self._tokenizer(s.model))
            self.post_message(Status(f"loading verifier {s.model or '(default)'} ...", loading=True))
            self.session = None
            with self._load_lock:
                self.session = self.session_factory(s.model, self.meter)
            self.loads += 1
            self._session_model, self._history = s.model, None
            v = self.session.verifier
            self.post_message(Loaded(v.name, v.identity, self.loads))
        session = self.session
        self._check_draft(s.draft, session.verifier.identity)
        if s.options.history != self._history:
            session = self.session = type(session)(session.verifier, s.draft, s.options, self.meter)
            self._history = s.options.history
        elif str(getattr(session.requested, "text", session.requested)) != s.draft.text:
            session.set_drafter(s.draft)           # the verifier stays loaded
        return session

    # ---- generation -----------------------------------------------------------------

    async def action_send(self) -> None:
        if self._modal():
            raise SkipAction()
        tab = self.tabs.active
        if tab == "compare":
            self.action_compare()
            return
        if tab != self.mode:
            self.action_tab(self.mode)
        if self._starting:                     # a second ctrl+g while the first is starting
            return
        self._starting = True
        try:
            if self.mode == "chat":
                await self._send_chat()
            else:
                self._continue_document()
        finally:
            self._starting = False

    async def _send_chat(self) -> None:
        s = self._prepare()
        if s is None:
            return
        text = self.chat_tab.composer.text.strip()
        if not text:
            self.notify("write a message first", severity="warning")
            return
        conv = self.current["chat"]
        if self.editing is not None:
            await self.chat_tab.drop_from(self.editing)
            del conv.turns[self.editing:]
            self.editing = None
            self.chat_tab.supersede_from(None)
        conv.system_prompt = s.system_prompt
        conv.turns.append(Turn("user", text))
        conv.touch()
        self.chat_tab.composer.clear()
        await self.chat_tab.add(len(conv.turns) - 1, conv.turns[-1])
        await self._answer(conv, s)

    async def _answer(self, conv: Conversation, s: Settings, seed: int | None = None) -> None:
        options = s.options if seed is None else s.options.replace(seed=seed)
        s = Settings(s.model, s.draft, options, s.system_prompt, s.conversations)
        turn = Turn("assistant", "", drafter=render.short_spec(s.draft.text),
                    seed=options.seed if options.temperature > 0 else None)
        conv.turns.append(turn)
        index = len(conv.turns) - 1
        await self.chat_tab.add(index, turn, writing=True)
        self._start(Job(next(self._ids), "chat", conv, s, conv.chat(index, self.template_kwargs), index))

    def _continue_document(self) -> None:
        s = self._prepare()
        if s is None:
            return
        text = self.doc_tab.editor.text
        if not text.strip():
            self.notify("write the beginning of the document first", severity="warning")
            return
        conv = self.current["document"]
        self._stash_document()
        start = self.doc_tab.begin()
        self._start(Job(next(self._ids), "document", conv, s, text, start))

    async def action_regenerate(self) -> None:
        """Chat: the last answer again (with sampling, the next seed); document: the last
        continuation again, if the text has not changed since."""
        if self._modal():
            raise SkipAction()
        if self._starting:
            return
        self._starting = True
        try:
            await self._regenerate()
        finally:
            self._starting = False

    async def _regenerate(self) -> None:
        if self.mode == "document":
            conv, ed = self.current["document"], self.doc_tab.editor
            if not conv.runs or conv.text != ed.text or conv.runs[-1].end != len(ed.text):
                self.notify("nothing to write again: the document changed since its last "
                            "continuation (ctrl+z undoes it)", severity="warning")
                return
            if self.generating:
                self.notify("already generating; esc stops it", severity="warning")
                return
            run = conv.runs.pop()
            ed.delete(ed.document.get_location_from_index(run.start), ed.document.end)
            self._continue_document()
            return
        s = self._prepare()
        if s is None:
            return
        conv = self.current["chat"]
        seed = None
        if conv.turns and conv.turns[-1].role == "assistant":
            last = conv.turns.pop()
            await self.chat_tab.drop_from(len(conv.turns))
            if s.options.temperature > 0:
                seed = (last.seed if last.seed is not None else s.options.seed) + 1
        if not conv.turns or conv.turns[-1].role != "user":
            self.notify("no message to answer yet", severity="warning")
            return
        await self._answer(conv, s, seed)

    def action_edit_last(self) -> None:
        """Put your last message (or the one of yours that has focus) back in the editor; the
        next ctrl+g sends it in its place, and the answers after it are written again."""
        if self._modal():
            raise SkipAction()
        if self.generating:
            self.notify("stop the generation first (esc)", severity="warning")
            return
        conv = self.current["chat"]
        focused = self.focused
        if isinstance(focused, MessageView) and focused.turn.role == "user":
            index = focused.index
        else:
            index = next((i for i in range(len(conv.turns) - 1, -1, -1) if conv.turns[i].role == "user"), None)
        if index is None:
            self.notify("no message of yours to edit yet", severity="warning")
            return
        self.editing = index
        composer = self.chat_tab.composer
        composer.text = conv.turns[index].content
        self.chat_tab.supersede_from(index)
        self.chat_tab.status("editing your message: ctrl+g sends it in place of the old one "
                             "(the answers after it are written again); esc cancels")
        self.set_focus(composer)
        composer.move_cursor(composer.document.end)
        self.refresh_bindings()

    def action_compare(self) -> None:
        if self._modal():
            raise SkipAction()
        s = self._prepare()
        if s is None:
            return
        prompt = self._last_prompt
        if prompt is None:
            if self.mode == "chat":
                text = self.chat_tab.composer.text.strip()
                if not text:
                    self.notify("write a message (or generate once) first", severity="warning")
                    return
                prompt = ("chat", self.current["chat"].chat(None, self.template_kwargs).then("user", text))
            else:
                prompt = ("document", self.doc_tab.editor.text)
        self.tabs.active = "compare"
        self._focus_tab("compare")
        self._tab_changed("compare")
        tab = self.query_one(CompareTab)
        tab.clear()
        self.query_one("#compare-result", Static).update("running plain, then speculative, then measuring ...")
        self._start(Job(next(self._ids), "compare", None, s, prompt[1], 0))

    def _start(self, job: Job) -> None:
        self.jobs[job.id] = job
        self.generating = True
        self.last_k = job.settings.options.k
        if job.kind != "compare":
            self._last_prompt = (job.kind, job.prompt)
        if self.meter is not None and self.meter.info.measured:
            self.meter.power()               # reset the live-power baseline
        self._status(job, "starting ...")
        self.refresh_bindings()
        if job.kind == "compare":
            self._compare_worker(job)
        else:
            self._generate_worker(job)

    def action_stop(self) -> None:
        if self._modal():
            self.screen.dismiss(None)
            return
        if self.generating:
            self.workers.cancel_group(self, "generate")
            for job in self.jobs.values():
                self._status(job, "stopping ...")
            return
        if self.editing is not None:
            self.editing = None
            self.chat_tab.supersede_from(None)
            self.chat_tab.composer.clear()
            self.chat_tab.status("edit cancelled")
            self.refresh_bindings()
            return
        raise SkipAction()

    def _stream(self, worker, session, job: Job, drafter=None, options=None, target=None):
        """One generation on the worker thread: (ids, text, Stats, Window, finish reason)."""
        tokens, text, pending = [], [], []
        last_flush = time.perf_counter()
        final = None
        run = job.id if target is None else target
        for r in session.stream(job.prompt, options or job.settings.options, drafter,
                                should_stop=lambda: worker.is_cancelled,
                                continuation=isinstance(job.prompt, str),
                                cache=self.prompt_cache if job.kind != "compare" else None):
            tokens.extend(r.tokens)
            text.append(r.text)
            pending.extend(r.segments)
            now = time.perf_counter()
            if now - last_flush >= FLUSH_S or r.finish_reason:
                self.post_message(Chunk(run, pending, copy.copy(r.stats), now - job.t0))
                pending, last_flush = [], now
            final = r
        return tokens, "".join(text), final.stats, final.energy, final.finish_reason

    def _chat_check(self, session, job: Job) -> None:
        from olifant_mlx.engine import Chat

        if isinstance(job.prompt, Chat) and not session.verifier.has_chat_template:
            raise ValueError(f"{session.verifier.name} has no chat template (a base model): "
                             f"continue text in the Document tab (F3)")

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    @on_own_thread           # MLX never runs on the pool's thread: see olifant_mlx.teardown
    def _generate_worker(self, job: Job) -> None:
        worker = get_current_worker()
        try:
            session = self._session_for(job.settings)
            self._chat_check(session, job)
            job.t0 = time.perf_counter()
            self.post_message(Status(f"writing with {session.verifier.name}, drafter "
                                     f"{session.spec.text if session.spec else session.drafter.name}"))
            _, text, stats, window, reason = self._stream(worker, session, job)
            self.post_message(Done(job.id, text, stats, window, reason))
        except Exception as e:     # shown in the UI, never as a traceback
            self.post_message(Failed("generation", f"{type(e).__name__}: {e}", job.id))

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    @on_own_thread           # MLX never runs on the pool's thread: see olifant_mlx.teardown
    def _compare_worker(self, job: Job) -> None:
        from olifant_mlx.drafters import NoDrafter

        worker = get_current_worker()
        try:
            session = self._session_for(job.settings)
            self._chat_check(session, job)
            job.t0 = time.perf_counter()
            p_ids, p_text, p_stats, p_win, r1 = self._stream(
                worker, session, job, NoDrafter(), job.settings.options.replace(k=0), target=-job.id)
            if r1 == "stopped":
                raise InterruptedError("stopped")
            job.t0 = time.perf_counter()
            s_ids, s_text, s_stats, s_win, r2 = self._stream(worker, session, job)
            if r2 == "stopped":
                raise InterruptedError("stopped")
            measured, rates = self._compare_rounds(worker, session, job)
            self.post_message(CompareDone((p_text, p_stats, p_win), (s_text, s_stats, s_win),
                                          p_ids == s_ids, measured, rates))
        except InterruptedError:
            self.post_message(Failed("compare", "stopped", job.id))
        except Exception as e:
            self.post_message(Failed("compare", f"{type(e).__name__}: {e}", job.id))

    def _compare_rounds(self, worker, session, job: Job):
        """After the shown pair (the warm-up), COMPARE_ROUNDS unshown rounds of plain and
        speculative, alternating which runs first: (Speedups, (plain, speculative) median tok/s)."""
        import statistics

        from olifant_mlx.drafters import NoDrafter
        from olifant_mlx.measure import rounds

        def rate(drafter, options):
            out = list(session.stream(job.prompt, options, drafter, should_stop=lambda: worker.is_cancelled,
                                      continuation=isinstance(job.prompt, str)))
            last = out[-1] if out else None
            if last is None or last.finish_reason == "stopped":
                raise InterruptedError("stopped")
            return last.stats.tokens_per_s

        plain_opts = job.settings.options.replace(k=0)
        plains, specs = [], []
        for i in range(COMPARE_ROUNDS):
            self.post_message(Status(f"measuring: round {i + 1} of {COMPARE_ROUNDS} (plain and speculative)"))
            for which in (("plain", "spec") if i % 2 == 0 else ("spec", "plain")):
                if which == "plain":
                    plains.append(rate(NoDrafter(), plain_opts))
                else:
                    specs.append(rate(None, job.settings.options))
        return rounds.speedups(plains, specs), (statistics.median(plains), statistics.median(specs))

    # ---- message handlers (UI thread) -----------------------------------------------

    def _status(self, job: Job | None, text: str) -> None:
        kind = job.kind if job is not None else self.mode
        if kind == "chat":
            self.chat_tab.status(text)
        elif kind == "document":
            self.doc_tab.status(text)
        else:
            self.query_one("#compare-result", Static).update(text)

    def on_status(self, m: Status) -> None:
        for job in self.jobs.values():
            self._status(job, m.text)
        view = self.chat_tab.view(next((j.index for j in self.jobs.values() if j.kind == "chat"), -1))
        if view is not None:
            view.loading = m.loading
        self.doc_tab.editor.loading = m.loading and any(j.kind == "document" for j in self.jobs.values())

    def on_loaded(self, m: Loaded) -> None:
        self.identity = m.identity
        self.query_one(ModelsTab).set_identity(m.identity)
        self.notify(f"verifier {m.name} loaded", timeout=3)

    def on_tokenizer_known(self, m: TokenizerKnown) -> None:
        if self.identity is None and m.model == self.model_spec:
            self.query_one(ModelsTab).set_identity(m.identity)

    def on_chunk(self, m: Chunk) -> None:
        job = self.jobs.get(abs(m.run))
        if job is None:
            return
        if job.kind == "chat":
            view = self.chat_tab.view(job.index)
            if view is not None:
                view.loading = False
            turn = job.conv.turns[job.index]
            turn.content += "".join(t for t, _ in m.segments)
            turn.segments += m.segments
            self.chat_tab.append(job.index, m.segments)
        elif job.kind == "document":
            self.doc_tab.editor.loading = False
            self.doc_tab.append(m.segments)
        else:
            self.query_one("#compare-plain" if m.run < 0 else "#compare-spec", FlowText).append(m.segments)
        self.live.show_stats(m.stats, m.elapsed)
        self._status(job, render.status_line(m.stats, "writing"))

    def _session_line(self) -> None:
        s = self.session
        if s is None:
            return
        asked = getattr(s.requested, "text", s.requested)
        resolved = s.spec.text if s.spec is not None else s.drafter.name
        self.live.show_session(s.verifier.name, render.short_spec(str(asked)), render.short_spec(resolved),
                               self.last_k)
        self.sub_title = f"{s.verifier.name} · {render.short_spec(resolved)} · k {self.last_k}"

    async def on_done(self, m: Done) -> None:
        job = self.jobs.pop(m.run, None)
        self.generating = bool(self.jobs)
        self.refresh_bindings()
        if job is None:
            return
        self.last_stats, self.last_window = m.stats, m.window
        stats = m.stats.as_dict()
        energy = m.window.as_dict(m.stats.tokens) if m.window is not None and m.window.total_j is not None else None
        verifier = self.session.verifier.name if self.session is not None else None
        drafter = self.session.spec.text if self.session is not None and self.session.spec else job.settings.draft.text
        drafter = render.short_spec(drafter)
        label = self.meter.info.label if self.meter else "not measured"
        self.live.show_stats(m.stats, time.perf_counter() - job.t0)
        self.live.show_energy(render.energy_text(m.window, m.stats.tokens, label))
        self._session_line()
        state = {"stopped": "stopped", "eos": "done", "stop": "done (stop sequence)",
                 "max_tokens": "done (max tokens)"}.get(m.finish_reason, f"done ({m.finish_reason})")
        line = render.status_line(m.stats, state, m.window.total_j if m.window is not None else None)
        conv = job.conv
        if job.kind == "chat":
            turn = conv.turns[job.index]
            turn.content = m.text
            turn.stats, turn.energy, turn.finish_reason = stats, energy, m.finish_reason
            turn.verifier, turn.drafter = verifier, drafter
            view = self.chat_tab.view(job.index)
            if view is not None:
                view.loading = False
                await view.finish(self.chat_tab.markdown)
            if not m.text and m.finish_reason == "eos":
                line += " · the verifier ended its answer at once"
        else:
            self.doc_tab.end()
            ed = self.doc_tab.editor
            conv.text, conv.marks = ed.text, list(ed.marks_list)
            conv.runs.append(Run(job.index, len(ed.text), stats, energy, m.finish_reason, verifier, drafter))
        conv.touch()
        self._status(job, line)
        self._save_store()
        self._show_list()

    async def on_compare_done(self, m: CompareDone) -> None:
        self.jobs.clear()
        self.generating = False
        self.refresh_bindings()
        (_, ps, pw), (_, ss, sw) = m.plain, m.spec
        self.query_one("#compare-result", Static).update(
            render.compare_text(ps, ss, pw.total_j if pw else None, sw.total_j if sw else None,
                                m.same, m.measured, m.rates))
        self.last_stats = ss
        self._session_line()

    async def on_failed(self, m: Failed) -> None:
        job = self.jobs.pop(m.run, None) if m.run is not None else None
        self.generating = bool(self.jobs)
        self.refresh_bindings()
        if m.where == "training":
            self.query_one("#train-progress").display = False
            self.query_one("#train-status", Static).update(f"training failed: {m.error}")
        if job is not None:
            if job.kind == "chat":
                turn = job.conv.turns[job.index]
                view = self.chat_tab.view(job.index)
                if not turn.content:             # refused or failed before any text: no answer
                    del job.conv.turns[job.index:]
                    await self.chat_tab.drop_from(job.index)
                else:
                    turn.finish_reason = "error"
                    if view is not None:
                        view.loading = False
                        await view.finish(self.chat_tab.markdown)
            elif job.kind == "document":
                self.doc_tab.editor.loading = False
                self.doc_tab.end()
                self._stash_document()
            self._status(job, f"{m.where} failed: {m.error}" if m.error != "stopped" else "stopped")
        if m.error != "stopped":
            self.notify(m.error, title=f"{m.where} failed", severity="error", timeout=8)

    # ---- buttons --------------------------------------------------------------------

    @on(Button.Pressed, "#compare-go")
    def _compare(self) -> None:
        self.action_compare()

    @on(Checkbox.Changed, "#set-store-on")
    @on(Input.Submitted, "#set-store")
    def _store_setting(self) -> None:
        try:
            s = self.query_one(SettingsTab).read()
        except ValueError:
            return
        self._use_store(s.conversations)

    # ---- export, copy, view ----------------------------------------------------------

    def _settings_summary(self) -> dict:
        try:
            s = self.query_one(SettingsTab).read()
        except ValueError:
            return {}
        o = s.options
        return {"verifier": self.session.verifier.name if self.session else s.model,
                "drafter": s.draft.text, "k": o.k, "max_tokens": o.max_tokens, "kv_cache": o.kv_cache,
                "max_kv_size": o.max_kv_size, "temperature": o.temperature, "top_p": o.top_p,
                "seed": o.seed, "energy_meter": self.meter.info.label if self.meter else None}

    def action_export(self) -> None:
        if self._modal():
            raise SkipAction()
        self._stash_document()
        conv = self.current[self.mode]
        if not (conv.turns or conv.text.strip()):
            self.notify("nothing to export yet", severity="warning")
            return

        def write(choice):
            if not choice:
                return
            from olifant_mlx.files import write_atomic

            path, fmt = choice
            try:
                write_atomic(path, export_text(conv, fmt, self._settings_summary()))
            except (OSError, ValueError) as e:
                self.notify(f"cannot export: {e}", severity="error")
                return
            self.notify(f"exported to {path} ({fmt}, readable by you only)")

        self.push_screen(ExportScreen("this conversation" if self.mode == "chat" else "this document"), write)

    def action_copy(self) -> None:
        if self._modal():
            raise SkipAction()
        if self.mode == "chat":
            text, what = self.current["chat"].last_answer(), "the last answer"
        else:
            text, what = self.doc_tab.editor.text, "the document"
        if not text:
            self.notify("nothing to copy yet", severity="warning")
            return
        self.copy_to_clipboard(text)
        self.notify(f"copied {what} ({len(text):,} characters) to the clipboard")

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

    # ---- calculator -----------------------------------------------------------------

    @on(Button.Pressed, "#calc-measured")
    def use_measured(self) -> None:
        if not self.query_one(CalculatorTab).use_measured(self.last_stats, self.last_k):
            self.notify("run a speculative generation first", severity="warning")

    # ---- models ---------------------------------------------------------------------

    def _tokenizer(self, model):
        """The tokenizer alone (no weights), for checking draft models (worker thread)."""
        with self._load_lock:
            return self.tokenizer_fn(model)

    @work(thread=True, group="tokenizer", exit_on_error=False)
    @on_own_thread           # MLX never runs on the pool's thread: see olifant_mlx.teardown
    def _tokenizer_worker(self, model) -> None:
        try:
            self.post_message(TokenizerKnown(model, self._tokenizer(model)))
        except Exception:       # the Models list then says "not known yet"
            pass

    @on(Button.Pressed, "#use-model")
    @on(Button.Pressed, "#use-hybrid")
    def use_model(self, event: Button.Pressed) -> None:
        tab = self.query_one(ModelsTab)
        entry = tab.selected()
        if entry is None:
            self.notify("no draft model to use", severity="warning")
            return
        if tab.identity is not None and not entry.fits(tab.identity):
            self.notify(f"{entry.path.name} was trained for {entry.tokenizer}, not the verifier's "
                        f"{tab.identity.name}: not used", severity="error")
            return
        spec = f"olifant:{entry.path}" if event.button.id == "use-model" else f"adaptive:hybrid:{entry.path}"
        self.query_one(SettingsTab).use_drafter(spec)
        self.notify(f"drafter set to {spec} (the verifier stays loaded)")

    @on(Button.Pressed, "#models-refresh")
    def _refresh_models(self) -> None:
        self.query_one(ModelsTab).refresh_models()

    @on(Button.Pressed, "#train-go")
    def train_model(self) -> None:
        corpus = self.query_one("#corpus", Input).value.strip()
        name = self.query_one("#train-out", Input).value.strip()
        if not corpus or not name:
            self.notify("give a corpus path and an output name", severity="error")
            return
        out = self.query_one(ModelsTab).output_path(name)
        model = self.query_one("#set-model", Input).value.strip() or None
        self.query_one("#train-progress").display = True
        self.query_one("#train-status", Static).update(f"training {out.name} from {corpus} ...")
        self._train_worker(corpus, out, model)

    @work(thread=True, exclusive=True, group="train", exit_on_error=False)
    @on_own_thread           # MLX never runs on the pool's thread: see olifant_mlx.teardown
    def _train_worker(self, corpus, out, model) -> None:
        try:
            train = self.train_fn
            if train is None:
                from olifant_mlx.draftmodel.train import train
            tokenizer = self._tokenizer(model)
            out.parent.mkdir(parents=True, exist_ok=True)
            last = [0.0]

            def progress(phase, done, total):
                now = time.monotonic()
                if now - last[0] >= 0.1 or (total and done >= total):   # at most ~10 a second
                    last[0] = now
                    self.post_message(TrainProgress(phase, done, total))

            from olifant_mlx.draftmodel.documents import reporting

            with reporting() as files:       # a folder's files: each read or skipped, and why
                summary = train([corpus], tokenizer, str(out), show_progress=False, on_progress=progress)
            self.post_message(TrainDone(dict(summary, out=str(out), files=files.as_dict())))
        except Exception as e:
            self.post_message(Failed("training", f"{type(e).__name__}: {e}"))

    def on_train_progress(self, m: TrainProgress) -> None:
        bar = self.query_one("#train-progress", ProgressBar)
        bar.update(total=m.total, progress=m.done)
        self.query_one("#train-status", Static).update(f"training: {m.phase}")

    def on_train_done(self, m: TrainDone) -> None:
        self.query_one("#train-progress").display = False
        s = m.summary
        files = s.get("files") or {}
        skipped = [f"{os.path.basename(f['path'])} ({f['reason']})" for f in files.get("files", ())
                   if f["status"] == "skipped"]
        self.query_one("#train-status", Static).update(
            f"trained {s['out']}: {s.get('nodes', 0):,} nodes from {s.get('instances', 0):,} "
            f"instances" + (f"; {files['read']} files read, {len(skipped)} skipped: " + "; ".join(skipped)
                            if skipped else ""))
        self.notify(f"draft model saved to {s['out']}")
        self.query_one(ModelsTab).refresh_models()

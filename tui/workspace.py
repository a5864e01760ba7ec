"""The workspace the panes share: the one Session (one verifier held at a time), the energy
meter, the conversations and their opt-in store, the tokenizer for checking draft models,
and export. A mixin of OlifantApp (tui/app.py); panes reach it as `self.app`. What runs MLX
runs on thread workers (tui/workers.py) and reports back in messages (tui/messages.py).
"""
from __future__ import annotations

from olifant_mlx.tui import render, store
from olifant_mlx.tui.conversation import Conversation, export_text
from olifant_mlx.tui.conversations_panel import ConversationList
from olifant_mlx.tui.messages import Loaded, Status, TokenizerKnown
from olifant_mlx.tui.save import ExportScreen
from olifant_mlx.tui.settings_tab import Settings, SettingsTab
from textual import work
from textual.actions import SkipAction

from olifant_mlx.teardown import on_own_thread

WORKSPACE = ("chat", "document")         # the two kinds of conversation


def default_session(model, meter):
    """A Session on a freshly loaded verifier (runs on a worker thread)."""
    from olifant_mlx.engine import Session
    from olifant_mlx.verifier import load_verifier

    return Session(load_verifier(model), "none", meter=meter)


def default_tokenizer(model):
    from olifant_mlx.verifier import default_model, load_tokenizer

    return load_tokenizer(model or default_model())


class Workspace:
    """Session, meter, conversations, store and export (state kept on the App)."""

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

    def _stash_document(self) -> None:
        """Keep what the editor holds in the current document."""
        conv = self.current.get("document")
        if conv is not None:
            ed = self.doc_tab.editor
            conv.text, conv.marks = ed.text, ed.all_marks()

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

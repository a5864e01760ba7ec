"""Starting and stopping generations: send (ctrl+g), regenerate, edit and resend, compare,
stop. A mixin of OlifantApp; the runs themselves are tui/workers.py's."""
from __future__ import annotations

from olifant_mlx.tui import render
from olifant_mlx.tui.chat_tab import MessageView
from olifant_mlx.tui.compare_tab import CompareTab
from olifant_mlx.tui.conversation import Conversation, Turn
from olifant_mlx.tui.settings_tab import Settings
from olifant_mlx.tui.workers import Job
from textual.actions import SkipAction
from textual.widgets import Static


class Generation:
    """ctrl+g and its kin (a mixin of OlifantApp)."""

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

"""The App's side of the workspace's actions: send (ctrl+g), regenerate, edit and resend,
compare, stop, export and copy. It reads the tabs' widgets,
changes the workspace (tui/workspace.py) and starts the runs on Textual thread workers
(tui/workers.py); what they report is tui/results.py's. The App owns one (`app.generation`)
and its actions call it."""
from __future__ import annotations

from functools import partial

from olifant_mlx.tui import workers
from olifant_mlx.tui.chat_tab import MessageView
from olifant_mlx.tui.compare_tab import CompareTab
from olifant_mlx.tui.conversation import Conversation, export_data
from olifant_mlx.tui.save import ExportScreen
from olifant_mlx.tui.settings_tab import Settings, SettingsTab
from olifant_mlx.tui.workers import Job
from textual.actions import SkipAction
from textual.widgets import Static
from textual.worker import get_current_worker


class Generation:
    """ctrl+g and its kin, for the App `app` (which keeps the widgets, the keys and the mode)."""

    def __init__(self, app):
        self.app = app
        self.starting = False          # a generation is being set up (await in between)

    @property
    def ws(self):
        return self.app.workspace

    def _unless_modal(self) -> None:
        if self.app._modal():
            raise SkipAction()

    def _notify(self, text: str, severity: str = "warning", **kw) -> None:
        self.app.notify(text, severity=severity, **kw)

    # ---- settings --------------------------------------------------------------------

    def settings(self) -> Settings | None:
        """The settings for a new run, or None (with a notification) when one cannot start."""
        if self.ws.generating:
            self._notify("already generating; esc stops it")
            return None
        try:
            s = self.app.query_one(SettingsTab).read()
        except ValueError as e:
            self._notify(str(e), title="settings", severity="error")
            return None
        self.use_store(s.conversations)
        return self.ws.pins.apply(s)          # the documents pinned in the Precedents pane

    def use_store(self, path: str | None) -> None:
        if path == self.ws.store_path:
            return
        error = self.ws.use_store(path)
        if error:
            self._notify(error, severity="error", timeout=10)
        self.app.results.show_list()

    def stash_document(self) -> None:
        """Keep what the editor holds in the current document."""
        ed = self.app.doc_tab.editor
        self.ws.keep_document(ed.text, ed.all_marks())

    # ---- generation -----------------------------------------------------------------

    async def send(self) -> None:
        self._unless_modal()
        app = self.app
        if app.tabs.active == "compare":
            self.compare()
            return
        if app.tabs.active != app.mode:
            app.action_tab(app.mode)
        if self.starting:                     # a second ctrl+g while the first is starting
            return
        self.starting = True
        try:
            if app.mode == "chat":
                await self._send_chat()
            else:
                self._continue_document()
        finally:
            self.starting = False

    async def _send_chat(self) -> None:
        s = self.settings()
        if s is None:
            return
        chat = self.app.chat_tab
        text = chat.composer.text.strip()
        if not text:
            self._notify("write a message first")
            return
        if self.ws.editing is not None:
            await chat.drop_from(self.ws.editing)
            chat.supersede_from(None)
        conv = self.ws.ask(text, s.system_prompt)
        chat.composer.clear()
        await chat.add(len(conv.turns) - 1, conv.turns[-1])
        await self._answer(conv, s)

    async def _answer(self, conv: Conversation, s: Settings, seed: int | None = None) -> None:
        job = self.ws.answer(conv, s, seed)
        await self.app.chat_tab.add(job.index, conv.turns[job.index], writing=True)
        self.start(job)

    def _continue_document(self) -> None:
        s = self.settings()
        if s is None:
            return
        doc = self.app.doc_tab
        text = doc.editor.text
        if not text.strip():
            self._notify("write the beginning of the document first")
            return
        self.stash_document()
        self.start(self.ws.job("document", self.ws.current["document"], s, text, doc.begin()))

    async def regenerate(self) -> None:
        """Chat: the last answer again (with sampling, the next seed); document: the last
        continuation again, if the text has not changed since."""
        self._unless_modal()
        if self.starting:
            return
        self.starting = True
        try:
            await self._regenerate()
        finally:
            self.starting = False

    async def _regenerate(self) -> None:
        if self.app.mode == "document":
            conv, ed = self.ws.current["document"], self.app.doc_tab.editor
            if not conv.runs or conv.text != ed.text or conv.runs[-1].end != len(ed.text):
                self._notify("nothing to write again: the document changed since its last "
                             "continuation (ctrl+z undoes it)")
                return
            if self.ws.generating:
                self._notify("already generating; esc stops it")
                return
            run = conv.runs.pop()
            ed.delete(ed.document.get_location_from_index(run.start), ed.document.end)
            self._continue_document()
            return
        s = self.settings()
        if s is None:
            return
        conv = self.ws.current["chat"]
        seed = None
        if conv.turns and conv.turns[-1].role == "assistant":
            last = conv.turns.pop()
            await self.app.chat_tab.drop_from(len(conv.turns))
            if s.options.temperature > 0:
                seed = (last.seed if last.seed is not None else s.options.seed) + 1
        if not conv.turns or conv.turns[-1].role != "user":
            self._notify("no message to answer yet")
            return
        await self._answer(conv, s, seed)

    def edit_last(self) -> None:
        """Put your last message (or the one of yours that has focus) back in the editor; the
        next ctrl+g sends it in its place, and the answers after it are written again."""
        self._unless_modal()
        if self.ws.generating:
            self._notify("stop the generation first (esc)")
            return
        conv, chat = self.ws.current["chat"], self.app.chat_tab
        focused = self.app.focused
        if isinstance(focused, MessageView) and focused.turn.role == "user":
            index = focused.index
        else:
            index = next((i for i in range(len(conv.turns) - 1, -1, -1) if conv.turns[i].role == "user"), None)
        if index is None:
            self._notify("no message of yours to edit yet")
            return
        self.ws.editing = index
        composer = chat.composer
        composer.text = conv.turns[index].content
        chat.supersede_from(index)
        chat.status("editing your message: ctrl+g sends it in place of the old one "
                    "(the answers after it are written again); esc cancels")
        self.app.set_focus(composer)
        composer.move_cursor(composer.document.end)
        self.app.refresh_bindings()

    def compare(self) -> None:
        self._unless_modal()
        s = self.settings()
        if s is None:
            return
        app = self.app
        prompt = self.ws.last_prompt
        if prompt is None:
            if app.mode == "chat":
                text = app.chat_tab.composer.text.strip()
                if not text:
                    self._notify("write a message (or generate once) first")
                    return
                prompt = ("chat", self.ws.current["chat"].chat(None, self.ws.template_kwargs).then("user", text))
            else:
                prompt = ("document", app.doc_tab.editor.text)
        app.tabs.active = "compare"
        app._focus_tab("compare")
        app._tab_changed("compare")
        app.query_one(CompareTab).clear()
        app.query_one("#compare-result", Static).update("running plain, then speculative, then measuring ...")
        self.start(self.ws.job("compare", None, s, prompt[1]))

    def start(self, job: Job) -> None:
        """The job in the workspace, and its run on a thread worker of the App's (the group
        "generate": esc cancels it)."""
        self.ws.start(job)
        self.app.results.status(job, "starting ...")
        self.app.refresh_bindings()
        run = workers.compare if job.kind == "compare" else workers.generate
        ws, post = self.ws, self.app.post_message

        def work() -> None:
            worker = get_current_worker()
            run(ws, job, post, lambda: worker.is_cancelled)

        self.app.run_worker(work, name=f"{job.kind} {job.id}", group="generate", thread=True,
                            exclusive=True, exit_on_error=False)

    def load_tokenizer(self, model) -> None:
        """The verifier's tokenizer alone, on a thread worker (for the Models list)."""
        self.app.run_worker(partial(workers.tokenizer, self.ws, model, self.app.post_message),
                            name="tokenizer", group="tokenizer", thread=True, exit_on_error=False)

    def stop(self) -> None:
        app = self.app
        if app._modal():
            app.screen.dismiss(None)
            return
        if self.ws.generating:
            app.workers.cancel_group(app, "generate")
            for job in self.ws.jobs.values():
                app.results.status(job, "stopping ...")
            return
        if self.ws.editing is not None:
            self.ws.editing = None
            app.chat_tab.supersede_from(None)
            app.chat_tab.composer.clear()
            app.chat_tab.status("edit cancelled")
            app.refresh_bindings()
            return
        raise SkipAction()

    # ---- export, copy ----------------------------------------------------------------

    def export(self) -> None:
        self._unless_modal()
        self.stash_document()
        app = self.app
        conv = self.ws.current[app.mode]
        if not (conv.turns or conv.text.strip()):
            self._notify("nothing to export yet")
            return

        def write(choice):
            if not choice:
                return
            from olifant_mlx.files import write_atomic

            path, fmt = choice
            try:
                settings = app.query_one(SettingsTab).read()
            except ValueError:
                summary = {}
            else:
                summary = self.ws.summary(settings)
            try:
                write_atomic(path, export_data(conv, fmt, summary))
            except (OSError, ValueError) as e:
                self._notify(f"cannot export: {e}", severity="error")
                return
            app.notify(f"exported to {path} ({fmt}, readable by you only)")

        app.push_screen(ExportScreen("this conversation" if app.mode == "chat" else "this document"), write)

    def copy(self) -> None:
        self._unless_modal()
        app = self.app
        if app.mode == "chat":
            text, what = self.ws.current["chat"].last_answer(), "the last answer"
        else:
            text, what = app.doc_tab.editor.text, "the document"
        if not text:
            self._notify("nothing to copy yet")
            return
        app.copy_to_clipboard(text)
        app.notify(f"copied {what} ({len(text):,} characters) to the clipboard")

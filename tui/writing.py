"""What every tab that generates shares (the Chat, Document and Compare tabs): each starts its
runs on its own thread worker (`start`: the function of tui/workers.py it names, posting to
the tab) and handles the messages they post back in its own `on_chunk`, `on_done` (Compare:
`on_compare_done`) and `on_failed`; `on_status` is this class's. What a run shows beyond its
tab goes to the App's panels: the live numbers and the session line (`app.live`), the
conversation list and its store (`app.nav`), the Sources and Precedents tabs
(`app.show_copied`). A job's kind is its tab's id: the tab reads its own runs from the
workspace's jobs (`running`).
"""
from __future__ import annotations

import functools

import time

from olifant_mlx.tui import render, workers
from olifant_mlx.conversation import export_data
from olifant_mlx.tui.copied import where
from olifant_mlx.tui.messages import Chunk, Done, Failed, Status
from olifant_mlx.tui.save import ExportScreen
from olifant_mlx.tui.settings_tab import Settings, SettingsTab
from olifant_mlx.tui.workers import Job
from textual import work
from textual.widgets import TabPane
from textual.worker import get_current_worker

FINISHED = {"stopped": "stopped", "eos": "done", "stop": "done (stop sequence)",
            "max_tokens": "done (max tokens)"}


def setting_up(action):
    """A tab's action that sets a run up (awaiting in between): ignored while one is being set
    up already (a second ctrl+g meanwhile)."""
    @functools.wraps(action)
    async def once(self, *args):
        if self.starting:
            return
        self.starting = True
        try:
            await action(self, *args)
        finally:
            self.starting = False
    return once


class WritingPane(TabPane):
    """A tab whose runs are its own: it starts them, stops them and shows what they post."""
    what = "this conversation"         # what export's dialog calls the tab's text
    copies = "the last answer"         # what copy takes
    own_keys = ()                      # workspace keys ("send", "export", "copy") this tab runs itself

    def __init__(self, title: str, id: str):
        super().__init__(title, id=id)
        self.starting = False          # a run is being set up (await in between)

    @property
    def ws(self):
        return self.app.workspace

    def status(self, text: str) -> None:
        """Show `text` in the tab's status line."""
        raise NotImplementedError

    def show_loading(self, on: bool) -> None:
        """Show (or stop showing) that the verifier is loading."""

    def set_marks(self, mode: str) -> None:
        """Draw the provenance marks in `mode` (F10: flow.MARK_MODES)."""

    # ---- starting and stopping ----------------------------------------------------

    def settings(self) -> Settings | None:
        """The settings for a new run (the Settings tab's model, as it is), or None (with a
        notification) when one cannot start."""
        if self.ws.generating:
            self.notify("already generating; esc stops it", severity="warning")
            return None
        try:
            s = self.app.query_one(SettingsTab).read()
        except ValueError as e:
            self.notify(str(e), title="settings", severity="error")
            return None
        self.app.nav.use_store(s.conversations)
        return self.ws.pins.apply(s)          # the documents pinned in the Precedents pane

    def start(self, job: Job, run=workers.generate) -> None:
        """The job in the workspace, and `run` (tui/workers.py) on this tab's thread worker."""
        self.ws.start(job)
        self.status("starting ...")
        self.app.refresh_bindings()
        self._work(self.ws, job, run)

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    def _work(self, ws, job: Job, run) -> None:
        worker = get_current_worker()
        run(ws, job, self.post_message, lambda: worker.is_cancelled)

    def running(self) -> Job | None:
        """This tab's job in flight, if any."""
        return next((j for j in self.ws.jobs.values() if j.kind == self.id), None)

    def stop(self) -> bool:
        """Cancel this tab's run (esc); False when it has none."""
        if self.running() is None:
            return False
        self.workers.cancel_group(self, "generate")
        self.status("stopping ...")
        return True

    # ---- what the runs post ---------------------------------------------------------

    def on_status(self, m: Status) -> None:
        self.status(m.text)
        self.show_loading(m.loading)

    def took(self, m: Chunk) -> Job | None:
        """The job a chunk is of (None: no longer in flight), with the precedents it was given."""
        job = self.ws.jobs.get(abs(m.run))
        if job is not None and m.precedents is not None:
            job.precedents = m.precedents
        return job

    def ended(self, m) -> Job | None:
        """The job a Done or Failed ends, out of the jobs in flight (None: none), the keys
        shown again."""
        job = self.ws.end(m.run)
        self.app.refresh_bindings()
        return job

    def writing(self, m: Chunk) -> None:
        """A chunk's numbers, here and beyond the tab, and its warnings."""
        self.app.live.show_stats(m.stats, m.elapsed)
        self.status(render.status_line(m.stats, "writing"))
        if m.sources or m.precedents is not None:
            self.app.show_copied()
        if m.left_out:
            self.notify(f"{m.left_out} pinned passage(s) left out: over the precedent tokens (Settings)",
                        title="precedents", severity="warning", timeout=8)
        for run in m.verbatim:               # the verbatim guard: the span and the document
            place = (run.get("places") or [{}])[0]
            self.notify(f"the text copies {run.get('tokens')} tokens in a row from "
                        f"{where(place)} (over max verbatim)", title="verbatim", severity="warning", timeout=8)

    def finished(self, job: Job, m: Done, line: str = "") -> None:
        """A run kept in its conversation: its status line (and `line` after it); the numbers,
        the session, the Sources and Precedents tabs, the list and its store."""
        self.app.live.show_end(m.stats, m.window, time.perf_counter() - job.t0)
        self.app.show_copied()
        state = FINISHED.get(m.finish_reason, f"done ({m.finish_reason})")
        self.status(render.status_line(m.stats, state, m.window.total_j if m.window is not None else None)
                    + line)
        error = self.ws.save_store()
        if error:
            self.notify(error, severity="error")
        self.app.nav.show_current()

    def failed(self, m: Failed, job: Job | None) -> None:
        """A run that failed (or was stopped): said in the status line, and notified."""
        if job is not None:
            self.status(f"{m.where} failed: {m.error}" if m.error != "stopped" else "stopped")
        if m.error != "stopped":
            self.notify(m.error, title=f"{m.where} failed", severity="error", timeout=8)

    # ---- the tab's text: export and copy ----------------------------------------------

    def text(self) -> str:
        """What copy takes: the last answer, or the document."""
        raise NotImplementedError

    def compare_prompt(self):
        """What Compare runs when nothing was generated yet (the Chat tab: the chat and your
        message; None, with a notification, when there is none)."""
        return self.text()

    def action_copy(self) -> None:
        text = self.text()
        if not text:
            self.notify("nothing to copy yet", severity="warning")
            return
        self.app.copy_to_clipboard(text)
        self.notify(f"copied {self.copies} ({len(text):,} characters) to the clipboard")

    def stash(self) -> None:
        """Keep what an editor holds in the current conversation (the Document tab's)."""

    def action_export(self) -> None:
        self.stash()
        conv = self.ws.current[self.id]
        if not (conv.turns or conv.text.strip()):
            self.notify("nothing to export yet", severity="warning")
            return
        self.app.push_screen(ExportScreen(self.what), lambda choice: self.export(conv, choice))

    def export(self, conv, choice) -> None:
        """Write the export chosen in the dialog, (path, format) or None."""
        if not choice:
            return
        from olifant_mlx.files import write_atomic

        path, fmt = choice
        try:
            summary = self.ws.summary(self.app.query_one(SettingsTab).read())
        except ValueError:
            summary = {}
        try:
            write_atomic(path, export_data(conv, fmt, summary))
        except (OSError, ValueError) as e:
            self.notify(f"cannot export: {e}", severity="error")
            return
        self.notify(f"exported to {path} ({fmt}, readable by you only)")

"""What the workers report, shown on the UI thread: status, chunks of text, the finished run
with its numbers, Compare's result, failures. The App routes the workers' messages here
(`app.results`); the workspace (tui/workspace.py) keeps what they leave, this shows it."""
from __future__ import annotations

import time

from olifant_mlx.tui import render
from olifant_mlx.tui.conversations_panel import ConversationList
from olifant_mlx.tui.copied import ranges, where
from olifant_mlx.tui.flow import FlowText
from olifant_mlx.tui.messages import Chunk, CompareDone, Done, Failed, Loaded, Status, TokenizerKnown
from olifant_mlx.tui.models_tab import ModelsTab
from olifant_mlx.tui.precedents_pane import PrecedentsTab
from olifant_mlx.tui.sources_pane import SourcesTab
from olifant_mlx.tui.workers import Job
from olifant_mlx.tui.workspace import precedents
from textual.widgets import Static


class Results:
    """The workers' messages shown in the App `app`'s widgets."""

    def __init__(self, app):
        self.app = app

    @property
    def ws(self):
        return self.app.workspace

    def status(self, job: Job | None, text: str) -> None:
        kind = job.kind if job is not None else self.app.mode
        if kind == "chat":
            self.app.chat_tab.status(text)
        elif kind == "document":
            self.app.doc_tab.status(text)
        else:
            self.app.query_one("#compare-result", Static).update(text)

    def show_list(self) -> None:
        """The conversation list, this tab's conversation highlighted, and where they are kept."""
        nav, ws, mode = self.app.query_one(ConversationList), self.ws, self.app.mode
        nav.show(ws.listed(), ws.current[mode].id if mode in ws.current else None)
        nav.show_store(ws.store_line())

    def show_sources(self) -> None:
        """The Sources pane shows the current conversation's (or document's) copied spans."""
        sources = self.ws.sources(self.app.mode)
        if sources is None:
            return
        for pane in self.app.query(SourcesTab):       # none when the registry has no Sources pane
            pane.show(sources, self.ws.decode())

    def show_precedents(self) -> None:
        """The Precedents pane shows what the current answer (or continuation) was given."""
        given = precedents(self.ws, self.app.mode)
        if given is None:
            return
        for pane in self.app.query(PrecedentsTab):    # none when the registry has no such pane
            pane.show(given)

    def session_line(self) -> None:
        s, k = self.ws.session, self.ws.last_k
        if s is None:
            return
        asked = getattr(s.requested, "text", s.requested)
        resolved = s.spec.text if s.spec is not None else s.drafter.name
        self.app.live.show_session(s.verifier.name, render.short_spec(str(asked)), render.short_spec(resolved), k)
        self.app.sub_title = f"{s.verifier.name} · {render.short_spec(resolved)} · k {k}"

    # ---- the messages (UI thread) ----------------------------------------------------

    def on_status(self, m: Status) -> None:
        jobs, app = self.ws.jobs.values(), self.app
        for job in jobs:
            self.status(job, m.text)
        view = app.chat_tab.view(next((j.index for j in jobs if j.kind == "chat"), -1))
        if view is not None:
            view.loading = m.loading
        app.doc_tab.editor.loading = m.loading and any(j.kind == "document" for j in jobs)

    def on_loaded(self, m: Loaded) -> None:
        self.ws.identity = m.identity
        self.app.query_one(ModelsTab).set_identity(m.identity)
        self.app.notify(f"verifier {m.name} loaded", timeout=3)

    def on_tokenizer_known(self, m: TokenizerKnown) -> None:
        if self.ws.identity is None and m.model == self.ws.model_spec:
            self.app.query_one(ModelsTab).set_identity(m.identity)

    def on_chunk(self, m: Chunk) -> None:
        job, app = self.ws.jobs.get(abs(m.run)), self.app
        if job is None:
            return
        self.ws.chunk(job, m)
        if job.kind == "chat":
            view = app.chat_tab.view(job.index)
            if view is not None:
                view.loading = False
            app.chat_tab.append(job.index, m.segments)
            if m.sources:
                app.chat_tab.show_copied(job.index)
        elif job.kind == "document":
            ed = app.doc_tab.editor
            ed.loading = False
            app.doc_tab.append(m.segments)
            if m.sources:
                ed.set_copied(ed.copied + ranges(m.sources, job.index))
        else:
            app.query_one("#compare-plain" if m.run < 0 else "#compare-spec", FlowText).append(m.segments)
        app.live.show_stats(m.stats, m.elapsed)
        self.status(job, render.status_line(m.stats, "writing"))
        if m.sources:
            self.show_sources()
        if m.precedents is not None:
            self.show_precedents()
        if m.left_out:
            app.notify(f"{m.left_out} pinned passage(s) left out: over the precedent tokens (Settings)",
                       title="precedents", severity="warning", timeout=8)
        for run in m.verbatim:               # the verbatim guard: the span and the document
            place = (run.get("places") or [{}])[0]
            app.notify(f"the text copies {run.get('tokens')} tokens in a row from "
                       f"{where(place)} (over max verbatim)", title="verbatim", severity="warning", timeout=8)

    async def on_done(self, m: Done) -> None:
        job, app = self.ws.end(m.run), self.app
        app.refresh_bindings()
        if job is None:
            return
        if job.kind == "chat":
            self.ws.done(job, m)
            view = app.chat_tab.view(job.index)
            if view is not None:
                view.loading = False
                await view.finish(app.chat_tab.markdown)
        else:
            app.doc_tab.end()
            ed = app.doc_tab.editor
            self.ws.done(job, m, (ed.text, ed.all_marks()))
        label = self.ws.meter.info.label if self.ws.meter else "not measured"
        app.live.show_stats(m.stats, time.perf_counter() - job.t0)
        app.live.show_energy(render.energy_text(m.window, m.stats.tokens, label))
        self.session_line()
        state = {"stopped": "stopped", "eos": "done", "stop": "done (stop sequence)",
                 "max_tokens": "done (max tokens)"}.get(m.finish_reason, f"done ({m.finish_reason})")
        line = render.status_line(m.stats, state, m.window.total_j if m.window is not None else None)
        if job.kind == "chat" and not m.text and m.finish_reason == "eos":
            line += " · the verifier ended its answer at once"
        self.show_sources()
        self.show_precedents()
        self.status(job, line)
        error = self.ws.save_store()
        if error:
            app.notify(error, severity="error")
        self.show_list()

    async def on_compare_done(self, m: CompareDone) -> None:
        self.ws.jobs.clear()
        self.ws.generating = False
        self.app.refresh_bindings()
        (_, ps, pw), (_, ss, sw) = m.plain, m.spec
        self.app.query_one("#compare-result", Static).update(
            render.compare_text(ps, ss, pw.total_j if pw else None, sw.total_j if sw else None,
                                m.same, m.measured, m.rates))
        self.ws.last_stats = ss
        self.session_line()

    async def on_failed(self, m: Failed) -> None:
        job, app = self.ws.end(m.run), self.app
        app.refresh_bindings()
        if job is not None:
            if job.kind == "chat":
                view = app.chat_tab.view(job.index)
                if self.ws.failed(job):           # refused or failed before any text: no answer
                    await app.chat_tab.drop_from(job.index)
                elif view is not None:
                    view.loading = False
                    await view.finish(app.chat_tab.markdown)
            elif job.kind == "document":
                app.doc_tab.editor.loading = False
                app.doc_tab.end()
                app.generation.stash_document()
            self.status(job, f"{m.where} failed: {m.error}" if m.error != "stopped" else "stopped")
        if m.error != "stopped":
            app.notify(m.error, title=f"{m.where} failed", severity="error", timeout=8)

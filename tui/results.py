"""What the workers report, shown on the UI thread: status, chunks of text, the finished run
with its numbers, Compare's result, failures. A mixin of OlifantApp."""
from __future__ import annotations

import time

from olifant_mlx.tui import render
from olifant_mlx.tui.conversation import Run
from olifant_mlx.tui.copied import ranges, where
from olifant_mlx.tui.flow import FlowText
from olifant_mlx.tui.messages import Chunk, CompareDone, Done, Failed, Loaded, Status, TokenizerKnown
from olifant_mlx.tui.models_tab import ModelsTab
from olifant_mlx.tui.sources_pane import SourcesTab
from olifant_mlx.tui.workers import Job
from textual.widgets import Static


class Results:
    """The message handlers for the workers' messages (a mixin of OlifantApp)."""

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
            if m.sources:
                turn.sources += m.sources
                self.chat_tab.show_copied(job.index)
        elif job.kind == "document":
            self.doc_tab.editor.loading = False
            self.doc_tab.append(m.segments)
            if m.sources:
                job.sources += m.sources
                ed = self.doc_tab.editor
                ed.set_copied(ed.copied + ranges(m.sources, job.index))
        else:
            self.query_one("#compare-plain" if m.run < 0 else "#compare-spec", FlowText).append(m.segments)
        self.live.show_stats(m.stats, m.elapsed)
        self._status(job, render.status_line(m.stats, "writing"))
        if m.sources:
            self._show_sources()
        for run in m.verbatim:               # the verbatim guard: the span and the document
            place = (run.get("places") or [{}])[0]
            self.notify(f"the text copies {run.get('tokens')} tokens in a row from "
                        f"{where(place)} (over max verbatim)", title="verbatim", severity="warning",
                        timeout=8)

    def _show_sources(self) -> None:
        """The Sources pane shows the current conversation's (or document's) copied spans."""
        conv = self.current.get(self.mode)
        if conv is None:
            return
        running = [s for j in self.jobs.values() if j.conv is conv and j.kind == "document" for s in j.sources]
        for pane in self.query(SourcesTab):       # none when the registry has no Sources pane
            pane.show(conv.sources() + running, self._decode())

    def _decode(self):
        """The verifier's tokenizer's decode, for the passages (None until one is known)."""
        identity = self.session.verifier.identity if self.session is not None else self.identity
        return getattr(identity, "decode", None)

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
            conv.text, conv.marks = ed.text, ed.all_marks()
            conv.runs.append(Run(job.index, len(ed.text), stats, energy, m.finish_reason, verifier, drafter,
                                 job.sources))
        conv.touch()
        self._show_sources()
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

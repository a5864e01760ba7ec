"""The workspace the panes share, as one service the App owns (`app.workspace`): the one Session
(one verifier held at a time), the energy meter, the conversations and their opt-in store, the
tokenizer for checking draft models, the generations in flight (jobs) and what the last one
measured. A plain object, neither App nor widget: it touches no widget and posts nothing
itself. What runs on a worker thread (`session_for`, tui/workers.py) reports through the `post`
it is given; what goes wrong on the UI thread comes back as text. A pane reaches it as
`self.app.workspace`; what a kind of run keeps (a chat's answer, a document's continuation) is
its pane's (tui/chat_tab.py, tui/document_tab.py).
"""
from __future__ import annotations

import dataclasses
import itertools
import threading

from olifant_mlx.tui import render, store
from olifant_mlx.conversation import Conversation, short_spec
from olifant_mlx.tui.messages import Loaded, Status
from olifant_mlx.tui.workers import Job

from olifant_mlx.engine import GenerationOptions, PrefixCache

WORKSPACE = ("chat", "document")         # the two kinds of conversation


def default_session(model, meter):
    """A Session on a freshly loaded verifier (runs on a worker thread)."""
    from olifant_mlx.engine import Session
    from olifant_mlx.verifier import load_verifier

    return Session(load_verifier(model), "none", meter=meter)


def default_tokenizer(model):
    from olifant_mlx.verifier import default_model, load_tokenizer

    return load_tokenizer(model or default_model())


def precedents(ws, kind: str) -> list | None:
    """The passages the workspace `ws`'s current conversation's last answer (or its document's
    last or running continuation) was given; None when there is no conversation."""
    conv = ws.current.get(kind)
    running = [j.precedents for j in ws.jobs.values() if j.conv is conv]     # a chat answer's or a document's
    return None if conv is None else running[-1] if running else conv.last_precedents()


class Pins:
    """The documents pinned in the Precedents pane, [(library, path)]: every later generation
    of this session gets them first (options.precedent_files); in memory only."""

    def __init__(self):
        self.items: list[tuple] = []

    def paths(self) -> list[str]:
        """The pins as --precedent takes them: a library's document as library:NAME:PATH (so it
        is that library's, whatever library Settings names), a file by its path."""
        from olifant_mlx.precedents import library_pin

        return [library_pin(lib, path) if lib else path for lib, path in self.items]

    def has(self, passage: dict) -> bool:
        return (passage.get("library"), passage.get("path")) in self.items

    def toggle(self, passage: dict) -> bool:
        """Pin the passage's document (its path; a library's document by its path there), or
        unpin it when it is pinned; True when it is pinned now."""
        key = (passage.get("library"), passage.get("path"))
        if key in self.items:
            self.items.remove(key)
            return False
        self.items.append(key)
        return True

    def apply(self, s):
        """The settings `s` with the pinned documents first among the precedent files."""
        if not self.items:
            return s
        files = tuple(dict.fromkeys(self.paths() + list(s.options.precedent_files)))
        return dataclasses.replace(s, options=s.options.replace(precedent_files=files))


class Workspace:
    """Session, meter, conversations and store, tokenizer, jobs and the last run's numbers: the
    state the panes share and what changes it (a plain object: tests make one without an App)."""

    def __init__(self, model: str | None = None, *, system_prompt: str | None = None,
                 template_kwargs: dict | None = None, k: int = GenerationOptions.k, energy: str | None = None,
                 meter=None, meter_clock=None, conversations: str | None = None,
                 session_factory=None, tokenizer_fn=None, train_fn=None):
        self.model_spec = model               # the verifier asked for at launch
        self.system_prompt = system_prompt
        self.template_kwargs = dict(template_kwargs or {})
        self.energy_spec, self.meter, self.meter_clock = energy, meter, meter_clock
        self.session_factory = session_factory or default_session
        self.tokenizer_fn = tokenizer_fn or default_tokenizer
        self.train_fn = train_fn              # None: olifant_mlx.draftmodel.train's (Models tab)
        self.session = None                   # the shared Session (one verifier held at a time)
        self._session_model = None
        self._history = None
        self.loads = 0                        # verifiers loaded (the drafter never causes one)
        self.identity = None                  # the verifier's tokenizer, once known
        # loading a verifier or a tokenizer imports transformers, whose lazy imports are not
        # thread-safe: one load at a time
        self._load_lock = threading.Lock()
        self.conversations: list[Conversation] = []
        self.current: dict[str, Conversation] = {}
        self.editing: int | None = None       # the chat turn being edited
        self.store_path, self.store_error = conversations, None
        self.jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        # the KV caches of recent chat turns and document runs: the next turn of a conversation
        # prefills only its new tokens (Compare always reads its prompt afresh: it measures)
        self.prompt_cache = PrefixCache(max_entries=4)
        self.generating = False
        self.last_stats = self.last_window = None
        self.last_k = k
        self.last_request = None              # the engine Request of the last run (its worker's)
        self.last_prompt = None               # (kind, prompt) of the last chat or document run
        self.pins = Pins()                    # pinned in the Precedents pane (this session's)

    # ---- energy ---------------------------------------------------------------------

    def open_meter(self) -> str | None:
        """The meter asked for (unless one was given); a warning when it cannot open, and the
        `none` meter instead."""
        from olifant_mlx.energy import EnergyError, open_meter

        if self.meter is not None:
            return None
        opts = {"clock": self.meter_clock} if self.meter_clock else {}
        try:
            self.meter = open_meter(self.energy_spec, **opts)
        except (EnergyError, ValueError, OSError) as e:
            self.meter = open_meter("none")
            return f"energy meter: {e}; not measuring"
        return None

    def power_tick(self):
        """One live power reading while generating, added to each job's energy so far:
        (watts per domain, or None when no counter advanced; the energy line, or None), or None
        when there is nothing to read."""
        if not self.generating or self.meter is None or not self.meter.info.measured:
            return None
        p = self.meter.power()
        if not p.watts:
            return None
        # no counter advanced since the last tick (counters that update less often than the
        # tick, as a replayed trace's): not 0 W; the next reading holds that energy
        advanced = any(p.watts.values())
        line = None
        for job in self.jobs.values():
            if p.total_w is not None:
                job.live_j = (job.live_j or 0.0) + p.total_w * p.seconds
                if advanced:
                    line = render.energy_text(None, 0, self.meter.info.label, job.live_j, p.total_w)
        return (p.watts if advanced else None), line

    # ---- conversations and the opt-in store ------------------------------------------

    def add(self, conv: Conversation) -> Conversation:
        self.conversations.append(conv)
        self.current[conv.kind] = conv
        return conv

    def new(self, kind: str) -> Conversation:
        """A new conversation or document, now the current one of its kind."""
        self.editing = None
        return self.add(Conversation(kind=kind, system_prompt=self.system_prompt))

    def open(self) -> str | None:
        """The saved conversations (when kept), and a current one of each kind; the store's
        error, if any."""
        error = self.open_store()
        for kind in WORKSPACE:
            if kind not in self.current:
                self.new(kind)
        return error

    def find(self, conv_id: str) -> Conversation | None:
        return next((c for c in self.conversations if c.id == conv_id), None)

    def choose(self, conv: Conversation) -> Conversation:
        """`conv` now the current one of its kind."""
        self.current[conv.kind] = conv
        self.editing = None
        return conv

    def open_store(self) -> str | None:
        if not self.store_path:
            return None
        try:
            loaded = store.load(self.store_path)
        except (store.StoreError, OSError) as e:
            self.store_error = str(e)
            return f"{e}; conversations are not saved to it"
        known = {c.id for c in self.conversations}
        self.conversations += [c for c in loaded if c.id not in known]
        for kind in WORKSPACE:
            latest = [c for c in self.conversations if c.kind == kind]
            if latest and kind not in self.current:
                self.current[kind] = max(latest, key=lambda c: c.updated)
        return None

    def use_store(self, path: str | None) -> str | None:
        """Start (or stop) keeping conversations in `path` (the Settings tab's opt-in)."""
        self.store_path, self.store_error = path, None
        return (self.open_store() or self.save_store()) if path else None

    def save_store(self) -> str | None:
        if not self.store_path or self.store_error:
            return None
        try:
            store.save(self.store_path, self.conversations)
        except (store.StoreError, OSError, ValueError) as e:
            self.store_error = str(e)
            return f"cannot save conversations: {e}"
        return None

    def listed(self) -> list[Conversation]:
        """The conversations the list shows: those with content, and the current ones."""
        return [c for c in self.conversations if c.turns or c.text or c is self.current.get(c.kind)]

    def store_line(self) -> str:
        if self.store_error:
            return f"not saved: {self.store_error}"
        return f"kept in {self.store_path}" if self.store_path else "kept in memory only"

    # ---- the session (worker threads) ------------------------------------------------

    def tokenizer(self, model):
        """The tokenizer alone (no weights), for checking draft models (worker thread)."""
        with self._load_lock:
            return self.tokenizer_fn(model)

    def check_draft(self, spec, identity) -> None:
        """Refuse a draft model trained for another tokenizer (before any generation, and
        before the verifier's weights load when the tokenizer alone is known)."""
        path = spec.model_file
        if not path or identity is None:
            return
        from olifant_mlx.draftmodel.open import check_model_tokenizer

        # every file spec the CLI takes: olifant/hybrid models, rest: indexes, ngram-cache: caches
        check_model_tokenizer(path, identity.name, identity.vocab_size, identity.digest,
                              fix="choose a model marked ✓ in the Models tab (F6), or train one there")

    def session_for(self, s, post):
        """The Session for these Settings (on a worker thread). Loads a verifier only when its
        setting changes (posting Status and Loaded); another drafter or an opt-in history gets a
        new Session around the same verifier, the one a running generation holds left as it is."""
        if self.session is None or self._session_model != s.model:
            if s.draft.model_file:
                self.check_draft(s.draft, self.tokenizer(s.model))
            post(Status(f"loading verifier {s.model or '(default)'} ...", loading=True))
            self.session = None
            with self._load_lock:
                self.session = self.session_factory(s.model, self.meter)
            self.loads += 1
            self._session_model, self._history = s.model, None
            v = self.session.verifier
            post(Loaded(v.name, v.identity, self.loads))
        session = self.session
        self.check_draft(s.draft, session.verifier.identity)
        if s.options.history != self._history:
            session = self.session = type(session)(session.verifier, s.draft, s.options, self.meter)
            self._history = s.options.history
        elif str(getattr(session.requested, "text", session.requested)) != s.draft.text:
            session = self.session = session.with_drafter(s.draft)      # the verifier stays loaded
        return session

    def decode(self):
        """The verifier's tokenizer's decode, for the passages (None until one is known)."""
        identity = self.session.verifier.identity if self.session is not None else self.identity
        return getattr(identity, "decode", None)

    def summary(self, s) -> dict:
        """The settings an export records."""
        o = s.options
        return {"verifier": self.session.verifier.name if self.session else s.model,
                "drafter": s.draft.text, "k": o.k, "max_tokens": o.max_tokens, "kv_cache": o.kv_cache,
                "max_kv_size": o.max_kv_size, "temperature": o.temperature, "top_p": o.top_p, "seed": o.seed,
                "energy_meter": self.meter.info.label if self.meter else None, "precedents": o.precedents}

    # ---- jobs: the generations in flight and what they leave ---------------------------

    def job(self, kind: str, conv, s, prompt, index: int = 0) -> Job:
        return Job(next(self._ids), kind, conv, s, prompt, index)

    def start(self, job: Job) -> None:
        self.jobs[job.id] = job
        self.generating = True
        self.last_k = job.settings.options.k
        if job.conv is not None:             # a chat answer or a continuation (not Compare)
            self.last_prompt = (job.kind, job.prompt)
        if self.meter is not None and self.meter.info.measured:
            self.meter.power()               # reset the live-power baseline

    def end(self, run: int | None) -> Job | None:
        """The job of run `run` (None: none) taken out of the jobs in flight."""
        job = self.jobs.pop(run, None) if run is not None else None
        self.generating = bool(self.jobs)
        return job

    def record(self, job: Job, m) -> dict:
        """A finished run's (a Done's) numbers, kept as the last ones, and what its answer or
        continuation keeps of them: stats, energy, finish_reason, verifier, drafter."""
        self.last_stats, self.last_window = m.stats, m.window
        energy = m.window.as_dict(m.stats.tokens) if m.window is not None and m.window.total_j is not None else None
        s = self.session
        drafter = s.spec.text if s is not None and s.spec else job.settings.draft.text
        return {"stats": m.stats.as_dict(), "energy": energy, "finish_reason": m.finish_reason,
                "verifier": s.verifier.name if s is not None else None, "drafter": short_spec(drafter)}

    def sources(self, kind: str) -> list | None:
        """The copied spans of the current conversation (or document) of `kind`, with those of
        a continuation still running; None when there is none."""
        conv = self.current.get(kind)
        if conv is None:
            return None
        running = [s for j in self.jobs.values() if j.conv is conv for s in j.sources]
        return conv.sources() + running

"""What the generation workers run: a chat answer or a document continuation, Compare (plain
and speculative side by side, then measured rounds), the tokenizer alone. The tab that asks starts each on
its own Textual thread worker (tui/writing.py, models_tab.py); each call runs on its own thread
(olifant_mlx.teardown.on_own_thread), never touches widgets, and posts batched messages through
the `post` it is given. Each plans its engine Request (engine.request.plan) over the Session the
workspace gives it (tui/workspace.py), with the drafter the settings choose. Plain functions: a
test runs one without an App."""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

from olifant_mlx.conversation import Conversation, char_spans
from olifant_mlx.tui.messages import Chunk, CompareDone, Done, Failed, Status, TokenizerKnown
from olifant_mlx.tui.render import option_error
from olifant_mlx.tui.settings_tab import Settings

from olifant_mlx.engine.options import OptionsError
from olifant_mlx.engine.request import without_drafting
from olifant_mlx.teardown import on_own_thread

FLUSH_S = 0.05          # at most ~20 UI messages a second from a generation
COMPARE_ROUNDS = 3      # measured rounds after the shown pair (measure/rounds.py: fewer are not trusted)


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
    sources: list = field(default_factory=list)     # a document continuation's, so far
    precedents: list = field(default_factory=list)  # the passages it was given


class Found:
    """The copied spans the Session's tracker reports while a generation streams, each once,
    placed in the text (tui/copied.py) when a chunk takes them."""

    def __init__(self, library: str | None, decode):
        self.library, self.decode = library, decode
        self.seen, self.new, self.trips = set(), [], []

    def add(self, sources, verbatim=None) -> None:
        if verbatim is not None:
            self.trips.append(verbatim.as_dict() if hasattr(verbatim, "as_dict") else dict(verbatim))
        for s in sources or ():
            d = s.as_dict() if hasattr(s, "as_dict") else dict(s)
            if (d["start"], d["end"]) not in self.seen:
                self.seen.add((d["start"], d["end"]))
                self.new.append({**d, "library": self.library})

    def tripped(self) -> list:
        trips, self.trips = self.trips, []
        return trips

    def take(self, text: str, tokens) -> list:
        new, self.new = self.new, []
        return char_spans(new, text, tokens, self.decode) if new else []


def stream(post, session, job: Job, cancelled, request, target=None):
    """One planned generation (an engine Request) on the worker thread: (ids, text, Stats,
    Window, finish reason)."""
    streaming = streamed(post, session, job, cancelled, request, target)
    while True:
        try:
            next(streaming)
        except StopIteration as done:
            return done.value


def streamed(post, session, job: Job, cancelled, request, target=None, batched=False):
    """stream's generation as a generator: with `batched`, its verifier passes are yielded
    (engine.forward's events, for an engine.batch.Batch to run beside another's); it returns
    stream's answer."""
    tokens, text, pending = [], [], []
    last_flush = time.perf_counter()
    final = None
    run = job.id if target is None else target
    found = Found(request.library, getattr(session.verifier.identity, "decode", None))
    sent = False                     # the precedents (every Response has them): with one chunk
    for r in session.stream(request, should_stop=cancelled, batched=batched):
        if not hasattr(r, "finish_reason"):          # a pass, for the batch to run
            yield r
            continue
        tokens.extend(r.tokens)
        text.append(r.text)
        pending.extend(r.segments)
        found.add(r.sources, r.verbatim)
        now = time.perf_counter()
        if now - last_flush >= FLUSH_S or r.finish_reason:
            used = None if sent else r.precedents
            sent = sent or used is not None
            post(Chunk(run, pending, copy.copy(r.stats), now - job.t0,
                       found.take("".join(text), tokens), found.tripped(),
                       used.as_list() if used is not None else None, used.left_out if used is not None else 0))
            pending, last_flush = [], now
        final = r
    return tokens, "".join(text), final.stats, final.energy, final.finish_reason


def chat_check(session, job: Job) -> None:
    from olifant_mlx.engine import Chat

    if isinstance(job.prompt, Chat) and not session.verifier.has_chat_template:
        raise ValueError(f"{session.verifier.name} has no chat template (a base model): "
                         f"continue text in the Document tab (F3)")


def failure(e: Exception) -> str:
    """A run's failure as the TUI shows it: an option's as its settings row words it, else the
    exception's type and message."""
    return option_error(e) if isinstance(e, OptionsError) else f"{type(e).__name__}: {e}"


@on_own_thread           # MLX never runs on the pool's thread: see olifant_mlx.teardown
def generate(workspace, job: Job, post, cancelled) -> None:
    """A chat answer or a document continuation, over the workspace's Session (and its prompt
    cache), planned with the drafter the settings choose; `cancelled()` says when to stop."""
    try:
        session = workspace.session_for(job.settings, post)
        chat_check(session, job)
        request = workspace.last_request = session.plan(job.prompt, job.settings.options,
                                                        cache=workspace.prompt_cache)
        job.t0 = time.perf_counter()
        d = request.drafting
        post(Status(f"writing with {session.verifier.name}, drafter {d.spec.text if d.spec else d.drafter.name}"))
        _, text, stats, window, reason = stream(post, session, job, cancelled, request)
        post(Done(job.id, text, stats, window, reason))
    except Exception as e:     # shown in the UI, never as a traceback
        post(Failed("generation", failure(e), job.id))


@on_own_thread           # MLX never runs on the pool's thread: see olifant_mlx.teardown
def compare(workspace, job: Job, post, cancelled) -> None:
    """Plain and speculative side by side, their passes batched (each shown: run -job.id and
    job.id), then measured rounds, one at a time: one request, and the same decoded plainly.
    The energy ratio is the rounds' (the shown pair ran at once)."""
    try:
        session = workspace.session_for(job.settings, post)
        chat_check(session, job)
        speculative = workspace.last_request = session.plan(job.prompt, job.settings.options)
        plain = without_drafting(speculative)
        job.t0 = time.perf_counter()
        (p_ids, p_text, p_stats, _, r1), (s_ids, s_text, s_stats, _, r2) = side_by_side(
            session, [streamed(post, session, job, cancelled, plain, -job.id, session.shard is None),
                      streamed(post, session, job, cancelled, speculative, None, session.shard is None)])
        if "stopped" in (r1, r2):
            raise InterruptedError("stopped")
        measured, rates, (p_win, s_win) = compare_rounds(post, session, (plain, speculative), cancelled)
        post(CompareDone((p_text, p_stats, p_win), (s_text, s_stats, s_win), p_ids == s_ids, measured, rates))
    except InterruptedError:
        post(Failed("compare", "stopped", job.id))
    except Exception as e:
        post(Failed("compare", failure(e), job.id))


def side_by_side(session, generations) -> list:
    """Generations (`streamed(..., batched=True)`) run together, their passes batched
    (engine.batch); what each returned, in order."""
    from olifant_mlx.engine.batch import Batch

    answers = [None] * len(generations)

    def lane(i, generation):
        answers[i] = yield from generation

    lanes = [lane(i, g) for i, g in enumerate(generations)]
    batch = Batch(session.verifier.model, len(lanes))
    while lanes:
        for ended, error in batch.round(lanes).items():
            if error is not None:
                raise error
            lanes.remove(ended)
    return answers


def compare_rounds(post, session, requests, cancelled):
    """After the shown pair (the warm-up), COMPARE_ROUNDS unshown rounds of the (plain,
    speculative) requests, one at a time, alternating which runs first: (Speedups, (plain,
    speculative) median tok/s, (plain, speculative) energy Window of the median run or None)."""
    import statistics

    from olifant_mlx.measure import rounds

    def run(request):
        out = list(session.stream(request, should_stop=cancelled))
        last = out[-1] if out else None
        if last is None or last.finish_reason == "stopped":
            raise InterruptedError("stopped")
        return last.stats.tokens_per_s, last.energy

    runs = ([], [])
    for i in range(COMPARE_ROUNDS):
        post(Status(f"measuring: round {i + 1} of {COMPARE_ROUNDS} (plain and speculative)"))
        for which in ((0, 1) if i % 2 == 0 else (1, 0)):
            runs[which].append(run(requests[which]))
    plains, specs = ([rate for rate, _ in arm] for arm in runs)
    windows = tuple(median_window([w for _, w in arm]) for arm in runs)
    return rounds.speedups(plains, specs), (statistics.median(plains), statistics.median(specs)), windows


def median_window(windows):
    """The energy Window of the median of some runs' (None when any is not measured)."""
    if not windows or any(w is None or w.total_j is None for w in windows):
        return None
    return sorted(windows, key=lambda w: w.total_j)[len(windows) // 2]


@on_own_thread           # MLX never runs on the pool's thread: see olifant_mlx.teardown
def tokenizer(workspace, model, post) -> None:
    """The verifier's tokenizer alone, for the Models list (nothing posted when it fails: the
    list then says "not known yet")."""
    try:
        post(TokenizerKnown(model, workspace.tokenizer(model)))
    except Exception:
        pass

"""A bounded queue in front of one worker thread that owns the Session.

Everything that touches the verifier (loading it, the tokenizer and chat template, the Session's
decoding) runs on the worker thread, so MLX and the tokenizer are never used from two threads
at once. The worker runs up to `parallel` generations at a time (`serve --parallel`, default
one), a verifier pass of each in turn: each drafts with a state of its own (drafters.base:
`open`), so each client gets its solo output, drafting included (tests/test_server_parallel.py).
Requests wait in a FIFO of at most `size` jobs behind the running ones; one more is refused
(`QueueFull`, with a Retry-After estimate). A job carries its own stop flag: the
Session asks `job.should_stop()` after every verifier pass, so a client that leaves or a
deadline that passes ends the generation within one pass, and a job cancelled while it still
waits leaves the queue at once. Events (started, text, finished, failed) go back to the
requester through its `sink`, a thread-safe callable. Nothing a job holds is logged or kept
after it ends: the worker keeps only counts (`recent`).
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import math
import threading
import time
from dataclasses import dataclass

from olifant_mlx.teardown import release_streams

log = logging.getLogger("olifant_mlx.server")

# the verbatim guard's stop (--verbatim-action stop) is OpenAI's "content_filter": the output
# was cut by a rule, not by its end or its length
FINISH = {"eos": "stop", "stop": "stop", "max_tokens": "length", "stopped": "length",
          "verbatim": "content_filter"}


# the status of a job that ended while it waited (it never started)
QUEUED_STATUS = {"deadline": 504, "shutdown": 503, "disconnected": 499}


class QueueClosed(Exception):
    """The server is shutting down: no new jobs."""


class QueueFull(Exception):
    def __init__(self, retry_after: int):
        super().__init__(f"the server is busy: {retry_after} s")
        self.retry_after = retry_after


@dataclass(frozen=True)
class Started:
    prompt_tokens: int
    queue_s: float


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Finished:
    finish_reason: str          # OpenAI's: "stop" | "length" | "content_filter"
    usage: dict
    sources: list | None = None     # Source.as_dict() of each copied span; None: no library asked
    precedents: list | None = None  # the passages the prompt was given (request field `precedents`)


@dataclass(frozen=True)
class Failed:
    status: int
    message: str
    code: str | None = None
    param: str | None = None


@dataclass(frozen=True)
class ModelInfo:
    """What the HTTP side may know of the verifier without touching it."""
    id: str
    context_length: int | None
    vocab_size: int
    has_chat_template: bool
    drafters: tuple                 # names a request may use ("none" included)
    default_drafter: str
    meter_label: str
    libraries: tuple = ()           # (drafter name, the library it drafts from) of each that does


@dataclass(frozen=True)
class Record:
    """What the worker remembers of a finished job: counts only, never text."""
    id: str
    stop_reason: str            # eos | stop | max_tokens | disconnected | deadline | error | ...
    tokens: int
    passes: int
    cancelled_at_pass: int | None


class Job:
    """One request's generation. `prompt` is text, token ids or a Chat; `options` its
    GenerationOptions; `explicit_max` whether the client set max_tokens (else it is cut to fit
    the context); `deadline` a time.monotonic() value; `sink(event)` is called from the worker."""

    def __init__(self, id, prompt, options, drafter, deadline, sink, explicit_max=True, param="prompt",
                 model=None, owner=None, prediction=None, prediction_k=None, audit=None):
        self.id, self.prompt, self.options, self.drafter = id, prompt, options, drafter
        self.model = model             # a served verifier's id (None: the default one)
        self.owner = owner             # whose prompt cache it reads and adds to (the API key's index)
        self.prediction = prediction   # the predicted output's text, or None
        self.prediction_k = prediction_k   # its draft length (None: the request's num_draft_tokens)
        self.audit = audit             # its audit line's who: the key's id, the endpoint, the model
        self.deadline, self.sink, self.explicit_max, self.param = deadline, sink, explicit_max, param
        self.created = time.monotonic()
        self.stop_flag = threading.Event()
        self.reason = None             # why it was asked to stop
        self.passes = 0                # verifier passes so far (worker)
        self.started = None            # time.monotonic() when the worker took it
        self.cancelled_at_pass = None
        self.batches = []              # how many jobs each of its forward passes held (worker)
        self.done = False

    def cancel(self, reason: str = "disconnected") -> None:
        if not self.stop_flag.is_set():
            self.reason = reason
            self.cancelled_at_pass = self.passes
            self.stop_flag.set()

    def should_stop(self) -> bool:
        if not self.stop_flag.is_set() and time.monotonic() >= self.deadline:
            self.cancel("deadline")
        return self.stop_flag.is_set()

    def emit(self, event) -> None:
        try:
            self.sink(event)
        except Exception:              # the requester is gone (its event loop closed)
            self.cancel("disconnected")


class GenerationQueue:
    """The worker thread and its bounded FIFO. `setup()` runs on the worker thread and returns
    (session, drafters, info): the Session, {name: engine.request.Drafting} ("none" included), each
    built once, and a ModelInfo.
    `others`: setups of more verifiers a job may name (`job.model`, their info's id), loaded
    on the worker thread too, after the default one; `models` maps every id to its triple.
    `prompt_cache` (an engine PrefixCache, or None) keeps the verifiers' KV caches across
    requests (keyed by model): a request prefills only its prompt's tokens past the longest
    prefix it shares with a cached one (a conversation's next turn, a shared system prompt).
    `parallel`: how many jobs run at once, a pass of each in turn (the rest wait).
    `max_batch`: how many running jobs' passes run as one (engine.batch; None: as many as this
    machine's pass-cost curve says pay, the curve measured once per verifier and kept); more
    jobs than that run at once when `parallel` says so, in batches by turn."""

    def __init__(self, setup, size: int = 16, others=(), prompt_cache=None, audit=None, parallel: int = 1,
                 max_batch: int | None = 1):
        self._setup = setup
        self.parallel = parallel
        self.max_batch = max_batch
        self.batches = {}                # a served verifier's id -> its engine.batch.Batch
        self.audit = audit               # an audit.AuditLog: a line per job (counts and citations, no text)
        self._others = tuple(others)
        self.models = {}
        self.size = size
        self.prompt_cache = prompt_cache
        self._cv = threading.Condition()
        self._waiting = collections.deque()
        self._running = {}               # job -> its generation on the worker (a generator of passes)
        self._closed = False
        self._ready = threading.Event()
        self._error = None
        self._service_s = None           # moving average of a job's time on the worker
        self.session = self.drafters = self.info = None
        self.counts = collections.Counter()
        self.recent = collections.deque(maxlen=64)
        self._thread = threading.Thread(target=self._main, name="olifant-generation", daemon=True)

    # ---- the requester's side ----------------------------------------------------------

    def start(self, timeout: float | None = None) -> ModelInfo:
        """Start the worker and wait for its setup; an error there is raised here."""
        self._thread.start()
        self._ready.wait(timeout)
        if self._error is not None:
            raise self._error
        if self.info is None:
            raise TimeoutError("the generation worker did not get ready in time")
        return self.info

    def submit(self, job: Job) -> None:
        with self._cv:
            if self._closed:
                raise QueueClosed("the server is shutting down")
            busy = len(self._running) >= self.running_limit or bool(self._waiting)
            if busy and len(self._waiting) >= self.size:
                self.counts["rejected"] += 1
                raise QueueFull(self.retry_after())
            self._waiting.append(job)
            self._cv.notify()

    def cancel(self, job: Job, reason: str = "disconnected") -> None:
        """Stop a job: a waiting one leaves the queue now, a running one after this pass."""
        job.cancel(reason)
        with self._cv:
            if job in self._waiting:
                self._waiting.remove(job)
                self._record(job, reason, 0, 0)

    def retry_after(self) -> int:
        """Seconds until a slot is likely free: a job's average time, times the jobs ahead / parallel."""
        per_job = self._service_s or 5.0
        return max(1, min(600, math.ceil(per_job * (len(self._waiting) + 1) / self.running_limit)))

    @property
    def running_limit(self) -> int:
        """How many jobs run at once: --parallel, or a batch's worth where that is more."""
        return max(self.parallel, self.max_batch or 1)

    def status(self) -> dict:
        with self._cv:
            return {"running": len(self._running), "parallel": self.parallel, "max_batch": self.max_batch,
                    "waiting": len(self._waiting),
                    "size": self.size, "served": sum(v for k, v in self.counts.items() if k != "rejected"),
                    "rejected": self.counts["rejected"]}

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking jobs, stop the running one after its pass, end the worker."""
        with self._cv:
            self._closed = True
            waiting, self._waiting = list(self._waiting), collections.deque()
            running = list(self._running)
            self._cv.notify_all()
        for job in waiting:
            job.cancel("shutdown")
            self._audit(job, "shutdown")
            job.emit(Failed(503, "the server is shutting down", "shutdown"))
        for job in running:
            job.cancel("shutdown")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # ---- the worker's side -------------------------------------------------------------

    def _main(self):
        try:
            self._work()
        finally:                         # before the thread ends: see olifant_mlx.teardown
            release_streams()

    def _work(self):
        try:
            self.session, self.drafters, self.info = self._setup()
            self.models[self.info.id] = (self.session, self.drafters, self.info)
            for setup in self._others:
                served = setup()
                self.models.setdefault(served[2].id, served)
            self._batching()
        except BaseException as e:       # noqa: B036 - handed to start(), which raises it
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        while self._admit():
            self._round()

    def _batching(self) -> None:
        """A Batch for each served verifier (batches_for); `max_batch` None becomes the default one's size."""
        self.batches, size = batches_for(self.models, self.max_batch)
        if self.max_batch is None:
            self.max_batch = size
            log.info("batching up to %d requests a pass (this machine's pass costs)", size)

    def _round(self) -> None:
        """A pass of every running job, batched by verifier; the ones that ended leave."""
        groups = collections.defaultdict(list)
        for job, passes in self._running.items():
            groups[job.model if job.model in self.batches else self.info.id].append(passes)
        jobs = {passes: job for job, passes in self._running.items()}
        for model_id, lanes in groups.items():
            for passes, error in self.batches[model_id].round(lanes).items():
                self._ended(jobs[passes], error)

    def _admit(self) -> bool:
        """Wait for work; waiting jobs start while there is room. False: closed, none running."""
        with self._cv:
            while not self._waiting and not self._running and not self._closed:
                self._cv.wait()
            if self._closed and not self._running:
                return False
            while self._waiting and len(self._running) < self.running_limit and not self._closed:
                job = self._waiting.popleft()
                job.started = time.monotonic()
                self._running[job] = self._serve(job)
            return True

    def _ended(self, job: Job, error) -> None:
        """A running job's generation ended (`error`: the exception it raised): it leaves."""
        if error is not None:            # the worker outlives any one request
            log.error("request failed on the worker: %s", type(error).__name__)
            job.emit(Failed(500, "the generation failed on the server (see its log)", "server_error"))
        job.done = True
        with self._cv:
            del self._running[job]
        dt = time.monotonic() - job.started
        self._service_s = dt if self._service_s is None else 0.8 * self._service_s + 0.2 * dt

    def _serve(self, job: Job):
        """The job's generation: a generator of its verifier passes (engine.forward's events, for
        the batch to run; a sharded verifier's run here: None after each)."""
        if job.should_stop():          # it left, or its deadline passed, while it waited
            self._record(job, job.reason, 0, 0)
            if job.reason == "deadline":
                job.emit(Failed(504, "the request's deadline passed while it waited in the queue",
                                "deadline_exceeded"))
            else:
                job.emit(Failed(499, "the client closed the connection", "client_closed"))
            return
        session, drafters, info = self.models.get(job.model, (self.session, self.drafters, self.info))
        request = self._plan(job, session, drafters[job.drafter], info)
        if request is None:
            return
        request = prediction_length(request, drafters[job.drafter], job.prediction_k)
        queue_s = time.monotonic() - job.created
        job.emit(Started(len(request.ids), queue_s))
        last, found, batched = None, [], session.shard is None
        try:
            for r in session.stream(request, should_stop=job.should_stop, batched=batched):
                if not hasattr(r, "finish_reason"):   # a pass (engine.forward): the batch runs it
                    yield r
                    job.batches.append(getattr(r, "batch", 0))
                    continue
                job.passes += 1
                if r.text:
                    job.emit(Delta(r.text))
                found += r.sources
                last = r
                if r.finish_reason is None and not batched:
                    yield                # the other running jobs' passes
        except Exception as e:
            # the type and where, never the message (it could quote the prompt)
            log.error("generation failed: %s", type(e).__name__)
            self._record(job, "error", 0, job.passes, request, found)
            job.emit(Failed(500, "the generation failed on the server (see its log)", "server_error"))
            return
        stats = last.stats
        stop = job.reason if stats.stop_reason == "stopped" else stats.stop_reason
        self._record(job, stop, stats.tokens, stats.steps, request, found)
        used = request.precedents
        job.emit(Finished(FINISH.get(stats.stop_reason, "stop"),
                          usage(stats, last.energy, len(request.ids), job.drafter, stop, queue_s, info.meter_label,
                                job.prediction is not None, [b for b in job.batches if b]),
                          response_sources(found, "precedents" if request.traced else request.library),
                          used.as_list() if used is not None else None))

    def _plan(self, job: Job, session, drafted, info):
        """The job's engine Request (plan_job); None, the failure sent, when it cannot run."""
        planned = plan_job(job, session, drafted, info, self.prompt_cache)
        if isinstance(planned, tuple):
            return self._refuse(job, *planned)
        return planned

    def _refuse(self, job: Job, why: str, failed: Failed) -> None:
        self._record(job, why, 0, 0, refused=failed)
        job.emit(failed)

    def _record(self, job, stop_reason, tokens, passes, request=None, found=(), refused=None):
        with self._cv:
            self.counts[stop_reason] += 1
            self.recent.append(Record(job.id, stop_reason, tokens, passes, job.cancelled_at_pass))
        self._audit(job, stop_reason, tokens, request, found, refused)

    def _audit(self, job, stop_reason, tokens=0, request=None, found=(), refused=None) -> None:
        """The job's line in the audit log (with one): who, the status, and what audit.fields
        says of it; a line that cannot be written is said on the log (and the server refuses
        requests until one can be: Api.generate)."""
        if self.audit is None or job.audit is None:
            return
        from olifant_mlx import audit

        if refused is not None:
            status, outcome, reason = refused.status, "refused", refused.code or stop_reason
        else:
            outcome, reason = audit.outcome_of(stop_reason), stop_reason
            status = 500 if outcome == "error" else 200 if request is not None else QUEUED_STATUS.get(reason, 499)
        try:
            self.audit.append({**job.audit, "status": status,
                               **audit.fields(job.options, request, tokens, found, outcome, reason)})
        except audit.AuditError as e:
            log.error("%s", e)


def plan_job(job: Job, session, drafted, info, prompt_cache):
    """The job's engine Request, planned once (the precedents gathered, the prompt encoded
    and fitted, the provenance library opened); or, when it cannot run, why and the Failed to
    send (GenerationQueue._refuse's arguments)."""
    from olifant_mlx.engine.request import Chat, ContextError, LibraryOptionError, OptionsError
    from olifant_mlx.structured import SchemaError

    refused = None if job.options.sources is None else unknown_library(job.options.sources)
    if refused is not None:
        return ("bad_sources", refused)
    cache = None if prompt_cache is None else OwnedCache(prompt_cache, job.owner)
    try:
        # a completion's text is appended to its prompt: it keeps the space before its first word
        return session.plan(job.prompt, job.options, drafted, cache, not isinstance(job.prompt, Chat),
                    fit_max_tokens=not job.explicit_max, prediction=job.prediction)
    except ContextError as e:
        if e.what == "prediction":
            return ("context", Failed(
                400, f"prediction: {e.max_tokens:,} tokens, and with the prompt's {e.prompt_tokens:,} that is "
                     f"more than {info.id}'s context holds ({info.context_length:,}): shorten the prediction",
                "context_length_exceeded", "prediction"))
        return ("context", Failed(
            400, f"the prompt is {e.prompt_tokens:,} tokens and {e.max_tokens:,} more are asked for, but "
                 f"{info.id}'s context holds {info.context_length:,}: shorten the prompt or ask for "
                 f"fewer tokens (max_tokens)", "context_length_exceeded", job.param))
    except OptionsError as e:        # precedents or a library that cannot be used
        from olifant_mlx.server.wording import option_error

        why = "bad_precedents" if (e.option or "").startswith("precedent") else "bad_sources"
        message, param = option_error(e)
        if isinstance(e, LibraryOptionError):   # its files and fix are the operator's: in the log
            log.warning("request %s: %s", job.id, e)
            return (why, library_refusal(param or "precedents", e.library))
        return (why, Failed(400, message, "invalid_value", param))
    except SchemaError as e:         # a schema this verifier's tokenizer cannot take
        return ("bad_schema", Failed(400, str(e), "invalid_schema", "response_format"))
    except Exception as e:           # a chat template that refuses the conversation, ...
        return ("bad_prompt", Failed(400, f"the prompt cannot be formatted for this "
                                                           f"model: {e}", "invalid_prompt", job.param))


def batches_for(models, max_batch):
    """({served id: engine.batch.Batch}, the first one's size) for `models` ({id: (session, ...)}):
    `max_batch` each, or (None) as many as the verifier's pass-cost curve says pay (measured once
    on this machine and kept); one where its passes cannot be batched (a sharded verifier's, a
    model whose layers the batch cannot split: said in the log)."""
    from olifant_mlx.engine.batch import Batch, batchable, max_batch_for, pass_curve

    batches = {}
    for model_id, (session, _, _) in models.items():
        model, size, curve = session.verifier.model, max_batch, None
        why = "it is sharded" if session.shard is not None else None
        if size != 1 and why is None:
            why = batchable(model)
        if why is not None:
            if size != 1:
                log.warning("%s: passes run one request at a time (%s)", model_id, why)
            size = 1
        else:
            curve = pass_curve(model, model_id, on_measure=measuring(model_id))
            size = size or max_batch_for(curve)
        batches[model_id] = Batch(model, size, curve)
    return batches, next(iter(batches.values())).max_batch


def measuring(model_id):
    """The log's account of a first pass-cost measurement: when it starts, halfway, its end."""
    def said(done, total):
        if done == 1:
            log.info("%s: measuring this machine's pass costs (rows 1..72), once ...", model_id)
        elif done in (total // 2, total):
            log.info("%s: pass costs %d/%d", model_id, done, total)
    return said


def prediction_length(request, drafted, k):
    """The request drafting up to `k` tokens a pass where its drafter follows its prediction and
    chooses its own draft length (the adaptive drafter: its planner sizes each pass by cost);
    else as it is (`k` None: the request named its num_draft_tokens). `drafted`: the server's
    shared drafter, which plan() leaves untouched."""
    from olifant_mlx.drafters.adaptive import AdaptiveDrafter

    if k is None or request.drafter is drafted.drafter or not isinstance(request.drafter, AdaptiveDrafter):
        return request
    return dataclasses.replace(request, options=request.options.replace(k=k))


def library_refusal(field: str, name: str) -> Failed:
    """The one answer to a library a request names that it may not reach or that cannot be used:
    the same words whether it is missing, another key's, damaged or built for another tokenizer,
    with no path nor any other library's name (access.unknown_library answers so too); the
    server's log has the reason."""
    return Failed(400, f"{field}: no library {name[:100]!r} on this server", "library_not_found", field)


def unknown_library(name):
    """Why a request's `sources` cannot be used (library_refusal), or None."""
    from olifant_mlx.library import LibraryError, load

    try:
        load(name, list_others=False)
    except LibraryError as e:
        log.warning("sources %r: %s", name[:100], e)
        return library_refusal("sources", name)
    return None


def response_sources(found, library) -> list | None:
    """The copied spans of a generation, as JSON (Source.as_dict()), each once, in order, from
    what the Session's tracker put on its Responses; None without a library (the field is then
    left out)."""
    if library is None:
        return None
    spans = {(s.start, s.end): s for s in found}
    return [spans[k].as_dict() for k in sorted(spans)]


class OwnedCache:
    """One owner's part of a server's PrefixCache: its keys carry the owner, so a request
    reuses (and its cached_tokens counts) only prefixes its own API key's requests left."""

    def __init__(self, cache, owner):
        self.cache, self.owner = cache, owner

    def take(self, key, prompt):
        return self.cache.take((*key, ("owner", self.owner)), prompt)

    def keep(self, key, tokens, layers) -> None:
        self.cache.keep((*key, ("owner", self.owner)), tokens, layers)


def prompt_cache(limits):
    """The PrefixCache a server's limits ask for (None for --prompt-cache-size 0; bytes 0: no
    bound but the count)."""
    from olifant_mlx.engine.cache import PrefixCache

    if limits.prompt_cache_size == 0:
        return None
    return PrefixCache(limits.prompt_cache_size, limits.prompt_cache_bytes or 1 << 63)


def make_setup(verifier, choice, defaults, meter=None, warm_up: bool = True):
    """The worker's setup: `verifier` (a Verifier, or a function that loads one, called on the
    worker thread), a DrafterChoice (every drafter built once, "none" added), the default
    GenerationOptions and an energy meter. A short warm-up pays the first call's costs."""

    def setup():
        from olifant_mlx.drafters.base import NoDrafter
        from olifant_mlx.engine.request import drafting
        from olifant_mlx.engine.session import Session

        v = verifier() if callable(verifier) else verifier
        session = Session(v, "none", defaults, meter=meter)
        built = {name: drafting(spec, v.identity, session.history) for name, spec in choice.specs.items()}
        built["none"] = drafting(NoDrafter(), v.identity)
        session = session.with_drafter(built[choice.default])
        if warm_up:
            plain = defaults.replace(max_tokens=2, stop=(), sources=None, max_verbatim=None, precedents=None)
            session.generate("Hello", plain, built["none"])     # serve's guard needs a library
        label = meter.info.label if meter is not None else "not measured"
        libraries = tuple((name, d.library) for name, d in built.items() if d.library is not None)
        info = ModelInfo(v.name, v.context_length, v.identity.vocab_size, bool(v.has_chat_template),
                         tuple(built), choice.default, label, libraries)
        return session, built, info

    return setup


def usage(stats, energy, prompt_tokens, drafter, stop_reason, queue_s, meter_label, predicted=False,
          batches=()) -> dict:
    """OpenAI's usage fields, then ours: drafting, speed, energy (None when not measured), and
    the batches its passes ran in (`batches`: how many requests each forward pass held; the
    largest and the mean). `predicted`: the request gave a prediction, whose accepted and
    rejected tokens (completion_tokens_details, as OpenAI counts them) are then added."""
    joules = energy.total_j if energy is not None else None
    per_100 = energy.j_per_100_tokens(stats.tokens) if energy is not None else None
    details = {}
    if predicted:       # an empty prediction has no tokens: none accepted, none rejected
        counts = stats.extra.get("prediction", {})
        details["completion_tokens_details"] = {"accepted_prediction_tokens": counts.get("accepted", 0),
                                                "rejected_prediction_tokens": counts.get("rejected", 0)}
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": stats.tokens,
        "total_tokens": prompt_tokens + stats.tokens,
        "prompt_tokens_details": {"cached_tokens": stats.extra.get("cached_tokens", 0)},
        **details,
        "drafter": drafter,
        "drafted_tokens": stats.drafted,
        "accepted_tokens": stats.accepted,
        "acceptance": round(stats.acceptance, 4),
        "mean_accepted_length": round(stats.mean_accepted_length, 4),
        "verifier_passes": stats.steps,
        "tokens_per_s": round(stats.tokens_per_s, 3),
        "generation_tokens_per_s": round(stats.generation_tps, 3),
        "prompt_tokens_per_s": round(stats.prompt_tps, 3),
        "seconds": round(stats.seconds, 4),
        "queue_s": round(queue_s, 4),
        "stop_reason": stop_reason,
        "batch_size": max(batches, default=1),
        "mean_batch_size": round(sum(batches) / len(batches), 3) if batches else 1.0,
        "energy_j": None if joules is None else round(joules, 4),
        "j_per_100_tokens": None if per_100 is None else round(per_100, 4),
        "energy_meter": energy.info.label if energy is not None else meter_label,
    }

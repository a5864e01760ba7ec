"""The text-level API every surface stands on (mlx-lm's `stream_generate` -> `GenerationResponse`).

    verifier = load_verifier("smollm2-135m")
    session = Session(verifier, drafter="adaptive:hybrid:models/legal.olif",
                      options=GenerationOptions(k=8, max_tokens=200))
    for r in session.stream(session.plan(Chat.of("Draft a confidentiality clause."))):  # or text
        print(r.text, end="")              # r.segments: the same text with token provenance
    r.stats, r.finish_reason, r.energy     # the last response carries the totals

A prompt is text (continued as it is), token ids, or a `Chat` (messages formatted by the
verifier's chat template); `session.prompt_for(text)` makes a Chat for an instruct model and
leaves text alone for a base model, the way mlx-lm's generate does.

A `Session` holds what outlives one generation: the verifier, the default drafter (the
`drafter` given: a spec or a drafter object; else the options' `draft` spec; else none) and options,
the energy meter, the opt-in history and what drafting learns (`learning`). A generation's own
choices are a `Request` (`session.plan(prompt, options, drafter=...)` makes one, checked once);
`stream(request)` runs it, the one way to run one (`generate` streams one to its end). `with_drafter` is this
Session with another default drafter, the verifier still loaded. Prompts and outputs stay in
memory: only an opt-in history file (options.history) is ever written; an opt-in audit log
(options.audit_log) gets a line per generation with its counts and citations, never its text.
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from olifant_mlx.drafters.learning import Learning
from olifant_mlx.drafters.prediction import prediction_counts
from olifant_mlx.drafters.registry import parse_spec
from olifant_mlx.engine.batch import BATCH_PREFILL_CHUNK
from olifant_mlx.engine.cache import PREFILL_CHUNK
from olifant_mlx.engine.loop import generate_steps, model_vocab_size
from olifant_mlx.engine.options import GenerationOptions, OptionsError
from olifant_mlx.engine.request import Chat, ContextError, Request, drafting, encode, plan, sources_library
from olifant_mlx.engine.stats import Stats, Step

__all__ = ["Chat", "ContextError", "GenerationOptions", "OptionsError", "Request", "Response", "Result",
           "Session", "StopScanner", "split_segments", "step_kinds"]


PROVENANCE = ("accepted", "correction", "bonus", "plain")


def step_kinds(step: Step) -> list:
    """The provenance of each token a Step emitted: an accepted draft, the verifier's
    correction of a rejected draft, its bonus token after all drafts were accepted, or a
    plain token (nothing was drafted)."""
    kinds = ["accepted"] * step.accepted
    for _ in step.emitted[step.accepted:]:
        if not step.drafted:
            kinds.append("plain")
        elif step.accepted >= len(step.drafted):
            kinds.append("bonus")
        else:
            kinds.append("correction")
    return kinds


def split_segments(segments, n: int):
    """(the first n characters, the rest) of [(text, provenance)] segments."""
    head, tail = [], []
    for text, kind in segments:
        if n >= len(text):
            head.append((text, kind))
            n -= len(text)
        elif n > 0:
            head.append((text[:n], kind))
            tail.append((text[n:], kind))
            n = 0
        else:
            tail.append((text, kind))
    return head, tail


class StopScanner:
    """Cuts streamed text at the first stop sequence, holding back only text that could be
    the beginning of one (so no part of a stop sequence is ever shown)."""

    def __init__(self, stops):
        self.stops = tuple(stops)
        self.pending = []

    def feed(self, segments):
        """(segments safe to show, whether a stop sequence was reached)."""
        if not self.stops:
            return segments, False
        self.pending += segments
        text = "".join(t for t, _ in self.pending)
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            shown, _ = split_segments(self.pending, min(hits))
            self.pending = []
            return shown, True
        hold = max((n for s in self.stops for n in range(min(len(s) - 1, len(text)), 0, -1)
                    if text.endswith(s[:n])), default=0)
        shown, self.pending = split_segments(self.pending, len(text) - hold)
        return shown, False

    def flush(self):
        shown, self.pending = self.pending, []
        return shown


@dataclass
class Response:
    """One verifier pass, as text. The last one of a generation has `finish_reason` set
    ("eos", "max_tokens", "stop" for a stop sequence, "verbatim" when the verbatim guard
    stopped it, or "stopped" when asked to) and, when the session has a meter, the `energy`.
    With a sources library (options.sources, or the drafter's library): `sources`, the
    provenance.Source spans this pass closed (the last response: all still open), and
    `verbatim`, the Source of a run that has just gone past options.max_verbatim (once a run)."""
    text: str                       # new text since the previous response
    segments: list                  # [(text, provenance)] making up `text`
    tokens: list                    # token ids emitted by this pass
    step: Step | None
    stats: Stats                    # running totals (the same object throughout)
    finish_reason: str | None = None
    energy: object = None           # an energy Window (final response, with a meter)
    sources: list = dataclasses.field(default_factory=list)
    verbatim: object = None         # a provenance.Source: the guard tripped in this pass
    precedents: object = None       # the precedents.Precedents the prompt was given (options.precedents)


@dataclass
class Result:
    text: str
    tokens: list
    stats: Stats
    finish_reason: str
    energy: object = None
    sources: list = dataclasses.field(default_factory=list)     # every provenance.Source, by start
    precedents: object = None       # the precedents.Precedents the prompt was given, if any


class Decoding:
    """A generation's text as it streams: each pass's tokens detokenized with their provenance,
    the space before a continuation's first word kept, the text cut at a stop sequence."""

    def __init__(self, verifier, request: Request):
        self.verifier, self.ids = verifier, request.ids
        self.detok = verifier.detokenizer()
        self.stops = StopScanner(request.options.stop)
        self.lead = request.continuation        # the first text: check its space
        self.tokens = []

    def add(self, step: Step) -> list:
        """The [(text, provenance)] segments of a pass."""
        self.tokens.extend(step.emitted)
        segments = []
        for t, kind in zip(step.emitted, step_kinds(step)):
            self.detok.add_token(t)
            piece = self.detok.last_segment        # reading it clears it (mlx-lm)
            if piece:
                segments.append((piece, kind))
        if self.lead and segments:
            self.lead = False
            segments = keep_leading_space(self.verifier, self.ids, self.tokens, segments)
        return segments

    def end(self, segments, reason, stats):
        """(the segments safe to show, the finish reason): the rest of the text at the end,
        "stop" at a stop sequence."""
        if reason is not None:
            self.detok.finalize()
            piece = self.detok.last_segment
            if piece:
                segments.append((piece, segments[-1][1] if segments else "plain"))
        segments, hit = self.stops.feed(segments)
        if hit:
            reason = stats.stop_reason = "stop"
        elif reason is not None:
            segments += self.stops.flush()
        return segments, reason


def keep_leading_space(verifier, ids, tokens, segments):
    """The first segments with the space before the first word put back when decoding the end
    of the prompt with the output shows one that the detokenizer dropped."""
    decode = getattr(verifier.identity, "decode", None)
    if decode is None:
        return segments
    context = [t for t in ids[-4:] if t != verifier.bos_id]
    before, joined = decode(context), decode(context + tokens)
    text = segments[0][0]
    if joined.startswith(before) and joined[len(before):len(before) + 1] == " " \
            and not text.startswith(" ") and joined[len(before):].lstrip(" ")[:1] == text[:1]:
        return [(" " + text, segments[0][1])] + segments[1:]
    return segments


class Guard:
    """The copied spans a generation's passes close, and the verbatim guard's trip: reported
    once a run (a tracker None: nothing is tracked)."""

    def __init__(self, tracker):
        self.tracker, self.guarded = tracker, -1

    def feed(self, emitted) -> tuple:
        """(the Sources this pass closed, the Source of a run just gone past max_verbatim)."""
        if self.tracker is None:
            return [], None
        found, trip = self.tracker.feed(emitted), self.tracker.guard_tripped()
        if trip is not None and self.tracker.open_start == self.guarded:
            trip = None
        elif trip is not None:
            self.guarded = self.tracker.open_start
        return found, trip

    def close(self) -> list:
        return self.tracker.close() if self.tracker is not None else []


class Session:
    """A verifier with what outlives one generation (the default drafter and options, the
    meter, the opt-in history, what drafting learns), turning Requests into streams of
    Responses. Generations on one Session may run at the same time (streams stepped in turn):
    each drafts with a state of its own (drafters.base: `open`), and what they learn for the
    ones after them — acceptance estimates, the verifier's pass-cost fits — goes through
    `learning` (drafters.learning.Learning: one lock; `learning.frozen` keeps every request's
    drafting exactly what it would be alone). The options' `lead` (KV cache, after a pass that
    ended with the verifier's correction): "auto" decides per pass whether the correction
    leads the next pass with the drafts after it or is fed alone (engine.costs.LeadRule,
    planning with the options' `pass_cost`, else the fit kept in `learning`); True always
    leads; False keeps the older rule (the correction held back for the next step's free
    check), for measuring."""

    def __init__(self, verifier, drafter=None, options: GenerationOptions | None = None,
                 meter=None):
        self.verifier = verifier
        self.vocab_size = model_vocab_size(verifier.model)   # once: the engine checks ids against it
        self.options = options or GenerationOptions()
        self.learning = Learning()     # what generations learn for the ones after them
        self.meter = meter
        self.shard = getattr(verifier, "shard", None)   # a sharded verifier (engine.distributed)
        self.history = None
        if self.options.history:
            from olifant_mlx.drafters.history import SessionHistory

            ident = verifier.identity
            self.history = SessionHistory(self.options.history, ident.digest, ident.vocab_size)
        if drafter is None:            # the options' drafter (a spec), else plain decoding
            drafter = self.options.draft or "none"
        self.drafting = drafting(drafter, verifier.identity, self.history)   # the default drafter
        self.grammars = None           # structured.Grammars: compiled schemas, made when one is asked for

    @property
    def lead(self):
        """The default options' lead rule ("auto", True or False)."""
        return self.options.lead

    @property
    def drafter(self):
        return self.drafting.drafter

    @property
    def spec(self):
        """The default drafter's DrafterSpec (what `auto` chose), None for a drafter object."""
        return self.drafting.spec

    @property
    def requested(self):
        """The default drafter as it was asked for (a spec's text, a DrafterSpec, an object)."""
        return self.drafting.requested

    def with_drafter(self, drafter) -> Session:
        """This Session with another default drafter (a spec, a drafter object or a Drafting;
        `auto` resolved for this verifier), sharing the verifier (still loaded), meter, history
        and learning; this one is left as it is."""
        other = copy.copy(self)
        other.drafting = drafting(drafter, self.verifier.identity, self.history)
        return other

    def sources_library(self, opts: GenerationOptions | None = None) -> str | None:
        """The library the output's provenance is reported from with these options and the
        default drafter (engine.request.sources_library)."""
        return sources_library(opts or self.options, self.drafting)

    def prompt_for(self, text: str, system_prompt: str | None = None,
                   chat_template: bool = True, template_kwargs=None):
        """What to generate from for a user's text: a Chat when the verifier has a chat
        template (an instruct model) and `chat_template` is not turned off, else the text."""
        if chat_template and self.verifier.has_chat_template:
            return Chat.of(text, system_prompt, template_kwargs)
        return text

    def encode(self, prompt) -> list:
        """Prompt ids, as a Request is encoded (engine.request.encode)."""
        return encode(self.verifier, prompt)

    def plan(self, prompt, options: GenerationOptions | None = None, drafter=None, cache=None,
             continuation: bool | None = None, fit_max_tokens: bool = False, prediction=None) -> Request:
        """The Request for `prompt` (text, token ids or a Chat) on this Session: its default
        options and drafter unless given (`drafter`: a spec, built here with `auto` resolved for
        this verifier, a drafter object or a Drafting; without one, options whose `draft` asks
        for another drafter than the default one draft with that one: `asks_for_another`);
        engine.request.plan says the rest."""
        if drafter is None and self.asks_for_another(options):
            drafter = options.draft
        drafted = self.drafting if drafter is None else drafting(drafter, self.verifier.identity, self.history)
        return plan(self.verifier, prompt, options or self.options, drafted, cache, continuation,
                    fit_max_tokens, prediction, self.grammar)

    def asks_for_another(self, options: GenerationOptions | None) -> bool:
        """Whether `options.draft` names another drafter than this Session's default one, as it
        was asked for (a spec) or as the Session's own options name it (None names none)."""
        if options is None or options.draft is None:
            return False
        asked = self.requested if isinstance(self.requested, str) else getattr(self.requested, "text", None)
        default = {parse_spec(t, check_files=False).text for t in (asked, self.options.draft) if t}
        return parse_spec(options.draft, check_files=False).text not in default

    def grammar(self, schema: str, eos_ids):
        """`schema` (a JSON schema's text) compiled for this verifier's tokenizer (structured.Grammars);
        a SchemaError (a ValueError) when the schema is not supported."""
        if self.grammars is None:
            from olifant_mlx.structured import Grammars

            self.grammars = Grammars(self.verifier.tokenizer, self.vocab_size or self.verifier.identity.vocab_size)
        return self.grammars.get(schema, tuple(eos_ids))

    def stream(self, request: Request, should_stop: Callable[[], bool] | None = None,
               on_prefill: Callable[[int, int], None] | None = None, batched: bool = False) -> Iterator[Response]:
        """Run a Request (`plan` makes one): one Response per verifier pass. `should_stop()` is
        asked after every pass; `on_prefill(done, total)` reports the prefill. The request's
        `cache` (engine.cache's PromptCache, a conversation's; or PrefixCache, a server's): the
        KV regime starts from the cache of an earlier generation with this session and prefills
        only the prompt's tokens past the prefix they share; the output is the same. With a
        `prediction`, the last Response's stats count its accepted and rejected tokens
        (`prediction`). Streams of several Requests may be stepped in turn: each drafts with a
        state of its own. `batched`: its verifier passes come between the Responses, as
        engine.forward's events, for an engine.batch.Batch to run with other streams' passes
        (not on a sharded verifier)."""
        if not isinstance(request, Request):
            raise TypeError(f"Session.stream runs a Request, not a {type(request).__name__}: plan one "
                            f"first (session.plan(prompt, options, drafter=...))")
        if batched and self.shard is not None:
            raise ValueError("a sharded verifier's passes cannot be batched")
        responses = self._stream(request, should_stop, on_prefill, batched)
        if request.options.audit_log:       # a line when it ends: counts and citations, never its text
            from olifant_mlx.audit import audited, open_log

            responses = audited(open_log(request.options.audit_log), request, responses, key=None)
        return responses if self.shard is None else self._to_the_end(responses)

    def _to_the_end(self, responses):
        """A sharded generation is a sequence of collectives every rank joins: abandoned half
        way on rank 0, the other ranks would wait for passes that never come. So it ends the run
        with that said; `should_stop` is the way to end a generation early."""
        for r in responses:
            try:
                yield r
            except GeneratorExit:
                if r.finish_reason is None:
                    self.shard.fail("a generation on the sharded verifier was abandoned before its "
                                    "end: every rank must run it to the end (end it early with "
                                    "should_stop)")
                raise

    def _stream(self, request: Request, should_stop, on_prefill, batched=False):
        opts, ids, used = request.options, list(request.ids), request.precedents
        stats = Stats()
        if self.shard is not None:      # rank 0 announces the job the other ranks run with it
            should_stop = self.shard.begin(ids, opts, should_stop)
        start = self.meter.mark() if self.meter is not None else None
        text = Decoding(self.verifier, request)
        ident = self.verifier.identity
        guard = Guard(request.tracker(ident if hasattr(ident, "decode") else None))
        steps = self._steps(ids, request.drafter, opts, stats, on_prefill, request.eos_ids, request.cache,
                            request.constraint(), batched)
        for step in steps:
            if not isinstance(step, Step):      # a pass for the batch to run (batched)
                yield step
                continue
            segments = text.add(step)
            found, trip = guard.feed(step.emitted)
            reason = step.stop_reason or None
            if reason is None and trip is not None and opts.verbatim_action == "stop":
                reason = stats.stop_reason = "verbatim"
            if reason is None and should_stop is not None and should_stop():
                reason = stats.stop_reason = "stopped"
            segments, reason = text.end(segments, reason, stats)
            energy = None
            if reason is not None:
                energy = self._finish(ids, text.tokens, stats, request.drafter, start, request.prediction)
                found += guard.close()
            yield Response("".join(s for s, _ in segments), segments, list(step.emitted), step,
                           stats, reason, energy, found, trip, used)
            if reason is not None:
                steps.close()
                return
        # max_tokens == 0: no pass at all
        stats.stop_reason = "max_tokens"
        yield Response("", [], [], None, stats, "max_tokens",
                       self._finish(ids, [], stats, request.drafter, start, request.prediction), precedents=used)

    def _steps(self, ids, drafter, opts, stats, on_prefill, eos_ids, cache=None, constraint=None, batched=False):
        """The engine loop for one generation (a Step per verifier pass; batched, its passes
        too); a sharded verifier keeps no cache between generations (every rank would have to
        keep the same one)."""
        v = self.verifier
        return generate_steps(v.model, ids, drafter, opts, eos_ids=eos_ids, bos_id=v.bos_id,
                              stats=stats, on_prefill=on_prefill, vocab_size=self.vocab_size,
                              shared=self.shard, prompt_cache=cache if self.shard is None else None,
                              constraint=constraint, learning=self.learning, batched=batched,
                              prefill_chunk=BATCH_PREFILL_CHUNK if batched else PREFILL_CHUNK)

    def _finish(self, ids, tokens, stats, drafter, start, prediction=()):
        """Energy of the generation; the opt-in history remembers prompt and output; a
        prediction's accepted and rejected tokens (OpenAI's counts)."""
        stats.extra.update(verifier=self.verifier.name, drafter=drafter.name)
        if prediction:
            accepted, rejected = prediction_counts(prediction, tokens)
            stats.extra["prediction"] = {"tokens": len(prediction), "accepted": accepted, "rejected": rejected}
        if self.shard is not None:
            stats.extra["sharded"] = self.shard.describe()
        meter = self.meter
        if self.history is not None:
            bos = self.verifier.bos_id
            self.history.append((ids[1:] if ids[:1] == [bos] else ids) + tokens)
        return meter.between(start, meter.mark()) if meter is not None else None

    def generate(self, prompt, options: GenerationOptions | None = None, drafter=None,
                 should_stop=None, cache=None, continuation: bool | None = None, prediction=None) -> Result:
        """The whole generation at once: a Request, or a prompt planned first (`plan`, with the
        same arguments), streamed to its end."""
        if isinstance(prompt, Request):
            if (options, drafter, continuation, cache, prediction) != (None,) * 5:
                raise TypeError("a Request carries its options, drafter, continuation, cache and prediction")
            request = prompt
        else:
            request = self.plan(prompt, options, drafter, cache, continuation, prediction=prediction)
        text, tokens, last, sources = [], [], None, []
        for r in self.stream(request, should_stop):
            text.append(r.text)
            tokens.extend(r.tokens)
            sources += r.sources
            last = r
        return Result("".join(text), tokens, last.stats, last.finish_reason, last.energy, sources, last.precedents)

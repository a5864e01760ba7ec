"""The text-level API every surface stands on (mlx-lm's `stream_generate` -> `GenerationResponse`).

    verifier = load_verifier("smollm2-135m")
    session = Session(verifier, drafter="adaptive:hybrid:models/legal.olif",
                      options=GenerationOptions(k=8, max_tokens=200))
    for r in session.stream(Chat.of("Draft a confidentiality clause.")):   # or plain text
        print(r.text, end="")              # r.segments: the same text with token provenance
    r.stats, r.finish_reason, r.energy     # the last response carries the totals

A prompt is text (continued as it is), token ids, or a `Chat` (messages formatted by the
verifier's chat template); `session.prompt_for(text)` makes a Chat for an instruct model and
leaves text alone for a base model, the way mlx-lm's generate does.

A `Session` holds one verifier and one drafter; changing the drafter (`set_drafter`) never
reloads the verifier. `GenerationOptions` (engine.options) is validated once, where it is made. Prompts and
outputs stay in memory: only an opt-in history file (options.history) is ever written.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from olifant_mlx.drafters.costs import PassCost
from olifant_mlx.drafters.base import Drafter, as_drafter
from olifant_mlx.drafters.auto import resolve_auto
from olifant_mlx.drafters.registry import DrafterSpec, build_drafter, parse_spec, uses_history
from olifant_mlx.engine.loop import generate_steps, model_vocab_size
from olifant_mlx.engine.options import GenerationOptions, OptionsError
from olifant_mlx.engine.stats import Stats, Step


class ContextError(ValueError):
    """A prompt that, with the tokens asked for, does not fit the verifier's context."""


@dataclass(frozen=True)
class Chat:
    """A conversation: messages ({"role": "system"|"user"|"assistant", "content": text}) that
    the verifier's chat template formats, ending ready for the assistant's answer;
    `template_kwargs` are extra arguments for the template (mlx-lm's --chat-template-config)."""
    messages: tuple
    template_kwargs: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for m in self.messages:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) or \
                    m.get("role") not in ("system", "user", "assistant", "tool"):
                raise OptionsError(f"a chat message needs a role (system, user, assistant) and "
                                   f"text content, got {m!r}")

    @classmethod
    def of(cls, text: str, system_prompt: str | None = None, template_kwargs=None) -> Chat:
        msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return cls(tuple(msgs + [{"role": "user", "content": text}]), dict(template_kwargs or {}))

    def then(self, role: str, content: str) -> Chat:
        return Chat(self.messages + ({"role": role, "content": content},), self.template_kwargs)


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


class Session:
    """A verifier, a drafter and default options, turning prompts into streams of Responses.
    The options' `lead` (KV cache, after a pass that ended with the verifier's correction):
    "auto" decides per pass whether the correction leads the next pass with the drafts after
    it or is fed alone (engine.costs.LeadRule, planning with the options' `pass_cost`, else
    `lead_cost`, the verifier's pass-cost curve fitted from this session's passes); True
    always leads; False keeps the older rule (the correction held back for the next step's
    free check), for measuring."""

    def __init__(self, verifier, drafter="none", options: GenerationOptions | None = None,
                 meter=None):
        self.verifier = verifier
        self.vocab_size = model_vocab_size(verifier.model)   # once: the engine checks ids against it
        self.options = options or GenerationOptions()
        self.lead_cost = None          # fitted from the passes, for options without a pass_cost
        self.meter = meter
        self.shard = getattr(verifier, "shard", None)   # a sharded verifier (engine.distributed)
        self.history = None
        if self.options.history:
            from olifant_mlx.drafters.history import SessionHistory

            ident = verifier.identity
            self.history = SessionHistory(self.options.history, ident.digest, ident.vocab_size)
        self.spec = None
        self.drafter = None
        self.set_drafter(drafter)

    @property
    def lead(self):
        """The default options' lead rule ("auto", True or False)."""
        return self.options.lead

    def set_drafter(self, drafter) -> Drafter:
        """Use another drafter: a spec (text or DrafterSpec) or a Drafter object; the
        verifier stays loaded. `auto` is resolved here, for this verifier: `self.spec` is what
        it chose, `self.requested` what was asked for."""
        self.requested = drafter
        if isinstance(drafter, (str, DrafterSpec)):
            spec = drafter if isinstance(drafter, DrafterSpec) else parse_spec(drafter)
            if spec.kind == "auto":
                spec = resolve_auto(self.verifier.identity)
            if self.history is not None and not uses_history(spec):
                raise OptionsError("a session history is read only by a hybrid drafter: use "
                                   "--draft hybrid:PATH or adaptive:hybrid:PATH", "history")
            self.spec = spec
            drafter = build_drafter(spec, self.verifier.identity, self.history)
        else:
            self.spec = None
        self.drafter = as_drafter(drafter)
        return self.drafter

    def sources_library(self, opts: GenerationOptions | None = None) -> str | None:
        """The library the output's provenance is reported from: options.sources, else the
        library the drafter drafts from (`library:NAME`, or what `auto` chose), else None."""
        opts = opts or self.options
        if opts.sources:
            return opts.sources
        from olifant_mlx.provenance import library_of_spec

        return library_of_spec(self.spec)

    def tracker(self, opts: GenerationOptions | None = None, precedents=None):
        """A provenance.SourceTracker for one generation with these options, or None (no
        library). OptionsError for a library missing or built for another tokenizer. With
        `precedents` (and no options.sources) the spans are found in the passages the prompt
        was given."""
        opts = opts or self.options
        ident = self.verifier.identity
        decode = ident if hasattr(ident, "decode") else None
        if precedents is not None and precedents.passages and not opts.sources:
            from olifant_mlx.precedents import provenance_index
            from olifant_mlx.provenance import SourceTracker

            return SourceTracker(provenance_index(precedents, ident), opts.min_source_tokens, opts.max_verbatim,
                                 opts.matter, tokenizer=decode)
        name = self.sources_library(opts)
        if name is None:
            if opts.max_verbatim is not None:
                raise OptionsError("--max-verbatim needs a library to compare with: --sources NAME "
                                   "or --draft library:NAME", "max_verbatim")
            return None
        from olifant_mlx.library import LibraryError
        from olifant_mlx.provenance import SourceTracker, index_of

        try:
            index = index_of(name)
        except LibraryError as e:
            raise OptionsError(f"--sources {name}: {e}", "sources") from None
        if not index.library.fits(ident):
            raise OptionsError(f"--sources {name}: the library was built for another tokenizer than "
                               f"{self.verifier.name}'s: build one with `library build NEW_NAME FOLDER --model "
                               f"{self.verifier.name}`",
                               "sources")
        return SourceTracker(index, opts.min_source_tokens, opts.max_verbatim, opts.matter, tokenizer=decode)

    def with_precedents(self, prompt, opts: GenerationOptions):
        """(the prompt with its precedents, the precedents.Precedents), or (prompt, None) when
        the options ask for none. The request is the query; the budget is options'
        precedent_tokens, else what the verifier's context leaves (at most DEFAULT_BUDGET)."""
        if not (opts.precedents or opts.precedent_files):
            return prompt, None
        from olifant_mlx import precedents

        query = precedents.query_of(prompt)
        budget = opts.precedent_tokens
        if budget is None:
            limit = self.verifier.context_length
            room = limit - len(self.encode(prompt)) - opts.max_tokens - 32 if limit else precedents.DEFAULT_BUDGET
            if room <= precedents.LABEL_TOKENS:
                raise ContextError(f"{self.verifier.name}'s context ({limit:,} tokens) leaves no room for "
                                   f"precedents beside the prompt and {opts.max_tokens:,} tokens of answer: "
                                   f"ask for fewer tokens (--max-tokens)")
            budget = min(precedents.DEFAULT_BUDGET, room)
        used = precedents.gather(self.verifier.identity, query, opts.precedents, opts.precedent_files,
                                 budget, opts.matter)
        return precedents.with_block(prompt, used), used

    def prompt_for(self, text: str, system_prompt: str | None = None,
                   chat_template: bool = True, template_kwargs=None):
        """What to generate from for a user's text: a Chat when the verifier has a chat
        template (an instruct model) and `chat_template` is not turned off, else the text."""
        if chat_template and self.verifier.has_chat_template:
            return Chat.of(text, system_prompt, template_kwargs)
        return text

    def encode(self, prompt) -> list:
        """Prompt ids: text is encoded as the verifier reads it, a Chat through its chat
        template; a list of ids is taken as is."""
        if isinstance(prompt, Chat):
            return self.verifier.chat_ids(prompt.messages, prompt.template_kwargs)
        if isinstance(prompt, str):
            return self.verifier.encode(prompt)
        return [int(t) for t in prompt]

    def fit_context(self, ids: list, opts: GenerationOptions) -> list:
        """The prompt checked against the verifier's context before any prefill: too long is
        a ContextError with the numbers, or with `truncate` its tail (BOS kept)."""
        limit = self.verifier.context_length
        if not limit or len(ids) + opts.max_tokens <= limit:
            return ids
        room = limit - opts.max_tokens
        if opts.truncate and room >= 2:
            bos = [ids[0]] if ids and ids[0] == self.verifier.bos_id else []
            return bos + ids[len(ids) - (room - len(bos)):]
        raise ContextError(
            f"the prompt is {len(ids):,} tokens and {opts.max_tokens:,} more are asked for, but "
            f"{self.verifier.name}'s context holds {limit:,}: shorten the prompt, ask for fewer "
            f"tokens (--max-tokens), or --truncate to keep the prompt's last "
            f"{max(room, 0):,} tokens")

    def eos_ids(self, opts: GenerationOptions) -> tuple:
        extra = tuple(self.verifier.token_id(t) for t in opts.extra_eos_tokens)
        return tuple(self.verifier.eos_ids) + extra

    def stream(self, prompt, options: GenerationOptions | None = None, drafter=None,
               should_stop: Callable[[], bool] | None = None,
               on_prefill: Callable[[int, int], None] | None = None,
               continuation: bool | None = None, cache=None, precedents=None) -> Iterator[Response]:
        """Generate from `prompt` (text or ids), one Response per verifier pass. `drafter`
        overrides the session's for this call; `should_stop()` is asked after every pass.
        `cache` (engine.cache's PromptCache, a conversation's; or PrefixCache, a server's): the
        KV regime starts from the cache of an earlier generation with this session and prefills
        only the prompt's tokens past the prefix they share; the output is the same.
        `continuation=True` (a prompt whose text the output is appended to: a raw completion, a
        document being continued, an answer begun): the output keeps the space before its first
        word, which a streaming detokenizer drops at the start of a generation, so that prompt +
        output is the verifier's decoding of both; None (the default): True for a text prompt,
        False for a Chat or token ids (say which for ids). `precedents`: the
        precedents.Precedents already put into a prompt given as ids (with_precedents), for the
        answer and its provenance; else the options' precedents are gathered here."""
        if continuation is None:
            continuation = isinstance(prompt, str)
        responses = self._stream(prompt, options, drafter, should_stop, on_prefill, continuation, cache,
                                 precedents)
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

    def _stream(self, prompt, options, drafter, should_stop, on_prefill, continuation, cache=None,
                precedents=None):
        opts = options or self.options
        drafter = self.drafter if drafter is None else as_drafter(drafter)
        prompt, used = (prompt, precedents) if precedents is not None else self.with_precedents(prompt, opts)
        ids = self.fit_context(self.encode(prompt), opts)
        eos = self.eos_ids(opts)
        v = self.verifier
        detok = v.detokenizer()
        stops = StopScanner(opts.stop)
        stats = Stats()
        if self.shard is not None:      # rank 0 announces the job the other ranks run with it
            should_stop = self.shard.begin(ids, opts, should_stop)
        meter = self.meter
        start = meter.mark() if meter is not None else None
        tokens = []
        tracker = self.tracker(opts, used)
        guarded = -1                    # the open run the guard last reported (once a run)
        steps = self._steps(ids, drafter, opts, stats, on_prefill, eos, cache)
        last = None
        lead = continuation and not isinstance(prompt, Chat)    # the first text: check its space
        for step in steps:
            tokens.extend(step.emitted)
            segments = []
            for t, kind in zip(step.emitted, step_kinds(step)):
                detok.add_token(t)
                piece = detok.last_segment        # reading it clears it (mlx-lm)
                if piece:
                    segments.append((piece, kind))
            if lead and segments:
                lead = False
                segments = self._keep_leading_space(ids, tokens, segments)
            found, trip = [], None
            if tracker is not None:
                found = tracker.feed(step.emitted)
                trip = tracker.guard_tripped()
                if trip is not None and tracker.open_start == guarded:
                    trip = None
                elif trip is not None:
                    guarded = tracker.open_start
            reason = step.stop_reason or None
            if reason is None and trip is not None and opts.verbatim_action == "stop":
                reason = stats.stop_reason = "verbatim"
            if reason is None and should_stop is not None and should_stop():
                reason = stats.stop_reason = "stopped"
            if reason is not None:
                detok.finalize()
                piece = detok.last_segment
                if piece:
                    segments.append((piece, segments[-1][1] if segments else "plain"))
            segments, hit = stops.feed(segments)
            if hit:
                reason = stats.stop_reason = "stop"
            elif reason is not None:
                segments += stops.flush()
            if reason is not None:
                last = self._finish(ids, tokens, stats, drafter, start)
                if tracker is not None:
                    found += tracker.close()
            yield Response("".join(s for s, _ in segments), segments, list(step.emitted), step,
                           stats, reason, last, found, trip, used)
            if reason is not None:
                steps.close()
                return
        # max_tokens == 0: no pass at all
        stats.stop_reason = "max_tokens"
        yield Response("", [], [], None, stats, "max_tokens", self._finish(ids, tokens, stats, drafter, start),
                       precedents=used)

    def _keep_leading_space(self, ids, tokens, segments):
        """The first segments with the space before the first word put back when decoding
        the end of the prompt with the output shows one that the detokenizer dropped."""
        decode = getattr(self.verifier.identity, "decode", None)
        if decode is None:
            return segments
        context = [t for t in ids[-4:] if t != self.verifier.bos_id]
        before, joined = decode(context), decode(context + tokens)
        text = segments[0][0]
        if joined.startswith(before) and joined[len(before):len(before) + 1] == " " \
                and not text.startswith(" ") and joined[len(before):].lstrip(" ")[:1] == text[:1]:
            return [(" " + text, segments[0][1])] + segments[1:]
        return segments

    def _steps(self, ids, drafter, opts, stats, on_prefill, eos_ids, cache=None):
        """The engine loop for one generation (a Step per verifier pass); a sharded verifier
        keeps no cache between generations (every rank would have to keep the same one)."""
        v = self.verifier
        if opts.lead == "auto" and opts.pass_cost is None:
            if self.lead_cost is None:
                self.lead_cost = PassCost()        # the verifier's speed outlives one generation
            opts = opts.replace(pass_cost=self.lead_cost)
        return generate_steps(v.model, ids, drafter, opts, eos_ids=eos_ids, bos_id=v.bos_id,
                              stats=stats, on_prefill=on_prefill, vocab_size=self.vocab_size,
                              shared=self.shard, prompt_cache=cache if self.shard is None else None)

    def _finish(self, ids, tokens, stats, drafter, start):
        """Energy of the generation; the opt-in history remembers prompt and output."""
        stats.extra.update(verifier=self.verifier.name, drafter=drafter.name)
        if self.shard is not None:
            stats.extra["sharded"] = self.shard.describe()
        meter = self.meter
        if self.history is not None:
            bos = self.verifier.bos_id
            self.history.append((ids[1:] if ids[:1] == [bos] else ids) + tokens)
        return meter.between(start, meter.mark()) if meter is not None else None

    def generate(self, prompt, options: GenerationOptions | None = None, drafter=None,
                 should_stop=None, cache=None, continuation: bool | None = None) -> Result:
        """The whole generation at once (`continuation` as in stream)."""
        text, tokens, last, sources = [], [], None, []
        for r in self.stream(prompt, options, drafter, should_stop, cache=cache, continuation=continuation):
            text.append(r.text)
            tokens.extend(r.tokens)
            sources += r.sources
            last = r
        return Result("".join(text), tokens, last.stats, last.finish_reason, last.energy, sources, last.precedents)

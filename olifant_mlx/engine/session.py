"""The text-level API every surface stands on (mlx-lm's `stream_generate` -> `GenerationResponse`).

    verifier = load_verifier("smollm2-135m")
    session = Session(verifier, drafter="adaptive:hybrid:models/legal.olif",
                      options=GenerationOptions(k=8, max_tokens=200))
    for r in session.stream("THE SOFTWARE IS PROVIDED"):
        print(r.text, end="")              # r.segments: the same text with token provenance
    r.stats, r.finish_reason, r.energy     # the last response carries the totals

A `Session` holds one verifier and one drafter; changing the drafter (`set_drafter`) never
reloads the verifier. `GenerationOptions` is validated once, where it is made. Prompts and
outputs stay in memory: only an opt-in history file (options.history) is ever written.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from olifant_mlx.drafters.base import Drafter, as_drafter
from olifant_mlx.drafters.registry import DrafterSpec, build_drafter, parse_spec, uses_history
from olifant_mlx.engine.loop import MAX_K, generate_steps, model_vocab_size
from olifant_mlx.engine.sampling import Sampling
from olifant_mlx.engine.stats import Stats, Step


class OptionsError(ValueError):
    """A generation option out of range; the message names the option, `option` is its field
    (surfaces show their own spelling of it: the CLI its flag)."""

    def __init__(self, message: str, option: str = ""):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class GenerationOptions:
    """Everything that shapes one generation, checked here and nowhere else."""
    k: int = 3                         # draft tokens per step (the maximum, for adaptive)
    max_tokens: int = 256
    kv_cache: bool = True              # False: the uncached regime
    max_kv_size: int | None = None     # a sliding KV window (rotating cache)
    temperature: float = 0.0           # 0: greedy
    top_p: float = 1.0
    seed: int = 0
    history: str | None = None         # opt-in session history file (hybrid drafters)

    def __post_init__(self):
        def bad(option, what):
            raise OptionsError(what, option)

        if not isinstance(self.k, int) or not 0 <= self.k <= MAX_K:
            bad("k", f"k (draft tokens per step) must be a whole number from 0 to {MAX_K}, got {self.k!r}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 0:
            bad("max_tokens", f"max tokens must be a whole number >= 0, got {self.max_tokens!r}")
        if self.max_kv_size is not None and (not isinstance(self.max_kv_size, int)
                                             or self.max_kv_size < 1):
            bad("max_kv_size", f"max KV size must be a whole number of tokens >= 1 (or none), "
                               f"got {self.max_kv_size!r}")
        if not isinstance(self.temperature, (int, float)) or not 0 <= self.temperature < float("inf"):
            bad("temperature", f"temperature must be a number >= 0 (0 is greedy), got {self.temperature!r}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            bad("top_p", f"top-p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.seed, int):
            bad("seed", f"seed must be a whole number, got {self.seed!r}")

    @property
    def sampling(self) -> Sampling | None:
        if self.temperature == 0:
            return None
        return Sampling(float(self.temperature), float(self.top_p), self.seed)

    @property
    def regime(self) -> str:
        return "kv" if self.kv_cache else "uncached"

    def replace(self, **changes) -> GenerationOptions:
        return dataclasses.replace(self, **changes)


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


@dataclass
class Response:
    """One verifier pass, as text. The last one of a generation has `finish_reason` set
    ("eos", "max_tokens" or "stopped") and, when the session has a meter, the `energy`."""
    text: str                       # new text since the previous response
    segments: list                  # [(text, provenance)] making up `text`
    tokens: list                    # token ids emitted by this pass
    step: Step | None
    stats: Stats                    # running totals (the same object throughout)
    finish_reason: str | None = None
    energy: object = None           # an energy Window (final response, with a meter)


@dataclass
class Result:
    text: str
    tokens: list
    stats: Stats
    finish_reason: str
    energy: object = None


class Session:
    """A verifier, a drafter and default options, turning prompts into streams of Responses."""

    def __init__(self, verifier, drafter="none", options: GenerationOptions | None = None,
                 meter=None):
        self.verifier = verifier
        self.vocab_size = model_vocab_size(verifier.model)   # once: the engine checks ids against it
        self.options = options or GenerationOptions()
        self.meter = meter
        self.history = None
        if self.options.history:
            from olifant_mlx.drafters.history import SessionHistory

            ident = verifier.identity
            self.history = SessionHistory(self.options.history, ident.digest, ident.vocab_size)
        self.spec = None
        self.drafter = None
        self.set_drafter(drafter)

    def set_drafter(self, drafter) -> Drafter:
        """Use another drafter: a spec (text or DrafterSpec) or a Drafter object; the
        verifier stays loaded."""
        if isinstance(drafter, (str, DrafterSpec)):
            spec = drafter if isinstance(drafter, DrafterSpec) else parse_spec(drafter)
            if self.history is not None and not uses_history(spec):
                raise OptionsError("a session history is read only by a hybrid drafter: use "
                                   "--draft hybrid:PATH or adaptive:hybrid:PATH", "history")
            self.spec = spec
            drafter = build_drafter(spec, self.verifier.identity, self.history)
        else:
            self.spec = None
        self.drafter = as_drafter(drafter)
        return self.drafter

    def encode(self, prompt) -> list:
        """Prompt ids: text is encoded as the verifier reads it; a list of ids is taken as is."""
        if isinstance(prompt, str):
            return self.verifier.encode(prompt)
        return [int(t) for t in prompt]

    def stream(self, prompt, options: GenerationOptions | None = None, drafter=None,
               should_stop: Callable[[], bool] | None = None,
               on_prefill: Callable[[int, int], None] | None = None) -> Iterator[Response]:
        """Generate from `prompt` (text or ids), one Response per verifier pass. `drafter`
        overrides the session's for this call; `should_stop()` is asked after every pass."""
        opts = options or self.options
        drafter = self.drafter if drafter is None else as_drafter(drafter)
        ids = self.encode(prompt)
        v = self.verifier
        detok = v.detokenizer()
        stats = Stats()
        meter = self.meter
        start = meter.mark() if meter is not None else None
        tokens = []
        steps = self._steps(ids, drafter, opts, stats, on_prefill)
        last = None
        for step in steps:
            tokens.extend(step.emitted)
            segments = []
            for t, kind in zip(step.emitted, step_kinds(step)):
                detok.add_token(t)
                piece = detok.last_segment        # reading it clears it (mlx-lm)
                if piece:
                    segments.append((piece, kind))
            reason = step.stop_reason or None
            if reason is None and should_stop is not None and should_stop():
                reason = stats.stop_reason = "stopped"
            if reason is not None:
                detok.finalize()
                piece = detok.last_segment
                if piece:
                    segments.append((piece, segments[-1][1] if segments else "plain"))
                last = self._finish(ids, tokens, stats, drafter, start)
            yield Response("".join(s for s, _ in segments), segments, list(step.emitted), step,
                           stats, reason, last)
            if reason is not None:
                steps.close()
                return
        # max_tokens == 0: no pass at all
        stats.stop_reason = "max_tokens"
        yield Response("", [], [], None, stats, "max_tokens", self._finish(ids, tokens, stats, drafter, start))

    def _steps(self, ids, drafter, opts, stats, on_prefill):
        """The engine loop for one generation (a Step per verifier pass)."""
        v = self.verifier
        return generate_steps(v.model, ids, drafter, k=opts.k, max_tokens=opts.max_tokens,
                              kv_cache=opts.kv_cache, eos_ids=v.eos_ids,
                              max_kv_size=opts.max_kv_size, bos_id=v.bos_id, stats=stats,
                              sampling=opts.sampling, on_prefill=on_prefill, vocab_size=self.vocab_size)

    def _finish(self, ids, tokens, stats, drafter, start):
        """Energy of the generation; the opt-in history remembers prompt and output."""
        stats.extra.update(verifier=self.verifier.name, drafter=drafter.name)
        meter = self.meter
        if self.history is not None:
            bos = self.verifier.bos_id
            self.history.append((ids[1:] if ids[:1] == [bos] else ids) + tokens)
        return meter.between(start, meter.mark()) if meter is not None else None

    def generate(self, prompt, options: GenerationOptions | None = None, drafter=None,
                 should_stop=None) -> Result:
        """The whole generation at once."""
        text, tokens, last = [], [], None
        for r in self.stream(prompt, options, drafter, should_stop):
            text.append(r.text)
            tokens.extend(r.tokens)
            last = r
        return Result("".join(text), tokens, last.stats, last.finish_reason, last.energy)

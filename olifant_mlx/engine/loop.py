"""Speculative decoding on an mlx-lm verifier (the paper's sections 2.2-2.4).

`generate_steps` yields one `Step` per verifier forward pass. Greedy and exact: a drafted
token is accepted only if it equals the verifier's own choice at its position, so the output
is token for token the verifier's plain output. Two regimes, one class each:

- `CachedVerification`: prefill once. After every pass the verifier's next token is known. When
  the drafter has not yet guessed at that position, it is held back and the first draft is
  checked against it for free (the rejection fast path: a wrong first draft costs one 1-token
  pass, like plain decoding; only a right one pays for the k-token pass). When the drafter's
  guess there was just rejected — a partially accepted pass ends with the verifier's correction
  — a second guess would be the same rejected token, so the correction is emitted at once and
  leads the next pass, with the drafts that follow it (as mlx-lm does): a "led" pass. Or,
  where `LeadRule` expects that to cost more than it saves (first drafts mostly wrong, tokens
  fed not free), the correction is fed alone and the drafts after it get the free check. After
  a multi-token pass the cache is rolled back to the accepted prefix.
- `UncachedVerification`: every step feeds the whole sequence (context + k drafts) in one
  pass; the logits at positions ctx-1 .. ctx+k-1 decide the accepted prefix and give one
  more token (k+1 predictions per pass).

Where the next pass does not depend on the result of the current one, it is queued before that
result is read (`mx.async_eval`, as mlx-lm's generate_step does): plain steps queue the next
1-token pass on the still-unevaluated token, and the 1-token pass after a fast-path rejection
runs while the drafter drafts the next step.

The loop plans with what it is given, not with what it knows of measuring: pass-cost models
(engine.costs, in the options) and, for a sharded verifier, a collective (engine.collective).
Read top to bottom: the two regimes, `generate_steps` and the steps it is made of.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from olifant_mlx.drafters.base import Drafter, as_drafter
from olifant_mlx.drafters.costs import PassCost
from olifant_mlx.engine import cache as kv
from olifant_mlx.engine.collective import Collective
from olifant_mlx.engine.constraint import ForcedDrafts
from olifant_mlx.engine.costs import LEAD_COST, LeadRule
from olifant_mlx.engine.forward import Forward, Proposal, alone
from olifant_mlx.engine.options import MAX_K, GenerationOptions  # noqa: F401  (MAX_K: engine.loop's name too)
from olifant_mlx.engine.sampling import picker
from olifant_mlx.engine.stats import Stats, Step
from olifant_mlx.mlx_setup import mx

EMBEDDING_NAMES = ("embed_tokens", "wte", "tok_embeddings", "word_embeddings")


def _embedding_rows(model) -> int | None:
    """Rows of the model's token embedding (an id at or past them crashes MLX's lookup)."""
    if not hasattr(model, "named_modules"):
        return None
    for name, module in model.named_modules():
        if name.rpartition(".")[2] in EMBEDDING_NAMES and "weight" in module:
            return int(getattr(module, "num_embeddings", None) or module["weight"].shape[0])
    return None


def model_vocab_size(model) -> int | None:
    """How many ids the verifier reads and scores: the smallest of its own `vocab_size`, its
    args' vocab_size and its token embedding's rows; None when none is found (ids unchecked)."""
    args = getattr(model, "args", None)
    found = (getattr(model, "vocab_size", None), getattr(args, "vocab_size", None),
             _embedding_rows(model))
    sizes = [n for n in found if isinstance(n, int) and n > 0]
    return min(sizes) if sizes else None


def _in_vocabulary(drafts, vocab_size):
    """The drafts up to the first id the verifier cannot read: such a draft can never be
    accepted, and feeding it to the model would crash the embedding lookup."""
    if vocab_size is None:
        return drafts
    for i, t in enumerate(drafts):
        if not 0 <= t < vocab_size:
            return drafts[:i]
    return drafts


def _check_prompt(prompt, vocab_size):
    if not prompt:
        raise ValueError("empty prompt: the verifier needs at least one token")
    if vocab_size is None:
        return
    for i, t in enumerate(prompt):
        if not 0 <= t < vocab_size:
            raise ValueError(f"prompt token id {t} at position {i} is outside the verifier's "
                             f"vocabulary (ids 0 to {vocab_size - 1})")


@dataclass
class Verdict:
    """What one pass decided: the tokens to emit, how many drafts were accepted, the
    verifier's own emitted token (correction or bonus), the pass's size, whether it was led by
    the previous pass's correction and whether the next one will be, and the draft the
    verifier rejected, as (position, token), if any."""
    emitted: list
    accepted: int
    own: int | None
    fast_path: bool
    forward_tokens: int
    led: bool = False
    next_led: bool = False
    rejected: tuple | None = None
    queued: bool = False


class CachedVerification:
    """KV-cached regime with the rejection fast path and correction-led passes (see the module
    docstring). The cache always holds the whole sequence but, after a led pass's correction,
    its last token; `lead` False is the older rule (every correction held back for a free
    check of the next draft, which the drafter then usually re-proposes), kept to measure
    against. Its passes are yielded (engine.forward), not run: `start`, `verify` and
    `advance` are generators."""

    def __init__(self, model, prompt, pick, max_kv_size=None, on_prefill=None, lead: bool = True,
                 prompt_cache=None, quantized=None, prefill_chunk: int = kv.PREFILL_CHUNK):
        self.model, self.pick, self.lead = model, pick, lead
        self.prompt, self.on_prefill, self.prefill_chunk = prompt, on_prefill, prefill_chunk
        self.quantized = quantized            # (bits, group size, start) of a quantized KV cache
        self.key = kv.cache_key(model, max_kv_size, quantized)
        layers, self.reused = prompt_cache.take(self.key, prompt) if prompt_cache else (None, 0)
        self.cache = layers if layers is not None else kv.make_cache(model, max_kv_size)
        self.led = False          # the sequence's last token is an emitted correction, not yet fed
        self.to_feed = False      # the token just emitted must be fed to know the next one
        self.waited_s = 0.0       # waiting for a queued pass's token, since the engine last read it
        self._next = self._next_int = None

    def start(self):
        """Prefill the prompt (past what a reused cache holds): the verifier's first token."""
        prompt = self.prompt
        logits = yield from kv.prefill_passes(self.cache, prompt[self.reused:], self.prefill_chunk, self.on_prefill)
        self.requantize()
        self._set_next(logits, len(prompt), prompt)
        self._after_prefill = self._next_int is None   # a wait for the prefill is no 1-token pass

    def _forward(self, tokens):
        """A pass through the cache, yielded: its logits (rows x vocab)."""
        forward = Forward(tokens, self.cache)
        yield forward
        return forward.logits

    # the verifier's next token: lazily computed (mx array) until read
    def _set_next(self, logits, position, context):
        lazy = self.pick.lazy(logits, position, context)
        if lazy is None:
            self._next, self._next_int = None, self.pick(logits, position, context)
        else:
            mx.async_eval(lazy)
            self._next, self._next_int = lazy, None

    @property
    def next_token(self) -> int:
        if self._next_int is None:
            self._next_int = self._await(self._next)
        return self._next_int

    def _await(self, lazy) -> int:
        t = time.perf_counter()
        token = int(lazy.item())
        if not self._after_prefill:
            self.waited_s += time.perf_counter() - t
        self._after_prefill = False
        return token

    def _hold(self, token: int):
        self._next, self._next_int = None, int(token)

    def verify(self, seq, drafts, room: int):
        """The pass for `drafts` after `seq` (a generator of its passes): its Verdict."""
        if self.led:
            return (yield from self._led_pass(seq, drafts))
        if not drafts and room > 1 and self._next_int is None and self.pick.lazy_ok:
            # plain step: queue the next pass on the token before reading it (mlx-lm's overlap;
            # no logits processor here, so the pick needs no context)
            y_lazy = self._next
            logits = yield from self._forward(y_lazy.reshape(1))
            self._set_next(logits[-1], len(seq) + 1, ())
            y = self._await(y_lazy)
            return Verdict([y], 0, y, False, 1, queued=True)
        y = self.next_token
        if not drafts or drafts[0] != y:
            # plain step, or the fast path: the first draft is already known to be wrong
            rejected = (len(seq), drafts[0]) if drafts else None
            self.to_feed = True
            return Verdict([y], 0, y, bool(drafts), 0, rejected=rejected)
        snap = kv.snapshot(self.cache)
        preds = self.pick((yield from self._forward(drafts)), len(seq) + 1, seq + drafts)
        a = 1
        while a < len(drafts) and preds[a - 1] == drafts[a]:
            a += 1
        yield from kv.rollback(self.cache, len(drafts), drafts[:a], snap)
        c = preds[a - 1]
        if a == len(drafts):                       # all accepted: the bonus token is held back
            self._hold(c)
            return Verdict(drafts, a, None, False, len(drafts))
        rejected = (len(seq) + a, drafts[a])
        if not self.lead:                          # the older rule: hold the correction too
            self._hold(c)
            return Verdict(drafts[:a], a, None, False, len(drafts), rejected=rejected)
        self.led = True
        return Verdict(drafts[:a] + [c], a, c, False, len(drafts), next_led=True, rejected=rejected)

    def _led_pass(self, seq, drafts):
        """The correction (seq's last token, not yet fed) and the drafts that follow it, in one
        pass; a pass without drafts just feeds the correction and holds the token after it."""
        feed = [seq[-1]] + drafts
        snap = kv.snapshot(self.cache) if drafts else None
        preds = self.pick((yield from self._forward(feed)), len(seq), seq + drafts)
        a = 0
        while a < len(drafts) and preds[a] == drafts[a]:
            a += 1
        if drafts:
            yield from kv.rollback(self.cache, len(feed), feed[:a + 1], snap)
        c = preds[a]
        if a == len(drafts):                       # all accepted (or none drafted): hold it
            self.led = False
            self._hold(c)
            return Verdict(drafts, a, None, False, len(feed), led=True)
        return Verdict(drafts[:a] + [c], a, c, False, len(feed), led=True, next_led=True,
                       rejected=(len(seq) + a, drafts[a]))

    def requantize(self) -> None:
        if self.quantized is not None and kv.quantize(self.cache, *self.quantized):
            self.quantized = None                 # done: the whole cache is quantized from here on

    def draft_room(self, seq) -> int | None:
        """How many drafts the next pass may take before a quantized cache's switch (None: no
        bound). Plain decoding switches once the cache holds `quantized_kv_start` tokens; a pass
        that fed past that point would compute the tokens after it on the unquantized cache,
        so passes stop there and the switch comes at the same token, as in plain decoding."""
        if self.quantized is None:
            return None
        return max(0, self.quantized[2] - len(seq))   # a led pass's correction is fed first

    def keep(self, prompt_cache, seq) -> None:
        """Give the cache, holding a prefix of `seq`, to `prompt_cache` for the next generation."""
        settled = kv.settle(self.cache, seq)
        if settled is not None:
            prompt_cache.keep(self.key, *settled)

    def advance(self, seq, verdict: Verdict):
        """Know the next token before the next step: from the pass just made, or by feeding
        the token just emitted (a 1-token pass, counted in the verdict; queued, not awaited,
        so that the next draft is made while it runs). A generator of that pass."""
        if not self.to_feed:
            return
        self.to_feed = False
        logits = yield from self._forward(seq[-1:])
        self._set_next(logits[-1], len(seq), seq)
        verdict.forward_tokens = 1
        verdict.queued = self._next_int is None


class UncachedVerification:
    """Uncached regime: the whole sequence and the drafts in one pass, every step."""

    led = False
    waited_s = 0.0

    def __init__(self, model, prompt, pick):
        self.model, self.pick = model, pick

    def start(self):
        return
        yield

    def verify(self, seq, drafts, room: int):
        forward = Forward(seq + drafts, None)
        yield forward
        preds = self.pick(forward.logits[len(seq) - 1:], len(seq), seq + drafts)
        a = 0
        while a < len(drafts) and preds[a] == drafts[a]:
            a += 1
        rejected = (len(seq) + a, drafts[a]) if a < len(drafts) else None
        return Verdict(drafts[:a] + [preds[a]], a, preds[a], False, len(seq) + len(drafts),
                       rejected=rejected)

    def advance(self, seq, verdict: Verdict):
        return
        yield

    def requantize(self) -> None:
        pass

    def draft_room(self, seq) -> None:
        return None


def generate_steps(model, prompt, drafter, options: GenerationOptions, *, eos_ids=(), bos_id: int | None = None,
                   stats: Stats | None = None, on_prefill=None, vocab_size: int | None = None,
                   shared: Collective | None = None, prompt_cache=None, constraint=None, learning=None,
                   batched: bool = False, prefill_chunk: int = kv.PREFILL_CHUNK):
    """Yield a Step per verifier pass until max_tokens or an EOS token (not emitted), as
    `options` say (engine.options.GenerationOptions: k, max_tokens, the KV regime and its
    quantization, sampling, the lead rule and the cost models; `script_options` makes them for
    tests and scripts). Greedy by default; with sampling options the verifier samples (see
    Sampling); the options' logits processors (mlx-lm's: processor(tokens, logits) -> logits)
    shape every choice. `drafter` (None: plain decoding) is shared: the generation drafts with a
    state of its own (`drafter.open`), started from what `learning` (drafters.learning: a
    Session's; None: the drafter's own) kept, where it keeps what it learnt at its end, as the
    lead rule its pass-cost fit; the state sees the prompt without a leading BOS unless it
    `wants_bos`. `vocab_size` (default: found on the model) bounds the ids: a prompt id outside
    it is refused, drafts are cut before one. `lead`: True leads every pass after a correction
    with the drafts that follow it, "auto" a LeadRule decides per pass (planning with
    `pass_cost`, else the fit `learning` kept, else a fresh one), False keeps the older KV rule
    (corrections held back for the next step's free check), for measuring. A drafter that sizes
    its drafts by cost (the adaptive one) plans this generation with `draft_cost` when it is
    set. With `shared` (engine.collective.Collective: a sharded verifier's), the drafts and
    every choice of token are rank 0's, so every rank takes the same passes and rollbacks, and
    every pass after a correction is led (pass times differ between ranks). `prompt_cache` (KV
    regime; engine.cache's PromptCache or PrefixCache) lends an earlier generation's cache: only
    the prompt's tokens past the prefix it shares are prefilled; it goes back at the end (or
    when the generator is closed). `kv_bits` (KV regime) quantizes the cache as mlx-lm does
    (QuantizedKVCache, `kv_group_size`), once it holds `quantized_kv_start` tokens, checked
    between passes. `constraint` (engine.constraint: structured output) masks every choice; each
    pass drafts its forced tokens, then the drafter's (ForcedDrafts). `batched`: the passes are
    yielded too, between the Steps (engine.forward: a Forward to run and a Proposal to plan before
    each pass with drafts), for engine.batch to run with other generations' passes; else each is
    run alone as it comes. `prefill_chunk`: the prompt tokens a prefill pass feeds."""
    events = _generation(model, prompt, drafter, options, eos_ids, bos_id, stats, on_prefill, vocab_size,
                         shared, prompt_cache, constraint, learning, prefill_chunk)
    return events if batched else alone(model, events)


def _generation(model, prompt, drafter, options, eos_ids, bos_id, stats, on_prefill, vocab_size, shared,
                prompt_cache, constraint, learning, prefill_chunk):
    """generate_steps' generation: its Steps, and its passes as engine.forward's events."""
    prompt = [int(t) for t in prompt]
    vocab_size = vocab_size or model_vocab_size(model)
    _check_prompt(prompt, vocab_size)
    drafter = as_drafter(drafter)
    plan_rule = _lead_rule(options, drafter, shared, learning)
    skip = 0 if drafter.wants_bos or bos_id is None or prompt[0] != bos_id else 1
    stats = stats if stats is not None else Stats()
    stats.prompt_tokens = len(prompt)
    if options.max_tokens == 0:
        return
    state = as_drafter(drafter.open(prompt[skip:], learning, options.draft_cost))
    plan = _plan(state, plan_rule, options, eos_ids, skip, vocab_size, shared, constraint, prompt)
    pick = _pick(options, constraint, shared)
    verifier = _verifier(model, prompt, pick, options, options.lead is not False, on_prefill, prompt_cache,
                         prefill_chunk)
    if not options.kv_cache:
        prompt_cache = None                     # nothing to keep: no pass leaves a cache behind
    seq = list(prompt)                      # everything the verifier has seen or will see
    try:
        t0 = time.perf_counter()
        yield from verifier.start()
        stats.prefill_s = time.perf_counter() - t0
        if prompt_cache is not None:
            stats.extra["cached_tokens"] = verifier.reused
        yield from _steps(verifier, plan, seq, stats)
    except GeneratorExit:        # closed between Steps: the cache holds a prefix of seq
        if prompt_cache is not None:
            verifier.keep(prompt_cache, seq)
        raise
    finally:                     # what it learnt goes on to the next generation (a stopped one's too)
        _finish(state, plan_rule if options.pass_cost is None else None, learning)
    if prompt_cache is not None:
        verifier.keep(prompt_cache, seq)


def _pick(options, constraint, shared):
    """The verifier's choice function: the options' sampling and processors, under the
    constraint; rank 0's on every rank of a sharded verifier."""
    pick = picker(options.sampling, options.processors(), constraint)
    return shared.choices(pick) if shared is not None else pick


def _finish(state, fitted: LeadRule | None, learning) -> None:
    """The end of a generation: the drafter's state keeps what it learnt, and the lead rule its
    pass-cost fit (`fitted`: a rule that fitted one of its own), in `learning`."""
    state.finish()
    if fitted is not None and learning is not None:
        learning.keep(LEAD_COST, fitted.cost)


def _plan(state, rule, options, eos_ids, skip, vocab_size, shared, constraint, prompt) -> Plan:
    """The Plan every pass reads: the drafter's state (under a constraint, shared with a sharded
    verifier's ranks), the lead rule and the options' bounds."""
    drafter = _constrained(state, constraint, prompt, skip)
    if shared is not None:
        drafter = shared.drafter(drafter)
    return Plan(drafter, rule, options.k, options.max_tokens, frozenset(int(e) for e in eos_ids),
                skip, vocab_size, options.kv_cache)


def _constrained(drafter, constraint, prompt, skip):
    """The drafter's state, under a constraint (started on the prompt) one that drafts its
    forced tokens first and cuts what it forbids."""
    if constraint is None:
        return drafter
    constraint.start(prompt)
    return ForcedDrafts(drafter, constraint, prompt[:skip])


def script_options(options: GenerationOptions | None = None, **fields) -> GenerationOptions:
    """Options for tests and scripts: `options` with `fields` changed; without options, made
    from the fields with 100 tokens at most and every pass after a correction led (lead=True)."""
    if options is None:
        return GenerationOptions(**{"max_tokens": 100, "lead": True, **fields})
    return options.replace(**fields) if fields else options


def _lead_rule(options, drafter, shared, learning) -> LeadRule | None:
    """The LeadRule that decides each pass after a correction, or None where every such pass
    is led (or, with lead=False, none): a drafter that plans led passes is left to it, and the
    ranks of a sharded verifier must all take the same passes whatever their pass times. It
    plans with the options' pass cost, else the fit `learning` kept (else a fresh one)."""
    rule = None
    if options.lead == "auto":
        cost = options.pass_cost
        if cost is None and learning is not None:
            cost = learning.take((LEAD_COST,), PassCost())
        rule = LeadRule(cost)
    if drafter.plans_led_passes or shared is not None:
        return None
    return rule


def _verifier(model, prompt, pick, options, lead: bool, on_prefill, prompt_cache, prefill_chunk):
    """The regime's verification (its `start` prefills the prompt, KV regime); `lead` False:
    corrections held back (the older KV rule)."""
    if not options.kv_cache:
        return UncachedVerification(model, prompt, pick)
    quantized = (options.kv_bits, options.kv_group_size, options.quantized_kv_start) if options.kv_bits else None
    return CachedVerification(model, prompt, pick, options.max_kv_size, on_prefill, lead, prompt_cache,
                              quantized, prefill_chunk)


@dataclass(frozen=True)
class Plan:
    """One generation's choices as every pass reads them: the drafter, the lead rule (None:
    lead every pass after a correction), k, the token budget, the EOS ids, how many leading
    tokens the drafter does not see (a BOS), the verifier's vocabulary size, the regime."""
    drafter: Drafter
    rule: LeadRule | None
    k: int
    max_tokens: int
    eos: frozenset
    skip: int
    vocab_size: int | None
    kv_cache: bool


def _drafts(plan: Plan, verifier, seq) -> list:
    """This pass's drafts: the drafter's, cut to k, before the first id outside the vocabulary
    and at a quantized cache's switch; none after a correction the lead rule feeds alone (the
    next step checks them for free)."""
    drafts = [int(t) for t in plan.drafter.draft(seq[plan.skip:], plan.k)[:plan.k]] if plan.k else []
    drafts = _in_vocabulary(drafts, plan.vocab_size)
    room = verifier.draft_room(seq)
    if room is not None:
        drafts = drafts[:room]
    if verifier.led and drafts and plan.rule is not None and not plan.rule.leads(len(drafts)):
        return []
    return drafts


def _cut(emitted, eos, room):
    """Emitted tokens cut at the first EOS (not emitted) or at `room`, whichever comes first;
    (kept, stop reason). An EOS past the room is never reached: the drafts a pass verifies may
    run past max_tokens, and plain decoding stops at max_tokens first."""
    for i, t in enumerate(emitted[:room]):
        if t in eos:
            return emitted[:i], "eos"
    if len(emitted) >= room:
        return emitted[:room], "max_tokens"
    return emitted, ""


def _steps(verifier, plan: Plan, seq, stats):
    """The loop of generate_steps: draft, verify, emit, learn, until max_tokens or an EOS."""
    produced, index, rejected, rejections = 0, 0, None, 0
    while True:
        ts = time.perf_counter()
        led = verifier.led
        drafts = _drafts(plan, verifier, seq)
        if drafts:                           # the pass's planner may take fewer of them
            proposal = Proposal(drafts, stats.accepted, rejections)
            yield proposal
            drafts = drafts[:proposal.allowed]
        td = time.perf_counter()
        # the first draft is the token the verifier just rejected at this very position
        reproposed = bool(drafts) and rejected == (len(seq), drafts[0])
        verdict = yield from verifier.verify(seq, drafts, plan.max_tokens - produced)
        kept, reason = _cut(verdict.emitted, plan.eos, plan.max_tokens - produced)
        seq.extend(kept)
        produced += len(kept)
        if not reason:
            yield from verifier.advance(seq, verdict)
            verifier.requantize()
        te = time.perf_counter()
        waited, verifier.waited_s = verifier.waited_s, 0.0
        rejected = verdict.rejected
        rejections += rejected is not None
        step = Step(index=index, drafted=drafts, accepted=min(verdict.accepted, len(kept)),
                    emitted=kept, verifier_token=verdict.own if verdict.own in kept else None,
                    fast_path=verdict.fast_path, forward_tokens=verdict.forward_tokens,
                    draft_s=td - ts, verify_s=te - td, step_s=te - ts,
                    finished=bool(reason), stop_reason=reason, led=led,
                    next_led=verdict.next_led and not reason, reproposed=reproposed,
                    queued=verdict.queued, waited_s=waited)
        _learn(plan, step, kept, te)
        stats.add(step)
        yield step
        if reason:
            return
        index += 1


def _learn(plan: Plan, step, kept, since) -> None:
    """The pass's outcome to the lead rule and the drafter; the drafter's learning (from
    `since`) is its time too."""
    if plan.rule is not None:
        plan.rule.observe(step)
    plan.drafter.accept(kept)
    plan.drafter.observe(step, plan.kv_cache)
    learnt = time.perf_counter() - since
    step.draft_s += learnt
    step.step_s += learnt


STEP_KEYWORDS = ("eos_ids", "bos_id", "stats", "on_prefill", "vocab_size", "shared", "prompt_cache",
                 "constraint", "learning")


def generate(model, prompt, drafter=None, options: GenerationOptions | None = None, **kw):
    """All tokens and the Stats of one generation, for tests and scripts: generate_steps with
    generate_steps' keywords, the rest option fields (script_options)."""
    steps = {k: kw.pop(k) for k in STEP_KEYWORDS if k in kw}
    stats = steps.pop("stats", None) or Stats()
    tokens = []
    for step in generate_steps(model, prompt, drafter, script_options(options, **kw), stats=stats, **steps):
        tokens.extend(step.emitted)
    return tokens, stats

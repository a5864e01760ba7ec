"""Confidence-gated, cost-aware draft length (beyond the paper: its section 5.6).

Every step the inner drafter proposes up to k tokens, each with a signal saying how it was
found (the IGTree's match depth and winner share, the length of an in-session match, or just
its position). The adaptive drafter keeps, per signal, a recency-weighted estimate p of how
often such a token is accepted once the verifier reaches it, and an online fit of the
verifier's pass time against tokens fed (time = a + b * tokens). It then keeps the prefix of
the draft that maximises expected tokens emitted per unit of verifier time:

    uncached (a pass feeds the context, L tokens, plus j drafts):
        E(j) = 1 + sum_{i<=j} prod_{m<=i} p_m            cost(j) = a + b (L + j)
    KV cache (the first draft is checked for free against the token the previous pass
    already gave: the rejection fast path; a plain step is a 1-token pass):
        E(j) = 1 + p_1 sum_{2<=i<=j} prod_{2<=m<=i} p_m  cost(j) = (1 - p_1)(a + b) + p_1 (a + b j)
    KV cache, a pass led by the previous pass's correction (fed first, the drafts after it):
        E(j) = 1 + sum_{i<=j} prod_{m<=i} p_m            cost(j) = a + b (1 + j)

A drafter with several candidate drafts (the hybrid: session, history, IGTree, extra sources)
gets the one with the best rate. The estimates learn from every candidate offered, scored
against the verifier's tokens as far as each pass made them known, not only from the one
proposed. So weak IGTree answers (shallow match, low share) are cut, a run of rejections lowers the
estimates until drafting stops, long drafts are kept only while the session's own text keeps
being accepted, and the estimates decay back to the prior when unused (which is how a paused
drafter probes again). The estimates and the cost fit are kept from one generation to the
next, as the verifier and the kind of text outlive a prompt: a short generation no longer
spends its first passes relearning that a source is weak, and since counts halve every
`half_life` passes a new kind of text takes over within a few dozen. The draft is unchanged,
only shortened: output stays exactly the verifier's.

Never below plain (`PlainGuard`): choosing j above leaves out what consulting the drafter costs
(its own time, every pass) and trusts the estimates. So the drafter also keeps the running
gain of the passes it drafted: the plain time of the tokens they emitted (one 1-token pass each
under the cost fit; uncached, one pass over the context) over what they cost (the fit's time of
the passes they fed, plus the drafter's measured time). When that gain stays below 1 for
`patience` passes, it stops consulting the drafter (a plain pass, as k = 0) and probes again
after `wait` plain passes, doubling the wait (up to `max_wait`) each time a probe fails too.
"""
from __future__ import annotations

import copy
import time

from olifant_mlx.drafters.base import Draft, DrafterBase, Signal
from olifant_mlx.drafters.costs import PassCost, PassTimes
from olifant_mlx.drafters.learning import Learning, LearntKey
from olifant_mlx.drafters.registry import build_drafter

COPIES = ("lookup", "history")   # signals (source, agreement length): longer is no worse


class AcceptanceEstimate:
    """Recency-weighted acceptance rate per signal, backing off to the signal's source and
    then to `prior`; `strength` pseudo-observations tie each level to the
    next, and counts halve every `half_life` verifier steps. A copied continuation's rate is
    at least that of a copy with shorter agreement (monotone in the agreement length)."""

    def __init__(self, prior: float = 0.5, strength: float = 2.0, half_life: float = 48.0):
        if not 0.0 < prior < 1.0:
            raise ValueError(f"prior must be between 0 and 1, got {prior}")
        self.prior = prior
        self.strength = strength
        self.decay = 0.5 ** (1.0 / half_life)
        self.counts = {}          # key -> [accepted, tested, step of last update]
        self.step = 0

    def _get(self, key):
        c = self.counts.get(key)
        if c is None:
            return 0.0, 0.0
        f = self.decay ** (self.step - c[2])
        return c[0] * f, c[1] * f

    def p(self, signal: Signal) -> float:
        acc, tested = self._get(signal.source)
        parent = (acc + self.strength * self.prior) / (tested + self.strength)
        acc, tested = self._get(signal)
        own = (acc + self.strength * parent) / (tested + self.strength)
        if signal.source in COPIES and signal.level > 1:
            # a copy that agrees with more of the context is at least as likely to be right
            shorter = signal.level - 1 if signal.level <= 4 else signal.level // 2
            return max(own, self.p(Signal(signal.source, shorter, signal.share)))
        return own

    def expect(self, source: str, p: float, weight: float = 2.0) -> None:
        """Start an unseen source at rate `p`, as if `weight` of its drafts had been tested
        (what the caller knows of it before any pass: a prediction is meant to be repeated)."""
        if source not in self.counts:
            self.counts[source] = [p * weight, weight, self.step]

    def update(self, signal: Signal, accepted: bool):
        for key in (signal.source, signal):
            acc, tested = self._get(key)
            self.counts[key] = [acc + accepted, tested + 1.0, self.step]

    def tick(self):
        self.step += 1


def best_length(p, cost, kv_cache: bool, context_len: int = 0) -> int:
    """The prefix length j of a draft with acceptance estimates p that maximises expected
    tokens per unit of verifier time (see the module docstring); ties go to the shorter.
    With a KV cache at least the first draft is kept when there is one: checking it is free."""
    return best_rate(p, cost, kv_cache, context_len)[1]


def best_rate(p, cost, kv_cache: bool, context_len: int = 0):
    """(expected tokens per unit of verifier time, j) at best_length's j."""
    if kv_cache:
        if not p:
            return 1.0 / cost(1), 0
        best_j, best = 1, 1.0 / cost(1)
        gain, run = 1.0, 1.0
        for j in range(2, len(p) + 1):
            run *= p[j - 1]
            gain += p[0] * run
            rate = gain / ((1 - p[0]) * cost(1) + p[0] * cost(j))
            if rate > best:
                best_j, best = j, rate
        return best, best_j
    best_j, best = 0, 1.0 / cost(context_len)
    gain, run = 1.0, 1.0
    for j in range(1, len(p) + 1):
        run *= p[j - 1]
        gain += run
        rate = gain / cost(context_len + j)
        if rate > best:
            best_j, best = j, rate
    return best, best_j


def known_outcome(step, tokens, i):
    """Whether a draft's i-th token (its first i all right) is the verifier's, as far as a
    Step shows: True, False, or None when the verifier's token there is not known."""
    if i < len(step.emitted):
        return tokens[i] == step.emitted[i]
    n = len(step.drafted)
    if not step.finished and i == step.accepted < n and list(tokens[:i + 1]) == list(step.drafted[:i + 1]):
        return False      # the rejected draft whose correction was held back (not emitted)
    return None


class CandidateLearner:
    """Per-signal acceptance estimates learnt from every candidate a drafter offered, not only
    the one proposed: after each pass the verifier's tokens are known as far as it emitted,
    so each candidate's tokens are scored against them up to its first miss (a candidate's
    token counts only once the ones before it are right, like a verified draft's)."""

    def __init__(self, prior: float = 0.5, half_life: float = 48.0):
        self.acceptance = AcceptanceEstimate(prior, half_life=half_life)
        self.offered = []

    def p(self, signals) -> list:
        return [self.acceptance.p(s) for s in signals]

    def expected(self, signals) -> float:
        """Expected accepted tokens of a whole draft: sum over i of prod_{m<=i} p_m."""
        total, run = 0.0, 1.0
        for q in self.p(signals):
            run *= q
            total += run
        return total

    def learn(self, step):
        seen = set()
        for tokens, signals in self.offered:
            key = (tuple(tokens), tuple(signals))
            if key in seen:
                continue
            seen.add(key)
            for i, sig in enumerate(signals):
                ok = known_outcome(step, tokens, i)
                if ok is None:
                    break
                self.acceptance.update(sig, ok)
                if not ok:
                    break
        self.offered = []
        self.acceptance.tick()


class PlainGuard:
    """Whether drafting is worth consulting the drafter at all (see the module docstring).
    `observe(plain_s, spent_s)` per pass that drafted: the plain time of the tokens it emitted
    and what it cost; the running gain is their recency-weighted sums' ratio (half-life
    `half_life` passes). Below 1 for `patience` passes in a row: off for `wait` plain passes,
    then a probe of `patience` passes on fresh sums; each time it goes off again the wait
    doubles up to `max_wait`, and a probe whose gain ends at 1 or more resets it. The state
    outlives a generation, like the estimates (the verifier and its costs do)."""

    def __init__(self, patience: int = 4, wait: int = 8, max_wait: int = 256, half_life: float = 16.0):
        if patience < 1 or wait < 1 or max_wait < wait:
            raise ValueError(f"need patience >= 1 and 1 <= wait <= max_wait, got {patience}, {wait}, {max_wait}")
        self.patience, self.first_wait, self.max_wait = patience, wait, max_wait
        self.decay = 0.5 ** (1.0 / half_life)
        self.wait = wait              # plain passes before the next probe, the next time it goes off
        self.off_left = 0             # plain passes left before the next probe (0: drafting)
        self.paused = False           # off, or about to probe
        self.bad = 0                  # passes in a row with the running gain below 1
        self.trial = 0                # passes left of a probe
        self.plain_s = self.spent_s = 0.0
        self.off_passes = self.probes = self.pauses = 0   # for inspection and the docs

    @property
    def gain(self) -> float | None:
        """Plain time over drafting time of the recent drafting passes (None before any)."""
        return self.plain_s / self.spent_s if self.spent_s > 0 else None

    def drafting(self) -> bool:
        """Whether this pass may consult the drafter; call once per pass."""
        if self.off_left > 0:
            self.off_left -= 1
            self.off_passes += 1
            return False
        if self.paused:               # a probe starts: judged on its own passes
            self.paused = False
            self.plain_s = self.spent_s = 0.0
            self.bad, self.trial = 0, self.patience
            self.probes += 1
        return True

    def observe(self, plain_s: float, spent_s: float) -> None:
        self.plain_s = self.plain_s * self.decay + plain_s
        self.spent_s = self.spent_s * self.decay + spent_s
        below = self.plain_s < self.spent_s
        self.bad = self.bad + 1 if below else 0
        if self.bad >= self.patience:
            self.off_left, self.paused, self.bad, self.trial = self.wait, True, 0, 0
            self.wait = min(2 * self.wait, self.max_wait)
            self.pauses += 1
            return
        if self.trial:
            self.trial -= 1
            if self.trial == 0 and not below:
                self.wait = self.first_wait        # the probe paid: a later pause is short again


def plain_and_spent(step, cost, kv_cache: bool, overhead_s: float) -> tuple:
    """(what plain decoding would have spent on the tokens the step emitted, what the step
    spent): under the cost model, plus the drafter's time `overhead_s`. Plain emits one token
    per pass: KV a 1-token pass, uncached a pass over the context (the step's without drafts)."""
    fed = step.forward_tokens
    plain = cost(1) if kv_cache else cost(max(fed - len(step.drafted), 1))
    return len(step.emitted) * plain, (cost(fed) if fed > 0 else 0.0) + overhead_s


class AdaptiveDrafter(DrafterBase):
    """Any drafter, with a per-step draft length chosen as above, at most the requested k.
    The engine reports each verifier pass through `observe(step, kv_cache)`; a step whose
    `next_led` is set says the next pass is led by its correction (KV cache), so no draft of
    that pass is checked for free: it then feeds 1 + j tokens and the uncached formula applies
    with a context of one token (j = 0 just feeds the correction)."""

    plans_led_passes = True       # j = 0 for a led pass is its own choice, per candidate

    def __init__(self, inner, prior: float = 0.5, half_life: float = 48.0,
                 rel_slope: float = 0.1, guard: PlainGuard | bool | None = None):
        self.inner = inner
        self.name = f"adaptive-{inner.name}"
        self.wants_bos = inner.wants_bos
        # the verifier's speed and how often each kind of draft is right outlive one generation:
        # kept under `keys[0]` in a drafters.learning.Learning (the Session's, else `own`)
        self.cost = PassCost(rel_slope)
        self.learner = CandidateLearner(prior, half_life)
        # never below plain: stop consulting the drafter where it does not pay (None: always)
        self.guard = PlainGuard() if guard is None else guard or None
        self.keys, self.own, self.fresh_guard = (LearntKey(self.name),), Learning(), False
        self.expected = {}                # source -> the rate its drafts start at (a prediction's)
        self._begin(None)

    def around(self, inner):
        """A drafter like this one over `inner`, for one request: it starts from this one's
        estimates and cost fit (the verifier is the same) and keeps its own, which a drafter
        made around it in turn starts from (revise's next clause); its guard starts afresh
        (what paid before may not be what this request drafts from)."""
        other = copy.copy(self)
        other.inner, other.name = inner, f"adaptive-{inner.name}"
        other.guard = PlainGuard() if self.guard is not None else None
        other.keys, other.fresh_guard = (LearntKey(other.name),) + self.keys, True
        other.expected = dict(self.expected)
        return other

    def expect(self, source: str, p: float) -> None:
        """Drafts of `source` start each generation at rate `p` until passes say otherwise
        (AcceptanceEstimate.expect); for a drafter made for one request (`around`)."""
        self.expected[source] = p

    @property
    def acceptance(self):
        return self.learner.acceptance

    @property
    def planning(self):
        """The pass-cost model this generation plans with: the engine's, else its own fit."""
        return self.cost if self.given_cost is None else self.given_cost

    def open(self, prompt, learning=None, cost=None):
        """This drafter's state for one generation (drafters.base): the inner drafter's state,
        and the estimates, cost fit and guard `learning` (None: its own) kept from the last
        generation to finish, else its own; `cost`: the pass-cost model to plan with (None:
        the fit)."""
        state = copy.copy(self)
        state.inner = self.inner.open(prompt, learning)
        state.store = learning if learning is not None else self.own
        state.learner, state.cost, kept_guard = state.store.take(self.keys, (self.learner, self.cost, self.guard))
        state.guard = copy.deepcopy(self.guard) if self.fresh_guard else kept_guard
        for source, p in self.expected.items():
            state.acceptance.expect(source, p)
        state._begin(cost)
        return state

    def finish(self):
        """Keep this generation's estimates, cost fit and guard for the next (see open)."""
        store = getattr(self, "store", None)
        if store is not None:
            store.keep(self.keys[0], (self.learner, self.cost, self.guard))
        self.inner.finish()

    def start(self, prompt):
        self.start_planning(prompt, None)

    def start_planning(self, prompt, cost):
        """`start`, planning this generation with `cost` (None: the drafter's own fitted
        model, which a given one leaves as it was): the drafter as its own state."""
        self.inner.start(prompt)
        self._begin(cost)

    def _begin(self, cost):
        self.given_cost = cost
        self.pass_times = PassTimes()
        self.learner.offered = []         # a stopped generation's last offer has no outcome
        self.signals = []
        self.kv_cache = True              # until the engine says otherwise
        self.led = False                  # the next pass is led by a correction
        self.lengths = []                 # kept draft length per step, for inspection
        self.consulted = False            # this pass asked the inner drafter
        self.learn_s = 0.0                # the last observe's own time: drafting's cost too

    def draft_scored(self, context, k):
        self.consulted = self.guard is None or self.guard.drafting()
        if not self.consulted:            # paused: a plain pass, without the drafter's time
            self.learner.offered, self.signals = [], []
            self.lengths.append(0)
            return Draft([], [])
        # a drafter with several candidates (the hybrid) lets the estimates choose among them
        best, tokens, signals, j = -1.0, [], [], 0
        offered = self.inner.candidates(context, k)
        for drafts, sigs in offered:
            p = self.learner.p(sigs)
            if self.kv_cache and self.led:
                rate, n = best_rate(p, self.planning, False, 1)     # a pass of 1 + j tokens
            else:
                # uncached, a pass feeds the verifier's whole sequence (about the context: BOS aside)
                rate, n = best_rate(p, self.planning, self.kv_cache, len(context))
            if rate > best:
                best, tokens, signals, j = rate, drafts, sigs, n
        self.learner.offered = [(list(d), list(s)) for d, s in offered]
        self.signals = signals[:j]
        self.lengths.append(j)
        return Draft(tokens[:j], self.signals)

    def observe(self, step, kv_cache: bool):
        t = time.perf_counter()
        self.kv_cache = kv_cache
        self.led = kv_cache and step.next_led
        cost = self.planning
        self.pass_times.observe(cost, step)
        # a led pass pays for the correction of the drafted pass before it
        if self.guard is not None and (self.consulted or (step.led and not self.guard.paused)):
            overhead = getattr(cost, "draft_s", None)      # a fixed cost may fix it too
            overhead = step.draft_s + self.learn_s if overhead is None else overhead
            self.guard.observe(*plain_and_spent(step, cost, kv_cache, overhead))
        self.consulted = False
        self.learner.learn(step)
        self.inner.observe(step, kv_cache)
        self.learn_s = time.perf_counter() - t

    def accept(self, tokens):
        self.inner.accept(tokens)


def from_spec(spec, tokenizer, history):
    """`adaptive:SPEC` (the registry's builder): the inner spec's drafter, its length chosen per step."""
    return AdaptiveDrafter(build_drafter(spec.inner, tokenizer, history))

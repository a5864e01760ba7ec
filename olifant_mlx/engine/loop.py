"""Speculative decoding on an mlx-lm verifier (the paper's sections 2.2-2.4).

`generate_steps` yields one `Step` per verifier forward pass. Greedy and exact: a drafted
token is accepted only if it equals the verifier's own choice at its position, so the output
is token for token the verifier's plain output. Two regimes, one class each:

- `CachedVerification`: prefill once; the verifier's next token is already known from the
  previous pass, so the first draft is checked against it for free (rejection fast path: a
  rejected step costs one 1-token pass, like plain decoding); only an accepted first draft
  pays for the k-token pass, after which the cache is rolled back to the accepted prefix.
- `UncachedVerification`: every step feeds the whole sequence (context + k drafts) in one
  pass; the logits at positions ctx-1 .. ctx+k-1 decide the accepted prefix and give one
  more token (k+1 predictions per pass).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from olifant_mlx.drafters.base import as_drafter
from olifant_mlx.engine import cache as kv
from olifant_mlx.engine.sampling import Sampling, picker
from olifant_mlx.engine.stats import Stats, Step
from olifant_mlx.mlx_setup import mx

MAX_K = 64
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
    verifier's own emitted token (correction or bonus), and the pass's size."""
    emitted: list
    accepted: int
    own: int | None
    fast_path: bool
    forward_tokens: int


class CachedVerification:
    """KV-cached regime with the rejection fast path (see the module docstring)."""

    def __init__(self, model, prompt, pick, max_kv_size=None, on_prefill=None):
        self.model, self.pick = model, pick
        self.cache = kv.make_cache(model, max_kv_size)
        self.next_token = pick(kv.prefill(model, self.cache, prompt, on_progress=on_prefill),
                               len(prompt), prompt)
        self.pending = None        # the verifier's token after the accepted run, not yet emitted

    def verify(self, seq, drafts) -> Verdict:
        y = self.next_token
        if not drafts or drafts[0] != y:
            # plain step, or the fast path: the first draft is already known to be wrong
            self.pending = None
            return Verdict([y], 0, y, bool(drafts), 0)
        snap = kv.snapshot(self.cache)
        preds = self.pick(self.model(mx.array(drafts)[None], cache=self.cache)[0], len(seq) + 1,
                          seq + drafts)
        a = 1
        while a < len(drafts) and preds[a - 1] == drafts[a]:
            a += 1
        kv.rollback(self.model, self.cache, len(drafts), drafts[:a], snap)
        self.pending = preds[a - 1]
        return Verdict(drafts[:a], a, None, False, len(drafts))

    def advance(self, seq, verdict: Verdict) -> None:
        """Know the next token before the next step: from the accepted pass, or by feeding
        the token just emitted (a 1-token pass, counted in the verdict)."""
        if self.pending is not None:
            self.next_token, self.pending = self.pending, None
            return
        self.next_token = self.pick(
            self.model(mx.array(verdict.emitted[-1:])[None], cache=self.cache)[0, -1], len(seq), seq)
        verdict.forward_tokens = 1


class UncachedVerification:
    """Uncached regime: the whole sequence and the drafts in one pass, every step."""

    def __init__(self, model, prompt, pick):
        self.model, self.pick = model, pick

    def verify(self, seq, drafts) -> Verdict:
        logits = self.model(mx.array(seq + drafts)[None])[0, len(seq) - 1:]
        preds = self.pick(logits, len(seq), seq + drafts)
        a = 0
        while a < len(drafts) and preds[a] == drafts[a]:
            a += 1
        return Verdict(drafts[:a] + [preds[a]], a, preds[a], False, len(seq) + len(drafts))

    def advance(self, seq, verdict: Verdict) -> None:
        pass


def _cut(emitted, eos, room):
    """Emitted tokens cut at the first EOS (not emitted) or at `room`; (kept, stop reason)."""
    for i, t in enumerate(emitted):
        if t in eos:
            return emitted[:i], "eos"
    if len(emitted) >= room:
        return emitted[:room], "max_tokens"
    return emitted, ""


def generate_steps(model, prompt, drafter=None, k: int = 3, max_tokens: int = 100,
                   kv_cache: bool = True, eos_ids=(), max_kv_size: int | None = None,
                   bos_id: int | None = None, stats: Stats | None = None,
                   sampling: Sampling | None = None, on_prefill=None, processors=(),
                   vocab_size: int | None = None):
    """Yield a Step per verifier pass until max_tokens or an EOS token (not emitted).
    Greedy by default; with `sampling`, the verifier samples (see Sampling); `processors`
    (mlx-lm logits processors: processor(tokens, logits) -> logits) shape every choice. The
    drafter sees the prompt without a leading BOS unless it `wants_bos`. `vocab_size`
    (default: found on the model) bounds the ids: a prompt id outside it is refused, drafts are
    cut before one."""
    if not 0 <= k <= MAX_K:
        raise ValueError(f"k must be between 0 and {MAX_K}, got {k}")
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    prompt = [int(t) for t in prompt]
    vocab_size = vocab_size or model_vocab_size(model)
    _check_prompt(prompt, vocab_size)
    drafter = as_drafter(drafter)
    eos = set(int(e) for e in eos_ids)
    skip = 0 if drafter.wants_bos or bos_id is None or prompt[0] != bos_id else 1
    seq = list(prompt)                      # everything the verifier has seen or will see
    drafter.start(seq[skip:])
    stats = stats if stats is not None else Stats()
    stats.prompt_tokens = len(prompt)
    if max_tokens == 0:
        return
    pick = picker(sampling, processors)
    t0 = time.perf_counter()
    if kv_cache:
        verifier = CachedVerification(model, prompt, pick, max_kv_size, on_prefill)
        stats.prefill_s = time.perf_counter() - t0
    else:
        verifier = UncachedVerification(model, prompt, pick)
    produced, index = 0, 0
    while True:
        ts = time.perf_counter()
        drafts = [int(t) for t in drafter.draft(seq[skip:], k)[:k]] if k else []
        drafts = _in_vocabulary(drafts, vocab_size)
        td = time.perf_counter()
        verdict = verifier.verify(seq, drafts)
        kept, reason = _cut(verdict.emitted, eos, max_tokens - produced)
        seq.extend(kept)
        produced += len(kept)
        if not reason:
            verifier.advance(seq, verdict)
        te = time.perf_counter()
        step = Step(index=index, drafted=drafts, accepted=min(verdict.accepted, len(kept)),
                    emitted=kept, verifier_token=verdict.own if verdict.own in kept else None,
                    fast_path=verdict.fast_path, forward_tokens=verdict.forward_tokens,
                    draft_s=td - ts, verify_s=te - td, step_s=te - ts,
                    finished=bool(reason), stop_reason=reason)
        stats.add(step)
        drafter.accept(kept)
        drafter.observe(step, kv_cache)
        yield step
        if reason:
            return
        index += 1


def generate(model, prompt, drafter=None, **kw):
    """All tokens and the Stats of one generation (see generate_steps)."""
    stats = Stats()
    tokens = []
    for step in generate_steps(model, prompt, drafter, stats=stats, **kw):
        tokens.extend(step.emitted)
    return tokens, stats

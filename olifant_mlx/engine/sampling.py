"""The verifier's choice of token at a position: argmax, or a seeded draw that stays lossless,
after optional logits processors (repetition penalty, ...).

Every choice depends only on the logits at its position and the tokens before it, never on how
many drafts were verified in the same pass, which is what keeps speculative output identical
to plain output: a draft is accepted only if it equals that choice.
"""
from __future__ import annotations

from dataclasses import dataclass

from olifant_mlx.mlx_setup import mx


@dataclass(frozen=True)
class Sampling:
    """Temperature / top-k / top-p / min-p sampling that stays lossless under speculation: the
    token at sequence position p is drawn with a key derived from (seed, p) alone, so the
    verifier's choice at a position does not depend on how many drafts were verified with it.
    A draft token is accepted only if it equals that draw, which makes speculative output
    identical to plain sampling with the same seed (and so distributed exactly like it).
    Filters apply in the order top-k, top-p, min-p (each keeps at least the best token)."""
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    top_k: int = 0            # 0: off
    min_p: float = 0.0        # 0: off

    def filtered(self, logits):
        """Logits (rows, vocab) scaled by the temperature, filtered by top-k, top-p, min-p."""
        logits = logits.reshape(-1, logits.shape[-1]).astype(mx.float32) / self.temperature
        if 0 < self.top_k < logits.shape[-1]:
            kth = mx.sort(logits, axis=-1)[:, -self.top_k][:, None]
            logits = mx.where(logits >= kth, logits, -mx.inf)
        if self.top_p < 1.0:
            probs = mx.softmax(logits, axis=-1)
            order = mx.argsort(-probs, axis=-1)
            sorted_p = mx.take_along_axis(probs, order, axis=-1)
            keep_sorted = (mx.cumsum(sorted_p, axis=-1) - sorted_p) < self.top_p
            keep = mx.put_along_axis(mx.zeros_like(keep_sorted), order, keep_sorted, axis=-1)
            logits = mx.where(keep, logits, -mx.inf)
        if self.min_p > 0.0:
            probs = mx.softmax(logits, axis=-1)
            floor = self.min_p * mx.max(probs, axis=-1, keepdims=True)
            logits = mx.where(probs >= floor, logits, -mx.inf)
        return logits

    def draw(self, row, position: int):
        """The token at `position` from one filtered row, as a lazy 0-d array."""
        key = mx.random.key((self.seed * 1_000_003 + position) % (1 << 63))
        return mx.random.categorical(row, key=key)

    def pick(self, logits, first_position: int) -> list:
        """One token per row of logits; row i is the token at first_position + i."""
        logits = self.filtered(logits)
        return [int(self.draw(logits[i], first_position + i).item()) for i in range(logits.shape[0])]

    def pick_lazy(self, logits, position: int):
        """The token at `position` from one row of logits, not yet evaluated."""
        return self.draw(self.filtered(logits)[0], position)


def picker(sampling: Sampling | None, processors=(), constraint=None):
    """pick(logits, position, context): the verifier's token(s). `logits` holds one position
    (1-d: an int is returned) or consecutive positions from `position` on (2-d: a list);
    `context` is the token sequence, whose first position + i tokens are what row i follows
    (the history a logits processor sees, as in mlx-lm: prompt and generated tokens). A
    `constraint` (engine.constraint.Constraint) masks each row last, after the tokens it follows,
    so a choice never depends on the pass it was made in."""
    processors = tuple(processors)

    def process(logits, position, context):
        if not processors and constraint is None:
            return logits
        rows = logits.reshape(-1, logits.shape[-1])
        out = []
        for i in range(rows.shape[0]):
            row = rows[i:i + 1]
            if processors:
                history = mx.array(context[:position + i])
                for proc in processors:
                    row = proc(history, row)
            if constraint is not None:
                row = row + mx.array(constraint.bias(context[:position + i], row.shape[-1]))
            out.append(row)
        return mx.concatenate(out, axis=0).reshape(logits.shape)

    def pick(logits, position, context=()):
        logits = process(logits, position, context)
        if sampling is None:
            return mx.argmax(logits, axis=-1).tolist()
        out = sampling.pick(logits, position)
        return out[0] if logits.ndim == 1 else out

    def lazy(logits, position, context=()):
        """One position's token as an unevaluated 0-d array (mx.async_eval can start it while
        Python goes on); None where a logits processor or a constraint needs the tokens themselves."""
        if processors or constraint is not None:
            return None
        if sampling is None:
            return mx.argmax(logits, axis=-1)
        return sampling.pick_lazy(logits, position)

    pick.lazy = lazy
    pick.lazy_ok = not processors and constraint is None
    return pick

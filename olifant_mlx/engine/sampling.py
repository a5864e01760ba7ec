"""The verifier's choice of token at a position: argmax, or a seeded draw that stays lossless."""
from __future__ import annotations

from dataclasses import dataclass

from olifant_mlx.mlx_setup import mx


@dataclass(frozen=True)
class Sampling:
    """Temperature / top-p sampling that stays lossless under speculation: the token at
    sequence position p is drawn with a key derived from (seed, p) alone, so the verifier's
    choice at a position does not depend on how many drafts were verified with it. A draft
    token is accepted only if it equals that draw, which makes speculative output identical
    to plain sampling with the same seed (and so distributed exactly like it)."""
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    def pick(self, logits, first_position: int) -> list:
        """One token per row of logits; row i is the token at first_position + i."""
        logits = logits.reshape(-1, logits.shape[-1]).astype(mx.float32) / self.temperature
        if self.top_p < 1.0:
            probs = mx.softmax(logits, axis=-1)
            order = mx.argsort(-probs, axis=-1)
            sorted_p = mx.take_along_axis(probs, order, axis=-1)
            keep_sorted = (mx.cumsum(sorted_p, axis=-1) - sorted_p) < self.top_p
            keep = mx.put_along_axis(mx.zeros_like(keep_sorted), order, keep_sorted, axis=-1)
            logits = mx.where(keep, logits, -mx.inf)
        out = []
        for i in range(logits.shape[0]):
            key = mx.random.key((self.seed * 1_000_003 + first_position + i) % (1 << 63))
            out.append(int(mx.random.categorical(logits[i], key=key).item()))
        return out


def picker(sampling: Sampling | None):
    """pick(logits, position): the token(s) for the logits of one position (1-d: an int) or
    of consecutive positions from `position` on (2-d: a list)."""
    if sampling is None:
        return lambda logits, position: mx.argmax(logits, axis=-1).tolist()

    def pick(logits, position):
        out = sampling.pick(logits, position)
        return out[0] if logits.ndim == 1 else out
    return pick

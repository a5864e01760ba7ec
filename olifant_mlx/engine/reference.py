"""`bench --verifier reference`: a held-out document's real continuation plays the verifier.

`ReferenceModel` answers like an mlx-lm model whose choice at every position is the
document's next token, so the same engine loop (fast path, rollback, both regimes) measures
acceptance and accepted length against real domain text. Nothing here is timed as a
verifier: speed comes only from the calculator with a measured cost curve.
"""
from __future__ import annotations

from olifant_mlx.mlx_setup import mx

LABEL = "simulated verifier: reference text"


class PositionCache:
    """The one 'layer' of a ReferenceModel's cache: how many positions it has seen."""

    def __init__(self):
        self.offset = 0

    @property
    def state(self):
        return mx.array(self.offset)

    def is_trimmable(self):
        return True

    def trim(self, n):
        n = min(self.offset, n)
        self.offset -= n
        return n


class ReferenceModel:
    """Logits (1, L, vocab) that are one-hot at the document's next token of each position."""

    def __init__(self, truth, vocab_size: int):
        self.truth = mx.array(list(truth) + [0], dtype=mx.int32)   # after the end: any token
        self.n = len(truth)
        self.vocab_size = vocab_size
        self.vocab = mx.arange(vocab_size, dtype=mx.int32)

    def make_cache(self):
        return [PositionCache()]

    def __call__(self, inputs, cache=None):
        length = inputs.shape[1]
        start = cache[0].offset if cache else 0
        if cache:
            cache[0].offset += length
        nxt = mx.minimum(mx.arange(start + 1, start + length + 1), self.n)
        return (self.vocab[None, None, :] == self.truth[nxt][None, :, None]).astype(mx.float16)


class TextDetokenizer:
    """mlx-lm's streaming detokenizer interface over a plain decode function."""

    def __init__(self, decode):
        self.decode = decode
        self.reset()

    def reset(self):
        self.tokens, self.text, self._shown = [], "", 0

    def add_token(self, t):
        self.tokens.append(t)
        self.text = self.decode(self.tokens)

    def finalize(self):
        pass

    @property
    def last_segment(self):
        piece, self._shown = self.text[self._shown:], len(self.text)
        return piece


class ReferenceVerifier:
    """A Verifier (see olifant_mlx.verifier.Verifier) for one document: `prompt` ids, then
    the real `continuation` ids, under `tokenizer` (our Tokenizer: encode without BOS)."""
    name = "reference"
    label = LABEL
    eos_ids = ()
    bos_id = None
    context_length = None

    def __init__(self, tokenizer, prompt, continuation):
        self.identity = tokenizer
        self.prompt = list(prompt)
        self.continuation = list(continuation)
        self.model = ReferenceModel(self.prompt + self.continuation, tokenizer.vocab_size)

    def encode(self, text):
        return self.identity.encode(text)

    def detokenizer(self):
        return TextDetokenizer(self.identity.decode)

"""A small mlx-lm model sharing the verifier's tokenizer, as a drafter."""
from __future__ import annotations

from olifant_mlx.drafters.base import DrafterBase
from olifant_mlx.mlx_setup import mx


class NeuralDrafter(DrafterBase):
    """Drafts greedily with its own KV cache, kept in step with the context by trimming to
    the common prefix."""
    wants_bos = True  # it reads the sequence exactly as the verifier does

    def __init__(self, model, name="neural"):
        self.model = model
        self.name = name

    def start(self, prompt):
        from mlx_lm.models.cache import make_prompt_cache

        self.cache = make_prompt_cache(self.model)
        self.cached = []

    def draft(self, context, k):
        from mlx_lm.models.cache import trim_prompt_cache

        if k <= 0 or not context:
            return []
        common = 0
        limit = min(len(self.cached), len(context) - 1)  # always feed at least one token
        while common < limit and self.cached[common] == context[common]:
            common += 1
        if len(self.cached) > common:
            trimmed = trim_prompt_cache(self.cache, len(self.cached) - common)
            if trimmed != len(self.cached) - common:
                raise RuntimeError("neural drafter cache could not be rolled back")
        feed = list(context[common:])
        self.cached = list(context)
        out = []
        for _ in range(k):
            logits = self.model(mx.array(feed)[None], cache=self.cache)
            t = int(mx.argmax(logits[0, -1]).item())
            out.append(t)
            feed = [t]
            self.cached.append(t)
        # the last draft was never fed: the cache holds everything but it
        self.cached.pop()
        return out


def from_spec(spec, tokenizer, history):
    """`neural:MODEL` (the registry's builder): a verifier spec, loaded, refused unless its
    tokenizer is the verifier's."""
    from olifant_mlx.draftmodel.igtree import TokenizerMismatch
    from olifant_mlx.verifier import load_verifier

    v = load_verifier(spec.arg)
    if tokenizer is not None and v.identity.digest != tokenizer.digest:
        raise TokenizerMismatch(f"neural draft model {v.name!r} does not share the verifier's "
                                f"tokenizer {tokenizer.name!r}")
    return NeuralDrafter(v.model, name=f"neural:{v.name}")

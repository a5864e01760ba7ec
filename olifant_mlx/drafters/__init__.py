"""Drafters: cheap guesses of the verifier's next k tokens. The contract is `base.Drafter`;
`registry` builds drafters from specs (`build_drafter`, `parse_spec`, `help_text`). Each drafter has
its own module, with the `from_spec` function the registry builds it with (the table of the built-in
kinds is below, each with its builder): `olifant` (the IGTree), `ngram`, `lookup`, `neural`,
`hybrid`, `adaptive` (cost-aware length), `retrieval` (`rest`, `ngram-cache`), `auto` (`auto` and
`library:NAME`, which resolve to other specs), with `history` (opt-in earlier sessions) for the
hybrid.
"""
from olifant_mlx.drafters.adaptive import AdaptiveDrafter
from olifant_mlx.drafters.auto import resolve_auto
from olifant_mlx.drafters.base import (EMPTY, Draft, Drafter, DrafterBase, NoDrafter, Signal, as_drafter,
                                       position_signals)
from olifant_mlx.drafters.hybrid import HybridDrafter
from olifant_mlx.drafters.lookup import LookupDrafter, agreement, copy_signals
from olifant_mlx.drafters.neural import NeuralDrafter
from olifant_mlx.drafters.ngram import NgramDrafter, WordNgramDrafter
from olifant_mlx.drafters.olifant import OlifantDrafter
from olifant_mlx.drafters.prediction import PredictionSource, prediction_counts, predicting
from olifant_mlx.drafters import adaptive, auto, base, hybrid, lookup, neural, ngram, olifant, prediction, retrieval
from olifant_mlx.drafters.registry import (INDEX_MAGIC, KINDS, NGRAM_MAGIC, DrafterKind, DrafterSpec, DrafterSpecError,
                                           build_drafter, describe, help_text, parse_spec, register, uses_history)

# ---- the built-in drafters: each built by its module's function (registry.DrafterKind) ------

for _kind in (
    DrafterKind("auto", "", "the best available: adaptive hybrid over every corpus source for the "
                            "verifier's tokenizer (draft model, suffix indexes) and the session's "
                            "own text, drafting only where it beats plain decoding", auto.from_spec,
                source=False, history=True, own_length=True),
    DrafterKind("none", "", "plain decoding: no drafts", base.none_from_spec, source=False, drafts=False,
                aliases=("plain", "")),
    DrafterKind("olifant", "file", "the trained IGTree draft model (the paper's drafter)", olifant.from_spec),
    DrafterKind("ngram", "int", "the session's own token n-grams (default 4), with back-off",
                ngram.from_spec, 4),
    DrafterKind("ngram-words", "int", "the paper's word-level n-gram baseline (default 4)",
                ngram.words_from_spec, 4, tokenizer=True),
    DrafterKind("lookup", "int", "prompt lookup: copy what followed the last N tokens (default 3)",
                lookup.from_spec, 3),
    DrafterKind("neural", "model", "a small mlx-lm model with the verifier's tokenizer", neural.from_spec),
    DrafterKind("hybrid", "optfile", "a per-step choice by expected accepted tokens among the "
                                     "session's own text, the IGTree if given and any +SPEC sources",
                hybrid.from_spec, sources=True, source=False, history=True),
    DrafterKind("adaptive", "spec", "any drafter, its draft length chosen per step by cost",
                adaptive.from_spec, source=False, own_length=True),
    DrafterKind("rest", "file", "REST: the most frequent continuation of the longest corpus "
                                "match (a suffix index from build-rest)", retrieval.rest_from_spec,
                magic=INDEX_MAGIC),
    DrafterKind("ngram-cache", "file", "llama.cpp's static n-gram cache (llama-lookup's "
                                       "corpus tier, from build-rest --ngram-cache)",
                retrieval.ngram_cache_from_spec, magic=NGRAM_MAGIC),
    DrafterKind("prediction", "", "the request's prediction (the text being revised, OpenAI's predicted "
                                  "outputs), its place kept and found again after a change, and the "
                                  "session's own text: the adaptive hybrid over both", prediction.from_spec,
                source=False, history=True, own_length=True),
    DrafterKind("library", "name", "a precedent library (`library build`): the adaptive hybrid over "
                                   "its IGTree, its suffix index and the session's text",
                auto.library_from_spec, history=True),
):
    register(_kind)
del _kind

__all__ = ["AdaptiveDrafter", "HybridDrafter", "LookupDrafter", "NeuralDrafter", "NgramDrafter",
           "OlifantDrafter", "PredictionSource", "WordNgramDrafter", "agreement", "copy_signals",
           "EMPTY", "KINDS", "Draft", "Drafter", "DrafterBase", "DrafterKind", "DrafterSpec",
           "DrafterSpecError", "NoDrafter", "Signal", "as_drafter", "build_drafter", "describe",
           "help_text", "parse_spec", "position_signals", "predicting", "prediction_counts", "register",
           "resolve_auto", "uses_history"]

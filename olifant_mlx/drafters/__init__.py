"""Drafters: cheap guesses of the verifier's next k tokens.

The contract is `base.Drafter`; `registry` builds drafters from specs (`build_drafter`,
`parse_spec`, `help_text`). Each drafter has its own module, with the `from_spec` function the
registry builds it with: `olifant` (the IGTree), `ngram`, `lookup`, `neural`, `hybrid`, `adaptive`
(cost-aware length), `retrieval` (`rest`, `ngram-cache`), `auto` (`auto` and `library:NAME`, which
resolve to other specs), with `history` (opt-in earlier sessions) for the hybrid.
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
from olifant_mlx.drafters.registry import (KINDS, DrafterKind, DrafterSpec, DrafterSpecError, build_drafter,
                                           describe, help_text, parse_spec, register, uses_history)

__all__ = ["AdaptiveDrafter", "HybridDrafter", "LookupDrafter", "NeuralDrafter", "NgramDrafter",
           "OlifantDrafter", "PredictionSource", "WordNgramDrafter", "agreement", "copy_signals",
           "EMPTY", "KINDS", "Draft", "Drafter", "DrafterBase", "DrafterKind", "DrafterSpec",
           "DrafterSpecError", "NoDrafter", "Signal", "as_drafter", "build_drafter", "describe",
           "help_text", "parse_spec", "position_signals", "predicting", "prediction_counts", "register",
           "resolve_auto", "uses_history"]

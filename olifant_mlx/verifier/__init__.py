"""The verifier: the mlx-lm model whose output speculative decoding must reproduce.

`load_verifier(spec)` -> `Verifier` (model, mlx-lm tokenizer, identity, name, context length);
`load_tokenizer(spec)` loads a tokenizer alone, e.g. to train a draft model for a verifier.
"""
from olifant_mlx.verifier.aliases import (ALIASES, DEFAULT_MODEL, EMBEDDED_DEFAULT, VerifierError,
                                          default_model, resolve_model)
from olifant_mlx.verifier.loader import Verifier, load_tokenizer, load_verifier, verifier_tokenizer
from olifant_mlx.verifier.tokenizers import Tokenizer, TokenizerError

__all__ = ["ALIASES", "DEFAULT_MODEL", "EMBEDDED_DEFAULT", "Tokenizer", "TokenizerError", "Verifier",
           "VerifierError", "default_model", "load_tokenizer", "load_verifier", "resolve_model",
           "verifier_tokenizer"]

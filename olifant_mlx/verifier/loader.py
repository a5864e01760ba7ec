"""A loaded verifier: the mlx-lm model, its tokenizer and the identity a draft model must match."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from olifant_mlx.mlx_setup import mx
from olifant_mlx.verifier.aliases import ALIASES, VerifierError, default_model, resolve_model
from olifant_mlx.verifier.tokenizers import (MISTRAL_ALIASES, MISTRAL_NAME, Tokenizer, hf_tokenizer,
                                             mistral_tokenizer_path, sentencepiece_tokenizer,
                                             wrap_hf_tokenizer)


@dataclass
class Verifier:
    """The model that decides every token, and what surfaces need to know about it.

    `tokenizer` is mlx-lm's TokenizerWrapper (encode adds BOS where the model wants it; a
    fresh streaming detokenizer per `detokenizer` access); `identity` is our Tokenizer (encode
    without BOS; name, vocabulary size and digest, which a draft model must match)."""
    model: object
    tokenizer: object
    identity: Tokenizer
    name: str
    context_length: int | None = None
    path: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def eos_ids(self) -> tuple:
        return tuple(sorted(self.tokenizer.eos_token_ids))

    @property
    def bos_id(self) -> int | None:
        return self.tokenizer.bos_token_id

    def encode(self, text: str) -> list[int]:
        """Prompt ids as the verifier reads them (with BOS when the model is trained with it)."""
        return list(self.tokenizer.encode(text))

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "has_chat_template", False))

    def chat_ids(self, messages, template_kwargs=None) -> list[int]:
        """A conversation formatted by the verifier's chat template, ready for the assistant's
        turn (mlx-lm's way: the template's text, encoded without extra special tokens)."""
        if not self.has_chat_template:
            raise VerifierError(f"verifier {self.name!r} has no chat template: give a plain "
                                f"prompt (a base model continues text)")
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=True, **(template_kwargs or {}))
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def token_id(self, token: str) -> int:
        """The id of a token given as text (e.g. an extra end-of-sequence token)."""
        tok = getattr(self.tokenizer, "_tokenizer", self.tokenizer)
        vocab = tok.get_vocab()
        if token in vocab:
            return int(vocab[token])
        ids = tok.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise VerifierError(f"{token!r} is not one token of {self.name!r}'s vocabulary "
                                f"(it encodes to {len(ids)} tokens)")
        return int(ids[0])

    @property
    def vocab_size(self) -> int:
        return self.identity.vocab_size

    def detokenizer(self):
        return self.tokenizer.detokenizer


def verifier_tokenizer(tok, name: str) -> Tokenizer:
    """Our Tokenizer (encode without BOS, identity digest) for an mlx-lm tokenizer."""
    t = wrap_hf_tokenizer(getattr(tok, "_tokenizer", tok), name)
    t.eos_ids = tuple(sorted(getattr(tok, "eos_token_ids", ()) or t.eos_ids))
    return t


def _context_length(config: dict, tok) -> int | None:
    for key in ("max_position_embeddings", "max_sequence_length", "n_positions", "seq_length"):
        v = config.get(key) or (config.get("text_config") or {}).get(key)
        if isinstance(v, int) and v > 0:
            return v
    v = getattr(getattr(tok, "_tokenizer", tok), "model_max_length", None)
    return v if isinstance(v, int) and 0 < v < 10_000_000 else None


def load_verifier(spec: str | None = None) -> Verifier:
    """Load a verifier by alias, GGUF file, local folder or hub id (default: default_model()),
    with its weights evaluated (safe to hand to a worker thread)."""
    import mlx_lm

    name = spec or default_model()
    path = resolve_model(name)
    try:
        model, tok, config = mlx_lm.load(path, return_config=True)
    except Exception as e:
        hint = "" if Path(path).exists() else (
            " — it is not a local folder, so mlx-lm tried the Hugging Face hub; with no network "
            "use an offline alias (smollm2-135m, gemma3-270m) or a local GGUF/MLX folder")
        raise VerifierError(f"cannot load verifier {name!r}: {e}{hint}") from e
    mx.eval(model.parameters())
    return Verifier(model, tok, verifier_tokenizer(tok, name), name,
                    context_length=_context_length(config, tok), path=str(path))


def load_tokenizer(spec: str | None = None) -> Tokenizer:
    """A tokenizer alone (no weights): 'mistral' (Mistral-7B-v0.1), a SentencePiece .model
    file, a verifier alias or GGUF file (its tokenizer), or a HF/mlx-lm model path or id."""
    if spec in MISTRAL_ALIASES:
        return sentencepiece_tokenizer(mistral_tokenizer_path(), MISTRAL_NAME)
    if spec in ALIASES or spec.lower().endswith(".gguf"):
        return hf_tokenizer(resolve_model(spec), name=spec if spec in ALIASES else None)
    if os.path.isfile(spec) and not spec.endswith(".json"):
        return sentencepiece_tokenizer(spec)
    return hf_tokenizer(spec)

"""A loaded verifier: the mlx-lm model, its tokenizer and the identity a draft model must match."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from olifant_mlx.mlx_setup import mx
from olifant_mlx.verifier.aliases import (ALIASES, VerifierError, default_model, offline_hint, resolve_model,
                                          stderr_progress)
from olifant_mlx.verifier.tokenizers import (MISTRAL_ALIASES, MISTRAL_NAME, Tokenizer, hf_tokenizer,
                                             mistral_tokenizer_path, sentencepiece_tokenizer,
                                             wrap_hf_tokenizer)


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text: str, what: str = "the prompt") -> None:
    """VerifierError when `text` cannot be encoded as UTF-8 (a lone surrogate: JSON's "\\ud800",
    or an undecodable byte of a command-line argument), naming where; a tokenizer would say
    only "TextEncodeInput must be Union[...]"."""
    m = LONE_SURROGATE.search(text) if isinstance(text, str) else None
    if m is not None:
        c = ord(m.group())
        byte = f"; an undecodable byte 0x{c - 0xDC00:02X} in a command-line argument?" if 0xDC80 <= c <= 0xDCFF else ""
        raise VerifierError(f"{what} is not valid Unicode text: character {m.start() + 1} is a lone "
                            f"surrogate U+{c:04X}{byte} (send the text as UTF-8, or the character "
                            f"it stands for)")


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
    shard: object = None        # this process's part of a sharded verifier (engine.distributed)

    @property
    def eos_ids(self) -> tuple:
        return tuple(sorted(self.tokenizer.eos_token_ids))

    @property
    def bos_id(self) -> int | None:
        return self.tokenizer.bos_token_id

    def encode(self, text: str) -> list[int]:
        """Prompt ids as the verifier reads them (with BOS when the model is trained with it)."""
        check_text(text)
        return list(self.tokenizer.encode(text))

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "has_chat_template", False))

    def chat_ids(self, messages, template_kwargs=None, prefill: str | None = None) -> list[int]:
        """A conversation formatted by the verifier's chat template, ready for the assistant's
        turn (mlx-lm's way: the template's text, encoded without extra special tokens). With
        `prefill` (mlx-lm's --prefill-response) the assistant's turn is open and starts with it."""
        if not self.has_chat_template:
            raise VerifierError(f"verifier {self.name!r} has no chat template: give a plain "
                                f"prompt (a base model continues text)")
        messages, kwargs = list(messages), dict(template_kwargs or {})
        for n, m in enumerate(messages, 1):
            content = m.get("content") if isinstance(m, dict) else None
            for part in content if isinstance(content, list) else [content]:
                text = part.get("text") if isinstance(part, dict) else part
                check_text(text, f"message {n} ({m.get('role', '?')})")
        check_text(prefill, "--prefill-response")
        if prefill is not None:
            messages.append({"role": "assistant", "content": prefill})
            kwargs["continue_final_message"] = True
        text = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=prefill is None, **kwargs)
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


def load_verifier(spec: str | None = None, shard=None, adapter_path: str | None = None) -> Verifier:
    """Load a verifier by alias, GGUF file, local folder or hub id (default: default_model()),
    with its weights evaluated (safe to hand to a worker thread). With `shard` (an
    engine.distributed.Shard, under mlx.launch), this rank's shard of rank 0's verifier.
    `adapter_path`: LoRA adapters (mlx_lm.lora's folder) applied by mlx-lm's own `load`."""
    import mlx_lm

    if shard is not None:
        if adapter_path:
            raise VerifierError("adapters are not supported on a sharded verifier (as in mlx-lm)")
        return load_sharded(spec, shard)
    name = spec or default_model()
    path = resolve_model(name)
    try:
        with stderr_progress(f"loading {name}"):
            model, tok, config = mlx_lm.load(path, adapter_path=adapter_path, return_config=True)
            mx.eval(model.parameters())
    except Exception as e:
        hint = "" if Path(path).exists() else (
            f" — it is not a local folder, so mlx-lm tried the Hugging Face hub; with no network "
            f"use {offline_hint()}")
        raise VerifierError(f"cannot load verifier {name!r}: {e}{hint}") from e
    extra = {"adapter_path": str(adapter_path)} if adapter_path else {}
    return Verifier(model, tok, verifier_tokenizer(tok, name), name,
                    context_length=_context_length(config, tok), path=str(path), extra=extra)


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


PIPELINE_FAMILIES = "qwen2, qwen3-moe, deepseek v2/v3, glm4-moe, ministral3, mistral4, qwen3-next"


def load_sharded(spec, shard) -> Verifier:
    """This rank's shard of the verifier rank 0 names (`spec` counts on rank 0 only). GGUF
    files and aliases: the converted folder, loaded lazily, split by the model's own
    `shard(group)` (tensor) or `model.pipeline(group)` (pipeline), then only this rank's part
    evaluated; MLX folders and hub ids: mlx-lm's `sharded_load`, which downloads only this
    rank's files. `shard.mode` "auto" becomes tensor where the model allows it, else pipeline.
    Every rank must end with the same model and tokenizer (checked)."""
    from mlx_lm.utils import load_config, load_model, load_tokenizer, sharded_load

    name = shard.share_json((spec or default_model()) if shard.is_root else None, "model")
    gguf = name in ALIASES or name.lower().endswith(".gguf")
    path = resolve_model(name)
    local = Path(path).is_dir()
    try:
        if local or gguf:   # lazily: no weights read yet
            model, config = load_model(Path(path), lazy=True, strict=False)
        else:               # a hub id: its configuration first (small files), to check the split
            from mlx_lm.utils import _download

            model, config = None, load_config(_download(path, allow_patterns=["*.json"]))
        mode = _split_mode(name, config, model, shard)
        if gguf:
            if mode == "tensor":
                model.shard(shard.group)
            else:
                model.model.pipeline(shard.group)
            mx.eval(model.parameters())
            tok = load_tokenizer(Path(path), None,
                                 eos_token_ids=config.get("eos_token_id", None))
        else:
            model, tok, config = sharded_load(path, shard.group if mode == "pipeline" else None,
                                              shard.group if mode == "tensor" else None,
                                              return_config=True)
    except (VerifierError, ValueError, OSError) as e:
        raise VerifierError(f"cannot load {shard.label}'s shard of {name!r}: {e}") from e
    shard.mode = mode
    v = Verifier(model, tok, verifier_tokenizer(tok, name), name,
                 context_length=_context_length(config, tok), path=str(path), shard=shard)
    cfg = json.dumps(config, sort_keys=True, default=str)
    shard.check_same(f"{cfg}|{v.identity.digest.hex()}|{mode}", f"verifier ({name})")
    return v


def _split_mode(name, config, model, shard) -> str:
    """The sharding this model allows for shard.size ranks: shard.mode, or tensor before
    pipeline for "auto"; a VerifierError says why not."""
    n = shard.size
    family = config.get("model_type", "?")
    heads = config.get("num_attention_heads")
    kv = config.get("num_key_value_heads") or heads
    inter = config.get("intermediate_size")
    layers = config.get("num_hidden_layers")
    tensor_ok = model is None or hasattr(model, "shard")
    why_tensor = "" if tensor_ok else f"mlx-lm has no tensor parallelism for {family} models"
    if tensor_ok:
        bad = [f"{v} {what}" for v, what in ((heads, "attention heads"), (kv, "KV heads"),
                                              (inter, "MLP units")) if isinstance(v, int) and v % n]
        if bad:
            tensor_ok = False
            divisors = [d for d in range(2, 65) if all(not isinstance(v, int) or v % d == 0
                                                       for v in (heads, kv, inter))]
            why_tensor = (f"its {' and '.join(bad)} do not split {n} ways (tensor parallel works "
                          f"over {', '.join(map(str, divisors)) or 'no number of'} ranks)")
    pipe_ok = model is None or (hasattr(model, "model") and hasattr(model.model, "pipeline"))
    why_pipe = "" if pipe_ok else (f"mlx-lm has no pipeline for {family} models (it has for "
                                   f"{PIPELINE_FAMILIES})")
    if pipe_ok and isinstance(layers, int) and layers < n:
        pipe_ok, why_pipe = False, f"its {layers} layers are fewer than the {n} ranks"
    mode = shard.mode
    if mode == "auto":
        mode = "tensor" if tensor_ok else "pipeline" if pipe_ok else None
        if mode is None:
            raise VerifierError(f"{name} cannot be sharded over {n} ranks: tensor parallel: "
                                f"{why_tensor}; pipeline: {why_pipe}")
    if mode == "tensor" and not tensor_ok:
        raise VerifierError(f"{name} cannot be split {n} ways in tensor parallel: {why_tensor}"
                            + ("; --sharded pipeline can" if pipe_ok else ""))
    if mode == "pipeline" and not pipe_ok:
        raise VerifierError(f"{name} cannot be split in a pipeline: {why_pipe}"
                            + ("; --sharded tensor can" if tensor_ok else ""))
    return mode

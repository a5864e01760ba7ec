"""A prompt's KV cache in a file (mlx-lm's `--prompt-cache-file`): made once by `cache-prompt`,
loaded by `generate --prompt-cache-file`, whose prompt then continues the cached one.

The format is mlx-lm's (`save_prompt_cache`: safetensors, metadata `model` and
`tokenizer_config`), so `mlx_lm.generate --prompt-cache-file` reads ours. Ours also records the
prompt's tokens (drafting reads them) and the tokenizer's digest and vocabulary size (a file
from another model is refused before the verifier loads). The file holds state derived from the
user's text: written atomically, mode 0600.
"""
from __future__ import annotations

import json
import os

from olifant_mlx.files import private_output

SUFFIX = ".safetensors"


class PromptFileError(ValueError):
    """A prompt cache file that cannot be used, naming the file and the fix."""


def _metadata(path) -> dict:
    """The file's metadata, read without its arrays (the safetensors header)."""
    import struct

    name = os.fspath(path)
    if not name.endswith(SUFFIX):
        raise PromptFileError(f"{name}: a prompt cache file is a {SUFFIX} file (mlx-lm's format)")
    try:
        with open(name, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            if not 2 <= size <= 1 << 26:
                raise ValueError
            header = json.loads(f.read(size))
    except FileNotFoundError:
        raise PromptFileError(f"{name}: no such file (make one with `python -m olifant_mlx "
                              f"cache-prompt`)") from None
    except (OSError, ValueError, struct.error):
        raise PromptFileError(f"{name}: not a prompt cache file (a safetensors file made by "
                              f"`cache-prompt` or mlx_lm.cache_prompt)") from None
    meta = header.get("__metadata__") or {}
    return {k[2:]: v for k, v in meta.items() if k.startswith("0.")}     # mlx-lm's first list item


def check(path, tokenizer) -> dict:
    """Refuse, before any model loads, a file made for another tokenizer or without the
    tokens drafting needs; its metadata otherwise."""
    meta = _metadata(path)
    if "olifant_tokens" not in meta:
        raise PromptFileError(f"{os.fspath(path)}: made by mlx_lm.cache_prompt, which does not record "
                              f"the prompt's tokens (drafting reads them): make it with `python -m "
                              f"olifant_mlx cache-prompt --model {tokenizer.name}`")
    if meta.get("olifant_tokenizer") != tokenizer.digest.hex() or \
            meta.get("olifant_vocab_size") != str(tokenizer.vocab_size):
        raise PromptFileError(f"{os.fspath(path)}: made for another model ({meta.get('model', '?')}), "
                              f"not {tokenizer.name}: make one for it with `python -m olifant_mlx "
                              f"cache-prompt --model {tokenizer.name}`")
    return meta


def save(path, layers, tokens, verifier) -> None:
    """The cache (holding `tokens`) in mlx-lm's format, atomically, 0600."""
    from mlx_lm.models.cache import save_prompt_cache

    from olifant_mlx.engine.cache import held_tokens

    if not os.fspath(path).endswith(SUFFIX):
        raise PromptFileError(f"{os.fspath(path)}: a prompt cache file must end in {SUFFIX} (mlx-lm's format)")
    if held_tokens(layers) != len(tokens):
        raise RuntimeError("the cache does not hold the prompt it is saved with")
    ident = verifier.identity
    meta = {"model": verifier.name, "tokenizer_config": "{}", "olifant_tokens": json.dumps(list(tokens)),
            "olifant_tokenizer": ident.digest.hex(), "olifant_vocab_size": str(ident.vocab_size)}
    with private_output(path) as tmp:
        save_prompt_cache(os.fspath(tmp), layers, meta)


def _shape(layers) -> list:
    return [(type(c).__name__, getattr(c, "max_size", None)) for c in layers]


def load(path, tokenizer, model, max_kv_size=None):
    """(layers, tokens) of a checked file, whose cache must be the one `model` makes with
    `max_kv_size` (the same layers, the same windows)."""
    from mlx_lm.models.cache import load_prompt_cache

    from olifant_mlx.engine.cache import held_tokens, make_cache

    meta = check(path, tokenizer)
    layers = load_prompt_cache(os.fspath(path))
    tokens = [int(t) for t in json.loads(meta["olifant_tokens"])]
    if _shape(layers) != _shape(make_cache(model, max_kv_size)):
        raise PromptFileError(f"{os.fspath(path)}: its cache is not the one this verifier makes with "
                              f"--max-kv-size {max_kv_size or 'none'} (another model, or another "
                              f"--max-kv-size when it was made)")
    if held_tokens(layers) != len(tokens):
        raise PromptFileError(f"{os.fspath(path)}: its cache and its tokens disagree (a damaged file)")
    return layers, tokens

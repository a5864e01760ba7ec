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
MAX_HEADER = 1 << 26
# safetensors' dtypes and their sizes in bytes
ITEM_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
              "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
REMAKE = "make it again with `python -m olifant_mlx cache-prompt`"


class PromptFileError(ValueError):
    """A prompt cache file that cannot be used, naming the file and the fix."""


def damaged(path, problem: str) -> PromptFileError:
    return PromptFileError(f"{os.fspath(path)}: a damaged prompt cache file ({problem}): {REMAKE}")


def _header(path) -> dict:
    """The file's safetensors header, read without its arrays and checked: every array's dtype,
    shape and byte range inside the file. A FIFO or other non-regular file is refused unopened."""
    import struct

    from olifant_mlx.files import NotARegularFile, open_regular_file

    name = os.fspath(path)
    if not name.endswith(SUFFIX):
        raise PromptFileError(f"{name}: a prompt cache file is a {SUFFIX} file (mlx-lm's format)")
    try:
        with open_regular_file(name, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            length = struct.unpack("<Q", f.read(8))[0]
            if not 2 <= length <= min(MAX_HEADER, size - 8):
                raise ValueError
            header = json.loads(f.read(length))
    except FileNotFoundError:
        raise PromptFileError(f"{name}: no such file (make one with `python -m olifant_mlx "
                              f"cache-prompt`)") from None
    except NotARegularFile as e:
        raise PromptFileError(f"{name}: {str(e).removeprefix(name + ' ')}: a prompt cache file is a "
                              f"regular {SUFFIX} file") from None
    except (OSError, ValueError, struct.error):
        raise PromptFileError(f"{name}: not a prompt cache file (a safetensors file made by "
                              f"`cache-prompt` or mlx_lm.cache_prompt)") from None
    problem = _header_problem(header, size - 8 - length)
    if problem is not None:
        raise damaged(name, problem)
    return header


def _header_problem(header, data_bytes: int) -> str | None:
    """Why a parsed safetensors header cannot be read safely, or None."""
    if not isinstance(header, dict):
        return "its header is not an object"
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        return "its metadata is not text"
    for key, t in header.items():
        if key == "__metadata__":
            continue
        if not isinstance(t, dict) or not isinstance(t.get("dtype"), str) or t["dtype"] not in ITEM_BYTES:
            return f"array {key[:40]!r} has no known dtype"
        shape, offsets = t.get("shape"), t.get("data_offsets")
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            return f"array {key[:40]!r} has a bad shape"
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int for n in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data_bytes):
            return f"array {key[:40]!r} lies outside the file"
        count = 1
        for n in shape:
            count *= n
        if offsets[1] - offsets[0] != count * ITEM_BYTES[t["dtype"]]:
            return f"array {key[:40]!r} has {offsets[1] - offsets[0]} bytes for its shape"
    return None


def _metadata(path) -> dict:
    """Our metadata: mlx-lm's first list item (its keys "0.NAME")."""
    meta = _header(path).get("__metadata__", {})
    return {k[2:]: v for k, v in meta.items() if k.startswith("0.")}


def _classes(path) -> list:
    """The cache's layer classes as the file names them (mlx-lm's second list item)."""
    meta = _header(path).get("__metadata__", {})
    return [meta[k] for k in sorted((k for k in meta if k.startswith("1.") and k[2:].isdigit()),
                                    key=lambda k: int(k[2:]))]


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
        raise PromptFileError(f"{os.fspath(path)}: made for another model ({meta.get('model', '?')[:100]}), "
                              f"not {tokenizer.name}: make one for it with `python -m olifant_mlx "
                              f"cache-prompt --model {tokenizer.name}`")
    try:
        tokens = json.loads(meta["olifant_tokens"])
    except ValueError:
        tokens = None
    if not isinstance(tokens, list) or not tokens or \
            not all(type(t) is int and 0 <= t < tokenizer.vocab_size for t in tokens):
        raise damaged(path, "its prompt's tokens are not token ids of this model")
    return meta


def check_target(path) -> None:
    """Where `cache-prompt` may write, checked before the verifier loads: a .safetensors name in
    a folder that exists and can take a new file, and no FIFO, device or folder there (written
    like every other file)."""
    from olifant_mlx.files import check_writable

    if not os.fspath(path).endswith(SUFFIX):
        raise PromptFileError(f"{os.fspath(path)}: a prompt cache file must end in {SUFFIX} (mlx-lm's format)")
    check_writable(path, "prompt cache file")


def save(path, layers, tokens, verifier) -> None:
    """The cache (holding `tokens`) in mlx-lm's format, atomically, 0600."""
    from mlx_lm.models.cache import save_prompt_cache

    from olifant_mlx.engine.cache import held_tokens

    check_target(path)
    if held_tokens(layers) != len(tokens):
        raise RuntimeError("the cache does not hold the prompt it is saved with")
    ident = verifier.identity
    meta = {"model": verifier.name, "tokenizer_config": "{}", "olifant_tokens": json.dumps(list(tokens)),
            "olifant_tokenizer": ident.digest.hex(), "olifant_vocab_size": str(ident.vocab_size)}
    with private_output(path) as tmp:
        save_prompt_cache(os.fspath(tmp), layers, meta)


def _shape(layers) -> list:
    return [(type(c).__name__, getattr(c, "max_size", None)) for c in layers]


def _layer_problem(c, probe) -> str | None:
    """Why a loaded layer is not one the model can attend through, compared with `probe` (the
    same layer of a fresh cache fed one token), or None."""
    from mlx_lm.models.cache import RotatingKVCache

    from olifant_mlx.mlx_setup import mx

    got, want = c.state, probe.state
    if len(got) != len(want):
        return "a layer of another kind"
    for a, b in zip(got, want):
        if isinstance(b, mx.array):
            if not isinstance(a, mx.array) or a.ndim != b.ndim or a.dtype != b.dtype or \
                    a.shape[:-2] + a.shape[-1:] != b.shape[:-2] + b.shape[-1:]:
                return "keys or values of another shape"
        elif type(a) is not int or a < 0:
            return "a count that is not a whole number"
    held = c.keys.shape[-2]
    if isinstance(c, RotatingKVCache):
        if (c.max_size, c.keep) != (probe.max_size, probe.keep) or held > c.max_size or \
                not 0 <= c._idx <= held or held < min(c.offset, c.max_size):
            return "a window that does not add up"
    elif c.offset > held:
        return "more tokens counted than held"
    return None


def load(path, tokenizer, model, max_kv_size=None):
    """(layers, tokens) of a checked file, whose cache must be the one `model` makes with
    `max_kv_size` (the same layers, the same windows, arrays of the same shapes). Every
    malformed file is a PromptFileError naming it."""
    from mlx_lm.models.cache import load_prompt_cache

    from olifant_mlx.engine.cache import held_tokens, make_cache
    from olifant_mlx.mlx_setup import mx

    meta = check(path, tokenizer)
    probe = make_cache(model, max_kv_size)
    mismatch = PromptFileError(f"{os.fspath(path)}: its cache is not the one this verifier makes with "
                               f"--max-kv-size {max_kv_size or 'none'} (another model, or another "
                               f"--max-kv-size when it was made)")
    # named before mlx-lm looks them up (a hostile name is any global of its module)
    if _classes(path) != [type(c).__name__ for c in probe]:
        raise mismatch
    tokens = [int(t) for t in json.loads(meta["olifant_tokens"])]
    try:
        layers = load_prompt_cache(os.fspath(path))
    except Exception as e:          # mlx's reader and mlx-lm's rebuild, on bytes from anywhere
        raise damaged(path, f"unreadable: {type(e).__name__}") from None
    if _shape(layers) != _shape(probe):
        raise mismatch
    model(mx.array([[0]]), cache=probe)        # one token: the shapes a layer of this model holds
    try:
        problem = next((p for p in map(_layer_problem, layers, probe) if p is not None), None)
    except Exception as e:          # a layer whose state is not even of the right types
        problem = f"unreadable layers: {type(e).__name__}"
    if problem is not None:
        raise damaged(path, problem)
    if held_tokens(layers) != len(tokens):
        raise PromptFileError(f"{os.fspath(path)}: its cache and its tokens disagree (a damaged file)")
    return layers, tokens

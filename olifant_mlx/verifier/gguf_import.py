"""Turn a GGUF file (llama.cpp, Ollama) into a model folder mlx-lm loads.

Reading and dequantising is the `gguf` package's (llama.cpp's own reader);
the tokenizer is rebuilt from the file's metadata with transformers' GGUF
tokenizer builders (no torch needed). What remains here is the mapping
llama.cpp applied on export, undone:
- tensor names back to the Hugging Face names mlx-lm expects;
- llama/mistral: attn_q / attn_k rows were permuted per head (rotary halves
  interleaved) — inverted here;
- gemma3: RMSNorm weights were stored as 1 + w — 1 is subtracted.
Supported architectures: llama (incl. mistral and SmolLM), qwen2, gemma3. The file's chat
template (`tokenizer.chat_template`) is kept, so instruct models get their prompt format.
"""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np

from olifant_mlx.files import (NotARegularFile, atomic_writer, open_regular_file, private_files, private_output,
                               write_atomic)

SUPPORTED = ("llama", "qwen2", "gemma3")
VERSIONS = (2, 3)
SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUFValueType
STRING, ARRAY, UINT32 = 8, 9, 4
MAX_DIMS = 8


class GGUFError(ValueError):
    """A GGUF file that cannot be converted (unsupported architecture, damaged file)."""


class _Cursor:
    """Reads a GGUF file's header front to back; running off the end is a GGUFError that
    names the file, what was being read and where."""

    def __init__(self, f, size: int, path):
        self.f, self.size, self.path, self.pos = f, size, path, 0

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.size:
            raise GGUFError(f"{self.path}: truncated GGUF ({self.size:,} bytes): cut off in {what} "
                            f"at byte {self.pos:,} (an interrupted download or copy?)")

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        self.pos += n
        return self.f.read(n)

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n
        self.f.seek(self.pos)

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.take(8, what))[0]

    def string(self, what: str) -> bytes:
        return self.take(self.u64(what), what)


def _skip_value(cur: _Cursor, vtype: int, what: str, nested: bool = False) -> None:
    if vtype in SCALAR_BYTES:
        cur.skip(SCALAR_BYTES[vtype], what)
    elif vtype == STRING:
        cur.skip(cur.u64(what), what)
    elif vtype == ARRAY and not nested:
        itype, count = cur.u32(what), cur.u64(what)
        if itype in SCALAR_BYTES:
            cur.skip(SCALAR_BYTES[itype] * count, what)
        else:
            for _ in range(count):        # each item takes bytes: a false count runs off the end
                _skip_value(cur, itype, what, nested=True)
    else:
        raise GGUFError(f"{cur.path}: damaged GGUF: {what} has unknown value type {vtype}")


def _version(cur: _Cursor) -> int:
    magic = cur.take(4, "the magic number")
    if magic != b"GGUF":
        raise GGUFError(f"{cur.path}: not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    version = cur.u32("the version")
    swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
    if version not in VERSIONS and swapped in VERSIONS:
        raise GGUFError(f"{cur.path}: a big-endian GGUF (version {swapped}); only little-endian "
                        f"files (llama.cpp's default) are read: convert it with gguf-convert-endian")
    if version not in VERSIONS:
        raise GGUFError(f"{cur.path}: GGUF version {version} is not supported (versions "
                        f"{', '.join(map(str, VERSIONS))} are)")
    return version


def _tensor_end(cur: _Cursor, i: int) -> tuple[str, int]:
    """One tensor info: (name, offset of its data's end from the data section's start)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    what = f"tensor info {i}"
    name = cur.string(what).decode("utf-8", "replace")
    n_dims = cur.u32(what)
    if n_dims > MAX_DIMS:
        raise GGUFError(f"{cur.path}: damaged GGUF: tensor {name} claims {n_dims} dimensions")
    elements = int(np.prod([cur.u64(what) for _ in range(n_dims)], dtype=object))
    kind, offset = cur.u32(what), cur.u64(what)
    try:
        block, type_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ValueError, KeyError):
        raise GGUFError(f"{cur.path}: tensor {name} has unknown data type {kind}") from None
    if elements % block:
        raise GGUFError(f"{cur.path}: damaged GGUF: tensor {name} has {elements} values, not whole "
                        f"blocks of {block}")
    return name, offset + elements // block * type_bytes


def check_layout(path) -> None:
    """Walk a GGUF file's header, metadata and tensor table, and check its tensors' data lies
    within the file: a truncated, damaged, big-endian or foreign file is a GGUFError naming
    the file and the problem, before the gguf reader fails on it with numpy's errors."""
    try:
        f = open_regular_file(path, "rb")
    except NotARegularFile as e:
        raise GGUFError(f"GGUF {e}") from None
    except OSError as e:
        raise GGUFError(f"cannot read GGUF file {path}: {e.strerror}") from None
    with f:
        import os

        cur = _Cursor(f, os.fstat(f.fileno()).st_size, path)
        _version(cur)
        n_tensors, n_kv = cur.u64("the tensor count"), cur.u64("the metadata count")
        alignment = 32
        for i in range(n_kv):
            key = cur.string(f"metadata entry {i}").decode("utf-8", "replace")
            vtype = cur.u32(f"metadata {key}")
            if key == "general.alignment" and vtype == UINT32:
                alignment = cur.u32(f"metadata {key}") or 32
            else:
                _skip_value(cur, vtype, f"metadata {key}")
        ends = [_tensor_end(cur, i) for i in range(n_tensors)]
        data_start = -(-cur.pos // alignment) * alignment
        for name, end in ends:
            if data_start + end > cur.size:
                raise GGUFError(f"{path}: truncated GGUF: tensor {name} ends at byte "
                                f"{data_start + end:,} but the file has {cur.size:,} bytes "
                                f"(an interrupted download or copy?)")


def _fields(reader) -> dict:
    out = {}
    for key, field in reader.fields.items():
        try:
            out[key] = field.contents()
        except Exception:  # exotic types we do not need
            continue
    return out


def _config(arch: str, meta: dict, has_output: bool, path="") -> dict:
    def g(name, default=None):
        return meta.get(f"{arch}.{name}", default)

    def need(name):
        value = g(name)
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise GGUFError(f"{path}: metadata {arch}.{name} is missing or not a positive number ({value!r})")
        return int(value)

    if not meta.get("tokenizer.ggml.tokens"):
        raise GGUFError(f"{path}: metadata tokenizer.ggml.tokens (the vocabulary) is missing")
    heads = need("attention.head_count")
    hidden = need("embedding_length")
    vocab = len(meta["tokenizer.ggml.tokens"])
    common = {
        "hidden_size": hidden,
        "intermediate_size": need("feed_forward_length"),
        "num_hidden_layers": need("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g("attention.head_count_kv", heads)),
        "rms_norm_eps": float(g("attention.layer_norm_rms_epsilon", 1e-6)),
        "vocab_size": vocab,
        "max_position_embeddings": int(g("context_length", 4096)),
        "tie_word_embeddings": not has_output,
        "rope_theta": float(g("rope.freq_base", 10000.0)),
    }
    if arch == "llama":
        return {**common, "model_type": "llama", "architectures": ["LlamaForCausalLM"],
                "head_dim": int(g("rope.dimension_count", hidden // heads))}
    if arch == "qwen2":
        return {**common, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}
    head_dim = int(g("attention.key_length", 256))
    return {**common, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
            "head_dim": head_dim, "query_pre_attn_scalar": head_dim,
            "sliding_window": int(g("attention.sliding_window", 512)),
            "sliding_window_pattern": 6, "rope_local_base_freq": 10000.0,
            "tie_word_embeddings": True}


_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
}
_NORMS_LLAMA = {"ffn_norm": "post_attention_layernorm"}
_NORMS_GEMMA = {"post_attention_norm": "post_attention_layernorm",
                "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}


def _hf_name(arch: str, name: str) -> str | None:
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if name in top:
        return top[name]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name)
    if not m:
        return None
    layer, part, kind = m.groups()
    table = {**_LAYER_NAMES, **(_NORMS_GEMMA if arch == "gemma3" else _NORMS_LLAMA)}
    if part not in table:
        return None
    return f"model.layers.{layer}.{table[part]}.{kind}"


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Invert llama.cpp's per-head interleaving of the rotary halves (q and k rows)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tokenizer(arch: str, meta: dict, out_dir: Path) -> None:
    from tokenizers import pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

    tok_dict = {name: meta[f"tokenizer.{key}"]
                for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
                if f"tokenizer.{key}" in meta}
    for k in ("token_type", "scores"):
        if k in tok_dict:
            tok_dict[k] = list(tok_dict[k])
    backend, _ = convert_gguf_tokenizer(arch, tok_dict)
    if tok_dict.get("pre_tokenizer_type") == "smollm":
        # SmolLM's pre-tokenizer: every digit alone, then GPT-2 byte-level splitting
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tokens = tok_dict["tokens"]
    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token", False) and bos_id is not None:
        # models trained with BOS (gemma) produce garbage without it
        bos = tokens[int(bos_id)]
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 $B:1", special_tokens=[(bos, int(bos_id))])

    def special(key):
        i = meta.get(f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    # an instruct model's chat template travels with it: without it an instruction gets no
    # answer (the model sees plain text and ends at once)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=special("bos_token_id"),
                                  eos_token=special("eos_token_id"), unk_token=special("unknown_token_id"),
                                  pad_token=special("padding_token_id"),
                                  chat_template=meta.get("tokenizer.chat_template"))
    with private_files(out_dir) as tmp:       # save_pretrained writes its files itself
        tok.save_pretrained(tmp)
        cfg_path = tmp / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["add_bos_token"] = bool(meta.get("tokenizer.ggml.add_bos_token", False))
        cfg["add_eos_token"] = False
        write_atomic(cfg_path, json.dumps(cfg, indent=2))


# GGUF block formats that are exactly MLX's affine quantization (group 32): mlx.core.load reads
# them as MLX arrays (packed weights, scales, biases) without dequantizing
NATIVE_QUANT = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8}


def native_quantization(reader, arch) -> dict | None:
    """mlx-lm's `quantization` config for the GGUF's quantized tensors when every one of them
    is in a format MLX holds natively (so the weights can be kept as they are), else None:
    the commonest bits for all, per-module overrides for the others (e.g. a Q8_0 embedding
    among Q4_1 layers)."""
    import gguf

    bits = {}
    for t in reader.tensors:
        kind = gguf.GGMLQuantizationType(t.tensor_type).name
        if kind in ("F32", "F16", "BF16"):
            continue
        if kind not in NATIVE_QUANT:
            return None
        bits[_hf_name(arch, t.name)[: -len(".weight")]] = NATIVE_QUANT[kind]
    if not bits:
        return None
    common = max(set(bits.values()), key=list(bits.values()).count)
    config = {"group_size": 32, "bits": common}
    config.update({m: {"group_size": 32, "bits": b} for m, b in bits.items() if b != common})
    return config


def _quantized_weights(path, arch, config, reader):
    """The GGUF's tensors as MLX keeps them (quantized ones as weight/scales/biases triplets),
    renamed and unpermuted like the dequantized path: exactly the file's values."""
    from olifant_mlx.mlx_setup import mx

    raw = mx.load(str(path))
    weights = {}
    for t in reader.tensors:
        hf = _hf_name(arch, t.name)
        if hf is None:
            raise GGUFError(f"{path}: unexpected tensor {t.name} for architecture {arch}")
        stem = t.name[: -len(".weight")] if t.name.endswith(".weight") else t.name
        parts = {"weight": raw[t.name]}
        for extra in ("scales", "biases"):
            if f"{stem}.{extra}" in raw:
                parts[extra] = raw[f"{stem}.{extra}"]
        for kind, w in parts.items():
            if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
                heads = config["num_attention_heads"] if "attn_q" in t.name else config["num_key_value_heads"]
                w = mx.array(_unpermute(np.array(w), heads))      # whole rows move: groups intact
            if arch == "gemma3" and t.name.endswith("norm.weight"):
                w = w.astype(mx.float32) - 1.0
            if kind == "weight" and "scales" not in parts and w.dtype != mx.uint32:
                w = w.astype(mx.float32)
            weights[hf if kind == "weight" else hf[: -len("weight")] + kind] = w
    return weights


DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "q4": "float16"}
Q4_GROUP = 64      # mlx_lm.convert -q's default group size


def convert_gguf(gguf_path, out_dir, weights: str = "fp32") -> Path:
    """Write config.json, model.safetensors and the tokenizer for `gguf_path` into out_dir.
    weights: fp32 / fp16 / bf16 dequantize every tensor to that type; q4 keeps the file's
    blocks exactly where MLX holds them natively (all Q4_0, Q4_1 or Q8_0), else dequantizes
    and re-quantizes the matrices to MLX 4-bit (group 64, as `mlx_lm.convert -q`), the rest fp16."""
    import gguf

    from olifant_mlx.mlx_setup import mx

    if weights not in DTYPES:
        raise GGUFError(f"weight format {weights!r}: use one of {', '.join(DTYPES)}")
    path = Path(gguf_path)
    check_layout(path)
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:
        raise GGUFError(f"{path}: not a readable GGUF file: {e}") from e
    meta = _fields(reader)
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED:
        raise GGUFError(f"{path}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED)})")
    names = {t.name for t in reader.tensors}
    config = _config(arch, meta, has_output="output.weight" in names, path=path)
    quantization = native_quantization(reader, arch) if weights == "q4" else None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if quantization is not None:             # the file's own blocks: the GGUF's size, kept whole
        config["quantization"] = quantization
        with private_output(out / "model.safetensors") as tmp:     # mlx writes the file itself
            mx.save_safetensors(str(tmp), _quantized_weights(path, arch, config, reader), metadata={"format": "mlx"})
    else:
        with atomic_writer(out / "model.safetensors") as f:
            write_safetensors(f, _converted(path, reader, arch, config, getattr(mx, DTYPES[weights]), weights == "q4"))
    write_atomic(out / "config.json", json.dumps(config, indent=2))
    _tokenizer(arch, meta, out)
    mx.clear_cache()        # the buffers freed tensor by tensor: not kept beside the loaded verifier
    return out


def _converted(path, reader, arch, config, dtype, requantize: bool):
    """(name, its planned dtype and shape, a function computing it) of every tensor the folder
    holds, in the GGUF's order: dequantized, renamed and undone as llama.cpp exported it, cast to
    `dtype`; with `requantize` the matrices as MLX 4-bit triplets (weight, scales, biases; group
    Q4_GROUP, as mlx_lm.convert -q) and `config` given their quantization. Nothing is computed
    until asked for, one tensor at a time (write_safetensors)."""
    import gguf

    from olifant_mlx.mlx_setup import mx

    def dequantized(t):
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        w = w.reshape(tuple(int(x) for x in reversed(t.shape)))
        if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = config["num_attention_heads"] if "attn_q" in t.name else config["num_key_value_heads"]
            w = _unpermute(w, heads)
        if arch == "gemma3" and t.name.endswith("norm.weight"):
            w = w - 1.0
        return w if dtype == mx.float32 else mx.array(w).astype(dtype)    # fp32: written as it is, no copy

    out = []
    for t in reader.tensors:
        hf = _hf_name(arch, t.name)
        if hf is None:
            raise GGUFError(f"{path}: unexpected tensor {t.name} for architecture {arch}")
        shape = tuple(int(x) for x in reversed(t.shape))
        if requantize and len(shape) == 2 and shape[-1] % Q4_GROUP == 0:
            # matrices only (linear layers, the embedding); norms and biases stay fp16
            stem = hf[: -len("weight")]
            out += [(hf, mx.uint32, (shape[0], shape[1] * 4 // 32),
                     lambda t=t: mx.quantize(dequantized(t), group_size=Q4_GROUP, bits=4)),
                    (stem + "scales", dtype, (shape[0], shape[1] // Q4_GROUP), None),
                    (stem + "biases", dtype, (shape[0], shape[1] // Q4_GROUP), None)]
            config["quantization"] = {"group_size": Q4_GROUP, "bits": 4}
        else:
            out.append((hf, dtype, shape, lambda t=t: dequantized(t)))
    return out


SAFETENSORS_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "uint32": "U32"}


def write_safetensors(f, tensors) -> None:
    """A .safetensors file (the format mlx.core.save_safetensors writes, metadata "format":
    "mlx") of `tensors`, [(name, dtype, shape, compute)], written one tensor at a time: the
    header from the planned dtypes and shapes first, then each tensor as `compute()` makes it,
    and dropped before the next. A converted 1.5B model (7 GB in fp32) so never stands in memory
    whole, as it did when every tensor was kept for one save. A None `compute` is the next part
    of the previous one's result: a `compute` may make several tensors (a quantized matrix's
    weight, scales and biases), which the next entries name."""
    from olifant_mlx.mlx_setup import mx

    header, offset = {"__metadata__": {"format": "mlx"}}, 0
    for name, dtype, shape, _ in tensors:
        size = int(np.prod(shape, dtype=np.int64)) * dtype.size
        header[name] = {"dtype": SAFETENSORS_DTYPES[str(dtype).split(".")[-1]], "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)                     # the data 8-byte aligned, as safetensors pads
    start = f.tell()
    f.write(struct.pack("<Q", len(head)) + head)
    parts = []
    for name, dtype, shape, compute in tensors:
        if compute is not None:
            made = compute()
            parts = list(made) if isinstance(made, (tuple, list)) else [made]
        a = parts.pop(0)
        if isinstance(a, np.ndarray):       # fp32 straight from the GGUF reader
            made = mx.float32 if a.dtype == np.float32 else a.dtype
        else:
            mx.eval(a)
            made = a.dtype
        if made != dtype or tuple(a.shape) != tuple(shape):
            raise GGUFError(f"tensor {name}: made {made} {tuple(a.shape)}, planned {dtype} {tuple(shape)}")
        data = np.asarray(a.view(mx.uint16) if made == mx.bfloat16 else a)   # numpy has no bfloat16
        f.write(memoryview(np.ascontiguousarray(data)).cast("B"))
        del a, data
    if f.tell() - start != 8 + len(head) + offset:
        raise GGUFError(f"wrote {f.tell() - start:,} bytes of safetensors, planned {8 + len(head) + offset:,}")

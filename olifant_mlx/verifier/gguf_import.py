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
from pathlib import Path

import numpy as np

SUPPORTED = ("llama", "qwen2", "gemma3")


class GGUFError(ValueError):
    """A GGUF file that cannot be converted (unsupported architecture, damaged file)."""


def _fields(reader) -> dict:
    out = {}
    for key, field in reader.fields.items():
        try:
            out[key] = field.contents()
        except Exception:  # exotic types we do not need
            continue
    return out


def _config(arch: str, meta: dict, has_output: bool) -> dict:
    def g(name, default=None):
        return meta.get(f"{arch}.{name}", default)

    heads = int(g("attention.head_count"))
    hidden = int(g("embedding_length"))
    vocab = len(meta["tokenizer.ggml.tokens"])
    common = {
        "hidden_size": hidden,
        "intermediate_size": int(g("feed_forward_length")),
        "num_hidden_layers": int(g("block_count")),
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
    tok.save_pretrained(out_dir)
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["add_bos_token"] = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    cfg["add_eos_token"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2))


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


def convert_gguf(gguf_path, out_dir, dtype: str | None = None, keep_quantized: bool = False) -> Path:
    """Write config.json, model.safetensors and the tokenizer for `gguf_path` into out_dir.
    With keep_quantized, a GGUF whose blocks MLX holds natively (Q4_0, Q4_1, Q8_0) keeps its
    quantized weights exactly; otherwise every tensor is dequantized (fp32 below 1.5B
    parameters, fp16 above)."""
    import gguf

    from olifant_mlx.mlx_setup import mx

    path = Path(gguf_path)
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:
        raise GGUFError(f"{path}: not a readable GGUF file: {e}") from e
    meta = _fields(reader)
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED:
        raise GGUFError(f"{path}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED)})")
    names = {t.name for t in reader.tensors}
    config = _config(arch, meta, has_output="output.weight" in names)
    n_params = sum(int(np.prod(t.shape)) for t in reader.tensors)
    dtype = dtype or ("float32" if n_params < 1_500_000_000 else "float16")
    quantization = native_quantization(reader, arch) if keep_quantized else None
    weights = {}
    if quantization is not None:
        weights = _quantized_weights(path, arch, config, reader)
        config["quantization"] = quantization
    for t in reader.tensors if quantization is None else ():
        hf = _hf_name(arch, t.name)
        if hf is None:
            raise GGUFError(f"{path}: unexpected tensor {t.name} for architecture {arch}")
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape(tuple(int(x) for x in reversed(t.shape)))
        if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = config["num_attention_heads"] if "attn_q" in t.name else config["num_key_value_heads"]
            w = _unpermute(w, heads)
        if arch == "gemma3" and t.name.endswith("norm.weight"):
            w = w - 1.0
        weights[hf] = mx.array(w).astype(getattr(mx, dtype))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    _tokenizer(arch, meta, out)
    return out

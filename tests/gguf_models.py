"""Tiny models written as GGUF files the way llama.cpp writes them (the import tests' input)."""
import numpy as np
from mlx.utils import tree_flatten

from olifant_mlx.mlx_setup import mx
from olifant_mlx.verifier.gguf_import import _hf_name


def byte_vocab():
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return ["<|endoftext|>"] + sorted(bytes_to_unicode().values()) + ["Ġt"]


def tiny(arch):
    from mlx_lm.models import gemma3_text, llama, qwen2

    mx.random.seed(3)
    common = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=96, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-6, vocab_size=len(byte_vocab()))
    if arch == "llama":
        m = llama.Model(llama.ModelArgs(model_type="llama", tie_word_embeddings=False,
                                        rope_theta=10000.0, **common))
    elif arch == "qwen2":
        m = qwen2.Model(qwen2.ModelArgs(model_type="qwen2", tie_word_embeddings=True,
                                        rope_theta=10000.0, **common))
    else:
        common["num_hidden_layers"] = 6  # one full sliding-window pattern (5 local + 1 global)
        m = gemma3_text.Model(gemma3_text.ModelArgs(model_type="gemma3_text", head_dim=16,
                                                     query_pre_attn_scalar=16, sliding_window=512,
                                                     **common))
    # give biases and norms values that make a mapping mistake visible
    m.update(_perturb(m))
    mx.eval(m.parameters())
    return m


def _perturb(m):
    from mlx.utils import tree_map

    return tree_map(lambda p: p + 0.1 * mx.random.normal(p.shape), m.parameters())


def permute(w, heads):
    """llama.cpp's export permutation of q/k rows (convert_hf_to_gguf LlamaModel.permute)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {v: k for k, v in {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm"}.items()}


def write_gguf(model, arch, path):
    import gguf

    args = model.args
    w = gguf.GGUFWriter(str(path), arch)
    w.add_uint32(f"{arch}.embedding_length", args.hidden_size)
    w.add_uint32(f"{arch}.block_count", args.num_hidden_layers)
    w.add_uint32(f"{arch}.feed_forward_length", args.intermediate_size)
    w.add_uint32(f"{arch}.attention.head_count", args.num_attention_heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", args.num_key_value_heads)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", args.rms_norm_eps)
    w.add_float32(f"{arch}.rope.freq_base", float(args.rope_theta))
    w.add_uint32(f"{arch}.context_length", 2048)
    if arch == "gemma3":
        w.add_uint32(f"{arch}.attention.key_length", args.head_dim)
        w.add_uint32(f"{arch}.attention.sliding_window", args.sliding_window)
    vocab = byte_vocab()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", vocab)
    w.add_array("tokenizer.ggml.token_type", [3] + [1] * (len(vocab) - 1))
    w.add_array("tokenizer.ggml.merges", ["Ġ t"])
    w.add_uint32("tokenizer.ggml.eos_token_id", 0)
    norms = {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
             "post_feedforward_layernorm": "post_ffw_norm"} if arch == "gemma3" else {
        "post_attention_layernorm": "ffn_norm"}
    for name, p in tree_flatten(model.parameters()):
        a = np.array(p.astype(mx.float32))
        if name == "model.embed_tokens.weight":
            g = "token_embd.weight"
        elif name == "model.norm.weight":
            g = "output_norm.weight"
        elif name == "lm_head.weight":
            g = "output.weight"
        else:
            _, _, layer, *rest = name.split(".")
            part, kind = ".".join(rest[:-1]), rest[-1]
            g = f"blk.{layer}.{GGUF_NAMES.get(part) or norms[part]}.{kind}"
        if arch == "llama" and g.endswith(("attn_q.weight", "attn_k.weight")):
            heads = args.num_attention_heads if "attn_q" in g else args.num_key_value_heads
            a = permute(a, heads)
        if arch == "gemma3" and g.endswith("norm.weight"):
            a = a + 1.0
        assert _hf_name(arch, g) == name
        w.add_tensor(g, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

"""GGUF import: a tiny model written the way llama.cpp writes it converts back exactly."""
import json

import numpy as np
import pytest
from mlx.utils import tree_flatten

from olifant_mlx.verifier.gguf_import import GGUFError, _hf_name, convert_gguf
from olifant_mlx.mlx_setup import mx

gguf = pytest.importorskip("gguf")


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


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_roundtrip(tmp_path, arch):
    import mlx_lm

    model = tiny(arch)
    write_gguf(model, arch, tmp_path / "m.gguf")
    out = convert_gguf(tmp_path / "m.gguf", tmp_path / "mlx")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_hidden_layers"] == model.args.num_hidden_layers
    loaded, tok = mlx_lm.load(str(out))
    x = mx.array([[1, 5, 9, 100, 200, 42, 7]])
    assert mx.allclose(model(x), loaded(x), atol=1e-4).item()
    assert tok.decode(tok.encode("legal text 12")) .endswith("legal text 12")


def test_unsupported_and_damaged(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "mamba")
    w.add_array("tokenizer.ggml.tokens", ["a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match="architecture 'mamba' is not supported"):
        convert_gguf(tmp_path / "x.gguf", tmp_path / "out")
    (tmp_path / "bad.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    with pytest.raises(GGUFError, match="bad.gguf: truncated GGUF .*cut off in metadata entry 0"):
        convert_gguf(tmp_path / "bad.gguf", tmp_path / "out2")


# --- the verifier cache: concurrent first runs ---------------------------------------------

FIRST_RUN = """
import json, sys
from pathlib import Path
from olifant_mlx.verifier import aliases

wheel, sha, gguf_file = sys.argv[1:4]
aliases.ALIASES["fake-alias"] = aliases.Alias(("fake-gguf==1.0",), ("fake_gguf/model.gguf",), sha, "test")
aliases.download_wheel = lambda requirement, dest: Path(wheel)       # no network: a local wheel
print("ready", flush=True)
sys.stdin.readline()                                                 # every process at once
for spec in ("fake-alias", gguf_file):
    folder = Path(aliases.resolve_model(spec))
    config = json.loads((folder / "config.json").read_text())
    assert (folder / "model.safetensors").stat().st_size > 0
    print(folder, config["num_hidden_layers"], flush=True)
"""


def test_concurrent_first_runs_share_one_cache_entry(tmp_path):
    """Four processes resolve the same (fake, local) alias and the same GGUF file for the
    first time at once: each gets a whole converted folder, and the cache holds no leftovers.
    (Before: a fixed models/<alias>.tmp that each run deleted under the others.)"""
    import hashlib
    import os
    import subprocess
    import sys
    import zipfile

    gguf_file = tmp_path / "tiny.gguf"
    write_gguf(tiny("llama"), "llama", gguf_file)
    wheel = tmp_path / "fake_gguf-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(gguf_file, "fake_gguf/model.gguf")
    sha = hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    env = {**os.environ, "OLIFANT_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", FIRST_RUN, str(wheel), sha, str(gguf_file)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        outputs.append(out.split())
    assert all(o == outputs[0] for o in outputs) and outputs[0][1] == "2"
    cache = tmp_path / "cache"
    models = sorted(p.name for p in (cache / "models").iterdir())
    assert len(models) == 4 and models[:2] == ["fake-alias", "fake-alias.lock"]     # + the GGUF's
    assert sorted(p.name for p in (cache / "gguf").iterdir()) == ["fake-alias.gguf", "fake-alias.gguf.lock"]
    assert (cache / "gguf" / "fake-alias.gguf").read_bytes() == gguf_file.read_bytes()


def test_truncated_big_endian_and_incomplete_files_are_named(tmp_path):
    """Each damaged file gets a GGUFError naming the file and its problem, not numpy's
    reshape error or 'version 16777216'."""
    good = tmp_path / "m.gguf"
    write_gguf(tiny("llama"), "llama", good)
    data = good.read_bytes()
    cases = {0: "cut off in the magic number", 6: "cut off in the version", 20: "cut off in the metadata count",
             1000: "cut off in metadata tokenizer.ggml.tokens", len(data) // 2: "truncated GGUF: tensor blk",
             len(data) - 10: "truncated GGUF: tensor output.weight ends at byte"}
    for n, why in cases.items():
        cut = tmp_path / f"cut{n}.gguf"
        cut.write_bytes(data[:n])
        with pytest.raises(GGUFError, match=why) as e:
            convert_gguf(cut, tmp_path / f"out{n}")
        assert str(cut) in str(e.value)
    be = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(str(be), "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_array("tokenizer.ggml.tokens", ["a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match=r"big-endian GGUF \(version 3\).*gguf-convert-endian"):
        convert_gguf(be, tmp_path / "out-be")
    (tmp_path / "v9.gguf").write_bytes(b"GGUF" + (9).to_bytes(4, "little") + bytes(16))
    with pytest.raises(GGUFError, match="GGUF version 9 is not supported"):
        convert_gguf(tmp_path / "v9.gguf", tmp_path / "out-v9")
    bare = tmp_path / "bare.gguf"                     # a llama without its sizes
    w = gguf.GGUFWriter(str(bare), "llama")
    w.add_array("tokenizer.ggml.tokens", ["a", "b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match="metadata llama.attention.head_count is missing"):
        convert_gguf(bare, tmp_path / "out-bare")


def test_a_gguf_path_that_is_a_fifo_is_refused(tmp_path):
    import os

    from olifant_mlx.verifier import VerifierError, resolve_model

    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(VerifierError, match="not a regular file"):
        resolve_model(str(fifo))
    with pytest.raises(GGUFError, match="FIFO"):
        convert_gguf(fifo, tmp_path / "out")

"""Small random verifiers as MLX folders (config, weights, a byte-level tokenizer), for the
sharded-verifier tests: they need no download and shard 2 ways (tensor: 4 heads, 2 KV heads;
pipeline: qwen2, 4 layers)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import olifant_mlx.mlx_setup  # noqa: F401  (OpenBLAS before MLX)

EOS = "<|endoftext|>"
# the draft model memorises the verifier's continuations of these, so drafting from them pays
PROMPTS = ("Article 1. This Regulation", "THE SOFTWARE IS PROVIDED", "The patient was admitted",
           "In witness whereof", "Once upon a time", "Section 2. Definitions")


def byte_tokenizer(folder: Path) -> None:
    """A byte-level BPE without merges: 256 byte tokens and one end-of-text token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab[EOS] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "bos_token": None,
        "unk_token": None, "model_max_length": 4096,
        "chat_template": "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}"}))


def tiny_verifier(folder: Path, family: str = "llama", layers: int = 2, seed: int = 0) -> Path:
    """A random `family` (llama or qwen2) model that mlx-lm loads from `folder`."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.utils import save_config, save_model

    folder.mkdir(parents=True, exist_ok=True)
    byte_tokenizer(folder)
    config = {"model_type": family, "hidden_size": 64, "num_hidden_layers": layers,
              "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-5, "vocab_size": 257, "tie_word_embeddings": True,
              "max_position_embeddings": 4096, "rope_theta": 10000.0, "eos_token_id": 256}
    if family == "llama":
        from mlx_lm.models import llama as arch
    else:
        from mlx_lm.models import qwen2 as arch
    mx.random.seed(seed)
    model = arch.Model(arch.ModelArgs.from_dict(config))
    # scaled weights: greedy output that neither loops at once nor never repeats
    model.update(tree_map(lambda p: p * 2.0, model.parameters()))
    mx.eval(model.parameters())
    save_model(folder, model)
    save_config(config, folder / "config.json")
    return folder


def own_output_draft_model(verifier_folder: Path, out: Path, n: int = 64) -> Path:
    """An IGTree trained on the verifier's own greedy continuations of PROMPTS (so its drafts
    from them get accepted) and of random byte prompts, for the verifier's tokenizer."""
    from olifant_mlx.draftmodel.igtree import Builder
    from olifant_mlx.engine import generate
    from olifant_mlx.verifier import load_verifier

    v = load_verifier(str(verifier_folder))
    ident = v.identity
    b = Builder(vocab_size=ident.vocab_size, tokenizer_name=ident.name,
                tokenizer_digest=ident.digest)
    rng = np.random.default_rng(1)
    prompts = [v.encode(p) for p in PROMPTS] + [rng.integers(32, 127, size=6).tolist() for _ in range(6)]
    for prompt in prompts:
        tokens, _ = generate(v.model, prompt, max_tokens=n, eos_ids=v.eos_ids)
        b.add_document(prompt + tokens)
    b.build().save(str(out))
    return out

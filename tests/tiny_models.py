"""Tiny in-memory verifiers for the fast tests: a 2-layer llama over a 64-id vocabulary, the
tokenizers a Verifier needs over its ids, and the drafters every drafter test runs. Shared by the
test modules, which never import one another (test_architecture checks it)."""
import numpy as np
from mlx.utils import tree_map

from olifant_mlx.drafters import (AdaptiveDrafter, HybridDrafter, LookupDrafter, NeuralDrafter, NgramDrafter,
                                  NoDrafter, OlifantDrafter, WordNgramDrafter, build_drafter, predicting)
from olifant_mlx.draftmodel.igtree import Builder
from olifant_mlx.engine import generate
from olifant_mlx.engine.reference import TextDetokenizer
from olifant_mlx.mlx_setup import mx
from olifant_mlx.verifier import Verifier

VOCAB = 64


def tiny_llama(seed, layers=2):
    from mlx_lm.models import llama

    mx.random.seed(seed)
    args = llama.ModelArgs(model_type="llama", hidden_size=48, num_hidden_layers=layers,
                           intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                           rms_norm_eps=1e-5, vocab_size=VOCAB, tie_word_embeddings=True)
    model = llama.Model(args)
    # scaled weights: greedy output that neither loops at once nor never repeats
    model.update(tree_map(lambda p: p * 2.0, model.parameters()))
    mx.eval(model.parameters())
    return model


def igtree_on_own_output(model):
    """An IGTree trained on the tiny verifier's own greedy output: drafts get accepted."""
    b = Builder(vocab_size=VOCAB)
    rng = np.random.default_rng(1)
    for _ in range(30):
        p = rng.integers(1, VOCAB, size=8).tolist()
        out, _ = generate(model, p, max_tokens=60)
        b.add_document(p + out)
    return b.build()


class CharTok:
    """Token i <-> one letter, for the word-level n-gram."""

    def decode(self, ids):
        return "".join(" " if i % 7 == 0 else chr(97 + i % 26) for i in ids)

    def encode(self, text):
        return [(ord(c) - 97) % 26 + 1 for c in text.strip()]


def drafters(model, olifant):
    yield NoDrafter()
    yield OlifantDrafter(olifant)
    yield NgramDrafter()
    yield LookupDrafter()
    yield WordNgramDrafter(CharTok())
    yield NeuralDrafter(tiny_llama(1, layers=1))
    yield HybridDrafter(OlifantDrafter(olifant, min_depth=1, min_share=0.2))
    yield AdaptiveDrafter(OlifantDrafter(olifant))
    yield AdaptiveDrafter(HybridDrafter(OlifantDrafter(olifant)))
    yield AdaptiveDrafter(NgramDrafter(), prior=0.9)
    yield predicting(build_drafter("prediction"), list(range(1, 40)))


class Tok:
    """What a Verifier needs of an mlx-lm tokenizer, over tiny-model ids."""
    eos_token_ids = []
    bos_token_id = None
    name, vocab_size, digest = "tiny", VOCAB, bytes(32)

    def encode(self, text):
        return [1 + ord(c) % (VOCAB - 1) for c in text]

    def decode(self, ids):
        return "".join(chr(96 + i % 26) for i in ids)

    @property
    def detokenizer(self):
        return TextDetokenizer(self.decode)


def tiny_verifier():
    return Verifier(tiny_llama(0), Tok(), Tok(), "tiny")


class WordTok:
    """Our Tokenizer's encode, one id per character (enough to compare drafts with truth)."""
    name, vocab_size = "chars", 256

    def encode(self, text):
        return list(text.encode())

    def decode(self, ids):
        return bytes(ids).decode("utf-8", "replace")


class ChatTok(Tok):
    """The tiny tokenizer with a chat template (what mlx-lm's TokenizerWrapper offers)."""
    has_chat_template = True

    def encode(self, text, add_special_tokens=True):
        return super().encode(text)

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kw):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


def tiny_chat_verifier():
    return Verifier(tiny_llama(0), ChatTok(), Tok(), "tiny", context_length=2048)


class TinyVerifier:
    """The attributes a Session reads, around an in-memory model with token ids for text."""
    identity = None
    name = "tiny"
    eos_ids = ()
    bos_id = None
    context_length = None
    has_chat_template = False

    def __init__(self, model, shard=None):
        self.model, self.shard = model, shard

    def encode(self, text):
        return [ord(c) % 64 for c in text]

    def detokenizer(self):
        class D:
            last_segment = ""

            def add_token(self, t):
                self.last_segment = chr(97 + t % 26)

            def finalize(self):
                self.last_segment = ""
        return D()


JSON_CHARS = '{}[]":, abcdefghijklmnopqrstuvwxyz0123456789-._ABCDEFGHIJKLMNOP'   # ids 1..63


class JsonTok(ChatTok):
    """The tiny chat tokenizer over text that JSON is written in: id 0 ends the sequence, ids
    1..63 are one character each, and it says its tokens' bytes (`token_bytes`), which is what
    structured output reads of a tokenizer that is not a Hugging Face one."""
    eos_token_ids = [0]

    def encode(self, text, add_special_tokens=True):
        return [JSON_CHARS.index(c) + 1 if c in JSON_CHARS else 8 for c in text]

    def decode(self, ids):
        return "".join(JSON_CHARS[i - 1] if 0 < i < VOCAB else "" for i in ids)

    def token_bytes(self):
        return [b"<eos>"] + [c.encode() for c in JSON_CHARS]


def tiny_json_verifier():
    """The tiny model with JsonTok: a verifier that structured output can constrain."""
    return Verifier(tiny_llama(0), JsonTok(), JsonTok(), "tiny", context_length=2048)


def head64_llama(seed=0):
    """A tiny llama whose head dimension (64) mx.quantize can group."""
    from mlx.utils import tree_map
    from mlx_lm.models import llama

    from olifant_mlx.mlx_setup import mx

    mx.random.seed(seed)
    args = llama.ModelArgs(model_type="llama", hidden_size=128, num_hidden_layers=2, intermediate_size=96,
                           num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-5, vocab_size=VOCAB,
                           tie_word_embeddings=True)
    m = llama.Model(args)
    m.update(tree_map(lambda p: p * 2.0, m.parameters()))
    return m

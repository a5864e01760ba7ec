"""Verifier tokenizers for draft-model training, with a stable identity.

A draft model is only meaningful for the tokenizer it was trained on, so
every tokenizer carries a name, its vocabulary size and a digest: sha256 of
its vocabulary (token strings in id order). The digest does not depend on the
file format, so a SentencePiece model and the Hugging Face conversion of the
same vocabulary agree.

Default: the Mistral-7B-v0.1 SentencePiece model, which ships in the PyPI
package `mistral-common`; if that package is not installed, its wheel is
fetched once with `pip download --no-deps` and the file cached.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from olifant_mlx.files import atomic_writer, cache_dir, write_atomic
from olifant_mlx.verifier.fetch import FetchError, copy_member, download_wheel, sha256_file

MISTRAL_NAME = "mistral-7b-v0.1"
MISTRAL_PACKAGE = "mistral-common==1.13.1"
MISTRAL_MEMBER = "mistral_common/data/tokenizer.model.v1"
MISTRAL_SHA256 = "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"
MISTRAL_ALIASES = {None, "", "mistral", MISTRAL_NAME, "mistralai/Mistral-7B-v0.1"}


class TokenizerError(RuntimeError):
    """A tokenizer that cannot be found, fetched or loaded."""


def vocabulary_digest(pieces) -> bytes:
    h = hashlib.sha256()
    for piece in pieces:
        # an id without a token (a hole in the vocabulary) hashes as a lone NUL
        h.update(b"\0" if piece is None else piece.encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.digest()


class Tokenizer:
    """encode/decode plus identity (name, vocab_size, digest)."""

    def __init__(self, name, vocab_size, digest, encode_batch, decode, eos_ids=()):
        self.name = name
        self.vocab_size = vocab_size
        self.digest = digest
        self._encode_batch = encode_batch
        self._decode = decode
        self.eos_ids = tuple(eos_ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, no BOS/EOS, spacing and line breaks kept."""
        return self._encode_batch(texts)

    def encode(self, text: str) -> list[int]:
        return self._encode_batch([text])[0]

    def decode(self, ids) -> str:
        return self._decode([int(i) for i in ids])

    def identity(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size, "digest": self.digest.hex()}

    def __repr__(self):
        return f"Tokenizer({self.name!r}, vocab={self.vocab_size}, digest={self.digest.hex()[:12]})"


def sentencepiece_tokenizer(path, name=None) -> Tokenizer:
    import sentencepiece as spm

    try:
        sp = spm.SentencePieceProcessor(model_file=str(path))
    except Exception as e:  # sentencepiece raises OSError/RuntimeError variants
        raise TokenizerError(f"cannot load SentencePiece model {path}: {e}") from e
    n = sp.get_piece_size()
    digest = vocabulary_digest(sp.id_to_piece(i) for i in range(n))
    threads = max(1, min(4, os.cpu_count() or 1))
    return Tokenizer(
        name or Path(path).stem, n, digest,
        lambda texts: sp.encode(list(texts), num_threads=threads),
        sp.decode, eos_ids=[sp.eos_id()] if sp.eos_id() >= 0 else [])


def wrap_hf_tokenizer(tok, name: str) -> Tokenizer:
    """Our Tokenizer around a Hugging Face tokenizer (as mlx-lm loads them)."""
    n = max(len(tok), max(tok.get_vocab().values(), default=-1) + 1)
    digest = vocabulary_digest(tok.convert_ids_to_tokens(list(range(n))))
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    return Tokenizer(
        name, n, digest,
        lambda texts: tok(list(texts), add_special_tokens=False)["input_ids"],
        lambda ids: tok.decode(ids), eos_ids=eos)


def hf_tokenizer(spec, name=None) -> Tokenizer:
    """Any Hugging Face / mlx-lm tokenizer by local path or hub id."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(spec)
    except Exception as e:
        raise TokenizerError(
            f"cannot load tokenizer {spec!r}: {e}. Give a local model directory, a "
            f"SentencePiece .model file, 'mistral', or an offline verifier alias "
            f"(offline: hub ids need the network)") from e
    return wrap_hf_tokenizer(tok, name or os.path.basename(os.path.normpath(str(spec))) or str(spec))


def mistral_tokenizer_path() -> Path:
    """The Mistral-7B-v0.1 SentencePiece file: installed mistral-common, cache, or PyPI."""
    try:
        from importlib.resources import files

        p = files("mistral_common").joinpath("data/tokenizer.model.v1")
        if p.is_file():
            return Path(str(p))
    except (ImportError, ModuleNotFoundError, TypeError):
        pass
    target = cache_dir() / "tokenizers" / f"{MISTRAL_NAME}.model"
    if target.is_file() and sha256_file(target) == MISTRAL_SHA256:
        return target
    with tempfile.TemporaryDirectory() as tmp:
        try:
            wheel = download_wheel(MISTRAL_PACKAGE, tmp)
            part = Path(tmp) / "tokenizer.model"
            with atomic_writer(part) as out:
                copy_member(wheel, MISTRAL_MEMBER, out)
        except FetchError as e:
            raise TokenizerError(f"the Mistral tokenizer ships in the PyPI package "
                                 f"{MISTRAL_PACKAGE}; fetching it failed: {e}") from e
        if sha256_file(part) != MISTRAL_SHA256:
            raise TokenizerError(f"{MISTRAL_PACKAGE} has an unexpected tokenizer file (sha256 mismatch)")
        write_atomic(target, part.read_bytes(), mode=0o644)
    return target

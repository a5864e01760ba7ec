"""One way in for every olifant file a user names: `open_model_file(path)` reads the magic and
returns the loaded IGTree (.olif), SuffixIndex (.sfx) or NgramCache (.ngc).

The path is opened without blocking and refused unless it is a regular file (a FIFO or device
never hangs a command); anything else than the three kinds is one error naming the file.
"""
from __future__ import annotations

import os

from olifant_mlx.draftmodel.igtree import IGTree, ModelFileError, lib as _igt
from olifant_mlx.draftmodel.suffix import INDEX_MAGIC, NGRAM_MAGIC, NgramCache, SuffixIndex
from olifant_mlx.files import open_regular

IGTREE_MAGIC = b"OLIFIGT\0"
KINDS = {IGTREE_MAGIC: IGTree, INDEX_MAGIC: SuffixIndex, NGRAM_MAGIC: NgramCache}


def model_file_kind(path):
    """The class (IGTree, SuffixIndex, NgramCache) of the file at path, from its magic."""
    fd = open_regular(path)
    try:
        head = os.read(fd, 8)
    finally:
        os.close(fd)
    cls = KINDS.get(head)
    if cls is None:
        raise ModelFileError(_igt.OLIF_ERR_FOREIGN, (
            f"{os.fspath(path)}: not an olifant model file (bad magic): expected a draft model (.olif, from `train`), "
            f"a suffix index (.sfx) or an n-gram cache (.ngc, both from `build-rest`)"))
    return cls


WHAT = {IGTree: "a draft model (.olif, from `train`)", SuffixIndex: "a suffix index (.sfx, from `build-rest`)",
        NgramCache: "an n-gram cache (.ngc, from `build-rest`)"}


def open_model_file(path, verify_checksum: bool = True, want=None, tokenizer=None):
    """The loaded IGTree, SuffixIndex or NgramCache at path, whichever its magic says; with
    `want` (one of the three), another kind is a ModelFileError saying what the file is; with
    `tokenizer` (a verifier's identity: name, vocab_size, digest), a file built for another
    tokenizer is a TokenizerMismatch."""
    cls = model_file_kind(path)
    if want is not None and cls is not want:
        raise ModelFileError(_igt.OLIF_ERR_FOREIGN, f"{os.fspath(path)} is {WHAT[cls]}, not {WHAT[want]}")
    obj = cls.load(path, verify_checksum=verify_checksum)
    if tokenizer is not None:
        obj.check_tokenizer(tokenizer.name, tokenizer.vocab_size, tokenizer.digest)
    return obj


def check_model_tokenizer(path, name: str, vocab_size: int, digest: bytes, fix: str | None = None):
    """Load the file at path (checksums skipped: this is the quick check before the slow work)
    and refuse it unless it was built for this tokenizer; returns the loaded object."""
    obj = open_model_file(path, verify_checksum=False)
    obj.check_tokenizer(name, vocab_size, digest, fix=fix)
    return obj

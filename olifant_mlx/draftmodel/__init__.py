"""The Olifant draft model: TiMBL's IGTree over windows of the verifier's token ids.

`igtree` binds the C library (csrc/igtree.h), `corpus` turns corpora into token windows,
`train` builds, saves and evaluates a model file.
"""
from olifant_mlx.draftmodel.igtree import (Answer, Builder, IGTree, IGTreeError, ModelFileError,
                                           TokenizerMismatch, library_version)

__all__ = ["Answer", "Builder", "IGTree", "IGTreeError", "ModelFileError", "TokenizerMismatch",
           "library_version"]

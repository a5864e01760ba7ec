"""What the training tests share: a legal-looking corpus, an old model a run must leave alone,
and what a run left behind."""
from pathlib import Path

import numpy as np

from olifant_mlx.draftmodel.igtree import Builder

DOC = ("Article {n}\nThe Member States shall bring into force the laws, regulations and "
       "administrative provisions necessary to comply with this Directive by {n} June.\n"
       "They shall forthwith inform the Commission thereof.")


def legal_text(n_docs: int) -> str:
    return "\n\n".join(DOC.format(n=i) for i in range(n_docs)) + "\n"


def write_old_model(out: Path) -> bytes:
    """A small model for tokenizer "old" at `out` (what a run must leave alone); its bytes."""
    b = Builder(vocab_size=32000, window=4, tokenizer_name="old")
    b.add_documents(np.arange(1, 50, dtype=np.uint32), [0])
    b.build().save(out)
    return out.read_bytes()


def leftovers(folder: Path, *keep) -> list:
    """What a run left in its output folder beyond `keep` (temporary files, partial models)."""
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)

"""The trained IGTree as a drafter: k predictions in one C call, each fed back as context."""
from __future__ import annotations

from olifant_mlx.drafters.base import Draft, DrafterBase, Signal
from olifant_mlx.draftmodel.igtree import IGTree


class OlifantDrafter(DrafterBase):
    """Drafts stop before an answer whose match depth is below `min_depth` or whose winner
    share of its node is below `min_share` (0 and 0.0: never)."""

    def __init__(self, model: IGTree, min_depth: int = 0, min_share: float = 0.0, name="olifant"):
        self.model = model
        self.min_depth = min_depth
        self.min_share = min_share
        self.name = name

    def draft(self, context, k):
        return self.model.draft(context[-self.model.window:], k, self.min_depth, self.min_share)

    def draft_scored(self, context, k):
        """Drafts with their signals: match depth and winner share in quarters."""
        answers = self.model.draft_answers(context, k, self.min_depth, self.min_share)
        share = answers["winner_count"] / answers["total"].clip(min=1)
        return Draft(answers["token"].tolist(),
                     [Signal("igtree", int(d), min(int(s * 4), 3)) for d, s in zip(answers["depth"], share)])


def open_igtree(path, tokenizer) -> IGTree:
    """The IGTree at path, refused unless it is one built for `tokenizer` (None: unchecked)."""
    from olifant_mlx.draftmodel.open import open_model_file

    return open_model_file(path, want=IGTree, tokenizer=tokenizer)


def from_spec(spec, tokenizer, history):
    """`olifant:PATH` (the registry's builder)."""
    return OlifantDrafter(open_igtree(spec.arg, tokenizer))

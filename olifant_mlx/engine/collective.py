"""What the loop asks of a verifier sharded over several processes: one small interface.

Every rank runs the loop on its shard of the verifier, and every rank must take the same
passes and roll its cache back by the same amount. So the drafts and every choice of token
are rank 0's, handed to the loop through a `Collective` (engine.distributed.Shard is the one
implementation; `generate_steps(..., shared=...)`). The loop knows nothing else of ranks: with a
collective it only leaves out the lead rule, which decides from pass times that differ
between ranks.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Collective(Protocol):
    def drafter(self, drafter):
        """The drafter this rank's loop uses: rank 0's drafts, on every rank."""

    def choices(self, pick):
        """The verifier's choice function (engine.sampling.picker's) made rank 0's on every
        rank: each rank computes its own and takes rank 0's (no lazy choice)."""

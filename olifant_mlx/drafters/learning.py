"""What drafting learns across generations, kept apart from every generation's own state.

A drafter object is shared: a Session drafts every request with its default one, a server every
client's with the drafters it was configured with. The engine never drafts with it directly: each
generation opens its own state (`Drafter.open(prompt, learning)`: the n-gram counts, the place in
a prediction, the draft model's KV cache, this answer's acceptance estimates), so generations
that run at the same time never see each other's drafting.

Some of what a generation learns should outlive it: how often each kind of draft is accepted
(the adaptive and hybrid drafters' estimates), how long a verifier pass takes (the adaptive
drafter's cost fit, the lead rule's). That goes through one `Learning`: a generation takes a
private copy of what was kept when it opens and keeps what it ends with when it finishes; the
next generation to open starts from that. Two generations at once each start from what was
kept when they opened (the later to finish is what is kept). `frozen` keeps nothing: every
generation starts from the same estimates, so one request's drafting is exactly what it would
be alone (the tests compare interleaved requests with solo ones this way).

A Session has one (`Session.learning`); a drafter used without one (the engine's
`generate_steps` with no `learning`) keeps its own, so a script that calls it repeatedly still
carries the estimates from one generation to the next.
"""
from __future__ import annotations

import copy
import threading
import weakref


class LearntKey:
    """What a drafter's learnt values are kept under: one per drafter object. A drafter made
    from another for one request (a prediction's) has its own, and reads the other's until it
    has kept something: `Learning.take` is given the keys in that order."""
    __slots__ = ("name", "__weakref__")

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"LearntKey({self.name!r})"


class Learning:
    """Learnt values by key (see the module docstring), behind one lock. A key's entry goes
    when its drafter does (weak keys: a server's per-request drafters leave nothing behind)."""

    def __init__(self, frozen: bool = False):
        self.frozen = frozen
        self._lock = threading.Lock()
        self._kept = weakref.WeakKeyDictionary()

    def take(self, keys, initial):
        """A private copy of what is kept under the first of `keys` that has something, else
        of `initial`."""
        with self._lock:
            found = next((self._kept[k] for k in keys if k in self._kept), initial)
            return copy.deepcopy(found)

    def keep(self, key: LearntKey, value) -> None:
        """`value` (a finished generation's, no longer written) is what the next generation
        takes; nothing when frozen."""
        if self.frozen:
            return
        with self._lock:
            self._kept[key] = value

    def peek(self, key: LearntKey, default=None):
        """What is kept under `key` (not a copy: for reading), else `default`."""
        with self._lock:
            return self._kept.get(key, default)

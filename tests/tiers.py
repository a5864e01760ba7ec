"""The extended tier: repetitions and second regimes of guarantees that a CI test already checks
on the real verifiers. CI (the README's test command) skips them to stay well inside its 30
minutes on two cores; `OLIFANT_EXTENDED=1 python -m pytest -q` runs them too (CONTRIBUTING.md).

What stays in every run: each drafter in both KV regimes on the tiny model (test_engine,
test_structured, test_prompt_cache), and on SmolLM2 every deterministic drafter in both regimes
(test_transcripts); the tier holds the SmolLM2 runs without a KV cache elsewhere (each pass
re-reads the whole context: the costliest minutes of the suite) and extra tries of races."""
import os

import pytest

ENV = "OLIFANT_EXTENDED"


def on() -> bool:
    return os.environ.get(ENV) == "1"


extended = pytest.mark.skipif(not on(), reason=f"extended tier: {ENV}=1 runs it (tests/tiers.py)")


def kv_regimes() -> tuple:
    """The KV regimes a real-verifier test checks: with the cache, and without it in the tier."""
    return (True, False) if on() else (True,)


def tries(ci: int, extended_tries: int) -> range:
    """How many times a test of a race runs: `ci` in every run, `extended_tries` in the tier."""
    return range(extended_tries if on() else ci)

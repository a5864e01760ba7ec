"""The opt-in session history: file format, validation, and drafting from earlier sessions."""
import os
import stat

import numpy as np
import pytest

from olifant_mlx.drafters import HybridDrafter, OlifantDrafter, Signal
from olifant_mlx.drafters.history import HEADER, HistoryError, SessionHistory
from olifant_mlx.draftmodel.igtree import Builder, TokenizerMismatch
from olifant_mlx.engine import generate

DIGEST = bytes(range(32))


def test_sessions_round_trip_and_draft(tmp_path):
    path = tmp_path / "h.bin"
    h = SessionHistory(path, DIGEST, 100)
    assert not path.exists() and h.continuation([1, 2, 3], 4) == ([], [])   # nothing written yet
    h.append([1, 2, 3, 4, 5, 6])
    h.append([9, 1, 2, 3, 7, 8])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_bytes()[:8] == b"OLIFHST1"
    again = SessionHistory(path, DIGEST, 100)
    assert again.sessions == 2 and again.tokens == h.tokens
    # the latest occurrence wins; a continuation stops at the end of its session
    # signals: the agreement with the context grows along the draft (3, then 4 once 7 is in)
    assert again.continuation([0, 1, 2, 3], 5) == ([7, 8], [Signal("history", 3), Signal("history", 4)])
    assert again.continuation([9, 1, 2, 3], 1) == ([7], [Signal("history", 4)])
    assert again.continuation([5, 6, 9], 3) == ([], [])       # never across sessions
    assert again.continuation([2, 3], 3) == ([], [])          # too short to look up
    with pytest.raises(HistoryError, match="vocabulary"):
        again.append([100])


def test_bad_files_are_clear_errors(tmp_path):
    good = tmp_path / "good.bin"
    SessionHistory(good, DIGEST, 100).append([1, 2, 3, 4])
    data = good.read_bytes()
    cases = {
        "magic": b"not a history file at all" * 4,
        "version": data[:8] + (7).to_bytes(4, "little") + data[12:],
        "truncated record header": data + b"\x01\x00",
        "past the end": data[:-4],
        ">= vocabulary": data[:HEADER.size] + (1).to_bytes(4, "little") + (500).to_bytes(4, "little"),
    }
    for why, blob in cases.items():
        p = tmp_path / "bad.bin"
        p.write_bytes(blob)
        with pytest.raises(HistoryError, match=why):
            SessionHistory(p, DIGEST, 100)
    with pytest.raises(TokenizerMismatch, match="another tokenizer"):
        SessionHistory(good, bytes(32), 100)
    with pytest.raises(TokenizerMismatch):
        SessionHistory(good, DIGEST, 101)


def test_keeps_the_newest_sessions_within_max_tokens(tmp_path):
    path = tmp_path / "h.bin"
    h = SessionHistory(path, DIGEST, 100)
    for i in range(10):
        h.append([i, 50, 51, 52, i])
    small = SessionHistory(path, DIGEST, 100, max_tokens=12)
    assert small.sessions == 2 and small.continuation([50, 51, 52], 1)[0] == [9]


def test_hybrid_drafts_from_history_and_output_stays_plain(tmp_path):
    from test_engine import tiny_llama  # the engine tests' tiny verifier

    model = tiny_llama(0)
    rng = np.random.default_rng(3)
    prompt = rng.integers(1, 64, size=6).tolist()
    ref, _ = generate(model, prompt, max_tokens=40)
    b = Builder(vocab_size=64)
    b.add_document(rng.integers(1, 64, size=50).tolist())   # an IGTree that knows nothing useful
    olifant = OlifantDrafter(b.build())
    h = SessionHistory(tmp_path / "h.bin", DIGEST, 64)
    _, before = generate(model, prompt, HybridDrafter(olifant), k=5, max_tokens=40)
    h.append(prompt + ref)                                   # an earlier session wrote this
    hybrid = HybridDrafter(olifant, history=h)
    for kv in (True, False):
        out, after = generate(model, prompt, hybrid, k=5, max_tokens=40, kv_cache=kv)
        assert out == ref
        assert after.accepted > before.accepted and after.steps < before.steps

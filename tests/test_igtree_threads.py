"""A loaded model is queried from many threads: every entry point gives each thread its own
answers (IGTree.predict and predict_token once shared one answer buffer)."""
import threading

import numpy as np

from olifant_mlx.draftmodel.igtree import Builder


def test_concurrent_queries_match_single_threaded_answers():
    rng = np.random.default_rng(7)
    b = Builder(vocab_size=500)
    for _ in range(20):
        b.add_document(rng.integers(0, 500, 400).tolist())
    model = b.build()
    queries = rng.integers(0, 500, size=(4000, 4))
    want = [model.predict(q.tolist()) for q in queries]
    want_tokens = [a.token for a in want]
    assert len(set(want_tokens)) > 20 and len({a.depth for a in want}) > 1   # answers differ
    errors = []

    def worker(seed):
        order = np.random.default_rng(seed).permutation(len(queries))
        for i in order:
            q = queries[i].tolist()
            if model.predict(q) != want[i] or model.predict_token(q) != want_tokens[i]:
                errors.append(i)
            if model.draft(q, 3) != model.draft(q, 3):
                errors.append(-i)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, f"{len(errors)} answers differ under threads"

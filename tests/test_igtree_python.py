"""The cffi binding on the real C library: building, queries, drafting, files, errors."""
import numpy as np
import pytest

from olifant_mlx.draftmodel.corpus import windows
from olifant_mlx.draftmodel.igtree import (TOPK_ALL, Builder, IGTree, IGTreeError, ModelFileError,
                                TokenizerMismatch)

V = 50


def random_docs(seed=0, n_docs=40, vocab=V):
    """Token documents from a small Markov chain, so contexts predict something."""
    rng = np.random.default_rng(seed)
    trans = rng.dirichlet(np.full(vocab, 0.08), size=vocab)
    docs = []
    for _ in range(n_docs):
        t = [int(rng.integers(vocab))]
        for _ in range(int(rng.integers(20, 200))):
            t.append(int(rng.choice(vocab, p=trans[t[-1]])))
        docs.append(t)
    return docs


def flat(docs):
    tokens = np.array([t for d in docs for t in d], dtype=np.uint32)
    starts = np.cumsum([0] + [len(d) for d in docs[:-1]]).astype(np.uint64)
    return tokens, starts


def build(docs, **kw):
    b = Builder(vocab_size=V, tokenizer_name="toy", tokenizer_digest=b"\x01" * 32, **kw)
    b.add_documents(*flat(docs))
    return b.build()


@pytest.fixture(scope="module")
def model():
    return build(random_docs(), top_k=3)


def test_documents_equal_instances(tmp_path):
    """add_documents pads and resets contexts exactly like corpus.windows()."""
    docs = random_docs(1)
    tokens, starts = flat(docs)
    ctx, tgt = windows(tokens, starts, 4, V)
    assert (ctx[0] == V).all() and ctx[1, 3] == tokens[0] and (ctx[1, :3] == V).all()
    second = int(starts[1])
    assert (ctx[second] == V).all(), "context must reset at a document start"
    b = Builder(vocab_size=V)
    b.add_instances(np.column_stack([ctx, tgt]))
    a = build(docs)
    a.save(tmp_path / "a.olif")
    c = b.build()
    c.save(tmp_path / "c.olif")
    # identical trees; only the tokenizer identity in the header differs
    assert a.n_nodes == c.n_nodes and a.n_instances == c.n_instances == tgt.size
    assert (a.predict_batch(ctx) == c.predict_batch(ctx)).all()


def test_draft_appends_predictions(model):
    rng = np.random.default_rng(5)
    for _ in range(200):
        ctx = [int(x) for x in rng.integers(0, V, size=int(rng.integers(0, 7)))]
        k = int(rng.integers(1, 9))
        drafted = model.draft(ctx, k)
        expect, c = [], list(ctx)
        for _ in range(k):
            t = model.predict(c).token
            expect.append(t)
            c.append(t)
        assert drafted == expect


def test_draft_stops_on_weak_answers(model):
    ctx = [1, 2, 3, 4]
    full = model.draft_answers(ctx, 8)
    assert len(full) == 8
    deep = model.draft_answers(ctx, 8, min_depth=3)
    assert all(a["depth"] >= 3 for a in deep)
    assert list(deep["token"]) == list(full["token"][: len(deep)])
    if len(deep) < 8:
        assert full[len(deep)]["depth"] < 3
    confident = model.draft_answers(ctx, 8, min_share=0.9)
    assert all(a["winner_count"] >= 0.9 * a["total"] for a in confident)
    assert model.draft(ctx, 0) == []
    with pytest.raises(ValueError):
        model.draft(ctx, -1)


def test_short_context_is_padded(model):
    assert model.predict([]).token == model.predict([V] * 4).token
    assert model.predict([7]).node == model.predict([V, V, V, 7]).node


def test_batch_matches_single(model):
    rows = np.random.default_rng(2).integers(0, V + 1, size=(500, 4)).astype(np.uint32)
    batch = model.predict_batch(rows)
    for r, a in zip(rows, batch):
        s = model.predict(list(r))
        assert (s.token, s.depth, s.node, s.winner_count, s.total) == (
            a["token"], a["depth"], a["node"], a["winner_count"], a["total"])


def test_top_classes_are_best_first(model):
    rows = np.random.default_rng(3).integers(0, V, size=(200, 4)).astype(np.uint32)
    for a in model.predict_batch(rows):
        classes = model.node_classes(int(a["node"]))
        assert 1 <= len(classes) <= 3
        assert classes[0] == (a["token"], a["winner_count"])
        counts = [c for _, c in classes]
        assert counts == sorted(counts, reverse=True)


def test_pruning_is_lossless_and_full_distributions_sum(model):
    full = build(random_docs(), top_k=TOPK_ALL)
    rows = np.random.default_rng(4).integers(0, V, size=(300, 4)).astype(np.uint32)
    for a in full.predict_batch(rows):
        classes = full.node_classes(int(a["node"]))
        assert sum(c for _, c in classes) == a["total"]
    assert (full.predict_batch(rows)["token"] == model.predict_batch(rows)["token"]).all()


def test_save_load_roundtrip(tmp_path, model):
    path = tmp_path / "m.olif"
    model.save(path)
    loaded = IGTree.load(path)
    assert not loaded.memory_mapped and not model.memory_mapped   # a private copy of the file
    assert path.stat().st_mode & 0o777 == 0o600, "model files hold corpus n-grams: mode 0600"
    assert loaded.describe() == model.describe()
    rows = np.random.default_rng(6).integers(0, V + 1, size=(1000, 4)).astype(np.uint32)
    assert (loaded.predict_batch(rows) == model.predict_batch(rows)).all()
    assert IGTree.from_bytes(path.read_bytes()).n_nodes == model.n_nodes
    assert loaded.tokenizer_name == "toy" and loaded.tokenizer_digest == b"\x01" * 32


def test_tokenizer_identity_is_checked(model):
    model.check_tokenizer("toy", V, b"\x01" * 32)
    with pytest.raises(TokenizerMismatch, match="trained for tokenizer 'toy'"):
        model.check_tokenizer("other", V, b"\x02" * 32)
    with pytest.raises(TokenizerMismatch):
        model.check_tokenizer("toy", V + 1, b"\x01" * 32)


def test_level_orders():
    docs = random_docs(7)
    gr, ig = build(docs), build(docs, order="info_gain")
    assert gr.order == "gain_ratio" and ig.order == "info_gain"
    assert sorted(gr.permutation) == [0, 1, 2, 3]
    # newest token carries the most information in a Markov chain
    assert gr.permutation[0] == 3 and ig.permutation[0] == 3
    explicit = build(docs, order=[0, 1, 2, 3])
    assert explicit.permutation == [0, 1, 2, 3] and explicit.order == "explicit"
    with pytest.raises(ValueError, match="permutation"):
        Builder(vocab_size=V, order=[0, 0, 1, 2])
    with pytest.raises(ValueError, match="order"):
        Builder(vocab_size=V, order="chi_square")


def test_errors_name_the_problem():
    with pytest.raises(IGTreeError, match="no training instances"):
        Builder(vocab_size=V).build()
    b = Builder(vocab_size=V)
    with pytest.raises(IGTreeError, match="id 50 is not below vocab_size 50"):
        b.add_document([1, 2, 50])
    with pytest.raises(IGTreeError, match="class id 99"):
        b.add_instances([[1, 2, 3, 4, 99]])
    with pytest.raises(IGTreeError, match="window 0"):
        Builder(vocab_size=V, window=0)
    with pytest.raises(IGTreeError, match="window 17"):
        Builder(vocab_size=V, window=17)
    with pytest.raises(ValueError, match="shape"):
        b.add_instances(np.zeros((3, 4)))
    b.add_document([1, 2, 3])
    b.build()
    with pytest.raises(IGTreeError, match="already built"):
        b.build()


def test_load_errors(tmp_path, model):
    with pytest.raises(ModelFileError, match="cannot open"):
        IGTree.load(tmp_path / "missing.olif")
    (tmp_path / "foreign.olif").write_bytes(b"PK\x03\x04" + b"\0" * 2000)
    with pytest.raises(ModelFileError, match="not an olifant model"):
        IGTree.load(tmp_path / "foreign.olif")
    path = tmp_path / "m.olif"
    model.save(path)
    data = path.read_bytes()
    (tmp_path / "short.olif").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="truncated"):
        IGTree.load(tmp_path / "short.olif")
    damaged = bytearray(data)
    damaged[-100] ^= 0xFF
    with pytest.raises(ModelFileError, match="checksum"):
        IGTree.from_bytes(bytes(damaged))


def test_progress_callback_and_cancel():
    seen = []
    b = Builder(vocab_size=V)
    b.add_documents(*flat(random_docs(8)))
    b.build(lambda phase, done, total: seen.append(phase))
    assert {"statistics", "sorting", "building", "writing"} <= set(seen)
    b = Builder(vocab_size=V)
    b.add_documents(*flat(random_docs(8)))
    with pytest.raises(IGTreeError, match="cancelled"):
        b.build(lambda phase, done, total: phase == "sorting")


BAD_IDS = [-1, 2**32 + 3, 1.7, float("nan"), float("inf"), 2**70, None]


def entry_points(model):
    """Every way ids enter the binding, each fed one row of ids."""
    w = model.window
    yield "predict", lambda ids: model.predict(ids)
    yield "predict_token", lambda ids: model.predict_token(ids)
    yield "draft", lambda ids: model.draft(ids, 2)
    yield "draft_answers", lambda ids: model.draft_answers(ids, 2)
    yield "predict_batch", lambda ids: model.predict_batch(np.array([ids]))
    yield "add_instances", lambda ids: Builder(vocab_size=V, window=w - 1).add_instances([ids])
    yield "add_documents", lambda ids: Builder(vocab_size=V).add_documents(ids, [0])


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_one_rule_for_ids_at_every_entry_point(model, bad):
    """No entry point wraps, aliases, truncates or zeroes an id: each refuses it by name, from
    a list and from a numpy array alike (numpy's cast made -1 into 4294967295 silently)."""
    for name, call in entry_points(model):
        for form in (list, np.array):
            ids = [1, 2, 3, bad]
            if form is np.array and bad is not None:
                ids = np.array(ids)
            with pytest.raises(ValueError, match="must be"):
                call(ids)
                pytest.fail(f"{name} accepted {bad!r} as an id ({form.__name__})")


def test_whole_numbers_in_any_form_are_the_same_ids(model):
    ctx = [1, 2, 3, 4]
    want = model.predict(ctx)
    for form in (np.array(ctx), np.array(ctx, dtype=np.uint64), np.array(ctx, dtype=float), tuple(ctx)):
        assert model.predict(form) == want and model.predict_token(form) == want.token
        assert model.draft(form, 3) == model.draft(ctx, 3)
    assert (model.predict_batch(np.array([ctx], dtype=float)) == model.predict_batch([ctx])).all()
    with pytest.raises(ValueError, match="sequence of token ids"):
        model.predict(np.array([ctx]))


def test_memory_limit_and_threads_give_the_same_model(tmp_path):
    """A bounded-memory build spills to temporary files and merges them; its model is
    byte-identical to the in-memory one, for any number of threads, and no file remains."""
    docs = random_docs(9, n_docs=60)
    tokens, starts = flat(docs)
    ref = tmp_path / "ref.olif"
    build(docs, top_k=3).save(ref)
    spill = tmp_path / "spill"
    spill.mkdir()
    phases = set()

    def watch(phase, done, total):
        phases.add(phase)
        assert list(spill.iterdir()) == [], "temporary files must have no names"
        return False

    for threads in (1, 2, 0):
        for limit in (1 << 16, 1 << 30):
            b = Builder(vocab_size=V, tokenizer_name="toy", tokenizer_digest=b"\x01" * 32, top_k=3,
                        memory_limit=limit, tmpdir=spill, threads=threads)
            b.add_documents(tokens, starts)
            out = tmp_path / f"m{threads}_{limit}.olif"
            b.build(watch).save(out)
            assert out.read_bytes() == ref.read_bytes(), (threads, limit)
    assert "merging" in phases, "the smallest limit should have spilled and merged"
    assert list(spill.iterdir()) == []


def test_cancelled_bounded_build_leaves_no_files(tmp_path):
    spill = tmp_path / "spill"
    spill.mkdir()
    for phase in ("statistics", "sorting", "building"):
        b = Builder(vocab_size=V, memory_limit=1 << 16, tmpdir=spill, threads=2)
        b.add_documents(*flat(random_docs(10, n_docs=60)))
        with pytest.raises(IGTreeError, match="cancelled"):
            b.build(lambda p, done, total, phase=phase: p == phase)
        assert list(spill.iterdir()) == []


def test_builder_option_errors(tmp_path):
    with pytest.raises(IGTreeError, match="below the minimum"):
        Builder(vocab_size=V, memory_limit=1000)
    with pytest.raises(IGTreeError, match="no/such"):
        Builder(vocab_size=V, memory_limit=1 << 20, tmpdir=tmp_path / "no/such")
    with pytest.raises(IGTreeError, match="threads"):
        Builder(vocab_size=V, threads=1000)
    with pytest.raises(ValueError):
        Builder(vocab_size=V, threads=-1)


def test_save_as_version_1(tmp_path, model):
    path = tmp_path / "v1.olif"
    model.save(path, format_version=1)
    assert path.read_bytes()[8] == 1
    back = IGTree.load(path)
    assert back.describe() == model.describe()
    rows = np.random.default_rng(11).integers(0, V + 1, size=(500, 4)).astype(np.uint32)
    assert (back.predict_batch(rows) == model.predict_batch(rows)).all()
    with pytest.raises(IGTreeError, match="version 3"):
        model.save(path, format_version=3)

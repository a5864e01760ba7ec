"""The corpus retrieval peers as drafters: rest:PATH and ngram-cache:PATH in the registry, the
Drafter contract with signals, output identical to plain greedy decoding on the tiny model in
both regimes, bench runs of both (both regimes, and reference mode), and build-rest."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tiny_models import VOCAB, Tok, tiny_verifier

from olifant_mlx.draftmodel.igtree import Builder, TokenizerMismatch
from olifant_mlx.draftmodel.suffix import Corpus, NgramCache, SuffixIndex
from olifant_mlx.drafters import Drafter, DrafterSpecError, Signal, build_drafter, help_text, parse_spec
from olifant_mlx.drafters.adaptive import AdaptiveDrafter
from olifant_mlx.drafters.retrieval import NgramCacheDrafter, RestDrafter, bucket, quarters
from olifant_mlx.engine import generate
from olifant_mlx.measure.bench import ModelRunner, ReferenceRunner, aggregate, sweep


@pytest.fixture(scope="module")
def corpus(model):
    """The tiny verifier's own greedy output (so drafts get accepted), plus noise documents."""
    c = Corpus(VOCAB, "tiny", bytes(32))
    rng = np.random.default_rng(1)
    for i in range(30):
        p = rng.integers(1, VOCAB, size=8).tolist()
        out, _ = generate(model, p, max_tokens=60)
        c.add_document(p + out)
        if i % 3 == 0:
            c.add_document(rng.integers(0, VOCAB, size=40).tolist())
    return c


@pytest.fixture(scope="module")
def files(corpus, tmp_path_factory):
    d = tmp_path_factory.mktemp("retrieval")
    corpus.build_index().save(d / "tiny.sfx")
    corpus.build_ngram(2).save(d / "tiny.ngc")
    return d / "tiny.sfx", d / "tiny.ngc"


def retrieval_drafters(files):
    index, cache = SuffixIndex.load(files[0]), NgramCache.load(files[1])
    yield RestDrafter(index)
    yield RestDrafter(index, min_match=1, name="rest-m1")
    yield NgramCacheDrafter(cache)
    yield NgramCacheDrafter(cache, min_samples=1, min_percent=0, name="ngram-cache-lax")
    # without the PlainGuard: the tiny model's passes are quicker than drafting, so it would
    # pause them (and whether it does depends on the machine's timing; tests/test_auto.py)
    yield AdaptiveDrafter(RestDrafter(index, min_match=1), guard=False)
    yield AdaptiveDrafter(NgramCacheDrafter(cache), guard=False)


class Ident:
    def __init__(self, vocab=VOCAB, digest=bytes(32), name="tiny"):
        self.name, self.vocab_size, self.digest = name, vocab, digest


# ---- registry -----------------------------------------------------------------------------------

def test_registry_specs(files, tmp_path):
    sfx, ngc = files
    assert "rest:PATH" in help_text() and "ngram-cache:PATH" in help_text()
    assert isinstance(build_drafter(f"rest:{sfx}", Ident()), RestDrafter)
    assert isinstance(build_drafter(f"ngram-cache:{ngc}", Ident()), NgramCacheDrafter)
    adaptive = build_drafter(f"adaptive:rest:{sfx}", Ident())
    assert isinstance(adaptive, AdaptiveDrafter) and isinstance(adaptive.inner, RestDrafter)
    assert parse_spec(f"rest:{sfx}").model_file == str(sfx)
    olif = tmp_path / "m.olif"
    b = Builder(vocab_size=VOCAB, tokenizer_name="tiny", tokenizer_digest=bytes(32))
    b.add_document(list(range(1, 40)))
    b.build().save(str(olif))
    cases = [(f"rest:{tmp_path / 'missing.sfx'}", "cannot be read"),
             (f"rest:{ngc}", "is not a suffix index (build one with"),
             (f"ngram-cache:{sfx}", "is not an n-gram cache"),
             (f"rest:{olif}", "is not a suffix index"),
             (f"olifant:{sfx}", "is not an olifant draft model"),
             ("rest", "needs an argument: rest:PATH")]
    for spec, why in cases:
        with pytest.raises(DrafterSpecError) as info:
            parse_spec(spec)
        assert why in str(info.value), (spec, str(info.value))
    for spec in (f"rest:{sfx}", f"ngram-cache:{ngc}"):
        with pytest.raises(TokenizerMismatch, match="built for tokenizer 'tiny'"):
            build_drafter(spec, Ident(digest=bytes(range(32)), name="other"))


def test_contract_and_signals(files):
    for d in retrieval_drafters(files):
        assert isinstance(d, Drafter), d.name
        d.start([1, 2, 3])
        assert d.draft([1, 2, 3], 0) == [] and d.draft_scored([1, 2, 3], 0).tokens == []
    index = SuffixIndex.load(files[0])
    rest = RestDrafter(index, min_match=1)
    cache = NgramCacheDrafter(NgramCache.load(files[1]), min_samples=1, min_percent=0)
    seen = 0
    for ctx in ([5, 9, 12, 40], [3], list(range(20, 30))):
        for d in (rest, cache):
            scored = d.draft_scored(ctx, 6)
            assert scored.tokens == d.draft(ctx, 6)
            assert len(scored.signals) == len(scored.tokens)
            assert all(isinstance(s, Signal) and 0 <= s.share <= 3 for s in scored.signals)
            seen += len(scored.tokens)
        a = index.draft_answers(ctx, 6, max_match=16, min_match=1)
        sig = rest.draft_scored(ctx, 6).signals
        assert [s.level for s in sig] == [bucket(int(m)) for m in a["match"]]
        assert [s.share for s in sig] == [quarters(int(c), int(t)) for c, t in zip(a["count"], a["total"])]
        assert all(s.source == "rest" for s in sig)
    assert seen > 0
    assert [bucket(n) for n in (0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 32, 99)] == \
        [0, 1, 2, 3, 4, 4, 4, 8, 8, 16, 16, 32, 32]
    with pytest.raises(ValueError):
        RestDrafter(index, max_match=2, min_match=3)


# ---- the engine: output identical to plain greedy -------------------------------------------------

@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
@pytest.mark.parametrize("kv", [True, False], ids=["kv", "uncached"])
def test_output_equals_plain_greedy(model, files, prompts, kv):
    for prompt in prompts:
        ref, _ = generate(model, prompt, max_tokens=40, kv_cache=True)
        for d in retrieval_drafters(files):
            for k in (1, 3, 5, 8):
                out, st = generate(model, prompt, d, k=k, max_tokens=40, kv_cache=kv)
                assert out == ref, (d.name, k, kv)
                assert st.tokens == 40 and st.accepted <= st.drafted


def test_retrieval_drafts_get_accepted(model, files, prompts):
    for d in retrieval_drafters(files):
        accepted = 0
        for p in prompts:
            _, s = generate(model, p, d, k=5, max_tokens=60)
            accepted += s.accepted
        assert accepted > 0, d.name


# ---- bench: both regimes and reference mode -------------------------------------------------------

def test_bench_runs_both_peers(files, tmp_path):
    sfx, ngc = files
    strategies = {"rest": build_drafter(f"rest:{sfx}", Ident()),
                  "cache": build_drafter(f"ngram-cache:{ngc}", Ident())}
    tasks = {"legal": ["The Member States shall", "Article 4 of Regulation"]}
    rows = sweep(ModelRunner(tiny_verifier()), tasks, strategies, [3, 5], ["kv", "uncached"], 16,
                 tmp_path / "r.jsonl")
    assert len(rows) == 2 * 2 * (1 + 2 * 2)
    assert all(r["exact_match"] for r in rows)                      # output-preserving
    cells = {(c["strategy"], c["regime"], c["k"]) for c in aggregate(rows)}
    assert {("rest", "kv", 3), ("cache", "uncached", 5), ("plain", "kv", 0)} <= cells

    # reference mode: a document's real continuation plays the verifier
    tok = Tok()
    conts = {t: "the continuation of " + t * 3 for t in tasks["legal"]}
    ref_rows = sweep(ReferenceRunner(tok, conts), tasks, strategies, [3, 8], ["kv", "uncached"], 24,
                     tmp_path / "ref.jsonl")
    assert len(ref_rows) == 2 * 2 * (1 + 2 * 2) and all(r["exact_match"] for r in ref_rows)


# ---- build-rest ----------------------------------------------------------------------------------

CORPUS = ("The Member States shall bring into force the laws, regulations and administrative "
          "provisions necessary to comply with this Directive.\nThey shall forthwith inform the "
          "Commission thereof.\n\n") * 30


def run(*args, check=True):
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "120"})
    if check and r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr}")
    return r


@pytest.fixture(scope="module")
def hf_tokenizer(tmp_path_factory):
    """A local word-level HF tokenizer: offline, and its ids are words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("tok")
    words = sorted(set(CORPUS.replace(",", " ,").replace(".", " .").split()))
    vocab = {"<unk>": 0, **{w: i + 1 for i, w in enumerate(words)}}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>").save_pretrained(d / "hf")
    return d / "hf", vocab


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_build_rest_never_follows_a_planted_symlink_and_writes_private_files(hf_tokenizer, tmp_path):
    """Issue 24 items 2-3: `ln -s victim.txt x.sfx.tmp; build-rest ... --out x.sfx` overwrote the
    victim through the old fixed-name writer; and the files (the corpus as ids) were 0644."""
    tok_dir, _ = hf_tokenizer
    (tmp_path / "c.txt").write_text(CORPUS)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out, cache = tmp_path / "x.sfx", tmp_path / "x.ngc"
    os.symlink(victim, tmp_path / "x.sfx.tmp")
    os.symlink(victim, tmp_path / "x.ngc.tmp")
    run("build-rest", "--corpus", str(tmp_path / "c.txt"), "--tokenizer", str(tok_dir), "--out", str(out),
        "--ngram-cache", str(cache), "--quiet")
    assert victim.read_text() == "precious"
    for p in (out, cache):
        assert p.is_file() and not p.is_symlink(), p
        assert p.stat().st_mode & 0o777 == 0o600, p
    assert SuffixIndex.load(out).n_tokens > 0 and NgramCache.load(cache).order == 2


@pytest.mark.slow   # over 2.5 s on two cores (CI): out of the 3-minute default loop
def test_build_rest_command(hf_tokenizer, tmp_path):
    tok_dir, vocab = hf_tokenizer
    (tmp_path / "c.txt").write_text(CORPUS)
    s = json.loads(run("build-rest", "--corpus", str(tmp_path / "c.txt"), "--tokenizer", str(tok_dir),
                       "--out", str(tmp_path / "c.sfx"), "--ngram-cache", str(tmp_path / "c.ngc"),
                       "--json", "--quiet").stdout)
    assert s["documents"] == 30 and s["index"]["tokens"] == s["tokens"]
    assert s["index"]["bytes_per_corpus_token"] > 6 and s["ngram_cache"]["order"] == 2
    index = SuffixIndex.load(tmp_path / "c.sfx")
    they = [vocab["They"], vocab["shall"]]
    assert index.draft(they, 3) == [vocab["forthwith"], vocab["inform"], vocab["the"]]
    assert NgramCache.load(tmp_path / "c.ngc").draft(they, 2) == [vocab["forthwith"], vocab["inform"]]
    info = json.loads(run("rest-info", str(tmp_path / "c.ngc"), "--json").stdout)
    assert info["kind"] == "n-gram cache" and info["tokenizer"] == "hf"
    assert "suffix index" in run("rest-info", str(tmp_path / "c.sfx")).stdout
    for args, why in ((["--tokenizer", str(tok_dir)], "needs --out"),
                      (["--tokenizer", str(tok_dir), "--ngram-cache", "x.ngc", "--order", "9"], "--order"),
                      (["--tokenizer", str(tok_dir), "--out", str(tmp_path / "no" / "x" / "y")], "")):
        r = run("build-rest", "--corpus", str(tmp_path / "nothing.txt"), *args, check=False)
        assert r.returncode == 1 and why in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = run("rest-info", str(tmp_path / "c.txt"), check=False)
    assert r.returncode == 1 and "bad magic" in r.stderr


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_generate_refuses_a_foreign_index_before_loading_weights(hf_tokenizer, tmp_path, capsys):
    tok_dir, _ = hf_tokenizer
    (tmp_path / "c.txt").write_text(CORPUS)
    run("build-rest", "--corpus", str(tmp_path / "c.txt"), "--tokenizer", str(tok_dir), "--out",
        str(tmp_path / "c.sfx"), "--quiet")
    import olifant_mlx.verifier.loader as loader
    from olifant_mlx.cli import main

    def refuse(*a, **kw):
        raise AssertionError("the verifier was loaded before the drafter was checked")

    saved = loader.load_verifier
    loader.load_verifier = refuse
    try:
        code = main(["generate", "--model", "smollm2-135m", "-p", "x", "--draft",
                     f"rest:{tmp_path / 'c.sfx'}"])
    finally:
        loader.load_verifier = saved
    err = capsys.readouterr().err
    assert code == 1 and "suffix index was built for tokenizer 'hf'" in err, err
    assert "build-rest --tokenizer smollm2-135m" in err and "Traceback" not in err

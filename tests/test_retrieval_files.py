"""The retrieval C library (csrc/suffix.c): the suffix index and the static n-gram cache.

(a) answers against naive counting through Python, (b) the loaders on random, truncated,
wrong-version, damaged and randomly mutated files (>= 1,000 mutants of each kind of file),
(c) the C test driver csrc/test_suffix.c under AddressSanitizer and UndefinedBehaviorSanitizer
and with -Wall -Wextra -Werror, (d) a short libFuzzer run of fuzz/fuzz_suffix.c.
"""
from __future__ import annotations

import collections
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from olifant_mlx.draftmodel._suffix import lib
from olifant_mlx.draftmodel.igtree import TokenizerMismatch
from olifant_mlx.draftmodel.suffix import (Corpus, NgramCache, RetrievalFileError, SuffixError,
                                           SuffixIndex, load_retrieval)

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
FUZZ = ROOT / "fuzz"
# libFuzzer's RSS limit reads the process's peak RSS, which Linux carries over fork and exec: a
# pytest worker that loaded a verifier before (xdist) makes a fresh fuzzer "out of memory" at
# its first input. So no RSS limit; any single allocation over 2 GB still fails the run.
FUZZ_MEMORY = ["-rss_limit_mb=0", "-malloc_limit_mb=2048"]
SANITIZE = ["-std=c11", "-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror"]
STRICT = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"]
HEADER = 512
VERSION_OFFSET = 8


def documents(seed, n_docs=8, vocab=20, max_len=60):
    rng = np.random.default_rng(seed)
    phrase = rng.integers(0, vocab, 5).tolist()
    docs = []
    for _ in range(n_docs):
        doc = []
        while len(doc) < rng.integers(1, max_len):
            doc += phrase if rng.random() < 0.25 else [int(rng.integers(0, vocab))]
        docs.append(doc)
    return docs


def corpus_of(docs, vocab, name="test", digest=bytes(range(32))):
    c = Corpus(vocab, name, digest)
    c.add_documents([t for d in docs for t in d], np.cumsum([0] + [len(d) for d in docs[:-1]]))
    return c


@pytest.fixture(scope="module")
def built():
    docs = documents(3)
    c = corpus_of(docs, 20)
    return docs, c.build_index(), c.build_ngram(2)


@pytest.fixture(scope="module")
def files(built, tmp_path_factory):
    _, index, cache = built
    d = tmp_path_factory.mktemp("retrieval")
    index.save(d / "t.sfx")
    cache.save(d / "t.ngc")
    return {"index": (d / "t.sfx", (d / "t.sfx").read_bytes(), SuffixIndex),
            "ngram": (d / "t.ngc", (d / "t.ngc").read_bytes(), NgramCache)}


# ---- (a) answers ------------------------------------------------------------------------------

def naive_count(docs, p):
    return sum(d[i:i + len(p)] == p for d in docs for i in range(len(d) - len(p) + 1))


def test_counts_matches_and_drafts_against_naive(built):
    docs, index, _ = built
    index.verify()
    assert index.n_tokens == sum(map(len, docs)) and index.n_documents == len(docs)
    rng = random.Random(1)
    for _ in range(200):
        d = rng.choice(docs)
        i = rng.randrange(len(d))
        ctx = [rng.randrange(20) for _ in range(rng.randrange(3))] + d[i:i + rng.randrange(1, 7)]
        assert index.count(ctx) == naive_count(docs, ctx)
        m = index.match(ctx)
        want = max([n for n in range(1, len(ctx) + 1) if naive_count(docs, ctx[-n:])], default=0)
        assert m.length == want
        # the draft: greedy most frequent continuation, ties to the lower id
        cur, expect = list(ctx[-want:]), []
        while want and len(expect) < 6:
            nxt = collections.Counter(dd[j + len(cur)] for dd in docs for j in range(len(dd) - len(cur))
                                      if dd[j:j + len(cur)] == cur)
            if not nxt:
                break
            best = min(nxt, key=lambda t: (-nxt[t], t))
            expect.append(best)
            cur.append(best)
        assert index.draft(ctx, 6, min_match=1) == expect
        a = index.draft_answers(ctx, 6, min_match=1)
        assert (a["count"] <= a["total"]).all() and (np.diff(a["match"]) == 1).all()


def test_ngram_cache_against_naive(built):
    docs, _, cache = built
    table = collections.defaultdict(collections.Counter)
    for d in docs:
        for i in range(2, len(d)):
            table[tuple(d[i - 2:i])][d[i]] += 1
    assert cache.n_contexts == len(table) and cache.order == 2
    assert cache.n_instances == sum(sum(c.values()) for c in table.values())
    for key, cnt in table.items():
        a = cache.lookup(list(key))
        best = min(cnt, key=lambda t: (-cnt[t], t))
        assert (a.token, a.count, a.total, a.n_next) == (best, cnt[best], sum(cnt.values()), len(cnt))
        assert cache.next_counts([7, 7, *key]) == sorted(cnt.items())
    assert cache.lookup([1]) is None and cache.draft([1], 4) == []


def test_llama_static_thresholds():
    # after (1 2): 3 x3, 4 x1; after (2 3): 5, 6 (a 50/50 split); after (3 5): 7 once
    docs = [[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 4], [2, 3, 5, 7], [2, 3, 6]]
    cache = corpus_of(docs, 9).build_ngram(2)
    assert cache.draft([1, 2], 4) == [3, 5]                   # llama.cpp: >= 2 samples, >= 50 %
    assert cache.draft([1, 2], 4, min_percent=66) == [3]
    assert cache.draft([1, 2], 4, min_samples=1, min_percent=0) == [3, 5, 7]
    assert cache.draft([0, 1, 2], 1) == [3]


def test_roundtrip_identity_and_tokenizer_check(files, built):
    _, index, cache = built
    for _, (path, data, cls) in files.items():
        mapped, copied = cls.load(path), cls.from_bytes(data)
        assert not mapped.memory_mapped and not copied.memory_mapped   # loads are private copies
        assert mapped.describe() == copied.describe()
        assert mapped.tokenizer_name == "test" and mapped.tokenizer_digest == bytes(range(32))
        mapped.check_tokenizer("test", 20, bytes(range(32)))
        with pytest.raises(TokenizerMismatch, match="built for tokenizer 'test'"):
            mapped.check_tokenizer("other", 20, bytes(32))
        with pytest.raises(TokenizerMismatch, match=re.escape(str(path))):
            mapped.check_tokenizer("other", 21, bytes(32))
        with pytest.raises(RetrievalFileError, match="damaged"):   # same tokenizer, other vocab
            mapped.check_tokenizer("test", 21, bytes(range(32)))
        assert type(load_retrieval(path)) is cls
    idx = SuffixIndex.load(files["index"][0])
    for ctx in ([1, 2, 3], [5], [19, 19, 19, 0]):
        assert idx.draft(ctx, 8, min_match=1) == index.draft(ctx, 8, min_match=1)
    ng = NgramCache.load(files["ngram"][0])
    assert ng.describe() == cache.describe()


def test_build_errors():
    c = Corpus(10)
    with pytest.raises(SuffixError) as e:
        c.build_index()
    assert e.value.code == lib.OLIF_ERR_EMPTY
    with pytest.raises(SuffixError, match="not below vocab_size"):
        c.add_document([1, 2, 10])
    with pytest.raises(SuffixError, match="order 9"):
        corpus_of([[1, 2, 3]], 10).build_ngram(9)
    with pytest.raises(SuffixError) as e:
        corpus_of([[1, 2, 3]], 10).build_index(progress=lambda *a: True)
    assert e.value.code == lib.OLIF_ERR_CANCELLED


# ---- (b) loaders -------------------------------------------------------------------------------

def _refused(cls, data, code=None, *words, verify=True):
    with pytest.raises(RetrievalFileError) as info:
        cls.from_bytes(data, verify_checksum=verify)
    err = info.value
    assert err.message
    if code is not None:
        assert err.code == code, (err.code, str(err))
    for w in words:
        assert w in str(err).lower(), (w, str(err))
    return err


def _answers_safely(obj, rng, vocab):
    for _ in range(20):
        ctx = [rng.randrange(vocab + 3) for _ in range(rng.randrange(0, 20))]
        if isinstance(obj, SuffixIndex):
            a = obj.draft_answers(ctx, 8, min_match=1)
            assert (a["token"] < obj.vocab_size).all() and (a["count"] <= a["total"]).all()
            assert obj.match(ctx).length <= len(ctx)
        else:
            a = obj.draft_answers(ctx, 8, min_samples=0, min_percent=0)
            assert (a["token"] < obj.vocab_size).all() and (a["count"] <= a["total"]).all()


@pytest.mark.parametrize("verify", [True, False])
def test_random_bytes_are_foreign(verify):
    for seed in range(100):
        rng = random.Random(seed)
        data = rng.randbytes(rng.randrange(0, 2000))
        for cls in (SuffixIndex, NgramCache):
            _refused(cls, data, lib.OLIF_ERR_FOREIGN, "bad magic", verify=verify)


@pytest.mark.parametrize("kind", ["index", "ngram"])
def test_every_truncation_is_an_error(files, kind):
    _, data, cls = files[kind]
    for n in range(len(data)):
        for verify in (True, False):
            _refused(cls, data[:n], lib.OLIF_ERR_FOREIGN if n < 8 else lib.OLIF_ERR_TRUNCATED,
                     verify=verify)
    _refused(cls, data + b"\0", lib.OLIF_ERR_CORRUPT, "header says")


@pytest.mark.parametrize("kind", ["index", "ngram"])
def test_wrong_version_and_other_magic(files, kind, tmp_path):
    path, data, cls = files[kind]
    for version in (0, 2, 0xFFFFFFFF):
        bumped = bytearray(data)
        struct.pack_into("<I", bumped, VERSION_OFFSET, version)
        err = _refused(cls, bytes(bumped), lib.OLIF_ERR_VERSION, "version", verify=False)
        assert f"version {version}" in err.message
    other = NgramCache if cls is SuffixIndex else SuffixIndex
    _refused(other, data, lib.OLIF_ERR_FOREIGN, "bad magic: it is " + ("a suffix index" if cls is SuffixIndex
                                                                      else "an n-gram cache"))
    with pytest.raises(RetrievalFileError, match="no-such") as info:
        cls.load(tmp_path / "no-such.bin")
    assert info.value.code == lib.OLIF_ERR_IO


@pytest.mark.parametrize("kind", ["index", "ngram"])
def test_damage_is_caught_by_checksums(files, kind):
    _, data, cls = files[kind]
    rng = random.Random(5)
    loaded = refused = 0
    for pos in range(0, len(data), 5):
        flipped = bytearray(data)
        flipped[pos] ^= rng.randrange(1, 256)
        _refused(cls, bytes(flipped))
        try:
            obj = cls.from_bytes(bytes(flipped), verify_checksum=False)
        except RetrievalFileError as err:
            refused += 1
            assert err.code in (lib.OLIF_ERR_FOREIGN, lib.OLIF_ERR_VERSION, lib.OLIF_ERR_TRUNCATED,
                                lib.OLIF_ERR_CORRUPT), str(err)
        else:
            loaded += 1
            _answers_safely(obj, rng, 20)
    assert loaded and refused


def _reseal(buf: bytearray) -> None:
    """The library's checksums (docs/retrieval.md) recomputed after an edit."""
    def checksum(b):
        h = (0xcbf29ce484222325 ^ len(b)) & (2**64 - 1)
        words = len(b) // 8
        for (w,) in struct.iter_unpack("<Q", b[:words * 8]):
            h = ((h ^ w) * 0x100000001b3) & (2**64 - 1)
            h ^= h >> 32
        for x in b[words * 8:]:
            h = ((h ^ x) * 0x100000001b3) & (2**64 - 1)
        return h ^ (h >> 29)
    if len(buf) < HEADER:
        return
    struct.pack_into("<Q", buf, 136, checksum(bytes(buf[HEADER:])))
    struct.pack_into("<Q", buf, 144, 0)
    struct.pack_into("<Q", buf, 144, checksum(bytes(buf[:HEADER])))


@pytest.mark.parametrize("kind", ["index", "ngram"])
def test_a_thousand_random_mutants(files, kind):
    """1,000 mutants of each file (1-8 edits, some truncated, half re-sealed so the structural
    checks run behind valid checksums): each is a clear error or a structure that answers
    within its guarantees. Bounded: the files are a few KB."""
    _, data, cls = files[kind]
    rng = random.Random(2024 + len(kind))
    outcomes = collections.Counter()
    for _ in range(1000):
        m = bytearray(data)
        for _ in range(rng.randrange(1, 9)):
            pos = rng.randrange(HEADER) if rng.random() < 0.25 else rng.randrange(len(m))
            r = rng.random()
            if r < 0.3:
                m[pos] ^= 1 << rng.randrange(8)
            elif r < 0.6:
                m[pos] = rng.randrange(256)
            elif pos + 4 <= len(m):
                struct.pack_into("<I", m, pos & ~3, rng.choice([0, 1, 0xFFFFFFFF, len(data)]))
        if rng.random() < 0.1:
            del m[rng.randrange(len(m)):]
        if rng.random() < 0.5:
            _reseal(m)
        for verify in (True, False):
            try:
                obj = cls.from_bytes(bytes(m), verify_checksum=verify)
            except RetrievalFileError as err:
                assert err.message and err.code in (lib.OLIF_ERR_FOREIGN, lib.OLIF_ERR_VERSION,
                                                    lib.OLIF_ERR_TRUNCATED, lib.OLIF_ERR_CORRUPT,
                                                    lib.OLIF_ERR_CHECKSUM), str(err)
                outcomes[err.code] += 1
            else:
                outcomes["loaded"] += 1
                _answers_safely(obj, rng, 20)
    assert outcomes["loaded"] and outcomes[lib.OLIF_ERR_CORRUPT] and outcomes[lib.OLIF_ERR_CHECKSUM]


# ---- the file layer: private reads, safe writes -----------------------------------------------

REWRITE_CHILD = """
import os, sys
from olifant_mlx.draftmodel.suffix import load_retrieval
path, other = sys.argv[1], sys.argv[2]
obj = load_retrieval(path)
ctx = [1, 2, 3, 4]
before = obj.draft(ctx, 6) if hasattr(obj, "match") else obj.draft(ctx, 6, min_samples=1, min_percent=0)
def again():
    return obj.draft(ctx, 6) if hasattr(obj, "match") else obj.draft(ctx, 6, min_samples=1, min_percent=0)
os.truncate(path, 4096)                 # shorter than the loaded file: a shared mapping would SIGBUS
assert again() == before
os.truncate(path, 0)
assert again() == before
with open(path, "r+b") as f:            # rewritten in place with another file's bytes
    f.write(open(other, "rb").read())
assert again() == before
print("same answers")
"""


@pytest.mark.parametrize("kind", ["index", "ngram"])
def test_truncating_or_rewriting_a_loaded_file_is_harmless(files, kind, tmp_path):
    """Issue 24 item 1: a loaded .sfx/.ngc is a private copy; a child process would die of SIGBUS
    (rc -7) with a shared mapping."""
    path, data, _ = files[kind]
    target = tmp_path / path.name
    target.write_bytes(data)
    other = tmp_path / "other.bin"
    other.write_bytes(bytes(reversed(data)))
    run = subprocess.run([sys.executable, "-c", REWRITE_CHILD, str(target), str(other)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert "same answers" in run.stdout


@pytest.mark.parametrize("kind", ["index", "ngram"])
def test_save_never_follows_a_planted_symlink(built, kind, tmp_path):
    """Issue 24 item 2: `ln -s victim.txt x.sfx.tmp` made the old fixed-name writer overwrite the
    victim; the file layer writes a fresh O_EXCL|O_NOFOLLOW temporary file."""
    _, index, cache = built
    obj = index if kind == "index" else cache
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / ("x.sfx" if kind == "index" else "x.ngc")
    os.symlink(victim, tmp_path / (out.name + ".tmp"))
    obj.save(out)
    assert victim.read_text() == "precious"
    assert out.is_file() and not out.is_symlink()
    assert load_retrieval(out).describe() == obj.describe()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([victim.name, out.name, out.name + ".tmp"])


@pytest.mark.parametrize("kind", ["index", "ngram"])
def test_saved_files_are_private(built, kind, tmp_path):
    """Issue 24 item 3: the files hold the corpus as token ids: mode 0600, whatever the umask."""
    _, index, cache = built
    obj = index if kind == "index" else cache
    out = tmp_path / f"p.{kind}"
    old = os.umask(0o022)
    try:
        obj.save(out)
        obj.save(out)       # replacing keeps it private
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("kind", ["index", "ngram"])
def test_a_damaged_vocab_size_names_the_file(files, kind, tmp_path):
    """Issue 24 item 7: a header whose vocab size was damaged (checksums recomputed) used to read
    as a tokenizer mismatch with the same tokenizer on both sides and no file."""
    path, data, cls = files[kind]
    buf = bytearray(data)
    struct.pack_into("<II", buf, 20, 40, 40)      # vocab_size and separator
    _reseal(buf)
    bad = tmp_path / path.name
    bad.write_bytes(bytes(buf))
    try:
        obj = cls.load(bad)
    except RetrievalFileError as e:                 # refused by the structure checks: also fine
        assert str(bad) in str(e)
        return
    with pytest.raises(RetrievalFileError, match=re.escape(str(bad)) + ".*damaged"):
        obj.check_tokenizer("test", 20, bytes(range(32)))


# ---- (c), (d): the C driver and the fuzzer ------------------------------------------------------

def _compiler():
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("no C compiler (cc, gcc or clang) on PATH")


def _compile(cc, sources, out, flags):
    return subprocess.run([cc, *flags, "-I", str(CSRC), *map(str, sources), "-o", str(out)],
                          capture_output=True, text=True, timeout=180)


def _driver_passed(run):
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0, f"{run.stdout[-4000:]}\n--- stderr\n{run.stderr[-6000:]}"
    assert lines and re.fullmatch(r"\d+ passed, 0 failed", lines[-1]), run.stdout[-2000:]
    assert int(lines[-1].split()[0]) >= 15, lines[-1]
    mutants = [int(x) for x in re.findall(r"(\d+) mutants", run.stdout)]
    assert len(mutants) == 2 and min(mutants) >= 1000, run.stdout


@pytest.mark.slow
def test_c_driver_with_sanitizers(tmp_path):
    cc = _compiler()
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    if _compile(cc, [probe], tmp_path / "probe", SANITIZE).returncode != 0:
        pytest.skip(f"sanitizer runtime unavailable for {cc}")
    exe = tmp_path / "test_suffix_asan"
    built = _compile(cc, [CSRC / "suffix.c", CSRC / "olif_file.c", CSRC / "test_suffix.c"], exe, SANITIZE)
    assert built.returncode == 0, built.stderr
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = dict(os.environ, UBSAN_OPTIONS="print_stacktrace=1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "detect_leaks=1"))
    run = subprocess.run([str(exe), str(scratch)], capture_output=True, text=True, env=env,
                         timeout=600)
    if run.returncode != 0 and "LeakSanitizer does not work" in run.stderr:
        env["ASAN_OPTIONS"] = "detect_leaks=0"
        run = subprocess.run([str(exe), str(scratch)], capture_output=True, text=True, env=env,
                             timeout=600)
    _driver_passed(run)
    assert list(scratch.iterdir()) == [], "the driver left files behind"


@pytest.mark.slow
def test_c_driver_strict_warnings(tmp_path):
    cc = _compiler()
    exe = tmp_path / "test_suffix"
    built = _compile(cc, [CSRC / "suffix.c", CSRC / "olif_file.c", CSRC / "test_suffix.c"], exe, STRICT)
    assert built.returncode == 0, built.stderr
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _driver_passed(subprocess.run([str(exe), str(scratch)], capture_output=True, text=True,
                                  timeout=600))


@pytest.mark.slow
def test_libfuzzer_smoke(tmp_path):
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("clang not found (needed for -fsanitize=fuzzer)")
    flags = ["-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all"]
    probe = tmp_path / "probe.c"
    probe.write_text("#include <stddef.h>\n#include <stdint.h>\n"
                     "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) "
                     "{ (void)d; (void)n; return 0; }\n")
    if _compile(clang, [probe], tmp_path / "probe", flags).returncode != 0:
        pytest.skip("clang cannot build libFuzzer targets (libclang-rt dev package missing?)")
    exe = tmp_path / "fuzz_suffix"
    built = _compile(clang, [FUZZ / "fuzz_suffix.c", CSRC / "suffix.c", CSRC / "olif_file.c"], exe, flags)
    assert built.returncode == 0, built.stderr
    seeds, corpus = tmp_path / "seeds", tmp_path / "corpus"
    corpus.mkdir()
    made = subprocess.run([sys.executable, FUZZ / "make_suffix_seeds.py", seeds],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert len(list(seeds.glob("*.sfx"))) >= 3 and len(list(seeds.glob("*.ngc"))) >= 4
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
    run = subprocess.run([str(exe), "-runs=20000", "-seed=1", "-timeout=10", *FUZZ_MEMORY,
                          f"-artifact_prefix={tmp_path}/", str(corpus), str(seeds)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-6000:]
    assert "Done 20000 runs" in run.stderr, run.stderr[-2000:]

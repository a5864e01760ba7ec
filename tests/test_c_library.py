"""Robustness of the IGTree C library (csrc/*.c).

(a) the C test driver csrc/test_igtree.c built with AddressSanitizer and
    UndefinedBehaviorSanitizer, (b) the same driver built with -Wall -Wextra
    -Werror -O2 and no sanitizers, (c) the loader's errors as seen from Python
    on random, truncated, wrong-version and damaged files, and version-1 files
    written by the previous library (tests/data/v1), (d) a short libFuzzer run
    of fuzz/fuzz_load.c on freshly generated seeds, and (e) the header compiled
    as plain C99 (and C++) with -pedantic -Werror.

The C builds skip only when no C compiler is found or the sanitizer /
libFuzzer runtime is missing; everything is small and takes seconds.
"""
from __future__ import annotations

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

from olifant_mlx.draftmodel._igtree import lib
from olifant_mlx.draftmodel.igtree import (FORMAT_VERSION, LIBRARY_VERSION, Builder, IGTree,
                                IGTreeError, ModelFileError)

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
FUZZ = ROOT / "fuzz"
# libFuzzer's RSS limit reads the process's peak RSS, which Linux carries over fork and exec: a
# pytest worker that loaded a verifier before (xdist) makes a fresh fuzzer "out of memory" at
# its first input. So no RSS limit; any single allocation over 2 GB still fails the run.
FUZZ_MEMORY = ["-rss_limit_mb=0", "-malloc_limit_mb=2048"]
V1_FIXTURES = Path(__file__).resolve().parent / "data" / "v1"
LIBRARY = sorted(p for p in CSRC.glob("*.c") if not p.name.startswith("test_"))
SANITIZE = ["-std=c99", "-g", "-O1", "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-pthread"]
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-pthread"]
VERSION_OFFSET = 8          # uint32 little-endian, covered by the header checksum
HEADER_SIZE = 640
V2_N_INTERNAL, V2_SECTIONS, V2_CHILD = 392, 440, 3   # mirrored from csrc/igt_file.c


# ---- building C programs -------------------------------------------------------------

def _find_compiler():
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _compile(compiler, sources, out, flags, compile_only=False):
    cmd = [compiler, *flags, "-I", str(CSRC), *map(str, sources), "-o", str(out)]
    if not compile_only:
        cmd.append("-lm")
    else:
        cmd.insert(1, "-c")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def _run(cmd, env=None, cwd=None, timeout=300):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)


def _driver_passed(run):
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0, (
        f"test_igtree exited {run.returncode}\n--- stdout\n{run.stdout[-4000:]}\n"
        f"--- stderr\n{run.stderr[-6000:]}")
    assert lines and re.fullmatch(r"\d+ passed, 0 failed", lines[-1]), run.stdout[-2000:]
    assert int(lines[-1].split()[0]) >= 10, lines[-1]


@pytest.fixture(scope="module")
def compiler():
    cc = _find_compiler()
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH")
    return cc


@pytest.fixture(scope="module")
def sanitizer_env(compiler, tmp_path_factory):
    """Environment for sanitized programs; skips if the runtime is missing.
    Leak checking is on where LeakSanitizer works (not under ptrace, etc.)."""
    d = tmp_path_factory.mktemp("sanitizer-probe")
    src = d / "probe.c"
    src.write_text("#include <stdlib.h>\n"
                   "int main(void) { char *p = malloc(16); p[0] = 1; int r = p[0] - 1; "
                   "free(p); return r; }\n")
    built = _compile(compiler, [src], d / "probe", SANITIZE)
    if built.returncode != 0:
        pytest.skip(f"sanitizer runtime unavailable for {compiler}: {built.stderr[-400:]}")
    env = dict(os.environ, UBSAN_OPTIONS="print_stacktrace=1")
    for leaks in ("1", "0"):
        env["ASAN_OPTIONS"] = f"detect_leaks={leaks}"
        probe = _run([d / "probe"], env=env, timeout=60)
        if probe.returncode == 0:
            return env
    pytest.skip(f"sanitized programs do not run here: {probe.stderr[-400:]}")


# ---- (a), (b): the C driver ---------------------------------------------------------------

@pytest.mark.slow
def test_c_driver_with_sanitizers(compiler, sanitizer_env, tmp_path):
    exe = tmp_path / "test_igtree_asan"
    built = _compile(compiler, [*LIBRARY, CSRC / "test_igtree.c"], exe, SANITIZE)
    assert built.returncode == 0, built.stderr
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _driver_passed(_run([exe, scratch], env=sanitizer_env))
    assert list(scratch.iterdir()) == [], "the driver left files behind"


@pytest.mark.slow
def test_c_driver_strict_warnings(compiler, tmp_path):
    exe = tmp_path / "test_igtree"
    built = _compile(compiler, [*LIBRARY, CSRC / "test_igtree.c"], exe, STRICT)
    assert built.returncode == 0, built.stderr
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _driver_passed(_run([exe, scratch]))
    assert list(scratch.iterdir()) == [], "the driver left files behind"


@pytest.mark.parametrize("lang", ["c99", "c++"])
def test_header_is_plain_c99(compiler, tmp_path, lang):
    """igtree.h says plain C99 (and C++): it compiles so, pedantically, without warnings."""
    src = tmp_path / ("use.cpp" if lang == "c++" else "use.c")
    src.write_text('#include "igtree.h"\n'
                   "int main(void) { igt_info info; igt_get_info(0, &info); "
                   "return (int)info.window + (igt_version() ? 0 : 1); }\n")
    if lang == "c++":
        cxx = shutil.which("g++") or shutil.which("clang++")
        if cxx is None:
            pytest.skip("no C++ compiler")
        cmd = [cxx, "-std=c++11", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
               "-I", str(CSRC), str(src)]
    else:
        cmd = [compiler, "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
               "-I", str(CSRC), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # and the library itself is C99 with POSIX, no C11
    for source in LIBRARY:
        r = subprocess.run([compiler, "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror",
                            "-fsyntax-only", "-I", str(CSRC), str(source)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (source.name, r.stderr)


def test_library_version():
    major, minor, patch = (int(x) for x in LIBRARY_VERSION.split("."))
    assert lib.igt_version_number() == lib.IGT_VERSION_NUMBER == major * 10000 + minor * 100 + patch
    assert (lib.IGT_VERSION_MAJOR, lib.IGT_VERSION_MINOR, lib.IGT_VERSION_PATCH) == (major, minor, patch)
    assert FORMAT_VERSION == lib.IGT_FORMAT_VERSION == 2


# ---- (c): the loader's errors through Python --------------------------------------------------

@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """A small saved model (window 4, top-3 classes) and its bytes."""
    rng = np.random.default_rng(7)
    n, window, vocab = 400, 4, 24
    ctx = (rng.random((n, window)) * np.array([3, 6, 9, 12])).astype(np.uint32)
    cls = (ctx[:, -1] * 7 + ctx[:, -2] * 3) % vocab
    noise = rng.random(n) < 0.2
    cls[noise] = rng.integers(0, vocab, noise.sum())
    b = Builder(vocab_size=vocab, window=window, top_k=3, tokenizer_name="test")
    b.add_instances(np.column_stack([ctx, cls]))
    model = b.build()
    path = tmp_path_factory.mktemp("model") / "model.olif"
    model.save(path)
    return path, path.read_bytes(), ctx


def _raises(data, code, *words, verify=True):
    with pytest.raises(ModelFileError) as info:
        IGTree.from_bytes(data, verify_checksum=verify)
    err = info.value
    assert isinstance(err, IGTreeError) and err.code == code, (err.code, str(err))
    assert err.message, "empty error message"
    for word in words:
        assert word in str(err).lower(), (word, str(err))
    return err


def _queries_are_safe(model, rng, n=60):
    """Predict / draft / batch on a model that loaded from a damaged file."""
    w, v = model.window, model.vocab_size
    for _ in range(n):
        ctx = [rng.randrange(0, v + 3) for _ in range(rng.randrange(0, w + 3))]
        a = model.predict(ctx)
        assert a.token < v and a.depth <= w and a.winner_count <= a.total
        assert len(model.draft(ctx, 5)) == 5
        model.node_classes(a.node)
    rows = np.array([[rng.randrange(0, v + 2) for _ in range(w)] for _ in range(8)], np.uint32)
    assert (model.predict_batch(rows)["token"] < v).all()


def test_loaded_model_answers_like_the_saved_one(model_file):
    path, data, ctx = model_file
    mapped, copied = IGTree.load(path), IGTree.from_bytes(data)
    assert not mapped.memory_mapped and not copied.memory_mapped   # loads are private copies
    assert mapped.describe() == copied.describe()
    a, b = mapped.predict_batch(ctx), copied.predict_batch(ctx)
    assert (a == b).all()
    assert mapped.draft(list(ctx[0]), 8) == copied.draft(list(ctx[0]), 8)


@pytest.mark.parametrize("verify", [True, False])
def test_random_bytes_are_foreign(verify, tmp_path):
    for seed in range(150):
        rng = random.Random(seed)
        data = rng.randbytes(rng.randrange(0, 3000))
        _raises(data, lib.OLIF_ERR_FOREIGN, "magic", "not an olifant model", verify=verify)
    path = tmp_path / "random.bin"
    for seed in range(10):
        path.write_bytes(random.Random(1000 + seed).randbytes(1 + seed * 97))
        with pytest.raises(ModelFileError, match="magic") as info:
            IGTree.load(path, verify_checksum=verify)
        assert info.value.code == lib.OLIF_ERR_FOREIGN


def test_random_bytes_behind_the_magic():
    for seed in range(150):
        rng = random.Random(seed)
        data = bytearray(rng.randbytes(rng.randrange(8, 3000)))
        data[:8] = b"OLIFIGT\0"
        if seed % 2 and len(data) >= 16:
            struct.pack_into("<II", data, 8, 1, HEADER_SIZE)
        for verify in (True, False):
            with pytest.raises(ModelFileError):
                IGTree.from_bytes(bytes(data), verify_checksum=verify)


@pytest.mark.parametrize("verify", [True, False])
def test_every_truncation_is_an_error(model_file, verify):
    _, data, _ = model_file
    for n in range(len(data)):
        if n < 8:
            _raises(data[:n], lib.OLIF_ERR_FOREIGN, "magic", verify=verify)
        else:
            _raises(data[:n], lib.OLIF_ERR_TRUNCATED, "truncated", verify=verify)


def test_truncated_files(model_file, tmp_path):
    _, data, _ = model_file
    path = tmp_path / "cut.olif"
    path.write_bytes(b"")
    with pytest.raises(ModelFileError, match="empty") as info:
        IGTree.load(path)
    assert info.value.code == lib.OLIF_ERR_TRUNCATED
    for n in [1, 7, 8, 15, 16, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 1, len(data) - 1,
              *range(700, len(data), 211)]:
        path.write_bytes(data[:n])
        with pytest.raises(ModelFileError) as info:
            IGTree.load(path)
        assert ("magic" if n < 8 else "truncated") in str(info.value), (n, str(info.value))
    path.write_bytes(data + b"\0")
    with pytest.raises(ModelFileError, match="header says") as info:
        IGTree.load(path)
    assert info.value.code == lib.OLIF_ERR_CORRUPT


def test_wrong_version(model_file, tmp_path):
    _, data, _ = model_file
    assert struct.unpack_from("<I", data, VERSION_OFFSET)[0] == FORMAT_VERSION == 2
    for version in (0, 3, 0xFFFFFFFF):
        bumped = bytearray(data)
        struct.pack_into("<I", bumped, VERSION_OFFSET, version)
        err = _raises(bytes(bumped), lib.OLIF_ERR_VERSION, "version", verify=False)
        assert f"version {version}" in err.message
        # the header checksum covers the field, yet the version is what gets reported
        with pytest.raises(ModelFileError) as info:
            IGTree.from_bytes(bytes(bumped))
        assert "version" in str(info.value) or "checksum" in str(info.value)
        path = tmp_path / f"v{version}.olif"
        path.write_bytes(bumped)
        with pytest.raises(ModelFileError, match="version"):
            IGTree.load(path, verify_checksum=False)


def test_damage_is_caught_by_checksums(model_file, tmp_path):
    _, data, _ = model_file
    damaged = bytearray(data)
    damaged[HEADER_SIZE + 5] ^= 0x40
    _raises(bytes(damaged), lib.OLIF_ERR_CHECKSUM, "checksum")
    path = tmp_path / "damaged.olif"
    path.write_bytes(damaged)
    with pytest.raises(ModelFileError, match="checksum"):
        IGTree.load(path)
    header = bytearray(data)
    header[300] ^= 1                    # a feature weight
    _raises(bytes(header), lib.OLIF_ERR_CHECKSUM, "header checksum")


def test_byte_flips(model_file):
    """Checksums catch every flip; without them the structural checks refuse
    the file or it loads into a model that still answers safely."""
    _, data, _ = model_file
    rng = random.Random(5)
    loaded = refused = 0
    for pos in range(0, len(data), 7):
        flipped = bytearray(data)
        flipped[pos] ^= rng.randrange(1, 256)
        with pytest.raises(ModelFileError):
            IGTree.from_bytes(bytes(flipped))
        try:
            model = IGTree.from_bytes(bytes(flipped), verify_checksum=False)
        except ModelFileError as err:
            refused += 1
            assert err.code in (lib.OLIF_ERR_FOREIGN, lib.OLIF_ERR_VERSION, lib.OLIF_ERR_TRUNCATED,
                                lib.OLIF_ERR_CORRUPT), str(err)
        else:
            loaded += 1
            _queries_are_safe(model, rng, n=10)
    assert loaded and refused


def test_broken_child_index_is_corrupt(model_file):
    _, data, _ = model_file
    n_internal, = struct.unpack_from("<Q", data, V2_N_INTERNAL)
    child_at, = struct.unpack_from("<Q", data, V2_SECTIONS + 8 * V2_CHILD)
    assert n_internal > 3
    for i in range(0, n_internal + 1):
        broken = bytearray(data)
        struct.pack_into("<I", broken, child_at + 4 * i, 0xFFFFFFFF)
        _raises(bytes(broken), lib.OLIF_ERR_CORRUPT, "corrupt", verify=False)


@pytest.mark.parametrize("name", ["w4_gr_top3", "w4_gr_top0", "w3_explicit_all"])
def test_version_1_files_still_load(name, tmp_path):
    """Files written by the previous library (format 1) load, answer exactly as they did,
    equal a fresh build from the same instances, and convert both ways byte for byte."""
    old = (V1_FIXTURES / f"{name}.olif").read_bytes()
    assert struct.unpack_from("<I", old, VERSION_OFFSET)[0] == 1
    rows = np.load(V1_FIXTURES / f"{name}.rows.npy")
    expected = np.load(V1_FIXTURES / f"{name}.expected.npz")
    model = IGTree.load(V1_FIXTURES / f"{name}.olif")
    assert (model.predict_batch(expected["queries"]) == expected["answers"]).all()
    flat = [(i, c, n) for i in range(model.n_nodes + 1) for c, n in model.node_classes(i)]
    assert np.array_equal(np.array(flat, dtype=np.uint32).reshape(-1, 3), expected["node_classes"])
    fresh = Builder(vocab_size=model.vocab_size, window=model.window,
                    order=model.order if model.order != "explicit" else model.permutation,
                    top_k=model.top_k, tokenizer_name=model.tokenizer_name,
                    tokenizer_digest=model.tokenizer_digest)
    fresh.add_instances(rows)
    fresh = fresh.build()
    assert fresh.describe() == model.describe()
    v2, v1 = tmp_path / "v2.olif", tmp_path / "v1.olif"
    fresh.save(v2)
    model.save(v1, format_version=1)
    assert v1.read_bytes() == old, "version 1 -> 2 -> 1 is not the identity"
    assert IGTree.load(v2).file_size == v2.stat().st_size < len(old)
    fresh.save(v1, format_version=1)
    assert v1.read_bytes() == old, "a fresh build saved as version 1 differs from the old library's file"


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "no-such-model.olif"
    with pytest.raises(ModelFileError) as info:
        IGTree.load(path)
    assert info.value.code == lib.OLIF_ERR_IO
    assert "no-such-model.olif" in str(info.value) and "cannot open" in str(info.value)


# ---- (d): libFuzzer smoke run --------------------------------------------------------------------

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
    exe = tmp_path / "fuzz_load"
    built = _compile(clang, [FUZZ / "fuzz_load.c", *LIBRARY], exe, [*flags, "-pthread"])
    assert built.returncode == 0, built.stderr
    seeds, corpus = tmp_path / "seeds", tmp_path / "corpus"
    corpus.mkdir()
    made = _run([sys.executable, FUZZ / "make_seeds.py", seeds], timeout=120)
    assert made.returncode == 0, made.stderr
    assert len(list(seeds.glob("*.olif"))) >= 4
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
    run = _run([exe, "-runs=20000", "-seed=1", "-timeout=10", *FUZZ_MEMORY, f"-artifact_prefix={tmp_path}/",
                corpus, seeds], env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-6000:]
    assert "Done 20000 runs" in run.stderr, run.stderr[-2000:]

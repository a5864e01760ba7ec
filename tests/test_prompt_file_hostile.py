"""Hostile prompt cache files (issue 37, items 8 and 14): every malformed file is a
PromptFileError naming it, never a traceback or a hang; FIFOs and other non-regular files are
refused unopened; `cache-prompt` writes like every other writer. Real files, the tiny verifier,
mlx-lm's own reader; a fuzz loop over seeded random mutants of a real file."""
import json
import os
import random
import struct
import threading

import pytest

from olifant_mlx.engine import cache as kv
from olifant_mlx.engine import prompt_file
from olifant_mlx.files import NotARegularFile
from tiny_models import Tok, tiny_verifier

TOKENS = [3, 4, 5, 6, 7, 8, 9]
MUTANTS = 300


@pytest.fixture(scope="module")
def verifier():
    return tiny_verifier()


@pytest.fixture(scope="module")
def good(verifier, tmp_path_factory):
    layers = kv.make_cache(verifier.model)
    kv.prefill(verifier.model, layers, TOKENS)
    path = tmp_path_factory.mktemp("good") / "p.safetensors"
    prompt_file.save(path, layers, TOKENS, verifier)
    return path.read_bytes()


def split(data: bytes):
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def join(header, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def edited(data, edit):
    header, body = split(data)
    edit(header)
    return join(header, body)


def load(path, verifier):
    return prompt_file.load(path, Tok(), verifier.model)


def test_the_reported_files_are_clear_errors(good, verifier, tmp_path):
    meta = "__metadata__"
    cases = {
        "half": (good[:len(good) // 2], "lies outside the file"),
        "list": (join([1, 2, 3], b""), "header is not an object"),
        "class": (edited(good, lambda h: h[meta].update({"1.0": "Nope"})), "not the one this verifier makes"),
        "global": (edited(good, lambda h: h[meta].update({"1.0": "mx"})), "not the one this verifier makes"),
        "scalar": (edited(good, lambda h: h[meta].update({"2.1.1": "weird"})), "unreadable: ValueError"),
        "offset": (edited(good, lambda h: h["0.2"].update(dtype="F32")), "count that is not a whole number"),
        "tokens": (edited(good, lambda h: h[meta].update({"0.olifant_tokens": "[1, 99999]"})), "token ids"),
        "shape": (edited(good, lambda h: h["0.0"].update(shape=[1, 4, 128, 12])), "another shape"),
        "meta": (edited(good, lambda h: h.update({meta: {"0.model": 3}})), "metadata is not text"),
    }
    for name, (data, said) in cases.items():
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(data)
        with pytest.raises(prompt_file.PromptFileError) as e:
            load(path, verifier)
        assert said in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value), (name, e.value)


def test_a_fifo_is_refused_unopened(tmp_path, verifier):
    fifo = tmp_path / "f.safetensors"
    os.mkfifo(fifo)
    done = []
    worker = threading.Thread(target=lambda: done.append(pytest.raises(prompt_file.PromptFileError,
                                                                       prompt_file.check, fifo, Tok())),
                              daemon=True)
    worker.start()
    worker.join(60)        # a bound on a hang, not a timing claim: it returns at once
    if worker.is_alive():  # unblock the open so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("check() blocked on a FIFO")
    assert "FIFO" in str(done[0].value) and str(fifo) in str(done[0].value)


def test_random_mutants_load_or_are_a_clear_error(good, verifier, tmp_path):
    """Seeded mutants of a real file: flipped bytes (header and arrays), cuts, insertions and
    edited header values; each loads into layers that hold its tokens, or is the clear error."""
    rng = random.Random(37)
    header, body = split(good)
    hlen = 8 + len(json.dumps(header))
    loaded = 0
    for i in range(MUTANTS):
        data = bytearray(good)
        kind = i % 5
        if kind == 0:                       # flip a few bytes, mostly in the header
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(hlen) if rng.random() < 0.8 else rng.randrange(len(data))
                data[at] ^= 1 << rng.randrange(8)
        elif kind == 1:                     # cut it somewhere
            del data[rng.randrange(len(data)):]
        elif kind == 2:                     # insert junk
            at = rng.randrange(len(data))
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        else:                               # edit one header value
            h = json.loads(json.dumps(header))
            key = rng.choice(sorted(h))
            entry = h[key]
            field = rng.choice(sorted(entry))
            entry[field] = rng.choice([None, -1, 0, 1, 2 ** 40, "KVCache", "QuantizedKVCache", "x",
                                       [1], [1, 2, 999, 12], [0, 10 ** 9], {}, "[]", "[1, 2]",
                                       "scalar", "none", "string", "F16", "I64"])
            data = bytearray(join(h, body))
        path = tmp_path / f"m{i}.safetensors"
        path.write_bytes(bytes(data))
        try:
            layers, tokens = load(path, verifier)
        except prompt_file.PromptFileError as e:
            assert str(path) in str(e) and "\n" not in str(e)
            continue
        loaded += 1
        assert kv.held_tokens(layers) == len(tokens) and all(0 <= t < Tok.vocab_size for t in tokens)
    assert 0 < loaded < MUTANTS            # some mutants (array bytes) load, most are refused


def test_cache_prompt_writes_like_every_other_writer(tmp_path, verifier):
    layers = kv.make_cache(verifier.model)
    kv.prefill(verifier.model, layers, TOKENS)
    fifo = tmp_path / "f.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFile, match="is a FIFO"):
        prompt_file.save(fifo, layers, TOKENS, verifier)
    assert os.path.exists(fifo) and not fifo.is_file()         # the FIFO is still there
    missing = tmp_path / "no" / "such" / "p.safetensors"
    with pytest.raises(NotARegularFile, match="folder does not exist"):
        prompt_file.save(missing, layers, TOKENS, verifier)
    assert not (tmp_path / "no").exists()                      # no folder made
    from olifant_mlx.cli import main

    for target in (fifo, missing):                             # the command, before any model loads
        assert main(["cache-prompt", "--model", "no-such-model-xyz", "--prompt", "x",
                     "--prompt-cache-file", str(target)]) == 1

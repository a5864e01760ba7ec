"""The suite runs on a cache of its own (issue 37, item 18): never the user's, with the user's
fetched verifiers linked in read-only, so nothing is fetched again and nothing the user has is
written. Real files, real hard links."""
import os
from pathlib import Path

from suite_cache import SUITE_CACHE_ENV, link_tree

from olifant_mlx.files import cache_dir, write_atomic


def test_the_suite_does_not_run_on_the_users_cache():
    user = Path(os.path.expanduser("~/.cache/olifant_mlx")).resolve()
    here = cache_dir().resolve()
    assert here != user
    want = os.environ.get(SUITE_CACHE_ENV)
    assert here == (Path(want).resolve() if want else Path(__file__).resolve().parent.parent / ".pytest_cache"
                    / "olifant_cache")


def test_linked_files_are_shared_read_only_and_writers_leave_the_users_alone(tmp_path):
    user, suite = tmp_path / "user" / "models", tmp_path / "suite" / "models"
    (user / "m" / ".partial").mkdir(parents=True)
    (user / "m" / "weights.bin").write_bytes(b"weights")
    (user / "m" / ".partial" / "x").write_text("half fetched")
    (user / "m.lock").write_text("")
    link_tree(user, suite)
    assert (suite / "m" / "weights.bin").stat().st_ino == (user / "m" / "weights.bin").stat().st_ino
    assert not (suite / "m" / ".partial").exists() and not (suite / "m.lock").exists()
    write_atomic(suite / "m" / "weights.bin", b"rewritten by a test")     # every writer renames over
    assert (user / "m" / "weights.bin").read_bytes() == b"weights"
    link_tree(user, suite)                                                # files there are kept
    assert (suite / "m" / "weights.bin").read_bytes() == b"rewritten by a test"

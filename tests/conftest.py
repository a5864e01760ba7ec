import os
from pathlib import Path

import pytest

import olifant_mlx.mlx_setup  # noqa: F401  (OpenBLAS before anything imports MLX)

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared():
    if not SHARED.is_dir():
        pytest.skip(f"shared material not found at {SHARED} (set OLIFANT_SHARED)")
    return SHARED


@pytest.fixture(scope="module")
def tmux_server():
    """The tests' own tmux server (tests/terminal.py), ended after the module that used it."""
    import shutil

    from terminal import kill_server
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    yield
    kill_server()

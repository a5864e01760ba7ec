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

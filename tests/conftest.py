import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared():
    if not SHARED.is_dir():
        pytest.skip(f"shared material not found at {SHARED} (set OLIFANT_SHARED)")
    return SHARED

"""OpenBLAS is loaded before MLX on Linux, and its absence is a clear warning."""
import subprocess
import sys

import pytest

from olifant_mlx import mlx_setup


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_openblas_is_mapped_before_mlx():
    code = ("import olifant_mlx.mlx_setup as s, sys; "
            "maps = open('/proc/self/maps').read(); print(s.ensure_blas()); "
            "print('openblas' in maps)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    name, mapped = r.stdout.split()
    if not name:
        pytest.skip("libopenblas0-pthread is not installed here")
    assert mapped == "True"


def test_missing_openblas_warns(monkeypatch):
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    monkeypatch.setattr(mlx_setup, "OPENBLAS_CANDIDATES", ("libnot-openblas-at-all.so.9",))
    monkeypatch.setitem(mlx_setup._state, "blas", None)
    with pytest.warns(RuntimeWarning, match="apt-get install libopenblas0-pthread"):
        assert mlx_setup.ensure_blas() == ""

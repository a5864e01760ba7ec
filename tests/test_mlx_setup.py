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


def test_ranks_sharing_a_machine_split_its_cpus_between_their_blas_threads(tmp_path, monkeypatch):
    import json

    from olifant_mlx.machine import cpus

    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps([["127.0.0.1:5000"], ["10.0.0.2:5001"], ["127.0.0.1:5002"], ["127.0.0.1:5003"]]))
    env = {"MLX_RANK": "2", "MLX_HOSTFILE": str(hosts)}
    assert mlx_setup.ranks_here(env) == 3 and mlx_setup.ranks_here({**env, "MLX_RANK": "1"}) == 1
    assert mlx_setup.blas_threads(env) == max(1, cpus() // 3)
    assert mlx_setup.blas_threads({**env, "OPENBLAS_NUM_THREADS": "4"}) is None     # the user's choice stands
    assert mlx_setup.blas_threads({**env, "MLX_RANK": "1"}) is None                 # alone on its machine
    assert mlx_setup.blas_threads({}) is None                                       # not launched
    for broken in ("", "not json", "[[1]]", '{"a": 1}'):
        hosts.write_text(broken)
        assert mlx_setup.ranks_here(env) == 1, broken
    assert mlx_setup.ranks_here({"MLX_RANK": "0", "MLX_HOSTFILE": str(tmp_path / "missing.json")}) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_a_rank_sharing_the_machine_starts_openblas_with_its_share(tmp_path):
    """The real library, in a fresh process launched as one of 2 ranks on this machine: the
    thread count OpenBLAS itself reports."""
    import json
    import os

    from olifant_mlx.machine import cpus

    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps([["127.0.0.1:5000"], ["127.0.0.1:5001"]]))
    code = ("import ctypes, olifant_mlx.mlx_setup as s; name = s.ensure_blas(); "
            "print(ctypes.CDLL(name).openblas_get_num_threads() if name else 'none')")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**env, "MLX_RANK": "1", "MLX_HOSTFILE": str(hosts)})
    if r.stdout.strip() == "none":
        pytest.skip("libopenblas0-pthread is not installed here")
    assert int(r.stdout) == max(1, cpus() // 2)
    alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert int(alone.stdout) >= int(r.stdout)         # alone: OpenBLAS's own count (every CPU, capped)

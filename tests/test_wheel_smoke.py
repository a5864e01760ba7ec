"""CI's wheel smoke test (.ci/wheel_smoke.py: the CLI, a generation, the TUI headless) run on the
source tree, so that a change it no longer fits fails in the suite — CI runs it on the wheel only
after the whole suite, and a renamed TUI attribute once failed CI there."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SMOKE = Path(__file__).resolve().parents[1] / ".ci" / "wheel_smoke.py"


@pytest.mark.slow
def test_the_wheel_smoke_script_passes_on_the_source_tree(tmp_path):
    env = dict(os.environ, OLIFANT_SMOKE_SOURCE="1")
    r = subprocess.run([sys.executable, str(SMOKE)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert "wheel smoke test passed" in r.stdout


def test_outside_the_suite_it_refuses_a_package_that_is_not_installed(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OLIFANT_SMOKE_SOURCE"}
    r = subprocess.run([sys.executable, str(SMOKE)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "not the installed package" in r.stderr

"""The fast loop's budget (tests/conftest.py), which CI enforces (.ci/run): a run whose tests not
marked slow take longer than $OLIFANT_FAST_LOOP_BUDGET_S fails, naming the slowest; time in slow
tests does not count. Run on a two-test suite under this very conftest, in process."""
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()
SUITE_CACHE = (Path(__file__).parent / "suite_cache.py").read_text()     # the conftest imports it
SUITE = """
import time

import pytest


def test_quick():
    time.sleep(0.2)


@pytest.mark.slow
def test_long():
    time.sleep(0.6)
"""


def inner_run(pytester, monkeypatch, budget, *args):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(suite_cache=SUITE_CACHE)
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(test_inner=SUITE)
    monkeypatch.setenv("OLIFANT_FAST_LOOP_BUDGET_S", str(budget))
    # the inner conftest points $OLIFANT_CACHE at the inner suite's cache: restored after the test
    monkeypatch.setenv("OLIFANT_CACHE", os.environ["OLIFANT_CACHE"])
    return pytester.runpytest("-q", "-p", "no:cacheprovider", *args)


def test_a_fast_loop_over_its_budget_fails_naming_the_slowest(pytester, monkeypatch):
    r = inner_run(pytester, monkeypatch, 0.05)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(["*FAILED fast loop (*): 1 tests, * over its budget of 0 s*test_quick*"])
    assert "test_long" not in r.stdout.str().split("over its budget")[1]


def test_slow_tests_do_not_count_against_the_budget(pytester, monkeypatch):
    r = inner_run(pytester, monkeypatch, 0.6)       # 0.2 s fast + 0.6 s slow: under 0.6 s counted
    assert r.ret == pytest.ExitCode.OK, r.stdout.str()
    r.stdout.fnmatch_lines(["fast loop (*): 1 tests, * s as measured in this run (budget 1 s)"])


def test_under_xdist_each_worker_measures_and_the_controller_judges(pytester, monkeypatch):
    """Two workers: the fast test's time reaches the controller, which prints and enforces it."""
    pytest.importorskip("xdist")
    r = inner_run(pytester, monkeypatch, 60, "-n", "2")
    assert r.ret == pytest.ExitCode.OK, r.stdout.str()
    r.stdout.fnmatch_lines(["fast loop (*): 1 tests, * s on 2 workers as measured in this run (budget 60 s)"])
    r = inner_run(pytester, monkeypatch, 0.05, "-n", "2")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(["*FAILED fast loop (*): 1 tests, * on 2 workers * over its budget of 0 s*test_quick*"])

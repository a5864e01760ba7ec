"""The fixtures every test module may use, and the fast loop's time budget.

Fixtures are shared here (helpers in tests/tiny_models.py, server_helpers.py, train_helpers.py,
gguf_models.py): a test module never imports another test module (test_architecture checks it).
The real offline verifiers are loaded once per test session (`smol`, `gemma`)."""
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

# Under pytest-xdist (pyproject's addopts: -n auto) the workers share the machine's CPUs: each
# starts OpenBLAS with its share, as ranks sharing a machine do (mlx_setup), not a pool of every CPU
# spinning against the other worker's (stop 34: 832 s of system time in a 2-worker run without this).
# Subprocesses the tests start inherit it; a set OPENBLAS_NUM_THREADS wins.
from olifant_mlx.machine import cpus  # noqa: E402  (imports no MLX)

if os.environ.get("PYTEST_XDIST_WORKER_COUNT") and "OPENBLAS_NUM_THREADS" not in os.environ:
    os.environ["OPENBLAS_NUM_THREADS"] = str(max(1, cpus() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

import olifant_mlx.mlx_setup  # noqa: E402, F401  (OpenBLAS before anything imports MLX)

# A run started in the background by a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and so would every process the tests start: the Ctrl-C tests need it delivered.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
from suite_cache import suite_cache  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# the source tree's tools (tools/architecture.py, not part of the package) import by name in tests
sys.path.insert(0, str(ROOT / "tools"))
SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))
# the suite's own cache, never the user's (tests/suite_cache.py says why and how); subprocesses
# the tests start inherit it
os.environ["OLIFANT_CACHE"] = str(suite_cache(ROOT))
FAST_LOOP = 'python -m pytest -q -m "not slow"'
BUDGET_ENV = "OLIFANT_FAST_LOOP_BUDGET_S"   # CI sets it (.ci/run): the fast loop's bound in seconds


@pytest.fixture(scope="session")
def shared():
    if not SHARED.is_dir():
        pytest.skip(f"shared material not found at {SHARED} (set OLIFANT_SHARED)")
    return SHARED


@pytest.fixture(autouse=True)
def server_logging_restored():
    """A test that runs `serve` in process configures the server's loggers (configure_logging);
    they are put back after it, so that later tests' servers do not log into the run's output."""
    import logging

    loggers = [logging.getLogger(n) for n in ("olifant_mlx.server", "uvicorn.error")]
    saved = [(lg.handlers[:], lg.filters[:], lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, (handlers, filters, level, propagate) in zip(loggers, saved):
        lg.handlers[:], lg.filters[:], lg.propagate = handlers, filters, propagate
        lg.setLevel(level)


@pytest.fixture(scope="module")
def tmux_server():
    """The tests' own tmux server (tests/terminal.py), ended after the module that used it."""
    import shutil

    from terminal import kill_server
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    yield
    kill_server()


# ---- the tiny verifier (tests/tiny_models.py), one per module as before -----------------------

@pytest.fixture(scope="module")
def model():
    from tiny_models import tiny_llama

    return tiny_llama(0)


@pytest.fixture(scope="module")
def prompts():
    from tiny_models import VOCAB

    rng = np.random.default_rng(0)
    return [rng.integers(1, VOCAB, size=n).tolist() for n in (1, 5, 12, 30)]


@pytest.fixture(scope="module")
def olifant(model):
    from tiny_models import igtree_on_own_output

    return igtree_on_own_output(model)


# ---- the real offline verifiers: loaded once per session (read only: no test changes them) ----

@pytest.fixture(scope="session")
def smol():
    """SmolLM2-135M-Instruct (the offline alias smollm2-135m)."""
    from olifant_mlx.verifier import load_verifier

    return load_verifier("smollm2-135m")


@pytest.fixture(scope="session")
def gemma():
    """Gemma-3-270M (the offline alias gemma3-270m)."""
    from olifant_mlx.verifier import load_verifier

    return load_verifier("gemma3-270m")


DRAFT_TEXTS = (ROOT / "LICENSE",)     # fixed input: the Apache licence, as the checkout holds it


@pytest.fixture(scope="session")
def draft_path(smol):
    """A draft model for SmolLM2 trained from a fixed text of the checkout (its Apache licence),
    built once into the suite's cache: the same model on every machine, whatever licence texts
    its installed packages hold (the demo's builtin:licenses, which made verdicts differ)."""
    from olifant_mlx.cli.generate import demo_draft_model

    return demo_draft_model(smol.identity, "smollm2-135m", [str(p) for p in DRAFT_TEXTS])[1]


# ---- the fast loop's time, measured inside every run ------------------------------------------
# The fast loop is `-m "not slow"`. Its time is measured in the full run too (CI runs the suite
# once): collection, plus setup, call and teardown of every test not marked slow, plus the setup
# of any fixture such a test shares that a slow test happened to set up first (in the fast loop
# alone a fast test would pay for it). With $OLIFANT_FAST_LOOP_BUDGET_S set, a run whose fast
# tests take longer fails, naming the slowest of them.

_fast = {"started": 0.0, "collect": 0.0, "ids": set(), "fixtures": set(), "tests": {}, "setups": {},
         "set_up_by_fast": {}}


def _is_fast(item) -> bool:
    return item.get_closest_marker("slow") is None


def pytest_sessionstart(session):
    _fast["started"] = time.perf_counter()


def pytest_collection_finish(session):
    _fast["collect"] = time.perf_counter() - _fast["started"]
    for item in filter(_is_fast, session.items):
        _fast["ids"].add(item.nodeid)
        info = getattr(item, "_fixtureinfo", None)
        for defs in (info.name2fixturedefs.values() if info else ()):
            _fast["fixtures"].update(id(d) for d in defs)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    started = time.perf_counter()
    yield
    if fixturedef.scope != "function":     # a function fixture's time is its test's setup time
        key = id(fixturedef)
        _fast["setups"][key] = _fast["setups"].get(key, 0.0) + time.perf_counter() - started
        item = getattr(request, "_pyfuncitem", None)
        _fast["set_up_by_fast"].setdefault(key, item is not None and item.nodeid in _fast["ids"])


def pytest_runtest_logreport(report):
    if report.nodeid in _fast["ids"]:
        _fast["tests"][report.nodeid] = _fast["tests"].get(report.nodeid, 0.0) + report.duration


def fast_loop_seconds() -> float:
    """The fast loop's time as measured in this process (see above)."""
    shared_by_slow = sum(t for key, t in _fast["setups"].items()
                         if key in _fast["fixtures"] and not _fast["set_up_by_fast"][key])
    return _fast["collect"] + sum(_fast["tests"].values()) + shared_by_slow


# Under pytest-xdist each worker measures the fast tests it ran and sends that to the controller
# (xdist's workeroutput). A fast-only run spreads the same tests over as many workers, each as busy
# as here, so its time is the mean of the workers' times (each: its own collection, tests, shares).
_workers: list[dict] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    measured = getattr(node, "workeroutput", {}).get("fast_loop")
    if measured:
        _workers.append(measured)


def fast_loop() -> tuple[float, dict[str, float], int]:
    """The fast loop's seconds, its tests' seconds by id and the workers it was measured on."""
    if not _workers:
        return fast_loop_seconds(), _fast["tests"], 1
    tests = {name: t for w in _workers for name, t in w["tests"].items()}
    return sum(w["seconds"] for w in _workers) / len(_workers), tests, len(_workers)


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workeroutput"):      # an xdist worker: the controller judges
        session.config.workeroutput["fast_loop"] = {"seconds": fast_loop_seconds(), "tests": _fast["tests"]}
        return
    budget = os.environ.get(BUDGET_ENV)
    seconds, tests, _ = fast_loop()
    if budget and tests and seconds > float(budget) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)     # after the durations table
def pytest_terminal_summary(terminalreporter):
    seconds, tests, workers = fast_loop()
    if not tests:
        return
    budget = os.environ.get(BUDGET_ENV)
    on = f" on {workers} workers" if workers > 1 else ""
    line = f"fast loop ({FAST_LOOP}): {len(tests)} tests, {seconds:.1f} s{on} as measured in this run"
    if budget and seconds > float(budget):
        slowest = sorted(tests.items(), key=lambda kv: -kv[1])[:5]
        terminalreporter.write_line(
            f"FAILED {line}, over its budget of {float(budget):.0f} s (${BUDGET_ENV}): make these "
            "cheaper or mark them @pytest.mark.slow: " + ", ".join(f"{n} {t:.1f} s" for n, t in slowest),
            red=True, bold=True)
    else:
        terminalreporter.write_line(line + (f" (budget {float(budget):.0f} s)" if budget else ""))

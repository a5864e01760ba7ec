"""The package's shape: every module imports alone, no import cycles, libraries never import
the CLI, one registry behind every surface's drafter list, the C extension's clear error, and
docs/architecture.md's module map, import table and options table checked against the code."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = {"olifant_mlx": ROOT / "olifant_mlx", "olifant_mlx.tui": ROOT / "tui"}


def modules() -> dict:
    """Every module of the package (olifant_mlx.tui lives in tui/) -> its file."""
    out = {}
    for prefix, folder in PACKAGE_DIRS.items():
        for f in sorted(folder.rglob("*.py")):
            rel = f.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([prefix, *parts])
            if name.startswith("olifant_mlx.tui") and prefix == "olifant_mlx":
                continue
            out[name] = f
    return out


def imports_of(name: str, path: Path, known) -> set:
    """The package modules `path` imports anywhere (top level or inside functions)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph() -> dict:
    mods = modules()
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def test_no_import_cycles():
    g = graph()
    # a package's __init__ re-exporting its own submodules is not a cycle of the design
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in g.items()}
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_libraries_never_import_the_cli_or_the_ui():
    g = graph()
    surfaces = ("olifant_mlx.cli", "olifant_mlx.tui", "olifant_mlx.__main__")
    bad = [(m, t) for m, ts in g.items() for t in ts
           if not m.startswith(surfaces) and t.startswith(surfaces)]
    assert not bad, bad
    # and the layers go one way: the draft model knows no verifier, drafters or engine
    for m, ts in g.items():
        if m.startswith("olifant_mlx.draftmodel"):
            assert not any(t.startswith(("olifant_mlx.engine", "olifant_mlx.drafters",
                                         "olifant_mlx.measure")) for t in ts), (m, ts)
        if m.startswith("olifant_mlx.drafters"):
            assert not any(t.startswith(("olifant_mlx.engine", "olifant_mlx.measure")) for t in ts), (m, ts)
        # the HTTP server stands on the Session alone (no decoding of its own; engine.options for
        # the options' checks, bindings for their request fields; engine.cache for the prefix
        # cache it keeps across requests; `teardown` is its worker thread's clean end; `library`
        # to check a request's library name without listing the others), and only the serve
        # command uses it
        if m.startswith("olifant_mlx.server"):
            assert all(t == "olifant_mlx" or t.startswith(("olifant_mlx.server", "olifant_mlx.engine.session",
                                                            "olifant_mlx.engine.options", "olifant_mlx.engine.loop",
                                                            "olifant_mlx.engine.cache", "olifant_mlx.library",
                                                            "olifant_mlx.drafters", "olifant_mlx.teardown",
                                                            "olifant_mlx.bindings"))
                       for t in ts), (m, ts)
        elif any(t.startswith("olifant_mlx.server") for t in ts):
            assert m.startswith("olifant_mlx.cli"), (m, ts)


def test_the_graph_check_can_fail(tmp_path):
    """The cycle detector sees a cycle through a function-level import."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def f():\n    from olifant_mlx.b import g\n")
    b.write_text("import olifant_mlx.a\n")
    known = {"olifant_mlx.a": a, "olifant_mlx.b": b}
    assert imports_of("olifant_mlx.a", a, known) == {"olifant_mlx.b"}
    assert imports_of("olifant_mlx.b", b, known) == {"olifant_mlx.a"}


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_interpreter():
    """Each module in an interpreter of its own (outside the source tree: the installed
    package), as many at once as there are CPUs."""
    from concurrent.futures import ThreadPoolExecutor

    from olifant_mlx.machine import cpus

    names = [m for m in modules() if not m.endswith("__main__") and not m.endswith("_build")]

    def failure(name):
        r = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd="/")
        return (name, r.stderr.strip().splitlines()[-1:]) if r.returncode else None

    with ThreadPoolExecutor(cpus()) as pool:
        failed = [f for f in pool.map(failure, names) if f]
    assert not failed, failed
    assert len(names) > 40


def test_a_source_tree_without_the_extension_says_how_to_fix_it(tmp_path):
    """Importing the package from a checkout that was never built (the source tree shadowing
    an installed wheel) names the problem and the fix instead of a bare ModuleNotFoundError."""
    import shutil

    shutil.copytree(ROOT / "olifant_mlx", tmp_path / "olifant_mlx",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    r = subprocess.run([sys.executable, "-c", "import olifant_mlx.draftmodel.igtree"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})
    assert r.returncode != 0
    assert "C extension" in r.stderr and "source tree" in r.stderr and "pip install -e ." in r.stderr


def test_every_surface_shows_the_registry_drafters():
    from olifant_mlx.cli import build_parser
    from olifant_mlx.drafters import KINDS, help_text

    text = help_text()
    assert all(k in text for k in KINDS) and "adaptive:SPEC" in text and "hybrid[:PATH]" in text
    p = build_parser("olifant")
    sub = next(a for a in p._actions if a.dest == "command")
    for command in ("generate", "tui", "bench", "serve"):
        helps = " ".join(a.help or "" for a in sub.choices[command]._actions)
        assert text in helps, command


ARCHITECTURE = ROOT / "docs" / "architecture.md"
SURFACES = ("olifant_mlx.cli", "olifant_mlx.tui", "olifant_mlx.__main__")


def doc_table(header: str, text: str | None = None) -> list:
    """The body rows (lists of cells) of the Markdown table whose header line is `header`."""
    lines = (ARCHITECTURE.read_text() if text is None else text).splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
    return rows


def short(name: str) -> str:
    return name.removeprefix("olifant_mlx.")


def top(name: str) -> str:
    return short(name).split(".")[0]


def cross_package_imports() -> dict:
    """Library module (short name) -> the modules of other packages it imports, where any."""
    out = {}
    for m, ts in graph().items():
        if m.startswith(SURFACES):
            continue
        found = {short(t) for t in ts if t != "olifant_mlx" and top(t) != top(m)}
        if found:
            out[short(m)] = found
    return out


def import_table_mismatches(rows, actual: dict, names) -> list:
    """How the import table's rows differ from `actual` (an empty list when they agree)."""
    documented, problems = {}, []
    for left, right in rows:
        named = {n for n in re.findall(r"`([\w.]+)`", right) if n in names}
        for m in re.findall(r"`([\w.]+)`", left):
            if m not in names:
                problems.append(f"{m} is no module")
                continue
            documented[m] = {n for n in named if top(n) != top(m)}
    for m in sorted(set(documented) | set(actual)):
        has, says = actual.get(m, set()), documented.get(m)
        if says is None:
            problems.append(f"{m} imports {sorted(has)} and has no row")
        elif says != has:
            problems.append(f"{m}: the table says {sorted(says)}, the code imports {sorted(has)}")
    return problems


def test_the_import_table_is_the_code():
    names = {short(m) for m in modules()}
    rows = doc_table("| module | imports from other packages |")
    problems = import_table_mismatches(rows, cross_package_imports(), names)
    assert not problems, "docs/architecture.md's import table:\n" + "\n".join(problems)


def test_the_import_table_check_can_fail():
    names = {"engine.loop", "drafters.base", "drafters.adaptive", "files", "mlx_setup"}
    actual = {"engine.loop": {"drafters.base", "drafters.adaptive", "mlx_setup"}, "mlx_setup": {"files"}}
    rows = [["`engine.loop`", "`drafters.base`, `mlx_setup` (and `engine.cache`)"]]
    problems = import_table_mismatches(rows, actual, names)
    assert problems == ["engine.loop: the table says ['drafters.base', 'mlx_setup'], the code imports "
                        "['drafters.adaptive', 'drafters.base', 'mlx_setup']",
                        "mlx_setup imports ['files'] and has no row"]


def test_every_module_is_on_the_map():
    names = set(modules())
    mapped = {"olifant_mlx"}
    for package, _folder, holds in doc_table("| package | folder | what it holds |"):
        package = package.strip("`")
        assert package in names, f"docs/architecture.md maps {package}, which is no module"
        mapped.add(package)
        mapped.update(f"{package}.{n}" for n in re.findall(r"`([a-z_]+)`", holds))
    missing = sorted(names - mapped)
    assert not missing, f"modules on no map in docs/architecture.md: {missing}"


def test_the_options_table_is_the_dataclass():
    """Read from the dataclass itself, so the check follows the options type wherever it goes."""
    import dataclasses

    from olifant_mlx.engine import GenerationOptions

    rows = doc_table("| field | default | valid |")
    fields = dataclasses.fields(GenerationOptions)
    assert [r[0].strip("`") for r in rows] == [f.name for f in fields], \
        "docs/architecture.md's GenerationOptions table and its fields differ"
    for (name, default, _valid), f in zip(rows, fields):
        value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert default.strip("`") == repr(value), (name, default, value)


def test_the_option_attributes_table_is_the_option_type():
    """Every Option attribute, in order: what a new option may say to the surfaces."""
    import dataclasses

    from olifant_mlx.engine.options import Option

    rows = doc_table("| `Option` attribute | what it says |")
    assert [r[0].strip("`") for r in rows] == [f.name for f in dataclasses.fields(Option)], \
        "docs/architecture.md's Option attributes table and Option's fields differ"


# a test module is never imported by another (code or a subprocess's script): what tests share is
# a fixture in conftest.py or a helper module (tiny_models.py, server_helpers.py, ...)
TEST_MODULE_IMPORT = re.compile(r"^\s*(?:from\s+(?:tests\.)?test_\w+\s+import\b|import\s+(?:tests\.)?test_\w+"
                                r"|from\s+tests\s+import\s+[^\n]*\btest_\w+)", re.M)


def imports_of_test_modules(text: str) -> list:
    """The lines of `text` that import a test module."""
    return [m.group(0).strip() for m in TEST_MODULE_IMPORT.finditer(text)]



def test_no_test_module_imports_another():
    found = {f"tests/{f.name}: {line}" for f in sorted((ROOT / "tests").glob("*.py"))
             for line in imports_of_test_modules(f.read_text())}
    assert not found, ("a test module imports another; move what it shares to tests/conftest.py "
                       f"(a fixture) or a helper module such as tests/tiny_models.py: {sorted(found)}")


def test_the_test_module_import_check_can_fail():
    text = ("from test_engine import tiny_llama\nimport numpy\n    from tests.test_server import BAD\n"
            "from tests import test_engine\nimport test_bench\nfrom tiny_models import Tok\n"
            'CHILD = """\nfrom test_distributed import TinyVerifier\n"""\n')
    assert imports_of_test_modules(text) == [
        "from test_engine import", "from tests.test_server import", "from tests import test_engine",
        "import test_bench", "from test_distributed import"]

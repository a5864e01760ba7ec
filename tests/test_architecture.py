"""The package's shape: every module imports alone, no import cycles, libraries never import
the CLI, one registry behind every surface's drafter list, the C extension's clear error, and
docs/architecture.md's generated tables (tools/architecture.py) the code's."""
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

import architecture  # tools/architecture.py (tests/conftest.py puts tools/ on the path)
from architecture import graph, imports_of, modules

ROOT = Path(__file__).resolve().parent.parent


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
        # the engine is free of measuring: it is given its cost models (engine.costs) and a
        # sharded verifier's collective (engine.collective), and imports neither the adaptive
        # drafter nor the measuring code
        if m.startswith("olifant_mlx.engine"):
            assert not any(t.startswith(("olifant_mlx.measure", "olifant_mlx.drafters.adaptive"))
                           for t in ts), (m, ts)
        # the HTTP server stands on the Session and its Request alone (no decoding of its own; engine.options for
        # the options' checks, bindings for their request fields; engine.cache for the prefix
        # cache it keeps across requests; engine.batch to run its requests' passes as one;
        # `teardown` is its worker thread's clean end; `library`
        # to check a request's library name without listing the others; `audit` for its audit
        # log; `structured` to check a request's JSON schema before it is queued), and only the
        # serve command uses it
        if m.startswith("olifant_mlx.server"):
            assert all(t == "olifant_mlx" or t.startswith(("olifant_mlx.server", "olifant_mlx.engine.session",
                                                            "olifant_mlx.engine.request",
                                                            "olifant_mlx.engine.options", "olifant_mlx.engine.loop",
                                                            "olifant_mlx.engine.cache", "olifant_mlx.engine.batch",
                                                            "olifant_mlx.library",
                                                            "olifant_mlx.drafters", "olifant_mlx.teardown",
                                                            "olifant_mlx.bindings", "olifant_mlx.audit",
                                                            "olifant_mlx.structured"))
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
@pytest.fixture(scope="module")
def committed() -> str:
    return ARCHITECTURE.read_text()


def test_the_generated_sections_are_the_code(committed):
    """Every table and count docs/architecture.md shows is what tools/architecture.py makes
    from the code now, to the byte."""
    assert sorted(architecture.sections_in(committed)) == sorted(architecture.SECTIONS)
    assert architecture.generate(committed) == committed, \
        f"docs/architecture.md's generated sections differ from the code: run `{architecture.REWRITE}`"


def test_the_generated_sections_check_can_fail(committed):
    """A row changed by hand, a row missing, a section nobody makes: each is seen."""
    section = re.search(r"<!-- generated: imports -->.*?<!-- end: imports -->", committed, re.S).group(0)
    assert architecture.generate(section) == section
    row = section.splitlines()[3]                       # the first module's row
    for edited in (section.replace(row, row.rpartition(" | ")[0] + " | `files` |"), section.replace(row + "\n", "")):
        assert architecture.generate(edited) == section
    with pytest.raises(ValueError, match="no generated section called 'bogus'"):
        architecture.generate("<!-- generated: bogus -->\n<!-- end: bogus -->")


def test_the_generator_rewrites_a_file_and_is_idempotent(tmp_path, capsys):
    doc = tmp_path / "architecture.md"
    doc.write_text("# A\n\n<!-- generated: options -->\nstale\n<!-- end: options -->\n")
    assert architecture.main(["--write", str(doc)]) == 0
    once = doc.read_text()
    assert "stale" not in once and "| `k` |" in once
    assert architecture.main(["--write", str(doc)]) == 0 and doc.read_text() == once
    assert "rewritten" in capsys.readouterr().out.splitlines()[0]


def test_the_import_table_is_the_code():
    """The import table's data: each library module's imports from other packages, exactly."""
    g = graph()
    for m, found in architecture.cross_package_imports().items():
        assert "olifant_mlx." + m in g and not m.startswith(("cli", "tui", "__main__"))
        assert set(found) == {architecture.short(t) for t in g["olifant_mlx." + m]
                              if t != "olifant_mlx" and architecture.top(t) != architecture.top(m)}


def test_the_import_table_check_can_fail(tmp_path):
    """A function-level import is told apart from a top-level one."""
    a = tmp_path / "a.py"
    a.write_text("import olifant_mlx.b\n\ndef f():\n    from olifant_mlx.c import g\n")
    known = {"olifant_mlx.a": a, "olifant_mlx.b": a, "olifant_mlx.c": a}
    assert architecture.import_sites("olifant_mlx.a", a, known) == {"olifant_mlx.b": True, "olifant_mlx.c": False}


def test_every_module_is_on_the_map(committed):
    names = set(modules())
    assert len(names) > 40
    mapped = {"olifant_mlx." + n.strip("`") if n != "`olifant_mlx`" else "olifant_mlx"
              for n in re.findall(r"^\| (`[\w.]+`) \|", architecture.module_map(), re.M)}
    assert mapped == names, sorted(names ^ mapped)
    assert all(f"`{architecture.short(m)}`" in committed for m in names)


def test_the_options_table_is_the_dataclass():
    """Read from the dataclass itself, so the table follows the options type wherever it goes."""
    from olifant_mlx.engine import GenerationOptions

    rows = architecture.option_rows()
    fields = dataclasses.fields(GenerationOptions)
    assert [r[0] for r in rows] == [f.name for f in fields]
    for (name, default, _valid), f in zip(rows, fields):
        value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert default == repr(value), name
    assert dict((n, v) for n, _, v in rows)["top_p"] == "in (0, 1]"


def test_the_option_attributes_table_is_the_option_type():
    """Every Option attribute, in order: what a new option may say to the surfaces."""
    from olifant_mlx.engine.options import Option

    rows = architecture.class_fields(architecture.PACKAGE / "engine" / "options.py", "Option")
    assert [r[0] for r in rows] == [f.name for f in dataclasses.fields(Option)]


def test_a_fields_comment_is_read_with_its_continuation(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("class C:\n    a: int   # one\n    #        and two\n    b: str = 'x'\n    c: tuple = ()  # three\n")
    assert architecture.class_fields(f, "C") == [("a", "int", None, "one and two"), ("b", "str", "'x'", ""),
                                                 ("c", "tuple", "()", "three")]


# ---- the floors ----------------------------------------------------------------------------

# imports from a lower floor to a higher one that are being removed (files this change may not edit)
def test_every_module_is_on_a_floor():
    floors = {m: architecture.floor_of(m) for m in modules()}
    assert floors["olifant_mlx.files"] == 0 and floors["olifant_mlx.cli.serve"] == len(architecture.FLOORS) - 1
    assert floors["olifant_mlx.drafters.base"] < floors["olifant_mlx.engine.loop"] < floors["olifant_mlx.server.app"]


def test_no_import_goes_up_a_floor():
    assert architecture.floor_violations() == []


def test_the_floor_check_can_fail():
    floors = (("low", ("files",)), ("mid", ("engine",)), ("high", ("cli",)))
    g = {"olifant_mlx.files": {"olifant_mlx.engine.loop"}, "olifant_mlx.engine.loop": {"olifant_mlx.files"},
         "olifant_mlx.cli": {"olifant_mlx.engine", "olifant_mlx"}, "olifant_mlx.engine": {"olifant_mlx.cli.common"}}
    assert architecture.floor_violations(g, floors) == [("engine", "cli.common"), ("files", "engine.loop")]
    with pytest.raises(KeyError, match="olifant_mlx.server is on no floor"):
        architecture.floor_of("olifant_mlx.server", floors)


# ---- the sizes -----------------------------------------------------------------------------

def test_no_class_or_function_is_over_its_limit():
    """No class over 250 lines nor function over 60 outside tests (the docs' Sizes)."""
    over = architecture.oversized()
    assert not over, "\n".join(f"{f} {n}: {lines} lines" for f, n, _, lines in over)


def test_the_size_check_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("class C:\n    def m(self):\n" + "        x = 1\n" * 61 + "\ndef g():\n    pass\n")
    assert list(architecture.definitions(f)) == [("C", True, 63), ("C.m", False, 62), ("g", False, 2)]


def test_no_c_function_is_over_its_limit():
    """No C function in csrc/ over 120 lines (the docs' Sizes); the counter finds them all."""
    functions = dict(architecture.c_functions(ROOT / "csrc" / "igt_file.c"))
    assert {"open_v2", "encode_v2", "check_escapes"} <= set(functions) and functions["open_v2"] < 60
    over = architecture.c_oversized()
    assert not over, "\n".join(f"{f} {n}: {lines} lines" for f, n, lines in over)


def test_the_c_size_check_can_fail(tmp_path):
    """Braces in comments, strings, characters and macros are no code; an initializer or a struct
    is no function; a function counts from the line of its name to its closing brace."""
    body = "    x++;\n" * 118
    (tmp_path / "m.c").write_text(
        '#define BLOCK(x) do { x; } while (0)\n'
        'typedef struct { int a; } S;\n'
        'static const S INIT = {1};\n'
        '/* void fake(void) { */\n'
        'static int\nlong_one(int x,\n         int (*f)(int)) {\n' + body + '    return x;\n}\n'
        'int short_one(void) { const char *s = "}{"; char c = \'{\'; return s[0] + c; }\n'
        'int exactly(void) {\n' + "    ;\n" * 118 + '}\n')
    assert architecture.c_functions(tmp_path / "m.c") == [("long_one", 122), ("short_one", 1), ("exactly", 120)]
    assert architecture.c_oversized(tmp_path) == [(f"{tmp_path.name}/m.c", "long_one", 122)]


def test_ks_default_lives_in_one_place():
    places = architecture.k_defaults()
    assert len(places) == 1, places


def test_the_k_default_check_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("class O:\n    k: int = option(3, flag_default=8)\n\n"
                 "def f(k=8, *, num_draft_tokens=5):\n    g(k=0)\n    g(k=4)\n"
                 "    p.add_argument('-k', type=int, default=8)\n    p.add_argument('--gamma', '-k', default=4)\n")
    assert architecture.k_defaults_in(f) == [
        ("O.k", "flag_default=", 8), ("O.k", "the field's default", 3), ("f", "parameter k=", 8),
        ("f", "parameter num_draft_tokens=", 5), ("f", "k= passed", 4), ("f", "-k default=", 8)]


def test_the_print_command_shows_the_graph_and_the_counts(capsys):
    assert architecture.main(["--print"]) == 0
    out = capsys.readouterr().out
    assert "# import graph:" in out and "\nengine.loop -> " in out
    for heading in ("# functions outside tests:", "# literal defaults of k"):
        assert heading in out


def test_the_package_does_not_ship_the_tool():
    """tools/architecture.py reads the source tree: no module of the package is it."""
    assert "olifant_mlx.architecture" not in modules() and not (architecture.PACKAGE / "architecture.py").exists()
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "architecture.py"), "--print"], capture_output=True,
                       text=True, cwd="/")
    assert r.returncode == 0 and "# import graph:" in r.stdout, r.stderr


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

"""The package's shape, read from its code: the import graph and the tables of
docs/architecture.md. A tool of the source tree (tools/), not part of the package.

The tables in docs/architecture.md are generated here, never edited by hand: each sits between
`<!-- generated: NAME -->` and `<!-- end: NAME -->`, and
`python tools/architecture.py --write docs/architecture.md` rewrites them (byte-identical when
nothing changed); tests/test_architecture.py fails when the committed file differs. `--print`
prints the import graph, the sizes and the literal defaults of k. The code is read with `ast`
(nothing of the surfaces is imported); only the options' defaults come from importing
`engine.options`.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import re
import statistics
import sys
import tokenize
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent   # the source tree
PACKAGE = ROOT / "olifant_mlx"
SURFACES = ("olifant_mlx.cli", "olifant_mlx.tui", "olifant_mlx.__main__")
CLASS_LIMIT, FUNCTION_LIMIT = 250, 60       # lines, outside tests
REWRITE = "python tools/architecture.py --write docs/architecture.md"


def tui_folder() -> Path:
    """Where olifant_mlx.tui's files are: tui/ (it installs as olifant_mlx.tui)."""
    return ROOT / "tui"


def modules() -> dict:
    """Every module of the package (olifant_mlx.tui lives in tui/) -> its file."""
    out = {}
    for prefix, folder in (("olifant_mlx", PACKAGE), ("olifant_mlx.tui", tui_folder())):
        for f in sorted(folder.rglob("*.py")):
            parts = [p for p in f.relative_to(folder).with_suffix("").parts if p != "__init__"]
            name = ".".join([prefix, *parts])
            if not (name.startswith("olifant_mlx.tui") and prefix == "olifant_mlx"):
                out[name] = f
    return out


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def short(name: str) -> str:
    return name.removeprefix("olifant_mlx.")


def top(name: str) -> str:
    return short(name).split(".")[0]


# ---- the import graph ----------------------------------------------------------------------

def import_sites(name: str, path: Path, known) -> dict:
    """The package modules `path` imports -> whether at its top level (False: only inside
    functions or classes)."""
    tree = parsed(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top_level = {id(n) for n in tree.body}
    found = {}
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
                found[t] = found.get(t, False) or id(node) in top_level
    return found


def imports_of(name: str, path: Path, known) -> set:
    """The package modules `path` imports anywhere (top level or inside functions)."""
    return set(import_sites(name, path, known))


def graph() -> dict:
    mods = modules()
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def cross_package_imports() -> dict:
    """Library module (short name) -> {module of another package (short) -> at top level}."""
    mods = modules()
    out = {}
    for m, path in mods.items():
        if m.startswith(SURFACES):
            continue
        found = {short(t): at_top for t, at_top in import_sites(m, path, mods).items()
                 if t != "olifant_mlx" and top(t) != top(m)}
        if found:
            out[short(m)] = found
    return out


# ---- the floors ----------------------------------------------------------------------------

# Each module stands on a floor and imports only from its own floor and those below: lowest
# first, each floor's packages and modules by their short names ("" is the package's __init__);
# a module is on the floor of its longest listed prefix.
FLOORS = (
    ("helpers", ("", "files", "machine", "teardown", "mlx_setup", "passages", "exports", "audit", "structured",
                 "option_errors")),
    ("file formats", ("draftmodel", "energy", "redline")),
    ("models and libraries", ("verifier", "library", "catalog", "provenance", "precedents")),
    ("drafters", ("drafters",)),
    ("engine", ("engine",)),
    ("services", ("bindings", "conversation", "revise", "measure")),
    ("server", ("server",)),
    ("tui", ("tui",)),
    ("cli", ("cli", "__main__")),
)


def floor_of(name: str, floors=FLOORS) -> int:
    """The floor (its index in `floors`) of module `name`; a KeyError for a module on none."""
    s = "" if name == "olifant_mlx" else short(name)
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(floors) for p in prefixes
                if p and (s == p or s.startswith(p + "."))), default=None)
    if best is None and s != "":
        raise KeyError(f"{name} is on no floor: add it to FLOORS (tools/architecture.py)")
    return 0 if best is None else best[1]


def floor_violations(g=None, floors=FLOORS) -> list:
    """(module, what it imports) for every import from a lower floor to a higher one."""
    g = graph() if g is None else g
    return sorted((short(m), short(t)) for m, ts in g.items() for t in ts
                  if floor_of(m, floors) < floor_of(t, floors))


def floors_table() -> str:
    rows = [(str(i), name, ", ".join(f"`{p or 'olifant_mlx'}`" for p in prefixes))
            for i, (name, prefixes) in enumerate(FLOORS)]
    found = floor_violations()
    said = ", ".join(f"`{m}` → `{t}`" for m, t in found) or "none"
    return (table(("floor", "name", "packages and modules"), rows)
            + f"\n\n{len(found)} imports go from a lower floor to a higher one: {said}.")


# ---- the tables ----------------------------------------------------------------------------

def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: tuple, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def summary(path: Path) -> str:
    """The first sentence of a module's docstring."""
    doc = ast.get_docstring(parsed(path)) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<=[.?!])\s+(?=[A-Z`(])", first)[0] if first else "—"


def module_map() -> str:
    rows = [(f"`{short(m)}`", summary(path)) for m, path in sorted(modules().items())]
    return table(("module", "what it is (its docstring's first sentence)"), rows)


def import_table() -> str:
    """One row per group of modules of one package that import the same modules of others."""
    groups = {}
    for m, found in sorted(cross_package_imports().items()):
        at_top = ", ".join(f"`{t}`" for t in sorted(t for t, yes in found.items() if yes))
        inner = ", ".join(f"`{t}`" for t in sorted(t for t, yes in found.items() if not yes))
        said = "; ".join(filter(None, [at_top, inner and f"inside functions: {inner}"]))
        groups.setdefault((top(m), said), []).append(f"`{m}`")
    rows = [(", ".join(names), said) for (_, said), names in groups.items()]
    return table(("module", "imports from other packages"), rows)


def valid(o) -> str:
    """What an option takes, from its `Option` (an empty text for a field without one)."""
    if o is None:
        return ""
    kind, low, high = getattr(o, "kind", ""), getattr(o, "low", None), getattr(o, "high", None)
    from olifant_mlx.engine.options import bound

    word = {"whole": "whole number", "number": "finite number"}.get(kind)
    if word and low is not None and high is not None:
        brackets = "(" if o.low_open else "[", ")" if o.high_open else "]"
        said = (f"{word} {bound(low)}..{bound(high)}" if kind == "whole"
                else f"in {brackets[0]}{bound(low)}, {bound(high)}{brackets[1]}")
    elif word and low is not None:
        said = f"{word} {'>' if o.low_open else '≥'} {bound(low)}"
    else:
        said = word or {"choice": "one of " + ", ".join(map(repr, getattr(o, "choices", ()))),
                        "flag": "true or false", "text": "a non-empty text",
                        "texts": "a tuple of non-empty strings", "spec": "a drafter spec (drafters.registry)",
                        "cost": "a pass-cost model (coefficients(), observe())"}.get(kind, kind)
    return said + getattr(o, "note", "") + (", or None" if getattr(o, "optional", False) else "")


def option_rows() -> list:
    """(field, repr of its default, what it takes) of GenerationOptions, in field order."""
    from olifant_mlx.engine.options import GenerationOptions

    rows = []
    for f in dataclasses.fields(GenerationOptions):
        value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        rows.append((f.name, repr(value), valid(f.metadata.get("option"))))
    return rows


def options_table() -> str:
    return table(("field", "default", "valid"), [(f"`{n}`", f"`{d}`", v) for n, d, v in option_rows()])


def comments(path: Path) -> dict:
    """Line number -> (its comment, whether the line holds nothing else)."""
    out, code = {}, set()
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code.update(range(tok.start[0], tok.end[0] + 1))
    return {line: (text, line not in code) for line, text in out.items()}


def class_fields(path: Path, name: str) -> list:
    """(field, annotation, default or None, comment) of the dataclass `name` in `path`: the
    comment is the one on the field's line and the comment lines right under it."""
    notes = comments(path)
    cls = next(n for n in parsed(path).body if isinstance(n, ast.ClassDef) and n.name == name)
    rows = []
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        said, line = [], node.end_lineno
        if line in notes and not notes[line][1]:
            said.append(notes[line][0])
        while notes.get(line + 1, ("", False))[1]:
            line += 1
            said.append(notes[line][0])
        default = ast.unparse(node.value) if node.value else None
        rows.append((node.target.id, ast.unparse(node.annotation), default, " ".join(said)))
    return rows


def fields_table(path: Path, name: str, first: str) -> str:
    rows = [(f"`{n}`", f"`{a}`", f"`{d}`" if d else "required", c) for n, a, d, c in class_fields(path, name)]
    return table((first, "type", "default", "what it says (its comment)"), rows)


def relative(path: Path) -> str:
    folder = tui_folder()
    return "tui/" + str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path.relative_to(PACKAGE))


# ---- sizes ---------------------------------------------------------------------------------

def code_files() -> list:
    """The Python code outside tests: the package, tui/, benchmarks/ and tools/."""
    folders = [PACKAGE, tui_folder(), ROOT / "benchmarks", ROOT / "tools"]
    return [f for folder in folders for f in sorted(folder.rglob("*.py"))]


def display(path: Path) -> str:
    if path.is_relative_to(ROOT / "benchmarks") or path.is_relative_to(ROOT / "tools"):
        return str(path.relative_to(ROOT))
    rel = relative(path)
    return rel if rel.startswith("tui/") else "olifant_mlx/" + rel


def definitions(path: Path):
    """(qualified name, is a class, lines from its `def`/`class` line to its last) of `path`."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                yield name, isinstance(child, ast.ClassDef), child.end_lineno - child.lineno + 1
                yield from walk(child, name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(parsed(path), "")


def oversized() -> list:
    """(file, name, is a class, lines) of every class over CLASS_LIMIT and function over
    FUNCTION_LIMIT lines in the code outside tests."""
    return [(display(f), name, is_class, lines) for f in code_files() for name, is_class, lines in definitions(f)
            if lines > (CLASS_LIMIT if is_class else FUNCTION_LIMIT)]


# ---- C function sizes ----------------------------------------------------------------------

C_FUNCTION_LIMIT = 120                      # lines, csrc/*.c (the test drivers included)
C_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*',
                     re.S | re.M)


def c_code(text: str) -> str:
    """`text` with its comments, string and character literals and preprocessor lines blanked
    (newlines kept, so line numbers stay), leaving the braces that are code."""
    return C_TOKEN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def c_functions(path: Path) -> list:
    """(name, lines from the line of its name to its closing brace) of every function defined at
    the top level of the C file `path`: a top-level `{` right after a `)` opens a body (an
    initializer follows `=`, a struct its name)."""
    code, found, depth, start = c_code(path.read_text()), [], 0, 0
    for m in re.finditer(r"[{};]", code):
        if m.group(0) == "{":
            if depth == 0:
                head = code[start:m.start()].rstrip()
                name = re.search(r"(\w+)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)$", head) if head.endswith(")") else None
                opened = (name.group(1), code.count("\n", 0, start + name.start(1)) + 1) if name else None
            depth += 1
        elif m.group(0) == "}":
            depth -= 1
            if depth == 0:
                if opened:
                    found.append((opened[0], code.count("\n", 0, m.start()) + 2 - opened[1]))
                start = m.end()
        elif depth == 0:
            start = m.end()
    return found


def c_oversized(folder: Path = ROOT / "csrc") -> list:
    """(file, function, lines) of every C function over C_FUNCTION_LIMIT lines in `folder`."""
    return [(str(f.relative_to(folder.parent)), name, lines) for f in sorted(folder.glob("*.c"))
            for name, lines in c_functions(f) if lines > C_FUNCTION_LIMIT]


def sizes_table() -> str:
    found, rows = oversized(), []
    for is_class, limit, what in ((True, CLASS_LIMIT, "classes"), (False, FUNCTION_LIMIT, "functions")):
        over = [f"`{f}` `{n}`" for f, n, c, _ in found if c == is_class]
        rows.append((f"Python {what} over {limit} lines (olifant_mlx/, tui/, benchmarks/, tools/)", str(len(over)),
                     ", ".join(over) or "—"))
    over = [f"`{f}` `{n}`" for f, n, _ in c_oversized()]
    rows.append((f"C functions over {C_FUNCTION_LIMIT} lines (csrc/*.c)", str(len(over)), ", ".join(over) or "—"))
    return table(("what", "count", "which"), rows)


# ---- where k's default lives ---------------------------------------------------------------

K_NAMES = ("k", "num_draft_tokens")


def flag_dest(call: ast.Call) -> str | None:
    """The destination of an `add_argument` call's flag, as argparse names it (its first long
    spelling, else its first: `--gamma, -k` is gamma, the calculator's own draft length)."""
    spellings = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if getattr(call.func, "attr", "") != "add_argument" or not spellings:
        return None
    longs = [f for f in spellings if f.startswith("--")]
    return (longs or spellings)[0].lstrip("-").replace("-", "_")


def number(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def k_defaults_in(path: Path) -> list:
    """(where, what, value) of every literal default of k in `path`: a parameter's default, a
    class field's (or the first argument of the call that makes it, and its `flag_default`), a
    `-k` flag's `default=`, and a `k=N` (N > 0: 0 is plain decoding, a choice) passed to a call."""
    found = []

    def visit(node, where):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            where = f"{where}.{node.name}" if where else node.name
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            pairs = [*zip(a.args[len(a.args) - len(a.defaults):], a.defaults), *zip(a.kwonlyargs, a.kw_defaults)]
            found.extend((where, f"parameter {p.arg}=", d.value) for p, d in pairs if p.arg in K_NAMES and number(d))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in K_NAMES:
            value, field = node.value, f"{where}.{node.target.id}"
            if isinstance(value, ast.Call) and value.args:
                found.extend((field, "flag_default=", k.value.value) for k in value.keywords
                             if k.arg == "flag_default" and number(k.value))
                value = value.args[0]
            if number(value):
                found.append((field, "the field's default", value.value))
        elif isinstance(node, ast.Call):
            for k in node.keywords:
                if k.arg == "default" and flag_dest(node) in K_NAMES and number(k.value):
                    found.append((where, "-k default=", k.value.value))
                elif k.arg in K_NAMES and number(k.value) and k.value.value > 0:
                    found.append((where, f"{k.arg}= passed", k.value.value))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(parsed(path), "")
    return found


def k_defaults() -> list:
    """(file, where, what, value) of every literal default of k in the package and tui/."""
    files = [f for f in code_files() if f.is_relative_to(PACKAGE) or f.is_relative_to(tui_folder())]
    return [(display(f), *found) for f in files for found in k_defaults_in(f)]


def k_table() -> str:
    rows = [(f"`{f}`", f"`{where}`", what, str(v))
            for f, where, what, v in k_defaults()]
    return (f"{len(rows)} places hold a literal default of `k`:\n\n"
            + table(("file", "in", "as", "value"), rows))


# ---- the generated sections ----------------------------------------------------------------

SECTIONS = {
    "modules": module_map,
    "imports": import_table,
    "options": options_table,
    "option-attributes": lambda: fields_table(PACKAGE / "engine" / "options.py", "Option", "`Option` attribute"),
    "drafter-kind": lambda: fields_table(PACKAGE / "drafters" / "registry.py", "DrafterKind", "field"),
    "floors": floors_table,
    "sizes": sizes_table,
    "k-default": k_table,
}
BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end: \2 -->)", re.S)


def generate(text: str) -> str:
    """`text` with every generated section made anew from the code; a ValueError for a
    section this module does not make."""
    def fill(m):
        if m.group(2) not in SECTIONS:
            raise ValueError(f"no generated section called {m.group(2)!r} (known: {', '.join(SECTIONS)})")
        return m.group(1) + SECTIONS[m.group(2)]() + "\n" + m.group(4)

    return BLOCK.sub(fill, text)


def sections_in(text: str) -> list:
    return [m.group(2) for m in BLOCK.finditer(text)]


# ---- the command ---------------------------------------------------------------------------

def print_graph(out) -> None:
    g = graph()
    lengths = [n for f in code_files() for _, c, n in definitions(f) if not c]
    print(f"# import graph: {len(g)} modules, {sum(map(len, g.values()))} imports "
          "(module -> the package modules it imports)", file=out)
    for m, ts in sorted(g.items()):
        print(f"{short(m)} -> {', '.join(sorted(short(t) for t in ts)) or '-'}", file=out)
    print(f"\n# functions outside tests: {len(lengths)}, median {statistics.median(lengths):g} lines", file=out)
    for f, name, is_class, lines in oversized():
        print(f"{'class' if is_class else 'function'} {f} {name}: {lines} lines", file=out)
    print("\n# literal defaults of k", file=out)
    for f, where, what, value in k_defaults():
        print(f"{f} {where} {what} {value}", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/architecture.py", description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", metavar="FILE", help="rewrite FILE's generated sections (docs/architecture.md)")
    what.add_argument("--print", action="store_true", help="print the import graph, the sizes and the defaults of k")
    args = ap.parse_args(argv)
    if args.print:
        print_graph(sys.stdout)
        return 0
    from olifant_mlx.files import write_atomic

    path = Path(args.write)
    text = path.read_text()
    if not sections_in(text):
        ap.error(f"{path} has no generated sections (<!-- generated: NAME --> ... <!-- end: NAME -->)")
    new = generate(text)
    if new != text:
        write_atomic(path, new, mode=0o644)
    print(f"{path}: {len(sections_in(text))} sections, {'rewritten' if new != text else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One write path: every file olifant_mlx makes goes through olifant_mlx/files.py.

A scan of the source (olifant_mlx/ and tui/) fails on a writer outside files.py: open() for
writing, write_text/write_bytes, json.dump, np.save, shutil.copy, savefig, save_safetensors,
os.open with O_CREAT, rename, a temp file of its own. A writer inside a `with` of files.py's
atomic_writer / private_output / private_files writes into files.py's temp name and is fine;
the few that must stay are in ALLOWED, each with its reason. Then real files: the writers this
path covers create 0600 files and never follow a link planted at the temp or the final name."""
from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path

import pytest

from olifant_mlx import files

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("olifant_mlx", "tui")
FILES_PY = Path("olifant_mlx/files.py")
SAFE_CONTEXTS = {"atomic_writer", "private_output", "private_files"}
WRITER_CALLS = {"write_text", "write_bytes", "save_safetensors", "savefig", "save_pretrained", "tofile",
                "mkstemp", "NamedTemporaryFile", "extractall", "snapshot_download",
                "copy", "copy2", "copyfile", "copytree", "move", "rename", "replace", "save", "savez",
                "savez_compressed", "dump"}
# os.open flags that create or write a file: reported as the kind "O_WRITE"
# which module each ambiguous name must be called on to count as a file writer
QUALIFIED = {"copy": {"shutil"}, "copy2": {"shutil"}, "copyfile": {"shutil"}, "copytree": {"shutil"},
             "move": {"shutil"}, "rename": {"os"}, "replace": {"os"}, "save": {"np", "numpy", "mx"},
             "savez": {"np", "numpy", "mx"}, "savez_compressed": {"np", "numpy", "mx"}, "dump": {"json"}}
CREATE_FLAGS = {"O_CREAT", "O_WRONLY", "O_APPEND", "O_TRUNC"}

# (file, enclosing function, call): why this writer stays outside files.py
ALLOWED = {
    # appends: a history and a results file grow by whole records, so they cannot be renamed
    # into place; both are opened with open_regular (a FIFO or device is refused), created
    # 0600 (the history exclusively, never through a link), and a torn last record is cut
    ("olifant_mlx/drafters/history.py", "_open_or_create", "O_WRITE"),
    ("olifant_mlx/measure/bench.py", "open_results", "O_WRITE"),
    # a lock file holds nothing; it stays (removing it would race a waiter), opened O_NOFOLLOW
    ("olifant_mlx/verifier/aliases.py", "cache_entry_lock", "O_WRITE"),
    # the converted verifier's folder: written inside mkdtemp (0700), fsynced, renamed whole
    ("olifant_mlx/verifier/aliases.py", "gguf_model_dir", "rename"),
    # huggingface_hub's own cache (its .incomplete files, renamed by it), not ours
    ("olifant_mlx/verifier/pull.py", "pull", "snapshot_download"),
    # tests' and benchmarks' helper: copies a read-only fixture tree into their own tmp folder
    ("olifant_mlx/energy/rapl.py", "materialise", "copytree"),
    # redirecting stdout to /dev/null (a device, not a file we make)
    ("olifant_mlx/cli/__init__.py", "*", "O_WRITE"),
}


def _name(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _writes(call: ast.Call) -> str | None:
    """The writer this call is (a name from WRITER_CALLS, or 'open' for writing), else None."""
    f = call.func
    name = _name(f)
    if name == "open" and isinstance(f, ast.Name):
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
            return "open"
        return None
    if name in WRITER_CALLS:
        if name in QUALIFIED:
            owner = _name(f.value) if isinstance(f, ast.Attribute) else None
            return name if owner in QUALIFIED[name] else None
        return name
    return None


def stray_writers(root: Path = ROOT) -> list[tuple[str, str, str, int]]:
    """Every writer outside files.py not inside a safe `with`, as (file, function, call, line)."""
    out = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == FILES_PY:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), str(rel))
            _visit(tree, str(rel), "*", False, out)
    return out


def _visit(node, rel, func, safe, out):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        func = node.name
    if isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            _visit(item.context_expr, rel, func, safe, out)
        inner = safe or any(isinstance(i.context_expr, ast.Call) and _name(i.context_expr.func) in SAFE_CONTEXTS
                            for i in node.items)
        for child in node.body:
            _visit(child, rel, func, inner, out)
        return
    if isinstance(node, ast.Call) and not safe:
        kind = _writes(node)
        if kind:
            out.append((rel, func, kind, node.lineno))
    # os.O_CREAT and kin, wherever they appear (a wrapper like `self._open(flags)` takes them)
    if isinstance(node, ast.Attribute) and node.attr in CREATE_FLAGS and _name(node.value) == "os" and not safe:
        out.append((rel, func, "O_WRITE", node.lineno))
    for child in ast.iter_child_nodes(node):
        _visit(child, rel, func, safe, out)


def _allowed(hit) -> bool:
    rel, func, kind, _ = hit
    return (rel, func, kind) in ALLOWED or (rel, "*", kind) in ALLOWED


def test_no_stray_writer_outside_files_py():
    stray = [h for h in stray_writers() if not _allowed(h)]
    assert not stray, ("files written outside olifant_mlx/files.py (use write_atomic / atomic_writer, or "
                       "private_output / private_files where a library writes the file; else add to "
                       "ALLOWED with the reason):\n" + "\n".join(f"  {r}:{n} in {f}(): {k}" for r, f, k, n in stray))


def test_every_allowed_writer_still_exists():
    """A stale entry would let a new writer of the same name in through the back door."""
    hits = {(r, f, k) for r, f, k, _ in stray_writers()} | {(r, "*", k) for r, _, k, _ in stray_writers()}
    assert not ALLOWED - hits, f"ALLOWED entries that match nothing: {sorted(ALLOWED - hits)}"


def test_the_scan_can_fail(tmp_path):
    """The scanner finds each kind of stray writer (so the guard is no empty pass)."""
    pkg = tmp_path / "olifant_mlx"
    pkg.mkdir()
    (tmp_path / "tui").mkdir()
    (pkg / "bad.py").write_text(
        "import json, os, shutil\nimport numpy as np\nfrom olifant_mlx.files import atomic_writer\n"
        "def a(p):\n    open(p, 'w').write('x')\n"
        "def b(p):\n    p.write_text('x')\n"
        "def c(p, f):\n    json.dump({}, f)\n"
        "def d(p):\n    shutil.copy(p, p)\n"
        "def e(p):\n    os.open(p, os.O_WRONLY | os.O_CREAT)\n"
        "def f(p):\n    np.save(p, 1)\n"
        "def g(p):\n    with atomic_writer(p) as f:\n        json.dump({}, f)\n"
        "def h(p):\n    open(p).read()\n")
    found = {(f, k) for _, f, k, _ in stray_writers(tmp_path)}
    assert found == {("a", "open"), ("b", "write_text"), ("c", "dump"), ("d", "copy"), ("e", "O_WRITE"),
                     ("f", "save")}


# -- real files: 0600, and no planted link followed ---------------------------------------


def _plant(tmp_path, target: Path) -> Path:
    """A symbolic link at `target` to a file outside; returns the outside file."""
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    target.symlink_to(victim)
    return victim


def _check_private_and_unlinked(path: Path, victim: Path):
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode), f"{path} is still a link"
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert victim.read_text() == "keep me"


def test_write_atomic_replaces_a_planted_link_and_writes_0600(tmp_path):
    target = tmp_path / "out.json"
    victim = _plant(tmp_path, target)
    files.write_atomic(target, "{}")
    _check_private_and_unlinked(target, victim)
    assert target.read_text() == "{}"


def test_atomic_writer_never_opens_a_planted_temp_name(tmp_path, monkeypatch):
    """Whatever the temp name, it is created exclusively without following a link: a link
    planted at the name the writer picks makes it pick another, never write through it."""
    import tempfile

    target = tmp_path / "out.bin"
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    names = iter(["planted", "planted", "fresh"])     # mkstemp draws its names from this (CPython)
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: names)
    (tmp_path / ".out.bin.planted.tmp").symlink_to(victim)
    files.write_atomic(target, b"data")
    assert target.read_bytes() == b"data" and stat.S_IMODE(os.lstat(target).st_mode) == 0o600
    assert victim.read_text() == "keep me"
    assert os.path.islink(tmp_path / ".out.bin.planted.tmp")


def test_private_files_moves_each_file_in_0600_over_planted_links(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    victim = _plant(tmp_path, out / "tokenizer.json")
    with files.private_files(out) as tmp:
        (tmp / "tokenizer.json").write_text("{}")       # what save_pretrained does
        (tmp / "config.json").write_text("{}")
    for name in ("tokenizer.json", "config.json"):
        _check_private_and_unlinked(out / name, victim)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "tokenizer.json"]


def test_private_files_leaves_nothing_on_error(tmp_path):
    with pytest.raises(RuntimeError), files.private_files(tmp_path) as tmp:
        (tmp / "half.json").write_text("{")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_gguf_conversion_writes_0600_and_never_follows_planted_links(tmp_path):
    """The real converter on a real (tiny) GGUF file: every file it makes is 0600, and a link
    planted at config.json / model.safetensors / tokenizer_config.json is replaced, not followed."""
    from gguf_models import tiny, write_gguf

    from olifant_mlx.verifier.gguf_import import convert_gguf

    write_gguf(tiny("llama"), "llama", tmp_path / "m.gguf")
    out = tmp_path / "mlx"
    out.mkdir()
    planted = {}
    for name in ("config.json", "model.safetensors", "tokenizer_config.json"):
        (tmp_path / name).mkdir()
        planted[name] = _plant(tmp_path / name, out / name)
    convert_gguf(tmp_path / "m.gguf", out)
    for name, victim in planted.items():
        _check_private_and_unlinked(out / name, victim)
    for p in out.iterdir():
        assert stat.S_IMODE(os.lstat(p).st_mode) == 0o600, p
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"


def test_the_verifier_cache_entry_is_private_and_whole(tmp_path, monkeypatch):
    """gguf_model_dir: the converted folder (0700) and every file in it, the stamp included
    (0600), appear at once under a fresh $OLIFANT_CACHE; no temporary is left beside it."""
    from gguf_models import tiny, write_gguf

    from olifant_mlx.verifier.aliases import CONVERSION_STAMP, gguf_model_dir

    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OLIFANT_GGUF_WEIGHTS", "fp32")
    write_gguf(tiny("llama"), "llama", tmp_path / "m.gguf")
    out = gguf_model_dir(tmp_path / "m.gguf", "tiny")
    assert stat.S_IMODE(os.lstat(out).st_mode) == 0o700
    assert {p.name for p in out.iterdir()} >= {CONVERSION_STAMP, "config.json", "model.safetensors"}
    for p in out.iterdir():
        assert stat.S_IMODE(os.lstat(p).st_mode) == 0o600, p
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny", "tiny.lock"]

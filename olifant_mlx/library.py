"""Precedent libraries: a folder of documents as one named bundle for one verifier tokenizer.

A library lives in cache_dir()/libraries/NAME/ and holds
- `model.olif`: the IGTree draft model trained on the documents;
- `index.sfx`: their suffix index (REST);
- `tokens.u32`: the corpus token stream (every document's ids, in path order);
- `documents.json`: the document table — id, path (relative to the folder), title, content
  hash, matter, the document's token offset and count, its paragraphs' token offsets and pages;
- `library.json`: the name, folder, tokenizer, and the last build's counts and times;
- `passages.sqlite`: the ranked full-text index of its paragraphs (olifant_mlx.passages), which
  `library search` and drafting with `--precedents` read (absent in a library built before it).
Everything but library.json is a function of the files' contents and the tokenizer, so an
incremental rebuild equals a full one byte for byte. A rebuild re-extracts and re-tokenizes
only the files whose content hash is new; the others' tokens come from tokens.u32.

NAME is a symbolic link to a versioned folder `.NAME.XXXXXXXX.v` beside it. A build writes the
new version in full, fsyncs it, then points NAME at it with one rename: a reader (or a build
killed at any step) finds the old library or the new one, never none. Builds of one name take
turns (a flock on `.NAME.lock`), and each build first reclaims what a killed one left (its
unfinished version, a temporary link; a library left aside by the two-rename swap of earlier
versions is taken back). Each file is read once: its hash and its text come from the same bytes.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from olifant_mlx import passages
from olifant_mlx.draftmodel import documents
from olifant_mlx.files import (PRIVATE, cache_dir, fsync_dir, fsync_tree, locked, open_regular, read_regular,
                               switch_link, write_atomic)

FORMAT = 1
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TEXT_SUFFIXES = (".txt", ".text")
FILES = ("model.olif", "index.sfx", "tokens.u32", "documents.json", "library.json")
MATTER_FILE = ".matter"     # its first line names the matter of every document at or below its folder
MATTER_BYTES = 1024         # what is read of a .matter file: a matter name is one short line


class LibraryError(ValueError):
    """A library name, folder or bundle that cannot be used; the message says which and why."""


def libraries_dir() -> Path:
    return cache_dir() / "libraries"


def index_owner(path) -> str | None:
    """The name of the library whose suffix index `path` is (a library's own `index.sfx`), else None."""
    p = Path(path)
    if p.name != "index.sfx":
        return None
    return p.parent.name if p.resolve().parent.parent == libraries_dir().resolve() else None


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name or ""):
        raise LibraryError(f"library name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)")
    return name


@dataclass
class Library:
    name: str
    path: Path
    meta: dict

    @property
    def model_path(self) -> Path:
        return self.path / "model.olif"

    @property
    def index_path(self) -> Path:
        return self.path / "index.sfx"

    @property
    def tokens(self) -> int:
        return int(self.meta.get("tokens", 0))

    def fits(self, tokenizer) -> bool:
        t = self.meta.get("tokenizer", {})
        return t.get("vocab_size") == tokenizer.vocab_size and t.get("digest") == tokenizer.digest.hex()

    def table(self) -> list[dict]:
        """The document table, checked (LibraryError naming documents.json when it is damaged);
        a library built before matters were recorded reads matter None."""
        return read_table(self.name, self.path)

    def as_dict(self) -> dict:
        return {"name": self.name, "path": str(self.path), **self.meta,
                "size": sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())}


# what each metadata file must hold: field -> the types it may have (bool is never a number)
META_FIELDS = {"name": str, "folder": str, "tokenizer": dict, "documents": int, "tokens": int,
               "built_at": str}
TOKENIZER_FIELDS = {"name": str, "vocab_size": int, "digest": str}
ROW_FIELDS = {"id": int, "path": str, "title": str, "hash": str, "tokens": int, "start": int,
              "paragraphs": list, "pages": list}


def damaged(name: str, file: Path, problem: str) -> LibraryError:
    """The one-line error of a damaged metadata file: which library, which file, the fix."""
    return LibraryError(f"library {name!r}: {file} {problem}: rebuild it with `python -m olifant_mlx "
                        f"library build {name} FOLDER --model VERIFIER` (or remove it: `library rm {name}`)")


def _fields_problem(obj, fields: dict, what: str) -> str | None:
    """Why `obj` (parsed JSON) is not an object with these fields of these types, or None."""
    if not isinstance(obj, dict):
        return f"holds {type(obj).__name__}, not {what}"
    for key, kind in fields.items():
        value = obj.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            return f"has no valid {key!r} in {what}"
    return None


def _read_json(name: str, file: Path):
    try:
        return json.loads(read_regular(file).decode("utf-8"))
    except (OSError, ValueError) as e:      # a FIFO, bad UTF-8, bad JSON: NotARegularFile is one too
        raise damaged(name, file, f"cannot be read ({str(e)[:120]})") from None


def read_meta(name: str, path: Path) -> dict:
    """library.json, checked: the fields every reader of a library uses, with their types."""
    file = path / "library.json"
    meta = _read_json(name, file)
    problem = _fields_problem(meta, META_FIELDS, "the library's description")
    if problem is None:
        problem = _fields_problem(meta["tokenizer"], TOKENIZER_FIELDS, "its tokenizer")
    if problem is not None:
        raise damaged(name, file, problem)
    return meta


def read_table(name: str, path: Path) -> list[dict]:
    """documents.json's rows, checked: each a document with the fields provenance reads."""
    file = path / "documents.json"
    table = _read_json(name, file)
    rows = table.get("documents") if isinstance(table, dict) else None
    if not isinstance(rows, list):
        raise damaged(name, file, "has no list of documents")
    for i, row in enumerate(rows):
        problem = _fields_problem(row, ROW_FIELDS, f"document {i}")
        if problem is None and not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                       for x in row["paragraphs"] + row["pages"]):
            problem = f"has paragraph offsets or pages that are not whole numbers in document {i}"
        if problem is None and not isinstance(row.get("matter"), (str, type(None))):
            problem = f"has a matter that is not text in document {i}"
        if problem is not None:
            raise damaged(name, file, problem)
        row.setdefault("matter", None)
    return rows


def load(name: str, list_others: bool = True) -> Library:
    """The library called `name`, its metadata checked; LibraryError if there is none (naming
    the others unless `list_others` is False: a server's clients) or it is damaged (naming
    the file and the fix)."""
    path = libraries_dir() / check_name(name)
    if not (path / "library.json").exists() and not (path / "library.json").is_symlink():
        names = [lib.name for lib in list_libraries(warn=False)] if list_others else []
        close = difflib.get_close_matches(name, names, n=1)
        if close:            # a typo: the library meant, not the build of a new one under the typo
            raise LibraryError(f"no library {name!r}: did you mean {close[0]!r}? (libraries: {', '.join(names)})")
        listed = f"libraries: {', '.join(names) or 'none yet'}; " if list_others else ""
        raise LibraryError(f"no library {name!r} ({listed}build one with "
                           f"`python -m olifant_mlx library build {name} FOLDER --model VERIFIER`)")
    missing = [f for f in FILES if not (path / f).is_file()]
    if missing:
        raise LibraryError(f"library {name!r} at {path} lacks {', '.join(missing)}: rebuild it")
    meta = read_meta(name, path)
    read_table(name, path)
    return Library(name, path, meta)


def list_libraries(warn: bool = True) -> list[Library]:
    """Every readable library, by name; a damaged one is left out, with one warning line on
    stderr (`warn`) naming it, its file and the fix."""
    root = libraries_dir()
    found = []
    for p in sorted(root.iterdir()) if root.is_dir() else ():
        if p.is_dir() and NAME_RE.fullmatch(p.name) and (p / "library.json").is_file():
            try:
                found.append(load(p.name))
            except LibraryError as e:
                if warn and str(e) not in _warned:      # once per process, however often listed
                    _warned.add(str(e))
                    sys.stderr.write(f"warning: skipped {e}\n")
    return found


_warned: set = set()


def best_library(tokenizer) -> Library | None:
    """The library for this tokenizer with the most tokens, None if there is none."""
    fitting = [lib for lib in list_libraries() if lib.fits(tokenizer)]
    return max(fitting, key=lambda lib: lib.tokens) if fitting else None


def remove(name: str) -> Path:
    lib = load(name)
    with locked(_lock_path(name)):
        version = os.path.realpath(lib.path)
        if lib.path.is_symlink():
            lib.path.unlink()
        if os.path.dirname(version) == os.path.realpath(libraries_dir()):
            shutil.rmtree(version, ignore_errors=True)
        fsync_dir(lib.path.parent)
        _reclaim(name)
    return lib.path


# ---- versions, the lock, leftovers -----------------------------------------------------------

def _lock_path(name: str) -> Path:
    return libraries_dir() / f".{name}.lock"


def _leftover(name: str) -> re.Pattern:
    """The names of a library's versions and temporaries (mkdtemp's or token_hex's 8 characters:
    never another library's, whose name would sit where those 8 characters are)."""
    return re.compile(re.escape(f".{name}.") + r"[a-z0-9_]{8}\.(?:v|tmp|old|link)")


def _reclaim(name: str) -> None:
    """Remove what killed builds of `name` left, the version NAME points at excepted. When
    NAME itself is gone (a kill between the two renames of an earlier olifant_mlx), the
    newest complete library left aside is linked back first."""
    root = libraries_dir()
    if not root.is_dir():
        return
    pattern, link = _leftover(name), root / name
    entries = [p for p in root.iterdir() if pattern.fullmatch(p.name)]
    if not os.path.lexists(link):
        folders = sorted((p for p in entries if p.is_dir() and not p.is_symlink()),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        whole = [c for p in folders for c in (p / name, p) if all((c / f).is_file() for f in FILES)]
        if whole:
            switch_link(link, str(whole[0].relative_to(root)))
    current = Path(os.readlink(link)).parts[0] if link.is_symlink() else None
    for p in entries:
        if p.name == current:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    fsync_dir(root)


def _fault(step: str) -> None:
    """A test's fault at one step of a build: OLIFANT_LIBRARY_FAULT=kill:STEP (SIGKILL) or
    raise:STEP (OSError)."""
    how, _, where = os.environ.get("OLIFANT_LIBRARY_FAULT", "").partition(":")
    if where == step:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise OSError(f"fault injected at {step}")


# ---- building ------------------------------------------------------------------------------

def _previous(name: str, tokenizer) -> tuple[dict, np.ndarray]:
    """{content hash: table row} and the token stream of the library's last build, when it was
    built for this tokenizer (else nothing to reuse)."""
    try:
        lib = load(name)
    except LibraryError:
        return {}, np.zeros(0, np.uint32)
    if not lib.fits(tokenizer):
        return {}, np.zeros(0, np.uint32)
    tokens = np.frombuffer(read_regular(lib.path / "tokens.u32"), dtype=np.uint32)
    return {row["hash"]: row for row in lib.table()}, tokens


def _tokenize(tokenizer, ext: documents.Extracted) -> tuple[np.ndarray, list[int]]:
    """A document's ids: each paragraph encoded with its blank-line separator (so paragraph
    offsets are exact token offsets), and those offsets."""
    texts = [p + "\n\n" for p in ext.paragraphs[:-1]] + ext.paragraphs[-1:]
    ids = tokenizer.encode_batch(texts)
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in ids])[:-1]]).astype(int).tolist()
    return np.fromiter((t for x in ids for t in x), dtype=np.uint32), offsets


def build(name: str, folder, tokenizer, window: int = 4, on_file=None) -> dict:
    """Build (or update) library `name` from every file under `folder`; return a summary:
    the files' outcomes, how many were re-read, the times. on_file(outcome) per file."""
    check_name(name)
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise LibraryError(f"library {name}: {folder} is not a folder")
    with locked(_lock_path(name)):
        _reclaim(name)
        return _build(name, folder, tokenizer, window, on_file)


def _build(name: str, folder: Path, tokenizer, window: int, on_file) -> dict:
    t0 = time.perf_counter()
    old, old_tokens = _previous(name, tokenizer)
    root = os.path.realpath(folder)
    report = documents.Report()
    rows, parts, reread, start = [], [], 0, 0
    matters: dict[Path, str | None] = {}
    for path, why in documents.walk(folder):
        if path.name == MATTER_FILE:     # a side file naming a matter, not a document; named when it names none
            problem = read_matter(path)[1]
            if problem is not None:
                report.add(documents.Outcome(str(path.relative_to(folder)), "skipped", reason=problem))
            continue
        outcome, row, tokens = _document(path, str(path.relative_to(folder)), why, old, old_tokens, tokenizer,
                                         root)
        if row is not None:
            row.update(id=len(rows), start=start, matter=matter_of(folder, path, matters))
            rows.append(row)
            parts.append(tokens)
            start += int(tokens.size)
            reread += not outcome.cached
        report.add(outcome)
        if on_file is not None:
            on_file(outcome)
    if not rows:
        raise LibraryError(f"library {name}: no file under {folder} could be read "
                           f"({report.skipped} skipped)")
    read_s = time.perf_counter() - t0
    stream = np.concatenate(parts)
    starts = np.asarray([r["start"] for r in rows if r["tokens"]], dtype=np.uint64)
    t1 = time.perf_counter()
    summary = _write(name, folder, tokenizer, window, stream, starts, rows)
    summary.update(files=report.as_dict(), reread=reread, reused=sum(o.cached for o in report.outcomes),
                   read_tokenize_s=round(read_s, 3), build_s=round(time.perf_counter() - t1, 3),
                   rebuild_s=round(time.perf_counter() - t0, 3))
    return summary


def matter_of(folder: Path, path: Path, known: dict | None = None) -> str | None:
    """A document's matter: the first line of the nearest `.matter` file in its folder or one
    above it (up to the library's folder), else its top folder under the library's folder;
    None for a document directly in it. A `.matter` file that names no matter (read_matter)
    counts as none."""
    known = {} if known is None else known
    rel = path.relative_to(folder)
    for depth in range(len(rel.parts) - 1, -1, -1):
        d = folder.joinpath(*rel.parts[:depth])
        if d not in known:
            known[d] = read_matter(d / MATTER_FILE)[0]
        if known[d] is not None:
            return known[d]
    return rel.parts[0] if len(rel.parts) > 1 else None


def read_matter(side: Path) -> tuple[str | None, str | None]:
    """(the matter a `.matter` file names, None), or (None, why it names none: it is not a regular
    file, cannot be read, or its first line is not a short line of text); (None, None) where there
    is no such file, or a link (not followed). A matter name is a line: at most MATTER_BYTES are
    read, so a 4 GB `.matter` costs what a short one does."""
    if side.is_symlink() or not side.exists():
        return None, None
    try:
        with os.fdopen(open_regular(side, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb") as f:
            head = f.read(MATTER_BYTES + 1)
    except (OSError, ValueError) as e:       # NotARegularFile (a folder, a FIFO) is a ValueError
        return None, f"names no matter: {getattr(e, 'strerror', None) or e}"
    lines = head.decode("utf-8", "replace").lstrip().splitlines()
    line = lines[0].strip() if lines else ""
    if len(lines) < 2 and len(head) > MATTER_BYTES:
        return None, f"names no matter: its first line is over {MATTER_BYTES:,} bytes (a matter name is a line)"
    if any(ord(c) < 32 and c != "\t" for c in line) or "\ufffd" in line:
        return None, "names no matter: its first line is not text (control characters or bytes that are not UTF-8)"
    return (line or None), None


def _document(path: Path, rel: str, why, old: dict, old_tokens: np.ndarray, tokenizer, root: str):
    """(outcome, table row or None, token ids) of one file: its old tokens when the library
    already holds its content hash, else extracted and tokenized afresh — from the bytes that
    were hashed (a file changed meanwhile cannot pair one version's hash with another's text)."""
    suffix = path.suffix.lower()
    why = why or documents.not_read(path, also=TEXT_SUFFIXES)
    if why is not None:
        return documents.Outcome(rel, "skipped", reason=why), None, None
    try:
        data = documents.read_bytes(path, root)
    except documents.Skip as e:
        return documents.Outcome(rel, "skipped", reason=str(e)), None, None
    digest = documents.digest(data, suffix)
    row = old.get(digest)
    if row is not None:
        tokens = old_tokens[row["start"]:row["start"] + row["tokens"]]
        outcome = documents.Outcome(rel, "read", paragraphs=len(row["paragraphs"]),
                                    pages=max(row["pages"], default=0), cached=True)
        return outcome, {**row, "path": rel}, tokens
    ext, outcome = documents.read_document(path, data)
    outcome.path, outcome.cached = rel, False
    if ext is None:
        return outcome, None, None
    tokens, offsets = _tokenize(tokenizer, ext)
    row = {"path": rel, "title": (ext.title or path.name)[:80], "hash": digest, "tokens": int(tokens.size),
           "paragraphs": [int(o) for o in offsets], "pages": [int(p) for p in ext.pages]}
    return outcome, row, tokens


def _write(name, folder, tokenizer, window, stream, starts, rows) -> dict:
    """Build the model and the index from the stream; write the bundle in a fresh versioned
    folder, then switch the link NAME to it in one rename and remove the old version."""
    from olifant_mlx.draftmodel.igtree import Builder
    from olifant_mlx.draftmodel.suffix import Corpus

    root = libraries_dir()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".v", dir=root))     # the new version
    try:
        builder = Builder(tokenizer.vocab_size, window=window, tokenizer_name=tokenizer.name,
                          tokenizer_digest=tokenizer.digest)
        builder.add_documents(stream, starts)
        model = builder.build()
        model.save(tmp / "model.olif")
        corpus = Corpus(tokenizer.vocab_size, tokenizer.name, tokenizer.digest)
        corpus.add_documents(stream, starts)
        corpus.build_index().save(tmp / "index.sfx")
        write_atomic(tmp / "tokens.u32", stream.astype("<u4").tobytes())
        write_atomic(tmp / "documents.json", json.dumps({"format": FORMAT, "documents": rows}, indent=1,
                                                         sort_keys=True))   # the same bytes, however built
        n_passages = passages.write(tmp / passages.FILE, rows, stream, tokenizer)
        meta = {"format": FORMAT, "name": name, "folder": str(folder.resolve()),
                "tokenizer": tokenizer.identity(),
                "documents": len(rows), "tokens": int(stream.size), "window": window,
                "passages": n_passages, "nodes": model.n_nodes,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_atomic(tmp / "library.json", json.dumps(meta, indent=1))
        for f in FILES + (passages.FILE,):   # every part holds the user's text: private, whoever wrote it
            os.chmod(tmp / f, PRIVATE)
        fsync_tree(tmp)
        _fault("written")
        old = switch_link(root / name, tmp.name, step=_fault)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fault("switched")
    rel = os.path.relpath(old, root) if old is not None else os.pardir
    if not rel.startswith(os.pardir) and Path(rel).parts[0] != tmp.name:   # only a version of ours
        shutil.rmtree(root / Path(rel).parts[0], ignore_errors=True)
    return {**meta, "path": str(root / name)}

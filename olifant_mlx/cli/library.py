"""`library build|list|info|rm`: precedent libraries (a folder of documents as one named bundle
of IGTree, suffix index and document table for a verifier's tokenizer; olifant_mlx/library.py)."""
from __future__ import annotations

import os
import sys

from olifant_mlx.cli.common import mb, print_json, table, whole_number


def cmd_library(args) -> int:
    from olifant_mlx import library

    if args.action == "build":
        return _build(args)
    if args.action == "search":
        return _search(args)
    if args.action == "list":
        libs = library.list_libraries()
        if args.json:
            print_json([lib.as_dict() for lib in libs], indent=2)
        elif not libs:
            print(f"no libraries in {library.libraries_dir()}; build one with "
                  f"`library build NAME FOLDER --model VERIFIER`")
        else:
            table("libraries (--draft library:NAME)", [(lib.name, _line(lib)) for lib in libs])
        return 0
    if not args.name:
        raise ValueError(f"library {args.action} needs a library name")
    if args.action == "rm":
        print(f"removed {library.remove(args.name)}")
        return 0
    lib = library.load(args.name)
    if args.json:
        print_json({**lib.as_dict(), "table": lib.table()}, indent=2)
        return 0
    d = lib.as_dict()
    table(f"library {lib.name}", [("folder", d["folder"]), ("tokenizer", d["tokenizer"]["name"]),
                                  ("documents", f"{d['documents']:,}"), ("tokens", f"{d['tokens']:,}"),
                                  ("built", d["built_at"]), ("size", mb(d["size"])), ("where", d["path"])])
    return 0


def _search(args) -> int:
    """`library search NAME "query"`: the best passages, with their citations."""
    from rich.console import Console
    from rich.table import Table

    from olifant_mlx import library, passages

    if not args.name or args.folder is None:
        raise ValueError('library search needs a NAME and a query: library search NAME "words to find"')
    lib = library.load(args.name)
    found = passages.search(lib, args.folder, matter=args.matter, n=args.n)
    if args.json:
        print_json([p.as_dict() for p in found], indent=2)
        return 0
    if not found:
        wall = f" (matter {args.matter} and none)" if args.matter else ""
        print(f"no passage of library {lib.name} matches{wall}")
        return 0
    t = Table(title=f"library {lib.name}: {len(found)} passage{'s' * (len(found) != 1)}, best first",
              show_lines=True)
    for col in ("#", "where", "passage", "score"):
        t.add_column(col, overflow="fold", ratio=1 if col == "where" else 3 if col == "passage" else None)
    for i, p in enumerate(found, 1):
        text = p.text if len(p.text) <= 300 else p.text[:300] + " …"
        t.add_row(str(i), p.citation() + (f"\nmatter {p.matter}" if p.matter else ""), text, f"{p.score:.2f}")
    Console().print(t)
    return 0


def _line(lib) -> str:
    m = lib.meta
    return f"{m['documents']:,} documents, {m['tokens']:,} tokens, {m['tokenizer']['name']}, {m['folder']}"


def _build(args) -> int:
    from olifant_mlx import library
    from olifant_mlx.cli.train import files_table, train_tokenizer

    if not args.name or not args.folder:
        raise ValueError("library build needs a NAME and a FOLDER")
    library.check_name(args.name)
    if not os.path.isdir(args.folder):      # before the tokenizer loads
        raise library.LibraryError(f"library {args.name}: {args.folder} is not a folder")
    tok, why = train_tokenizer(args)
    if not args.quiet:
        sys.stderr.write(f"library {args.name} for tokenizer {tok.name} ({why})\n")
    s = library.build(args.name, args.folder, tok, window=args.window)
    if args.json:
        print_json(s, indent=2)
        return 0
    from olifant_mlx.draftmodel.documents import Outcome, Report, plural

    files_table(Report([Outcome(**f) for f in s["files"]["files"]]), [args.folder])
    table(f"library {args.name} built", [
        ("where", s["path"]), ("documents", f"{s['documents']:,}"), ("tokens", f"{s['tokens']:,}"),
        ("re-read", f"{plural(s['reread'], 'changed or new file')} ({s['reused']:,} unchanged, reused)"),
        ("rebuild time", f"{s['rebuild_s']:.1f} s (read + tokenize {s['read_tokenize_s']:.1f} s, "
                         f"build {s['build_s']:.1f} s)"),
        ("use it", f"--draft library:{args.name}")])
    return 0


def add_library(p):
    p.add_argument("action", choices=["build", "list", "info", "rm", "search"])
    p.add_argument("name", nargs="?", help="the library's name")
    p.add_argument("folder", nargs="?", metavar="FOLDER|QUERY",
                   help="with build: the folder of documents; with search: the words to find")
    p.add_argument("--matter", help="with search: passages of this matter and of documents without one only")
    from olifant_mlx.passages import MAX_PASSAGES

    p.add_argument("-n", type=whole_number(1, MAX_PASSAGES), default=10,
                   help="with search: how many passages (default 10)")
    p.add_argument("--model", "-m", help="the verifier whose tokenizer the library is for")
    p.add_argument("--tokenizer", help="a tokenizer instead of --model's")
    from olifant_mlx.cli.train import window_size

    p.add_argument("--window", type=window_size, default=4, help="the IGTree's context window (1..16, default 4)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_library)

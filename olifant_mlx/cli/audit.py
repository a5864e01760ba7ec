"""`audit verify FILE`: check an audit log's hash chain (olifant_mlx/audit.py), naming the first
line that was changed, removed, inserted or reordered."""
from __future__ import annotations

import sys

from olifant_mlx.cli.common import print_json


def cmd_audit(args) -> int:
    from olifant_mlx.audit import verify

    verdict = verify(args.file)
    if args.json:
        print_json({"file": args.file, "lines": verdict.lines, "intact": verdict.intact, "broken": verdict.broken,
                    "what": verdict.what or None, "last_sha256": verdict.last})
    elif verdict.intact:
        print(verdict.message(args.file))
    else:
        sys.stderr.write(f"error: {verdict.message(args.file)}\n")
    return 0 if verdict.intact else 1


def add_audit(p):
    p.add_argument("action", choices=["verify"], help="verify: check the hash chain of an audit log")
    p.add_argument("file", metavar="FILE", help="the audit log (--audit-log FILE of serve, generate, chat, "
                                                "tui, revise)")
    p.add_argument("--json", action="store_true", help="the verdict as JSON on stdout")
    p.set_defaults(func=cmd_audit)

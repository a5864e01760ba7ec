"""docs/results.md from the committed JSON of the runs: one table per question.

`docs/results/index.json` names each question, what it measured, on which code, the command,
the JSON file(s) it read and the columns; `render` turns it into Markdown. Nothing here
measures: a changed number means a changed JSON file (and a regenerated results.md).
"""
import json
from pathlib import Path

HEADER = """# Results

Generated from the committed JSON of the runs by `python -m olifant_mlx bench --report
docs/results.md` (the manifest: `docs/results/index.json`); do not edit by hand —
`tests/test_results_report.py` fails when a table no longer matches its JSON. One current table
per question: what it measured, on which code, the command. The older chronological notebook,
with every earlier run and its discussion, is [results-archive.md](results-archive.md).
"""


class ReportError(ValueError):
    """A manifest entry or the JSON it names is not what the report needs."""


REQUIRED = ("id", "title", "question", "measured", "verifier", "code", "command", "sources", "columns")
OPTIONAL = ("rows", "levels", "where", "reading", "archive")


def check_entry(entry: dict, manifest) -> None:
    """Every required key there and no unknown one (a misspelt key would be ignored silently)."""
    name = entry.get("id", "an entry without an id")
    missing = [k for k in REQUIRED if k not in entry]
    unknown = sorted(set(entry) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise ReportError(f"{manifest}: {name}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) +
            ([f"unknown {', '.join(unknown)}"] if unknown else [])))


def _get(record, key):
    """`record[key]`, where key may be dotted (`a.b`) into nested objects."""
    value = record
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def cell(value, digits=3) -> str:
    """One table cell: floats to `digits` places, whole numbers with thousands commas, lists
    joined, booleans yes/no, None a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(cell(v, digits) for v in value)
    return str(value).replace("|", "\\|")


def _levels(found, names: list, source) -> list:
    """Nested mappings flattened: each key of the first level becomes `names[0]` of its rows.
    A name `KEY>NAME` first steps into the object's `KEY` (a mapping kept beside other fields)."""
    if not names:
        return [found]
    inside, _, name = names[0].rpartition(">")
    if inside:
        found = found.get(inside) if isinstance(found, dict) else None
    if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
        raise ReportError(f"{source}: no mapping of objects for the level {names[0]!r}")
    return [{name: k, **r} for k, v in found.items() for r in _levels(v, names[1:], source)]


def records(data, path: str, source, levels=()) -> list:
    """The rows at `path` in one JSON document: a list of objects, one object, a mapping
    (rows of `key`, `value`), or with `levels` nested mappings (one row per innermost object)."""
    found = _get(data, path) if path else data
    if levels:
        return _levels(found, list(levels), source)
    if isinstance(found, list) and all(isinstance(r, dict) for r in found):
        return found
    if isinstance(found, dict):
        if all(not isinstance(v, (dict, list)) for v in found.values()) and path:
            return [{"key": k, "value": v} for k, v in found.items()]
        return [found]
    raise ReportError(f"{source}: {path or 'the top level'} holds no rows")


def table(entry: dict, docs: Path) -> str:
    """The Markdown table of one question, read from its JSON file(s)."""
    columns = entry["columns"]
    rows = []
    for source in entry["sources"]:
        path = docs / source
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ReportError(f"{entry['id']}: cannot read {path}: {e}") from None
        for r in records(data, entry.get("rows", ""), path, entry.get("levels", ())):
            if all(_get(r, k) == v for k, v in entry.get("where", {}).items()):
                rows.append(r)
    if not rows:
        raise ReportError(f"{entry['id']}: no rows in {', '.join(entry['sources'])}")
    lines = ["| " + " | ".join(c[0] for c in columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(cell(_get(r, c[1]), *c[2:]) for c in columns) + " |")
    return "\n".join(lines)


def section(entry: dict, docs: Path) -> str:
    sources = ", ".join(f"[`{s}`]({s})" for s in entry["sources"])
    parts = [f"## {entry['title']}", "", entry["question"], "",
             f"- **Measured:** {entry['measured']}",
             f"- **Verifier:** {entry['verifier']}",
             f"- **Code:** {entry['code']}",
             f"- **Command:** `{entry['command']}`",
             f"- **Data:** {sources}"]
    if entry.get("archive"):
        parts.append(f"- **Discussion:** [results-archive.md](results-archive.md#{entry['archive']})")
    parts += ["", table(entry, docs)]
    if entry.get("reading"):
        parts += ["", f"Reading: {entry['reading']}"]
    return "\n".join(parts)


def render(manifest: Path) -> str:
    """The whole results.md for `manifest` (its sources are relative to the folder above it)."""
    manifest = Path(manifest)
    try:
        entries = json.loads(manifest.read_text())["questions"]
    except (OSError, ValueError, KeyError) as e:
        raise ReportError(f"cannot read the results manifest {manifest}: {e}") from None
    for e in entries:
        check_entry(e, manifest)
    docs = manifest.parent.parent
    contents = [f"- [{e['title']}](#{anchor(e['title'])})" for e in entries]
    body = [section(e, docs) for e in entries]
    return "\n\n".join([HEADER.rstrip(), "\n".join(contents), *body]) + "\n"


def anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    keep = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return keep.replace(" ", "-")


def write_report(out) -> Path:
    """Render the manifest `results/index.json` beside `out` and write `out` (0644: a docs file)."""
    from olifant_mlx.files import check_file_path, write_atomic

    out = Path(out)
    check_file_path(out, "results file")
    return write_atomic(out, render(out.parent / "results" / "index.json"), mode=0o644)

"""What each API key may see: the libraries a server was started with, and each key's matters.

A server reaches only the libraries named when it starts (`--precedents`, `--sources`, the
libraries its drafters draft from, and those of an access file). Each key is bound to matters
and libraries: a key of `--api-key` (or `--api-key-file`), and a server without keys, to the
server's `--matter` (every matter without one) and all of its libraries; a key of an access
file (`--access-file`) to the matters and libraries its line names. A request may narrow what
its key sees, never widen it:

- a library it may not reach (`precedents`, `sources`) gets the answer a missing one gets
  (400 `library_not_found`, the same message whether it exists or not, no path);
- a matter it may not see is a 403 (`matter_forbidden`) naming nothing of that matter;
  `"matter": null` is the key's default, never "every matter";
- retrieval, pinned documents (`precedent`) and provenance (`sources`, the drafter's library)
  reach only the documents of its matters and of none (`GenerationOptions.matters`).

The access file (`parse_access`): one JSON object a line (blank lines and lines from `#` are skipped):

    {"key": "acme-desk-key-0001", "id": "acme-desk", "matters": ["acme"], "libraries": ["firm"]}
    {"key": "partner-key-00002", "matters": "*"}

`key` (required; 8+ printable ASCII characters); `id` (the name the audit log gives the key,
else a keyed hash of it); `matters` (a list of matter names, [] for the documents of no matter
alone, "*" for every matter; absent: the server's --matter, every matter without one);
`libraries` (a list of library names, "*" or absent: the server's own).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from olifant_mlx.server.config import ConfigError, check_api_key
from olifant_mlx.server.queue import library_refusal
from olifant_mlx.server.schemas import ApiError

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
FIELDS = ("key", "id", "matters", "libraries")
ALL = "*"


@dataclass(frozen=True)
class Access:
    """What one key (or a server without keys) may see. `matters`: the matters whose documents
    it may see beside those of none (None: every one); `matter`: its default matter (the one it
    is bound to, or the server's --matter); `libraries`: the libraries its requests may reach
    `id`: its name in the audit log."""
    matters: frozenset | None = None
    matter: str | None = None
    libraries: frozenset | None = None
    id: str | None = None

    @classmethod
    def of_server(cls, defaults, libraries, id: str | None = None) -> Access:
        """A key of --api-key, or a server without keys: the server's --matter (every matter
        without one) and its libraries."""
        m = defaults.matter
        return cls(None if m is None else frozenset((m,)), m, frozenset(libraries), id)

    def visible(self, matter: str | None = None):
        """The options' `matters` for a request narrowed to `matter` (None: the key's own)."""
        if matter is not None:
            return (matter,)
        return None if self.matters is None else tuple(sorted(self.matters))

    def defaults(self, server):
        """The server's request defaults for this key: its matter and wall, and the server's
        --precedents and --sources where it may reach them."""
        return server.replace(matter=self.matter, matters=self.visible(self.matter),
                              precedents=server.precedents if server.precedents in self.libraries else None,
                              sources=server.sources if server.sources in self.libraries else None)

    def wall(self, options, drafter_library: str | None = None):
        """A request's options (planned over `defaults`) behind this key's wall; ApiError when
        it asks for a library or a matter the key may not see. `drafter_library`: the library
        the request's drafter drafts from, whose spans are its sources by default."""
        for param in ("precedents", "sources"):
            name = getattr(options, param)
            if name is not None and name not in self.libraries:
                raise unknown_library(param, name)
        if drafter_library is not None and drafter_library not in self.libraries:
            raise ApiError(400, "draft: this API key may not use that drafter (it drafts from a library the "
                                "key cannot reach): choose another, e.g. \"none\"", "draft", "drafter_not_allowed")
        matter = options.matter
        if matter is not None and self.matters is not None and matter not in self.matters:
            raise ApiError(403, "matter: this API key may not see that matter", "matter", "matter_forbidden")
        return options.replace(matters=self.visible(matter))


def unknown_library(param: str, name: str) -> ApiError:
    """The one answer to a library a request may not reach, whether it exists or not (and to
    one it may reach that cannot be used: queue.library_refusal)."""
    refused = library_refusal(param, name)
    return ApiError(refused.status, refused.message, param, refused.code)


@dataclass(frozen=True)
class Entry:
    """An access file's line: its matters (a frozenset; None: every one; SERVER: the server's
    --matter), its libraries (None: the server's), its id."""
    matters: object
    libraries: frozenset | None
    id: str | None

    def access(self, defaults, libraries) -> Access:
        """The key's Access on a server with these defaults and libraries."""
        libraries = libraries if self.libraries is None else self.libraries
        if self.matters is SERVER:
            return Access.of_server(defaults, libraries, self.id)
        m = self.matters
        return Access(m, next(iter(m)) if m is not None and len(m) == 1 else None, frozenset(libraries), self.id)


SERVER = "the server's --matter"


def parse_access(text: str, path) -> dict:
    """{key: Entry} of an access file's text (see the module's doc), every line checked;
    ConfigError naming the file (`path`) and the line, never a key."""
    from olifant_mlx.library import LibraryError, check_name

    found, ids = {}, set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"--access-file {path}, line {n}"
        try:
            entry = json.loads(line)
        except ValueError:
            raise ConfigError(f"{where}: not a JSON object: write {{\"key\": KEY, \"matters\": [...], "
                              f"\"libraries\": [...]}}") from None
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: not a JSON object")
        unknown = [k for k in entry if k not in FIELDS]
        if unknown:
            raise ConfigError(f"{where}: unknown field {str(unknown[0])[:40]!r} (the fields: {', '.join(FIELDS)})")
        key = entry.get("key")
        if not isinstance(key, str):
            raise ConfigError(f"{where}: \"key\" is missing or not text")
        check_api_key(key, f"the key of {where}")
        if key in found:
            raise ConfigError(f"{where}: that key is on an earlier line: give each client its own key")
        label = entry.get("id")
        if label is not None and (not isinstance(label, str) or not ID_RE.fullmatch(label)):
            raise ConfigError(f"{where}: \"id\" is 1-64 letters, digits, '.', '_' or '-'")
        if label is not None and label in ids:
            raise ConfigError(f"{where}: the id {label!r} is on an earlier line")
        ids.add(label)
        matters = _names(entry, "matters", where)
        libraries = _names(entry, "libraries", where)
        for name in libraries or ():
            try:
                check_name(name)
            except LibraryError as e:
                raise ConfigError(f"{where}: {e}") from None
        found[key] = Entry(matters, libraries, label)
    if not found:
        raise ConfigError(f"--access-file {path}: no key in it (one JSON object a line)")
    return found


def _names(entry: dict, field: str, where: str):
    """A field of names: a frozenset; None for "*"; absent: SERVER (matters) or None (libraries)."""
    if field not in entry:
        return SERVER if field == "matters" else None
    value = entry[field]
    if value == ALL:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() and len(v) <= 200 for v in value):
        raise ConfigError(f"{where}: \"{field}\" is a list of names (each 1-200 characters) or \"*\"")
    return frozenset(value)


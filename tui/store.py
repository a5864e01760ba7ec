"""The opt-in saved-conversations file, kept with the history file's care.

Off by default: nothing is written unless the user names a file (`tui --conversations FILE`,
or the setting). The file is local JSON, written atomically and created readable by its owner
only (olifant_mlx.files.write_atomic, mode 0600); it carries a format name and a version, and
everything in it is validated when it is read. A file that is not one, is damaged, or comes
from a newer version is a StoreError, and is never overwritten: the app stops saving to it.
"""
from __future__ import annotations

import json
import os

from olifant_mlx.files import NotARegularFile, check_file_path, read_regular, write_atomic
from olifant_mlx.conversation import Conversation, ConversationError

FORMAT = "olifant_mlx.conversations"
VERSION = 1
MAX_BYTES = 256 * 1024 * 1024


class StoreError(ValueError):
    """A saved-conversations file that cannot be read or used."""


def check_path(path: str) -> None:
    """A store must be an existing regular file, or creatable in an existing folder: a FIFO,
    a device, a folder or a link to nothing is refused (nothing is opened, nothing blocks)."""
    try:
        check_file_path(path, "conversations file")
    except NotARegularFile as e:
        raise StoreError(str(e)) from None


def load(path: str) -> list[Conversation]:
    """The conversations in `path` ([] when it does not exist yet), validated."""
    check_path(path)
    if not os.path.exists(path):
        return []
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise StoreError(f"{path} is {size:,} bytes, more than a conversations file holds")
        data = json.loads(read_regular(path).decode("utf-8"))    # a FIFO swapped in is refused
    except (OSError, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, StoreError):
            raise
        raise StoreError(f"{path} is not a saved-conversations file: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StoreError(f"{path} is not a saved-conversations file (no {FORMAT!r} format)")
    version = data.get("version")
    if version != VERSION:
        raise StoreError(f"{path}: saved-conversations format version {version!r}, this build "
                         f"reads {VERSION}")
    items = data.get("conversations")
    if not isinstance(items, list):
        raise StoreError(f"{path}: 'conversations' must be a list")
    out, seen = [], set()
    for i, d in enumerate(items):
        try:
            c = Conversation.from_dict(d)
        except ConversationError as e:
            raise StoreError(f"{path}: conversation {i + 1}: {e}") from None
        if c.id in seen:
            raise StoreError(f"{path}: conversation id {c.id} appears twice")
        seen.add(c.id)
        out.append(c)
    return out


def save(path: str, conversations) -> None:
    """Write every conversation to `path` at once (atomic, mode 0600)."""
    check_path(path)
    data = {"format": FORMAT, "version": VERSION,
            "conversations": [c.as_dict() for c in conversations if c.turns or c.text]}
    write_atomic(path, json.dumps(data, ensure_ascii=False, allow_nan=False))

"""`generate --output FILE` and `chat --output FILE`: the text, its copied spans and their
sources written to a file, in the TUI's export formats (olifant_mlx/conversation.py), picked by the
file's suffix: .docx (Word, the copied spans highlighted), .md, .txt or .json. Written
atomically, mode 0600 (it holds the user's text); the path is checked before the model loads."""
from __future__ import annotations

import os

SUFFIXES = {".docx": "docx", ".md": "md", ".txt": "txt", ".json": "json"}


def output_format(path: str, probe: bool = False) -> str:
    """--output's format, from its suffix; the path refused (ValueError) when it is not a
    regular file or a new one in a folder that exists; with `probe` (before the model loads)
    also when no file can really be made in that folder (files.check_writable: /proc, an
    immutable or read-only folder)."""
    from olifant_mlx.files import check_file_path, check_writable

    fmt = SUFFIXES.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise ValueError(f"--output {path}: the file's suffix picks the format: "
                         f"{', '.join(SUFFIXES)}")
    (check_writable if probe else check_file_path)(path, "--output file")
    if fmt == "docx":
        from olifant_mlx.exports import need_docx

        need_docx()
    return fmt


def answer_turn(session, request, text, tokens, last, prefill: str = ""):
    """The assistant's Turn (olifant_mlx/conversation.py) of a generation (its Request's drafter
    and library): text, numbers, sources placed in the text (their "chars"), the precedents it
    was given."""
    from olifant_mlx.conversation import Turn

    stats = last.stats
    energy = last.energy.as_dict(stats.tokens) if last.energy is not None else None
    turn = Turn("assistant", prefill + text, [], stats.as_dict(), energy, last.finish_reason,
                session.verifier.name, request.drafting.spec.text if request.drafting.spec else None, None,
                placed_sources(session, request.library, prefill + text, tokens, last, len(prefill)))
    turn.precedents = last.precedents.as_list() if getattr(last, "precedents", None) is not None else []
    return turn


def placed_sources(session, library, text, tokens, last, offset: int = 0) -> list:
    """The generation's sources as the TUI keeps them: with "library" (the request's) and
    "chars" (in `text`, where the output starts at `offset`)."""
    from olifant_mlx.conversation import char_spans

    decode = getattr(session.verifier.identity, "decode", None)
    found = [{**s.as_dict(), "library": library} for s in last.sources]
    placed = char_spans(found, text[offset:], tokens, decode)
    for s in placed:
        if s.get("chars"):
            s["chars"] = [s["chars"][0] + offset, s["chars"][1] + offset]
    return placed


def document(prompt_text: str, turn):
    """A raw continuation as a document: the prompt, then the output, its copied spans marked."""
    from olifant_mlx.conversation import COPIED, Conversation, Run

    start = len(prompt_text)
    conv = Conversation(kind="document", text=prompt_text + turn.content)
    conv.marks = [(start + a, start + b, COPIED) for a, b in (s["chars"] for s in turn.sources if s.get("chars"))]
    conv.runs = [Run(start, len(conv.text), turn.stats, turn.energy, turn.finish_reason, turn.verifier,
                     turn.drafter, turn.sources, precedents=turn.precedents)]
    conv.touch()
    return conv


def write_output(path: str, conv, options) -> None:
    """The conversation or document, in the format of `path`'s suffix, written atomically (0600)."""
    from olifant_mlx.files import write_atomic
    from olifant_mlx.conversation import export_data

    settings = {name: getattr(options, name) for name in ("k", "max_tokens", "temperature", "seed")
                if hasattr(options, name)}
    write_atomic(path, export_data(conv, output_format(path), settings))

"""The "copied from library" mark: spans of generated text that occur verbatim in a precedent
library (olifant_mlx/provenance.py), drawn over the drafting marks of tui/flow.py. Reverse
video, so the mark never relies on colour alone; "off" hides it with the other marks.

A source (Source.as_dict() from the Session's tracker) says where it is in the output in
tokens; the TUI needs characters, so `char_spans` places each one in the text it was written
into: by its text when the tracker gave it, else by decoding the output's tokens."""
from __future__ import annotations

from rich.style import Style
from rich.text import Text

from olifant_mlx.exports import appendix, where  # noqa: F401 (the TUI's names for them)

COPIED_CSS = "{name} > .prov--copied {{ color: $text-accent; text-style: reverse; }}\n"
LABEL = "copied from library"
LEGEND = "copied"             # the legend's word for it (the legend is one line at 80 columns)


def char_spans(sources, text: str, tokens, decode=None) -> list:
    """The sources with "chars": [start, end] added, character offsets in `text` (the output
    of `tokens`); one that cannot be placed gets none (listed, not marked)."""
    out, pos = [], 0
    for s in sources:
        s = dict(s)
        span = s.get("text") or ""
        at = text.find(span, pos) if span else -1
        if at < 0 and span:
            at = text.find(span)
        if at >= 0:
            s["chars"] = [at, at + len(span)]
            pos = at + len(span)
        elif decode is not None:
            a = len(decode(list(tokens[:s["start"]])))
            b = len(decode(list(tokens[:s["end"]])))
            if 0 <= a < b <= len(text):
                s["chars"] = [a, b]
        out.append(s)
    return out


def ranges(sources, offset: int = 0) -> list:
    """[(start, end)] of the placed sources, shifted by `offset` (where the output starts)."""
    return sorted((s["chars"][0] + offset, s["chars"][1] + offset) for s in sources if s.get("chars"))


class Copied:
    """Mixin for FlowText and DocEditor (after Provenance): `copied`, sorted (start, end)
    character ranges of the widget's text, shown with the copied mark."""
    copied: list = []

    def copied_style(self) -> Style | None:
        if self.marks == "off":
            return None
        if self.marks == "mono":
            return Style(reverse=True)
        return self.get_component_rich_style("prov--copied", partial=True)

    def set_copied(self, spans) -> None:
        self.copied = sorted((int(a), int(b)) for a, b, *_ in spans if b > a)
        self.marks_changed()

    def all_marks(self) -> list:
        """A DocEditor's marks as a document keeps them: the drafting marks and the copied."""
        return list(self.marks_list) + [(a, b, "copied") for a, b in self.copied]

    def mark_copied(self, line: Text, start: int, base=None) -> None:
        """Stylize the copied parts of `line`, which starts at `start` in the text (plus
        `base()`, when given: where its paragraph starts, worked out only when needed)."""
        if not self.copied:
            return
        if base is not None:
            start += base()
        style = self.copied_style()
        end = start + len(line)
        for a, b in self.copied:
            lo, hi = max(a, start), min(b, end)
            if style is not None and lo < hi:
                line.stylize(style, lo - start, hi - start)


def cited(groups, markdown: bool) -> str:
    """An export's precedents appendix: for each answer or continuation given precedents
    ([(what, passages)], Conversation.precedents()), each passage's number and citation."""
    if not groups:
        return ""
    out = ["## Precedents\n" if markdown else "Precedents:\n"]
    for what, passages in groups:
        out.append(f"{what[0].upper()}{what[1:]}:" + ("\n" if markdown else ""))
        for p in passages:
            lib = p.get("library")
            notes = ", ".join(x for x in (lib and (f"library *{lib}*" if markdown else f"library {lib}"),
                                          p.get("pinned") and "pinned") if x)
            citation = f"`{p['citation']}`" if markdown else p["citation"]
            out.append(f"{'- ' if markdown else '  '}[{p.get('number', '?')}] {citation}"
                       + (f" ({notes})" if notes else ""))
        out.append("")
    return "\n".join(out)

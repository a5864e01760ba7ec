"""The "copied from library" mark: spans of generated text that occur verbatim in a precedent
library (olifant_mlx/provenance.py), drawn over the drafting marks of tui/flow.py. Reverse
video, so the mark never relies on colour alone; "off" hides it with the other marks.

A source (Source.as_dict() from the Session's tracker) says where it is in the output in
tokens; the TUI needs characters: olifant_mlx.conversation's `char_spans` places each one in the
text it was written into."""
from __future__ import annotations

from rich.style import Style
from rich.text import Text

from olifant_mlx.exports import where  # noqa: F401 (the TUI's name for it)

COPIED_CSS = "{name} > .prov--copied {{ color: $text-accent; text-style: reverse; }}\n"
LABEL = "copied from library"
LEGEND = "copied"             # the legend's word for it (the legend is one line at 80 columns)




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

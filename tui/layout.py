"""The App's frame: the side panels and the tabs between them, laid out for the width
(`Body`), and the footer keeping to the keys that fit (`KeyFooter`)."""
from __future__ import annotations

from textual.containers import Horizontal
from textual.app import ComposeResult
from textual.widgets import Footer

PANEL_W = 34            # a side panel's width (30 columns inside)
BOTH_PANELS_FROM = 140   # columns from which the list and the numbers show by default
LIVE_FROM = 110          # ... and the numbers alone
DRAWERS_BELOW = 110      # narrower: a side panel opens over the text, one at a time


class Body(Horizontal):
    """The conversation list (#nav), the tabs and the live numbers (#live), side by side."""

    def __init__(self):
        super().__init__(id="body")
        self.panels = {"nav": None, "live": None}    # None: by the width; True/False: yours
        self.full_labels = None

    def show_panels(self, width: int, pane) -> None:
        """Show the side panels that fit: both from BOTH_PANELS_FROM columns, the numbers from
        LIVE_FROM, none below (F8, F9 open them, as a drawer over the text, one at a time, so
        the editor and the tabs keep the whole width); the list only beside a tab that asks
        for it (`pane`, its registry entry: a conversation or document), the numbers too."""
        auto = {"nav": width >= BOTH_PANELS_FROM, "live": width >= LIVE_FROM}
        show = {p: auto[p] if self.panels[p] is None else self.panels[p] for p in auto}
        show["nav"] &= pane is not None and pane.nav
        show["live"] &= pane is not None and pane.numbers
        drawers = width < DRAWERS_BELOW
        if drawers and show["nav"] and show["live"]:
            show["nav" if self.panels["live"] else "live"] = False
        self.query_one("#nav").display, self.query_one("#live").display = show["nav"], show["live"]
        self.set_class(drawers, "-drawers")

    def toggle(self, panel: str, width: int) -> None:
        """F8, F9: a side panel shown or hidden (when narrow, the other one hidden)."""
        shown = self.query_one(f"#{panel}").display
        self.panels[panel] = not shown
        if not shown and width < DRAWERS_BELOW:
            self.panels["live" if panel == "nav" else "nav"] = False

    def label_tabs(self, tabs, width: int) -> None:
        """The tabs' labels with their keys ("F2 Chat") when they all fit beside the side
        panels, else their names alone (F1 and the footer still say the keys)."""
        if self.full_labels is None:
            self.full_labels = {p.id: str(tabs.get_tab(p.id).label) for p in tabs.query("TabPane")}
        room = width - PANEL_W * ((width >= BOTH_PANELS_FROM) + (width >= LIVE_FROM))
        fits = sum(len(label) + 2 for label in self.full_labels.values()) <= room
        for pane, label in self.full_labels.items():
            tabs.get_tab(pane).label = label if fits else label.split(" ", 1)[-1]


class KeyFooter(Footer):
    """The footer, keeping to the keys that fit: the workspace's keys always, then the view
    keys, then the panels and the palette (F1 lists every key whatever the width)."""
    TIERS = ((150, ()), (120, ("toggle_panel", "command_palette")),
             (0, ("toggle_panel", "command_palette", "compare", "toggle_markdown", "cycle_marks")))

    def hidden(self) -> tuple:
        width = self.app.size.width
        return next(h for w, h in self.TIERS if width >= w)

    def compose(self) -> ComposeResult:
        hidden = self.hidden()
        for w in super().compose():
            if action_name(getattr(w, "action", "")) not in hidden:
                yield w


def action_name(action: str) -> str:
    """A binding's action by name: "compare" for a workspace key's "writer('compare')"."""
    name, _, args = action.rpartition(".")[2].partition("(")
    return args.strip("')\"") if name == "writer" else name

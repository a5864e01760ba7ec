"""The TUI's layout and keys: usable at 80x24 (no widget narrower than 30 columns, in every
tab and with each side panel open), responsive at 160x48, and every key working whatever has
focus (F-keys from tables, inputs, lists and editors alike)."""
import asyncio
import itertools

import pytest
from textual.widgets import Button, Label, RadioButton, Tab
from textual.widgets._footer import FooterKey, FooterLabel
from textual.widgets._header import HeaderClock, HeaderClockSpace, HeaderIcon
from tui_fakes import fake_app, settle

from olifant_mlx.tui.app import TABS
from olifant_mlx.tui.panes import PANES

# small by nature: a button, a label in front of a field, a tab's name, a footer key
SMALL = (Button, Label, Tab, FooterKey, FooterLabel, HeaderIcon, HeaderClock, HeaderClockSpace,
         RadioButton)
KEYS = {p.id: p.key for p in PANES}      # f2 .. f7, from the registry (tui/panes.py)


def visible(app):
    """Every widget drawn on the screen now, with its region."""
    for w in app.screen.query("*"):
        if w.display and w.visible and w.region.width > 0 and w.region.height > 0 \
                and type(w).__name__ not in ("ScrollBar", "ScrollBarCorner", "Toast", "ToastRack"):
            yield w


def narrow_widgets(app, minimum=30):
    return [f"{type(w).__name__}#{w.id} {w.region.width} in {type(w.parent).__name__}" for w in visible(app)
            if not isinstance(w, SMALL) and type(w).__name__ != "NonSelectableStatic"   # a Select's ▼
            and w.region.width < minimum]


def outside(app):
    """Widgets running past the right edge (below the bottom, a scroll container scrolls)."""
    width = app.size.width
    return [f"{type(w).__name__}#{w.id} {w.region}" for w in visible(app) if w.region.right > width]


async def fill(pilot, app):
    """A conversation and a continued document, so every pane has content."""
    app.chat_tab.composer.text = "Draft a clause."
    await pilot.press("ctrl+g")
    await settle(pilot, app)
    await pilot.press("f3", "ctrl+g")
    await settle(pilot, app)


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_no_widget_narrower_than_30_columns(size):
    async def go():
        app = fake_app(max_tokens=30)
        async with app.run_test(size=size) as pilot:
            await fill(pilot, app)
            states = []
            for tab in TABS:
                await pilot.press(KEYS[tab])
                await pilot.pause()
                states.append((tab, "default"))
                assert app.tabs.active == tab
                bad, out = narrow_widgets(app), outside(app)
                assert not bad and not out, (tab, bad, out)
                if tab in ("chat", "document", "compare"):
                    for key in ("f8", "f9"):            # each side panel opened (and closed)
                        await pilot.press(key)
                        await pilot.pause()
                        bad, out = narrow_widgets(app), outside(app)
                        assert not bad and not out, (tab, key, bad, out)
                        await pilot.press(key)
                        await pilot.pause()
            # the editor and the output area get most of the screen
            await pilot.press("f2")
            await pilot.pause()
            width = app.size.width
            assert app.chat_tab.transcript.region.width >= min(width - 2, 80)
            assert app.chat_tab.composer.region.width >= min(width - 2, 80)
            assert app.chat_tab.transcript.region.height >= size[1] // 2
            return states

    asyncio.run(go())


@pytest.mark.slow   # over 1.4 s on two cores: out of the 3-minute loop's margin
def test_side_panels_follow_the_width():
    async def go():
        app = fake_app()
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            assert app.query_one("#nav").display and app.query_one("#live").display
            footer = {k.key for k in app.query(FooterKey)}
            assert {"ctrl+g", "ctrl+b", "ctrl+f", "f1", "f8", "f9", "f10", "ctrl+p"} <= footer
            await pilot.press("f5")                       # not beside the calculator
            await pilot.pause()
            assert not app.query_one("#nav").display and not app.query_one("#live").display
        app = fake_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert not app.query_one("#nav").display and not app.query_one("#live").display
            await pilot.press("f8")
            assert app.query_one("#nav").display
            await pilot.press("f9")                       # one at a time when narrow
            assert app.query_one("#live").display and not app.query_one("#nav").display

    asyncio.run(go())


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
def test_keys_work_whatever_has_focus():
    async def go():
        app = fake_app(max_tokens=6)
        async with app.run_test(size=(80, 24)) as pilot:
            await fill(pilot, app)
            turn, pressed = itertools.count(1), set()
            for tab in TABS:
                await pilot.press(KEYS[tab])
                await pilot.pause()
                pane = app.query_one(f"#{tab}")
                kinds, targets = set(), []
                for w in pane.query("*"):                  # a widget of each focusable kind
                    if w.focusable and w.region.width and type(w) not in kinds and len(kinds) < 3:
                        kinds.add(type(w))
                        targets.append(w)
                if tab == "chat":                           # and the conversation list
                    await pilot.press("f8")
                    targets.append(app.query_one("#conv-list"))
                assert targets, tab
                for w in targets:
                    # an F-key from this widget (the next one each time: all of them, from
                    # every kind of widget in turn), and a workspace key: export's dialog
                    other = TABS[next(turn) % len(TABS)]
                    if other == tab:
                        other = TABS[next(turn) % len(TABS)]
                    w.focus()
                    await pilot.pause()
                    assert app.focused is w, (tab, w)
                    await pilot.press("ctrl+s")
                    await pilot.pause()
                    if tab == "review":               # its own export, the redline's: none revised yet
                        assert "revise clauses first" in list(app._notifications)[-1].message, w
                    else:
                        assert type(app.screen).__name__ == "ExportScreen", (tab, w)
                        await pilot.press("escape")
                        await pilot.pause()
                    assert type(app.screen).__name__ != "ExportScreen" and app.focused is w
                    await pilot.press(KEYS[other])
                    await pilot.pause()
                    assert app.tabs.active == other, (tab, type(w).__name__, other)
                    pressed.add((tab, other))
                    await pilot.press(KEYS[tab])
                    await pilot.pause()
            assert {other for _, other in pressed} == set(TABS)
            # ctrl+g from the Models table writes in the workspace (the last one used)
            await pilot.press("f3", "f6")
            app.query_one("#model-table").focus()
            await pilot.pause()
            n = len(app.workspace.current["document"].runs)
            await pilot.press("ctrl+g")
            await settle(pilot, app)
            assert app.tabs.active == "document" and len(app.workspace.current["document"].runs) == n + 1
            # the footer shows the keys that fit; F1 lists them all
            footer = {k.key for k in app.query(FooterKey)}
            assert {"ctrl+g", "ctrl+r", "ctrl+n", "ctrl+s", "ctrl+o", "f1", "ctrl+q"} <= footer

    asyncio.run(go())

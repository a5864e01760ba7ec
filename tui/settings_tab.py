"""The Settings tab: every setting in one panel, validated where the library validates it.

The drafter list is the registry's (`describe()`), `auto` first and preselected; a drafter is
used with a fixed k or with an adaptive draft length (k is then the maximum). The options
become a `GenerationOptions` (its validation, its messages) and the drafter a `DrafterSpec`
(`parse_spec`) every time they are read, so a bad value is reported before anything runs.
Changing a setting touches nothing until the next generation; changing the drafter then
switches the drafter (`Session.set_drafter`), never the verifier.
"""
from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Checkbox, Input, Label, Select, Static, TabPane

from olifant_mlx.bindings import BINDINGS, TUI, bound
from olifant_mlx.drafters.registry import KINDS, DrafterSpec, parse_spec
from olifant_mlx.engine import GenerationOptions
from olifant_mlx.engine.options import options

SECTIONS = {"generation": "generation",       # the option rows' sections, in order, and headings
            "sampling": "sampling (temperature 0 is greedy: drafting never changes the text)",
            "provenance": "provenance (spans copied from a library; the verbatim guard)"}

PLACEHOLDERS = {"PATH": "draft model file (.olif): see the Models tab",
                "N": "N (optional)", "MODEL": "a small mlx-lm model (alias, folder or hub id)",
                "SPEC": "the drafter to adapt, e.g. hybrid:models/legal.olif"}


def drafters() -> list[tuple[str, str, str]]:
    """(kind, usage, summary) of every registry drafter, in registry order."""
    return [(k.name, k.usage, k.summary) for k in KINDS.values()]


def split_spec(text: str) -> tuple[str, str, str]:
    """(kind, argument, length) for the form from a spec: adaptive:X shows as X, adaptive."""
    spec = parse_spec(text, check_files=False)
    length = "fixed"
    inner = spec.inner and KINDS[spec.inner.kind]
    if spec.kind == "adaptive" and inner and inner.drafts and not inner.own_length:
        spec, length = spec.inner, "adaptive"
    if spec.kind == "auto":
        length = "adaptive"
    arg = spec.inner.text if spec.inner is not None else spec.arg
    return spec.kind, arg, length


def compose_spec(kind: str, arg: str, length: str) -> str:
    """The spec text the form means."""
    arg = arg.strip()
    if kind in KINDS and not KINDS[kind].arg:
        return kind
    base = f"{kind}:{arg}" if arg else kind
    if kind == "adaptive" or length != "adaptive":
        return base
    return f"adaptive:{base}"


@dataclass(frozen=True)
class Settings:
    """What the next generation uses, validated."""
    model: str | None
    draft: DrafterSpec
    options: GenerationOptions
    system_prompt: str | None
    conversations: str | None      # the opt-in saved-conversations file


def _whole(value: str, what: str, optional: bool = False):
    value = value.strip()
    if not value:
        if optional:
            return None
        raise ValueError(f"{what} is empty")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{what} must be a whole number, got {value!r}") from None


def _number(value: str, what: str, optional: bool = False) -> float | None:
    if optional and not value.strip():
        return None
    try:
        return float(value.strip())
    except ValueError:
        raise ValueError(f"{what} must be a number, got {value.strip()!r}") from None


def option_rows() -> dict:
    """{section: [field name, ...]} of the options with a settings row (olifant_mlx.bindings),
    in the table's order but for a row placed after another (`after`); sections in SECTIONS'
    order, then any other, in the table's order."""
    names = bound(TUI)
    for name in [n for n in names if BINDINGS[n].after]:
        names.remove(name)
        names.insert(names.index(BINDINGS[name].after) + 1, name)
    rows = {section: [] for section in SECTIONS}
    for name in names:
        rows.setdefault(BINDINGS[name].section, []).append(name)
    return rows


def row_id(name: str) -> str:
    return BINDINGS[name].row_id or "set-" + name.replace("_", "-")


def option_widget(name: str, value):
    """An option's settings widget: a checkbox (flag), a select (choice) or an input."""
    o, hint = options()[name], BINDINGS[name].hint
    if o.kind == "flag":
        return Checkbox(hint, value, id=row_id(name), compact=True)
    if o.kind == "choice":
        return Select([(str(c), c) for c in o.choices], value=Select.BLANK if value is None else value,
                      allow_blank=o.optional,
                      id=row_id(name), compact=True)
    text = "" if value is None else f"{value:g}" if o.kind == "number" else \
        ", ".join(value) if o.kind == "texts" else str(value)
    integer = o.kind == "whole" and not o.optional
    return Input(text, type="integer" if integer else "text", placeholder=hint, id=row_id(name),
                 compact=True)


def read_option(name: str, widget):
    """An option's value from its widget (ValueError naming it when it is not one); its range
    is checked where the options are made."""
    o = options()[name]
    if o.kind == "flag":
        return widget.value
    if o.kind == "choice":
        return None if widget.is_blank() else widget.value
    text = widget.value
    if o.kind == "whole":
        return _whole(text, o.what, o.optional)
    if o.kind == "number":
        return _number(text, o.what, o.optional)
    if o.kind == "texts":
        return tuple(t.strip() for t in text.split(",") if t.strip())
    return text.strip() or (None if o.optional else "")


class SettingsTab(TabPane):
    def __init__(self, model: str | None, draft: str, options: GenerationOptions,
                 system_prompt: str | None = None, conversations: str | None = None):
        super().__init__("F7 Settings", id="settings")
        self.base = options
        self.initial = (model or "", draft, system_prompt or "", conversations or "")

    def compose(self) -> ComposeResult:
        model, draft, system, store = self.initial
        o = self.base
        kind, arg, length = split_spec(draft)

        def row(label, widget):
            with Horizontal(classes="row"):
                yield Label(label, classes="key")
                yield widget

        with VerticalScroll(id="settings-form"):
            yield Static("generation", classes="heading")
            yield from row("verifier", Input(model, placeholder="default: smollm2-135m or $OLIFANT_MODEL",
                                             id="set-model", compact=True))
            yield from row("drafter", Select([(usage, k) for k, usage, _ in drafters()], value=kind,
                                             allow_blank=False, id="set-drafter", compact=True))
            yield from row("  argument", Input(arg, id="set-draft-arg", compact=True))
            yield Static("", id="set-draft-about", classes="about")
            yield from row("draft length", Checkbox("adaptive: up to k, chosen per pass "
                                                    "(off: k every pass)", length == "adaptive",
                                                    id="set-adaptive", compact=True))
            for section, names in option_rows().items():
                if section != "generation":
                    yield Static(SECTIONS.get(section, section), classes="heading")
                for name in names:
                    yield from row(BINDINGS[name].label, option_widget(name, getattr(o, name)))
            yield Static("conversations", classes="heading")
            yield from row("system prompt", Input(system, placeholder="none", id="set-system",
                                                  compact=True))
            yield Static("files (nothing is written unless you turn it on here)", classes="heading")
            yield from row("history", Checkbox("opt-in session history (hybrid drafters)",
                                               bool(o.history), id="set-history-on", compact=True))
            yield from row("  file", Input(o.history or "", placeholder="path of the history file",
                                           id="set-history", compact=True))
            yield from row("keep chats", Checkbox("save conversations to a local file (0600)",
                                                  bool(store), id="set-store-on", compact=True))
            yield from row("  file", Input(store, placeholder="path of the conversations file",
                                           id="set-store", compact=True))
            yield Static("", id="set-check")

    def on_mount(self) -> None:
        self._drafter_changed()

    # ---- reading ----

    def value(self, ident: str) -> str:
        return self.query_one(f"#{ident}", Input).value

    def spec_text(self) -> str:
        adaptive = self.query_one("#set-adaptive", Checkbox).value
        return compose_spec(self.query_one("#set-drafter", Select).value, self.value("set-draft-arg"),
                            "adaptive" if adaptive else "fixed")

    def read(self) -> Settings:
        """The settings, validated (ValueError naming the setting)."""
        model = self.value("set-model").strip() or None
        draft = parse_spec(self.spec_text())
        history = None
        if self.query_one("#set-history-on", Checkbox).value:
            history = self.value("set-history").strip()
            if not history:
                raise ValueError("history is on: give the path of the history file")
        store = None
        if self.query_one("#set-store-on", Checkbox).value:
            store = self.value("set-store").strip()
            if not store:
                raise ValueError("keeping conversations is on: give the path of the file")
        values = {name: read_option(name, self.query_one(f"#{row_id(name)}"))
                  for names in option_rows().values() for name in names}
        options = self.base.replace(**values, history=history)
        from olifant_mlx.drafters import uses_history

        if history and not uses_history(draft):
            raise ValueError("the session history is read only by a hybrid drafter: choose auto, "
                             "hybrid, or an adaptive hybrid")
        system = self.value("set-system").strip() or None
        return Settings(model, draft, options, system, store)

    # ---- writing (from other panes) ----

    def use_drafter(self, spec: str) -> None:
        kind, arg, length = split_spec(spec)
        self.query_one("#set-drafter", Select).value = kind
        self.query_one("#set-draft-arg", Input).value = arg
        self.query_one("#set-adaptive", Checkbox).value = length == "adaptive"

    # ---- live feedback ----

    @on(Select.Changed, "#set-drafter")
    def _drafter_changed(self) -> None:
        kind = self.query_one("#set-drafter", Select).value
        info = {k: (usage, summary) for k, usage, summary in drafters()}
        usage, summary = info.get(kind, ("", ""))
        arg = self.query_one("#set-draft-arg", Input)
        length = self.query_one("#set-adaptive", Checkbox)
        takes = ":" in usage
        arg.disabled = not takes
        arg.placeholder = PLACEHOLDERS.get(usage.rsplit(":", 1)[-1].rstrip("]"), "") if takes else "(none)"
        known = KINDS.get(kind)
        if known and known.own_length:
            length.value = True
        length.disabled = bool(known) and (known.own_length or not known.drafts)
        self.query_one("#set-draft-about", Static).update(f"{usage}: {summary}")
        self.check()

    @on(Checkbox.Changed, "#set-store-on")
    @on(Input.Submitted, "#set-store")
    def _store_setting(self) -> None:
        """Keeping conversations in a file starts (or stops) at once, not at the next run."""
        try:
            s = self.read()
        except ValueError:
            return
        self.app.generation.use_store(s.conversations)

    @on(Input.Changed)
    @on(Checkbox.Changed)
    def check(self) -> None:
        out = self.query_one("#set-check", Static)
        try:
            s = self.read()
        except ValueError as e:
            out.update(f"✗ {e}")
            out.set_class(True, "-error")
            return
        out.set_class(False, "-error")
        out.update(f"✓ next generation: drafter {s.draft.text}, k={s.options.k}, "
                   f"{s.options.max_tokens} tokens at most, "
                   f"{'greedy' if s.options.temperature == 0 else f'temperature {s.options.temperature:g}'}")

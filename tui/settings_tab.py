"""The Settings tab: every setting in one panel, validated where the library validates it.

The drafter list is the registry's (`describe()`), `auto` first and preselected; a drafter is
used with a fixed k or with an adaptive draft length (k is then the maximum). What the form
holds is a model (`SettingsModel`): each field's value is set, and checked, when its widget
changes (the option's own check, `GenerationOptions`'; the drafter, an option too, is first
parsed with its files read, `parse_spec`), a bad one shown beside its field and on the last
line; a run reads the model's `Settings` as they are (`read`), nothing parsed then. Changing
a setting touches nothing until the next generation; changing the drafter then switches the
drafter, never the verifier.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Checkbox, Input, Label, Select, Static, TabPane

from olifant_mlx.bindings import BINDINGS, TUI, bound
from olifant_mlx.drafters.registry import KINDS, DrafterSpec, parse_spec, uses_history
from olifant_mlx.engine import GenerationOptions
from olifant_mlx.engine.options import OptionsError, options
from olifant_mlx.tui.render import option_error

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
    """What the next generation uses, validated: `draft` is options.draft parsed."""
    model: str | None
    draft: DrafterSpec
    options: GenerationOptions
    system_prompt: str | None
    conversations: str | None      # the opt-in saved-conversations file


class FieldError(ValueError):
    """What is wrong with the settings, and the field it is wrong in (None: several)."""

    def __init__(self, name: str | None, message: str):
        super().__init__(message)
        self.name = name


@dataclass
class SettingsModel:
    """The Settings tab's values by field ("model", "draft", each option row's name, "system",
    "history", "store"), each set and checked when its widget changes (`set`), and the
    `Settings` they make now, or the first error, in the order of the form (`settings`,
    `error`). Plain data: a test makes one without an App."""
    base: GenerationOptions
    values: dict
    errors: dict = field(default_factory=dict)     # field -> what is wrong with its value
    settings: Settings | None = None
    error: FieldError | None = None

    @classmethod
    def start(cls, model, draft: str, options: GenerationOptions, system_prompt=None, conversations=None):
        values = {"model": model or None, "system": system_prompt or None, "history": options.history,
                  "store": conversations or None,
                  **{n: getattr(options, n) for names in option_rows().values() for n in names}}
        m = cls(options, values)
        m.set("draft", lambda: parse_spec(draft))
        return m

    def set(self, name: str, value) -> None:
        """Field `name` now the value `value()` makes, or wrong (its ValueError kept); an
        option's value checked by the options' own check. The settings made again."""
        self.errors.pop(name, None)
        try:
            v = value()
            if isinstance(v, DrafterSpec):         # a drafter option holds its spec's text
                v = v.text
            if name in self.base.__dataclass_fields__:
                self.base.replace(**{name: v})
            self.values[name] = v
        except OptionsError as e:
            self.errors[name] = option_error(e)
        except ValueError as e:
            self.errors[name] = str(e)
        try:
            self.settings, self.error = self.make(), None
        except FieldError as e:
            self.settings, self.error = None, e

    def order(self) -> list[str]:
        fields = [n for n in self.base.__dataclass_fields__ if n != "draft"]
        return ["model", "draft", "history", "store", *fields, "system"]

    def make(self) -> Settings:
        wrong = next((n for n in self.order() if n in self.errors), None)
        if wrong is not None:
            raise FieldError(wrong, self.errors[wrong])
        v = self.values
        options = {n: v[n] for n in self.base.__dataclass_fields__ if n in v and n != "history"}
        try:
            opts = self.base.replace(**options, history=v["history"])
        except OptionsError as e:         # options that do not go together: beside the option's row, if any
            raise FieldError(e.option if e.option in v else None, option_error(e)) from None
        except ValueError as e:
            raise FieldError(None, str(e)) from None
        draft = parse_spec(opts.draft, check_files=False)        # its files were read when it was set
        if v["history"] and not uses_history(draft):
            raise FieldError("history", "the session history is read only by a hybrid drafter: choose "
                                        "auto, hybrid, or an adaptive hybrid")
        return Settings(v["model"], draft, opts, v["system"], v["store"])


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
    if o.kind == "schema":          # a file, or the schema's JSON text; checked as it is typed
        if not text.strip():
            return None
        from olifant_mlx.structured import check_schema, read_schema

        schema = read_schema(text, BINDINGS[name].label)
        check_schema(schema, BINDINGS[name].label)
        return schema
    return text.strip() or (None if o.optional else "")


def spec_rows(name: str, row, spec: str):
    """A drafter option's rows (one widget of three parts: split_spec, compose_spec): its kind
    (the row's own id and label), its argument and whether its draft length is adaptive."""
    kind, arg, length = split_spec(spec)
    yield from row(BINDINGS[name].label, Select([(usage, k) for k, usage, _ in drafters()], value=kind,
                                                allow_blank=False, id=row_id(name), compact=True))
    yield from row("  argument", Input(arg, id="set-draft-arg", compact=True))
    yield Static("", id="set-draft-about", classes="about")
    yield from row("draft length", Checkbox("adaptive: up to k, chosen per pass (off: k every pass)",
                                            length == "adaptive", id="set-adaptive", compact=True))


class SettingsTab(TabPane):
    """The form, and the model it edits (`self.model`, a SettingsModel)."""
    FIXED = {"set-model": "model", "set-system": "system", "set-drafter": "draft", "set-draft-arg": "draft",
             "set-adaptive": "draft", "set-history-on": "history", "set-history": "history",
             "set-store-on": "store", "set-store": "store"}
    SHOWN = {"model": "set-model", "draft": "set-draft-arg", "system": "set-system", "history": "set-history",
             "store": "set-store"}     # the field beside which a setting's error shows

    def __init__(self, model: str | None, draft: str, options: GenerationOptions,
                 system_prompt: str | None = None, conversations: str | None = None):
        super().__init__("F7 Settings", id="settings")
        self.base = options
        self.initial = (model or "", draft, system_prompt or "", conversations or "")
        self.model = SettingsModel.start(model, compose_spec(*split_spec(draft)), options, system_prompt,
                                         conversations)
        self.fields = {**self.FIXED, **{row_id(n): n for names in option_rows().values() for n in names}}

    def compose(self) -> ComposeResult:
        model, draft, system, store = self.initial
        o = self.base

        def row(label, widget):
            with Horizontal(classes="row"):
                yield Label(label, classes="key")
                yield widget
            yield Static("", id=f"{widget.id}-error", classes="field-error")

        with VerticalScroll(id="settings-form"):
            yield Static("generation", classes="heading")
            yield from row("verifier", Input(model, placeholder="default: smollm2-135m or $OLIFANT_MODEL",
                                             id="set-model", compact=True))
            for section, names in option_rows().items():
                if section != "generation":
                    yield Static(SECTIONS.get(section, section), classes="heading")
                for name in names:
                    if options()[name].kind == "spec":       # the drafter: its kind, argument and length
                        yield from spec_rows(name, row, draft)
                    else:
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

    def read(self) -> Settings:
        """The settings the next run uses, as the model holds them (ValueError: what is wrong)."""
        if self.model.settings is None:
            raise self.model.error
        return self.model.settings

    # ---- a widget changed: its field set in the model ----

    def text(self, ident: str) -> str:
        return self.query_one(f"#{ident}", Input).value.strip()

    def spec_text(self) -> str:
        adaptive = self.query_one("#set-adaptive", Checkbox).value
        return compose_spec(self.query_one("#set-drafter", Select).value, self.text("set-draft-arg"),
                            "adaptive" if adaptive else "fixed")

    def file(self, ident: str, error: str) -> str | None:
        """An opt-in file's path: None when it is off; ValueError `error` when on without one."""
        if not self.query_one(f"#{ident}-on", Checkbox).value:
            return None
        if not self.text(ident):
            raise ValueError(error)
        return self.text(ident)

    def value(self, name: str, widget):
        """What field `name` holds now, read from its widget (ValueError naming it)."""
        if options().get(name) and options()[name].kind == "spec":     # its files read as it is set
            return parse_spec(self.spec_text())
        if name == "history":
            return self.file("set-history", "history is on: give the path of the history file")
        if name == "store":
            return self.file("set-store", "keeping conversations is on: give the path of the file")
        if name in ("model", "system"):
            return widget.value.strip() or None
        return read_option(name, widget)

    @on(Input.Changed)
    @on(Checkbox.Changed)
    @on(Select.Changed)
    def _changed(self, event) -> None:
        widget = event.control
        name = self.fields.get(widget.id)
        if name is None:
            return
        self.model.set(name, lambda: self.value(name, widget))
        self.show_check()
        if widget.id == "set-store-on":          # keeping conversations starts (or stops) at once
            self._use_store()

    @on(Input.Submitted, "#set-store")
    def _use_store(self) -> None:
        if self.model.settings is not None:
            self.app.nav.use_store(self.model.settings.conversations)

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
        self.show_check()

    def show_check(self) -> None:
        """Each field's error beside it, and the next generation's settings (or the first
        error) on the last line."""
        m = self.model
        beside = {self.SHOWN.get(n) or row_id(n): e for n, e in m.errors.items()}
        if m.error is not None and m.error.name is not None:
            beside[self.SHOWN.get(m.error.name) or row_id(m.error.name)] = str(m.error)
        for line in self.query(".field-error"):
            error = beside.get(line.id.removesuffix("-error"))
            line.update(f"✗ {error}" if error else "")
            line.set_class(bool(error), "-shown")
        out = self.query_one("#set-check", Static)
        out.set_class(m.settings is None, "-error")
        if m.settings is None:
            out.update(f"✗ {m.error}")
            return
        o = m.settings.options
        out.update(f"✓ next generation: drafter {m.settings.draft.text}, k={o.k}, {o.max_tokens} tokens at most, "
                   f"{'greedy' if o.temperature == 0 else f'temperature {o.temperature:g}'}")

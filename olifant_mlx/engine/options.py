"""GenerationOptions: everything that shapes one generation, each option stated once.

Every field carries an `Option` (its metadata): its name in messages, its kind, range or
choices, its command-line flags and help, its field in the server's requests and its row in
the TUI's settings. The argparse flags (cli/common.py's add_option_args), the server's request
fields (server/schemas.py), the TUI's settings (tui/settings_tab.py) and the one validation
(`check_option`, run where the options are made) are all made from it, so adding an option is
one field here; a surface shows its own spelling of a bad value's option (the CLI its flag,
the server its field) before the same message.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from olifant_mlx.engine.sampling import Sampling

MAX_K = 64
KV_BITS = (2, 3, 4, 5, 6, 8)            # what mx.quantize takes
KV_GROUP_SIZES = (32, 64, 128)
LEAD_RULES = ("auto", True, False)
VERBATIM_ACTIONS = ("warn", "stop")


class OptionsError(ValueError):
    """A generation option out of range; the message names the option, `option` is its field
    (surfaces show their own spelling of it: the CLI its flag)."""

    def __init__(self, message: str, option: str = ""):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Option:
    """What one GenerationOptions field is, on every surface. `kind`: "whole", "number"
    (finite), "flag", "text", "texts" (a tuple of non-empty strings), "choice" (one of
    `choices`) or "cost" (a pass-cost model: coefficients() and observe()). `flags`: the command
    line's spellings (none: no flag); `server`: the request field; `tui`: the settings label."""
    what: str                         # its name in messages: "top-p"
    kind: str = "whole"
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple = ()
    optional: bool = False            # None is a value: off, or chosen elsewhere
    note: str = ""                    # said after the range: " (0 is greedy)"
    flags: tuple = ()
    help: str | None = None
    metavar: str | None = None
    negated: bool = False             # a flag that turns it off (--no-kv-cache)
    server: str | None = None         # the request field that sets it
    server_high: float | None = None  # the server's own, narrower, limit
    tui: str | None = None            # the settings row's label ...
    tui_section: str = "generation"   # ... under this heading ...
    tui_id: str | None = None         # ... its widget's id (default set-NAME)
    tui_hint: str = ""                # a checkbox's text, or an empty input's placeholder
    tui_after: str | None = None      # the option whose row this one follows (default: field order)
    flag_default: object = None       # the command line's own default, where it differs (k: 8)
    ranks: bool = True                # sent to a sharded verifier's other ranks


def option(default, **meta):
    return dataclasses.field(default=default, metadata={"option": Option(**meta)})


def _range(o: Option, high) -> str:
    if o.low is not None and high is not None and o.kind == "whole":
        return f"between {o.low:g} and {high:g} (a whole number{o.note})"
    if o.low is not None and high is not None:
        return f"in {'(' if o.low_open else '['}{o.low:g}, {high:g}{')' if o.high_open else ']'}{o.note}"
    word = "a whole number" if o.kind == "whole" else "a number"
    if o.low is not None:
        return f"{word} {'>' if o.low_open else '>='} {o.low:g}{o.note}"
    return word + o.note


def check_option(name: str, value, high=None) -> None:
    """OptionsError (its message naming the option) unless `value` is one the option takes;
    `high`: a surface's own, lower, upper bound (the server's)."""
    o = options()[name]
    if value is None and o.optional:
        return
    high = o.high if high is None else high
    ok = True
    if o.kind in ("whole", "number"):
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ok = (isinstance(value, int) if o.kind == "whole" else number) and not isinstance(value, bool)
        if ok and o.low is not None:
            ok = value > o.low if o.low_open else value >= o.low
        if ok and high is not None:
            ok = value < high if o.high_open else value <= high
        what = f"must be {_range(o, high)}"
    elif o.kind == "choice":
        ok = any(value is c or (type(value) is type(c) and value == c) for c in o.choices)
        what = f"must be one of {', '.join(map(str, o.choices))}"
    elif o.kind == "flag":
        ok, what = isinstance(value, bool), "must be true or false"
    elif o.kind == "texts":
        ok = isinstance(value, tuple) and all(isinstance(x, str) and x for x in value)
        what = "must be non-empty strings"
    elif o.kind == "text":
        ok, what = isinstance(value, str) and bool(value), "must be a non-empty text"
    elif o.kind == "cost":
        ok = hasattr(value, "coefficients") and hasattr(value, "observe")
        what = "must be a pass-cost model (coefficients(), observe())"
    if not ok:
        raise OptionsError(f"{o.what} {what}{' (or none)' if o.optional and o.kind != 'cost' else ''}"
                           f", got {value!r}", name)


@dataclass(frozen=True)
class GenerationOptions:
    """Everything that shapes one generation, checked here and nowhere else. The field order
    is the command line's."""
    k: int = option(3, what="k", low=0, high=MAX_K, note=" of draft tokens per step",
                    flags=("-k", "--num-draft-tokens"), flag_default=8,
                    help="draft tokens per step, 0..64 (the maximum for adaptive drafters; default 8)",
                    server="num_draft_tokens", tui="k")
    kv_cache: bool = option(True, what="the KV cache", kind="flag", flags=("--no-kv-cache",), negated=True,
                            help="uncached regime: the whole sequence each step", tui="KV cache",
                            tui_id="set-kv", tui_hint="on (off: the uncached regime)")
    max_kv_size: int | None = option(None, what="max KV size", low=1, optional=True,
                                     flags=("--max-kv-size",),
                                     help="a sliding KV window of this many tokens (rotating cache)",
                                     tui="max KV size", tui_id="set-max-kv", tui_hint="blank: the whole context")
    kv_bits: int | None = option(None, what="KV bits", kind="choice", choices=KV_BITS, optional=True,
                                 flags=("--kv-bits",), metavar="BITS",
                                 help="quantize the KV cache to this many bits (2-8; mlx-lm's QuantizedKVCache; "
                                      "default: not quantized); drafted output can then differ from plain decoding "
                                      "on the same cache where its two best tokens are close "
                                      "(docs/speculative-decoding.md)")
    kv_group_size: int = option(64, what="KV group size", kind="choice", choices=KV_GROUP_SIZES,
                                flags=("--kv-group-size",), help="group size of the KV quantization (default 64)")
    quantized_kv_start: int = option(5000, what="the quantized KV start", low=0,
                                     flags=("--quantized-kv-start",),
                                     help="with --kv-bits, quantize once the cache holds this many tokens "
                                          "(default 5000)")
    max_tokens: int = option(256, what="max tokens", low=0, flags=("-m", "--max-tokens"),
                             help="tokens to generate at most (default 256)", tui="max tokens", tui_after="k")
    temperature: float = option(0.0, what="temperature", kind="number", low=0, note=" (0 is greedy)",
                                flags=("--temp", "--temperature"),
                                help="sampling temperature (0 = greedy, the default)",
                                server="temperature", server_high=2,
                                tui="temperature", tui_section="sampling", tui_id="set-temp")
    top_p: float = option(1.0, what="top-p", kind="number", low=0, high=1, low_open=True, flags=("--top-p",),
                          server="top_p", tui="top-p", tui_section="sampling")
    min_p: float = option(0.0, what="min-p", kind="number", low=0, high=1, high_open=True, flags=("--min-p",),
                          server="min_p")
    top_k: int = option(0, what="top-k", low=0, note=" (0 is off)", flags=("--top-k",), server="top_k")
    seed: int = option(0, what="seed", flags=("--seed",),
                       help="sampling seed: same seed, same text, with or without drafting",
                       tui="seed", tui_section="sampling")
    repetition_penalty: float | None = option(None, what="repetition penalty", kind="number", low=0,
                                              low_open=True, optional=True, flags=("--repetition-penalty",),
                                              help="penalise repeated tokens (> 1)",
                                              server="repetition_penalty", server_high=10)
    repetition_context_size: int = option(20, what="repetition context size", low=1,
                                          flags=("--repetition-context-size",))
    extra_eos_tokens: tuple = option((), what="extra EOS tokens", kind="texts", flags=("--extra-eos-token",),
                                     metavar="TOKEN", help="tokens that also end the generation")
    stop: tuple = option((), what="stop sequences", kind="texts", flags=("--stop",), metavar="TEXT",
                         help="text that ends the generation (not shown)")
    truncate: bool = option(False, what="truncate", kind="flag", flags=("--truncate",),
                            help="a prompt too long for the verifier's context keeps its last tokens")
    history: str | None = option(None, what="the history file", kind="text", optional=True,
                                 flags=("--history",), metavar="FILE", ranks=False,
                                 help="opt-in: a hybrid drafter also drafts from earlier sessions kept in "
                                      "FILE, and this session's prompt and output are appended to it "
                                      "(local, mode 0600)")
    # provenance (olifant_mlx.provenance): the spans of the output found verbatim in a library
    sources: str | None = option(None, what="the sources library", kind="text", optional=True,
                                 flags=("--sources",), metavar="NAME", ranks=False,
                                 server="sources", tui="sources library", tui_section="provenance",
                                 tui_hint="blank: the drafter's library, if any",
                                 help="report the spans of the output found verbatim in library NAME "
                                      "(with any drafter; default: the library --draft library:NAME or "
                                      "auto drafts from)")
    min_source_tokens: int = option(12, what="the minimum source length", low=1, note=" of tokens",
                                    flags=("--min-source-tokens",), metavar="N", ranks=False,
                                    server="min_source_tokens",
                                    help="report verbatim spans of at least N tokens (default 12)")
    max_verbatim: int | None = option(None, what="max verbatim", low=1, optional=True,
                                      flags=("--max-verbatim",), metavar="N", ranks=False,
                                      server="max_verbatim", tui="max verbatim", tui_section="provenance",
                                      tui_hint="blank: no guard",
                                      help="the verbatim guard: warn (or stop) when the output copies more "
                                           "than N consecutive tokens from one library document")
    verbatim_action: str = option("warn", what="the verbatim action", kind="choice", choices=VERBATIM_ACTIONS,
                                  flags=("--verbatim-action",), metavar="warn|stop", ranks=False,
                                  server="verbatim_action", tui="verbatim action", tui_section="provenance",
                                  help="what the guard does: warn (one line on stderr) or stop (the "
                                       "generation ends there, finish reason 'verbatim'; default warn)")
    matter: str | None = option(None, what="the matter", kind="text", optional=True, flags=("--matter",),
                                metavar="NAME", ranks=False, server="matter", tui="matter",
                                tui_section="provenance", tui_hint="blank: every document counts",
                                help="the matter this text is for: the guard counts only documents of "
                                     "other matters")
    # drafting with precedents (olifant_mlx.precedents): passages put into the prompt ahead of the request
    precedents: str | None = option(None, what="the precedents library", kind="text", optional=True,
                                    flags=("--precedents",), metavar="NAME", ranks=False, server="precedents",
                                    tui="precedents library", tui_section="precedents",
                                    tui_hint="blank: no precedents",
                                    help="put the passages of library NAME that best match the request into the "
                                         "prompt, with their citations (docs/precedents.md)")
    precedent_files: tuple = option((), what="pinned precedents", kind="texts", flags=("--precedent",),
                                    metavar="FILE", ranks=False,
                                    help="pin a document (a file of any format the libraries read, or a document "
                                         "of the --precedents library by its path there): its passages go into "
                                         "the prompt first (repeatable)")
    precedent_tokens: int | None = option(None, what="the precedent budget", low=1, optional=True,
                                          note=" of tokens", flags=("--precedent-tokens",), metavar="N",
                                          ranks=False, server="precedent_tokens", tui="precedent tokens",
                                          tui_section="precedents", tui_hint="blank: 1024, context permitting",
                                          help="tokens of precedents at most (default 1024, or what the "
                                               "verifier's context leaves beside the prompt and the answer)")
    # the KV rule after a correction (engine.loop.LeadRule): "auto" decides per pass, True
    # always leads, False holds the correction back (the older rule, for measuring) ...
    lead: object = option("auto", what="the lead rule", kind="choice", choices=LEAD_RULES)
    # ... planning with this pass-cost model (None: the session fits one from its passes);
    # a cost-aware drafter (adaptive) plans with draft_cost (None: its own fitted one)
    pass_cost: object = option(None, what="the pass cost", kind="cost", optional=True, ranks=False)
    draft_cost: object = option(None, what="the draft cost", kind="cost", optional=True, ranks=False)

    def __post_init__(self):
        for name in options():
            check_option(name, getattr(self, name))
        if self.kv_bits is not None and self.max_kv_size is not None:
            raise OptionsError("a quantized KV cache cannot be a sliding window (mlx-lm has no quantized "
                               "rotating cache): give --kv-bits or --max-kv-size, not both", "kv_bits")
        if self.kv_bits is not None and not self.kv_cache:
            raise OptionsError("--kv-bits quantizes the KV cache: the uncached regime has none", "kv_bits")

    @property
    def sampling(self) -> Sampling | None:
        if self.temperature == 0:
            return None
        return Sampling(float(self.temperature), float(self.top_p), self.seed, self.top_k,
                        float(self.min_p))

    def processors(self) -> list:
        """mlx-lm logits processors for these options (repetition penalty)."""
        if self.repetition_penalty is None or self.repetition_penalty == 1.0:
            return []
        from mlx_lm.sample_utils import make_logits_processors

        return make_logits_processors(repetition_penalty=self.repetition_penalty,
                                      repetition_context_size=self.repetition_context_size)

    @property
    def regime(self) -> str:
        return "kv" if self.kv_cache else "uncached"

    def replace(self, **changes) -> GenerationOptions:
        return dataclasses.replace(self, **changes)


_OPTIONS = {}


def options() -> dict:
    """{field name: Option} of GenerationOptions, in field order."""
    if not _OPTIONS:
        _OPTIONS.update((f.name, f.metadata["option"]) for f in dataclasses.fields(GenerationOptions))
    return _OPTIONS


def default_of(name: str):
    """The field's default."""
    return next(f.default for f in dataclasses.fields(GenerationOptions) if f.name == name)


def flag_of(name: str) -> str | None:
    """The option's flag as an error names it: its long spellings ("--temp/--temperature"),
    or a one-letter name's own short flag ("-k")."""
    o = options().get(name)
    if o is None or not o.flags:
        return None
    if f"-{name}" in o.flags:
        return f"-{name}"
    return "/".join(f for f in o.flags if f.startswith("--")) or o.flags[0]

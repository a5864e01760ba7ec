"""GenerationOptions: everything that shapes one generation, each option stated once.

A frozen dataclass. Every field carries an `Option`: its name in messages, its kind, range or
choices, from which the one check (`check_option`, run where the options are made) is made.
Nothing here is about a surface: how the command line, the server's requests and the TUI's
settings spell an option is olifant_mlx.bindings's table, each surface made from it; a surface
shows its own spelling of a bad value's option (the CLI its flag, the server its field) before
the same message.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from olifant_mlx.engine.sampling import Sampling
from olifant_mlx.option_errors import OptionsError
from olifant_mlx.precedents import DEFAULT_BUDGET as PRECEDENT_BUDGET  # noqa: F401  (precedent_tokens' default)

MAX_K = 64
MAX_REPETITION_CONTEXT = 1 << 20        # tokens: more than any context the penalty could look back over
KV_BITS = (2, 3, 4, 5, 6, 8)            # what mx.quantize takes
KV_GROUP_SIZES = (32, 64, 128)
LEAD_RULES = ("auto", True, False)
VERBATIM_ACTIONS = ("warn", "stop")


@dataclass(frozen=True)
class Option:
    """What one GenerationOptions field takes. `kind`: "whole", "number" (finite), "flag",
    "text", "texts" (a tuple of non-empty strings), "choice" (one of `choices`), "schema" (a
    JSON schema: the text of a JSON object; the surfaces that type one name its file), "spec"
    (a drafter spec as the registry parses it, its files not read: drafters.registry) or "cost"
    (a pass-cost model: coefficients() and observe()). Every option is sent to a sharded verifier's
    other ranks (engine/distributed.py) unless it is `rank_local`: what only rank 0 reads (its
    files, libraries and cost models)."""
    what: str                         # its name in messages: "top-p"
    kind: str = "whole"
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple = ()
    optional: bool = False            # None is a value: off, or chosen elsewhere
    note: str = ""                    # said after the range: " (0 is greedy)"
    rank_local: bool = False          # rank 0's alone: never sent to a sharded verifier's other ranks


def option(default, **meta):
    return dataclasses.field(default=default, metadata={"option": Option(**meta)})


def bound(x) -> str:
    """A bound as people write it: 1048576, not 1.04858e+06; 0.5 as 0.5."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _range(o: Option, high) -> str:
    if o.low is not None and high is not None and o.kind == "whole":
        return f"between {bound(o.low)} and {bound(high)} (a whole number{o.note})"
    if o.low is not None and high is not None:
        return f"in {'(' if o.low_open else '['}{bound(o.low)}, {bound(high)}{')' if o.high_open else ']'}{o.note}"
    word = "a whole number" if o.kind == "whole" else "a number"
    if o.low is not None:
        return f"{word} {'>' if o.low_open else '>='} {bound(o.low)}{o.note}"
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
    elif o.kind == "schema":
        ok, what = _is_json_object(value), "must be a JSON schema (the text of a JSON object)"
    elif o.kind == "spec":
        ok, what = _is_spec(value, name), "must be a drafter spec"
    elif o.kind == "cost":
        ok = hasattr(value, "coefficients") and hasattr(value, "observe")
        what = "must be a pass-cost model (coefficients(), observe())"
    if not ok:
        raise OptionsError(f"{o.what} {what}{' (or none)' if o.optional and o.kind != 'cost' else ''}"
                           f", got {value!r}", name)


def _is_spec(value, name: str) -> bool:
    """Whether the registry parses `value` as a drafter spec, its files unread (they are read
    where the drafter is built); a spec it refuses is an OptionsError with the registry's words."""
    from olifant_mlx.drafters.registry import parse_spec

    if not isinstance(value, str):
        return False
    try:
        parse_spec(value, check_files=False)
    except ValueError as e:
        raise OptionsError(str(e), name) from None
    return True


def _is_json_object(value) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return isinstance(json.loads(value), dict)
    except ValueError:
        return False


@dataclass(frozen=True)
class GenerationOptions:
    """Everything that shapes one generation, checked here and nowhere else. The field order
    is the command line's. How each surface spells an option (its flag, request field, settings
    row) is olifant_mlx.bindings's, not this type's."""
    # the drafter (a spec: drafters.registry); None: the Session's default drafter. Rank 0 drafts;
    # the other ranks of a sharded verifier build none (engine.distributed.SharedDrafter)
    draft: str | None = option(None, what="the drafter", kind="spec", optional=True, rank_local=True)
    k: int = option(8, what="k", low=0, high=MAX_K, note=" of draft tokens per step")
    kv_cache: bool = option(True, what="the KV cache", kind="flag")
    max_kv_size: int | None = option(None, what="max KV size", low=1, optional=True)
    kv_bits: int | None = option(None, what="KV bits", kind="choice", choices=KV_BITS, optional=True)
    kv_group_size: int = option(64, what="KV group size", kind="choice", choices=KV_GROUP_SIZES)
    quantized_kv_start: int = option(5000, what="the quantized KV start", low=0)
    max_tokens: int = option(256, what="max tokens", low=0)
    temperature: float = option(0.0, what="temperature", kind="number", low=0, note=" (0 is greedy)")
    top_p: float = option(1.0, what="top-p", kind="number", low=0, high=1, low_open=True)
    min_p: float = option(0.0, what="min-p", kind="number", low=0, high=1, high_open=True)
    top_k: int = option(0, what="top-k", low=0, note=" (0 is off)")
    seed: int = option(0, what="seed")
    repetition_penalty: float | None = option(None, what="repetition penalty", kind="number", low=0,
                                              low_open=True, optional=True)
    # mlx-lm slices the last N tokens with 32-bit indices: 2^40 was an MLX error after the model loaded
    repetition_context_size: int = option(20, what="repetition context size", low=1, high=MAX_REPETITION_CONTEXT)
    extra_eos_tokens: tuple = option((), what="extra EOS tokens", kind="texts")
    stop: tuple = option((), what="stop sequences", kind="texts")
    truncate: bool = option(False, what="truncate", kind="flag")
    # structured output (olifant_mlx.structured): the answer is JSON that follows this schema
    json_schema: str | None = option(None, what="the JSON schema", kind="schema", optional=True,
                                     rank_local=True)
    history: str | None = option(None, what="the history file", kind="text", optional=True, rank_local=True)
    # the opt-in audit log (olifant_mlx.audit): a line per generation, never a word of its text
    audit_log: str | None = option(None, what="the audit log", kind="text", optional=True, rank_local=True)
    # provenance (olifant_mlx.provenance): the spans of the output found verbatim in a library
    sources: str | None = option(None, what="the sources library", kind="text", optional=True, rank_local=True)
    min_source_tokens: int = option(12, what="the minimum source length", low=1, note=" of tokens", rank_local=True)
    max_verbatim: int | None = option(None, what="max verbatim", low=1, optional=True, rank_local=True)
    verbatim_action: str = option("warn", what="the verbatim action", kind="choice", choices=VERBATIM_ACTIONS,
                                  rank_local=True)
    matter: str | None = option(None, what="the matter", kind="text", optional=True, rank_local=True)
    # the wall (a server's, per API key): the matters whose documents retrieval, pins and provenance
    # may reach, beside the documents of no matter; None: every matter
    matters: tuple | None = option(None, what="the matters", kind="texts", optional=True, rank_local=True)
    # drafting with precedents (olifant_mlx.precedents): passages put into the prompt ahead of the request
    precedents: str | None = option(None, what="the precedents library", kind="text", optional=True, rank_local=True)
    precedent_files: tuple = option((), what="pinned precedents", kind="texts", rank_local=True)
    # a server's requests pin documents of the precedents library by their path there, never a file
    precedent_documents: tuple = option((), what="pinned documents", kind="texts", rank_local=True)
    precedent_tokens: int | None = option(None, what="the precedent budget", low=1, optional=True,
                                          note=" of tokens", rank_local=True)
    # the KV rule after a correction (engine.loop.LeadRule): "auto" decides per pass, True
    # always leads, False holds the correction back (the older rule, for measuring) ...
    lead: object = option("auto", what="the lead rule", kind="choice", choices=LEAD_RULES)
    # ... planning with this pass-cost model (None: the session fits one from its passes);
    # a cost-aware drafter (adaptive) plans with draft_cost (None: its own fitted one)
    # (rank-local: each rank fits its own)
    pass_cost: object = option(None, what="the pass cost", kind="cost", optional=True, rank_local=True)
    draft_cost: object = option(None, what="the draft cost", kind="cost", optional=True, rank_local=True)

    def __post_init__(self):
        for name in options():
            check_option(name, getattr(self, name))
        if self.kv_bits is not None and self.max_kv_size is not None:
            raise OptionsError("a quantized KV cache cannot be a sliding window (mlx-lm has no quantized "
                               "rotating cache): give KV bits or a max KV size, not both", "kv_bits")
        if self.kv_bits is not None and not self.kv_cache:
            raise OptionsError("KV bits quantize the KV cache: the uncached regime has none", "kv_bits")

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

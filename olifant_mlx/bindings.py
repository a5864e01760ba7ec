"""Where each generation option shows: its command-line flags, its field in the server's
requests and its row in the TUI's settings.

`engine.options` says what an option is (its default and its check); this table says how the
surfaces spell it and which of them it applies to (`applies`):

- `generate`: a flag of generate, chat and tui (cli/common.py's add_generation_args);
- `serve`: a flag of serve (the server's default for requests) and a request field (unless
  `clients` is False: the server's own, as its audit log);
- `request`: a request field without a serve flag (`seed`: a request without one draws afresh);
- `tui`: a row of the TUI's settings (tui/settings_tab.py).

The drafter (`draft`) is a row too: its flags (--draft, and mlx-lm's --draft-model MODEL as its
`alias`), its settings row (kind, argument and draft length, tui/settings_tab.py's `spec_rows`)
and a request field that is `named`: a server's requests choose among the drafters it was
started with (serve --draft/--drafters), by name, never by spec (server/schemas.py's `_drafter`).

Whether a sharded verifier's other ranks get an option is the option's own (`Option.rank_local`),
no surface's. An option that applies nowhere is the engine's alone (`lead`, `pass_cost`,
`draft_cost`: set in code).
Why an option of generate does not apply to serving is said beside its row.
"""
from __future__ import annotations

from dataclasses import dataclass

from olifant_mlx.engine.options import PRECEDENT_BUDGET

GENERATE, SERVE, REQUEST, TUI = "generate", "serve", "request", "tui"
SURFACES = (GENERATE, SERVE, REQUEST, TUI)


@dataclass(frozen=True)
class Binding:
    """One option's spellings. `flags`: the command line's (generate's and serve's); `request`:
    the request field (default: the option's name); `label`: the settings row's."""
    applies: frozenset = frozenset()
    flags: tuple = ()
    help: str | None = None           # argparse's: %(default)s is the flag's default
    metavar: str | None = None
    negated: bool = False             # a flag that turns it off (--no-kv-cache)
    request: str | None = None
    server_high: float | None = None  # the server's own, narrower, limit
    label: str | None = None          # the settings row's label ...
    section: str = "generation"       # ... under this heading ...
    row_id: str | None = None         # ... its widget's id (default set-NAME)
    hint: str = ""                    # a checkbox's text, or an empty input's placeholder
    after: str | None = None          # the option whose row this one follows (default: table order)
    off: str | None = None            # a request's value that turns the server's default off (None)
    clients: bool = True              # a serve option a request may set (False: the server's own)
    # another flag for the same option: (flag, metavar, prefix, help), its value the option's after
    # the prefix (--draft-model MODEL: mlx-lm's spelling of --draft neural:MODEL); it wins over the flag
    alias: tuple | None = None
    # the request field names one of the server's configured choices (serve --draft/--drafters), or
    # "none", never a value of the option: the server checks it by its own rule (server.schemas)
    named: bool = False


def bind(*applies: str, **spelling) -> Binding:
    return Binding(frozenset(applies), **spelling)


BINDINGS = {
    # a server's requests choose among the drafters it was started with, by name (serve --drafters);
    # its help lists the registry's drafters, made by the command line (cli/common.py's MADE_HELPS)
    "draft": bind(GENERATE, SERVE, TUI, flags=("--draft",), named=True, label="drafter",
                  row_id="set-drafter",
                  alias=("--draft-model", "MODEL", "neural:",
                         "a small mlx-lm draft model (mlx-lm's flag): the same as --draft neural:MODEL")),
    "k": bind(GENERATE, SERVE, TUI, flags=("-k", "--num-draft-tokens"), request="num_draft_tokens",
              label="k", help="draft tokens per step, 0..64 (the maximum for adaptive drafters; default "
                              "%(default)s)"),
    # the uncached regime is for measuring; a server keeps its KV caches across requests
    "kv_cache": bind(GENERATE, TUI, flags=("--no-kv-cache",), negated=True,
                     help="uncached regime: the whole sequence each step", label="KV cache", row_id="set-kv",
                     hint="on (off: the uncached regime)"),
    "max_kv_size": bind(GENERATE, SERVE, TUI, flags=("--max-kv-size",),
                        help="a sliding KV window of this many tokens (rotating cache)", label="max KV size",
                        row_id="set-max-kv", hint="blank: the whole context"),
    "kv_bits": bind(GENERATE, SERVE, flags=("--kv-bits",), metavar="BITS",
                    help="quantize the KV cache to this many bits (2-8; mlx-lm's QuantizedKVCache; default: "
                         "not quantized); drafted output can then differ from plain decoding on the same "
                         "cache where its two best tokens are close (docs/speculative-decoding.md)"),
    "kv_group_size": bind(GENERATE, SERVE, flags=("--kv-group-size",),
                          help="group size of the KV quantization (default %(default)s)"),
    "quantized_kv_start": bind(GENERATE, SERVE, flags=("--quantized-kv-start",),
                               help="with --kv-bits, quantize once the cache holds this many tokens "
                                    "(default %(default)s)"),
    "max_tokens": bind(GENERATE, SERVE, TUI, flags=("-m", "--max-tokens"),
                       help="tokens to generate at most (default %(default)s)", label="max tokens", after="k"),
    "temperature": bind(GENERATE, SERVE, TUI, flags=("--temp", "--temperature"), server_high=2,
                        help="sampling temperature (0 = greedy, the default)", label="temperature",
                        section="sampling", row_id="set-temp"),
    "top_p": bind(GENERATE, SERVE, TUI, flags=("--top-p",), label="top-p", section="sampling"),
    "min_p": bind(GENERATE, SERVE, flags=("--min-p",)),
    "top_k": bind(GENERATE, SERVE, flags=("--top-k",)),
    "seed": bind(GENERATE, REQUEST, TUI, flags=("--seed",), label="seed", section="sampling",
                 help="sampling seed: same seed, same text, with or without drafting"),
    "repetition_penalty": bind(GENERATE, SERVE, flags=("--repetition-penalty",), server_high=10,
                               help="penalise repeated tokens (> 1)"),
    "repetition_context_size": bind(GENERATE, SERVE, flags=("--repetition-context-size",)),
    # tokens of the served model's vocabulary, known only once it loads: a request ends on text with `stop`
    "extra_eos_tokens": bind(GENERATE, flags=("--extra-eos-token",), metavar="TOKEN",
                             help="tokens that also end the generation"),
    "stop": bind(GENERATE, SERVE, flags=("--stop",), metavar="TEXT",
                 help="text that ends the generation (not shown)"),
    "truncate": bind(GENERATE, SERVE, flags=("--truncate",),
                     help="a prompt too long for the verifier's context keeps its last tokens"),
    # a server takes its clients' schemas as OpenAI spells them: response_format, tools
    "json_schema": bind(GENERATE, TUI, flags=("--json-schema",), metavar="FILE", label="JSON schema",
                        hint="blank: free text; a file, or {...}",
                        help="the answer is JSON that follows this JSON schema: a FILE, or the schema itself "
                             "as JSON text ('{\"type\": \"object\"}': any JSON object); needs the "
                             "[structured] extra (docs/structured-output.md)"),
    # writes the prompts and outputs to a local file: a server keeps none of its clients' text
    "history": bind(GENERATE, flags=("--history",), metavar="FILE",
                    help="opt-in: a hybrid drafter also drafts from earlier sessions kept in FILE, and this "
                         "session's prompt and output are appended to it (local, mode 0600)"),
    # a server writes its own (with the API key's id), which no request may change
    "audit_log": bind(GENERATE, SERVE, flags=("--audit-log",), metavar="FILE", clients=False,
                      help="opt-in: append a line per request to FILE (local, mode 0600, hash-chained): who, "
                           "the matter, libraries, citations of the passages given and spans traced, token "
                           "counts, outcome; never a word of the prompt or the output (docs/audit.md)"),
    "sources": bind(GENERATE, SERVE, TUI, flags=("--sources",), metavar="NAME", label="sources library",
                    section="provenance", hint="blank: the drafter's library, if any",
                    help="report the spans of the output found verbatim in library NAME (with any drafter; "
                         "default: the library --draft library:NAME or auto drafts from)"),
    "min_source_tokens": bind(GENERATE, SERVE, flags=("--min-source-tokens",), metavar="N",
                              help="report verbatim spans of at least N tokens (default %(default)s)"),
    "max_verbatim": bind(GENERATE, SERVE, TUI, flags=("--max-verbatim",), metavar="N", label="max verbatim",
                         section="provenance", hint="blank: no guard",
                         help="the verbatim guard: warn (or stop) when the output copies more than N "
                              "consecutive tokens from one library document"),
    "verbatim_action": bind(GENERATE, SERVE, TUI, flags=("--verbatim-action",), metavar="warn|stop",
                            label="verbatim action", section="provenance",
                            help="what the guard does: warn (one line on stderr) or stop (the generation "
                                 "ends there, finish reason 'verbatim'; default %(default)s)"),
    "matter": bind(GENERATE, SERVE, TUI, flags=("--matter",), metavar="NAME", label="matter",
                   section="provenance", hint="blank: every document counts",
                   help="the matter this text is for: the guard counts only documents of other matters"),
    # set by a server from the API key's access (server/access.py), never by a flag or a field
    "matters": bind(),
    "precedents": bind(GENERATE, SERVE, TUI, flags=("--precedents",), metavar="NAME", off="",
                       label="precedents library", section="precedents", hint="blank: no precedents",
                       help="put the passages of library NAME that best match the request into the prompt, "
                            "with their citations (docs/precedents.md)"),
    # files of this machine: a client must not name the server's files
    "precedent_files": bind(GENERATE, flags=("--precedent",), metavar="FILE",
                            help="pin a document (a document of the --precedents library by its path there, "
                                 "which wins over a file of that path; library:NAME:PATH, one of library NAME; "
                                 "or a file of any format the libraries read): its passages go into the "
                                 "prompt first (repeatable)"),
    # a request's pins: documents of its precedents library by their path there (the server reads no file)
    "precedent_documents": bind(REQUEST, request="precedent"),
    "precedent_tokens": bind(GENERATE, SERVE, TUI, flags=("--precedent-tokens",), metavar="N",
                             label="precedent tokens", section="precedents",
                             hint=f"blank: {PRECEDENT_BUDGET}, context permitting",
                             help=f"tokens of precedents at most (default {PRECEDENT_BUDGET}, or what the verifier's "
                                  "context leaves beside the prompt and the answer; the default grows to hold "
                                  "the best passage whole)"),
    "lead": bind(),
    "pass_cost": bind(),              # cost models, set in code
    "draft_cost": bind(),
}


def applies(name: str, surface: str) -> bool:
    """Whether the option is on that surface (a `serve` option a client may set is a request field too)."""
    on = BINDINGS[name].applies
    return surface in on or (surface == REQUEST and SERVE in on and BINDINGS[name].clients)


def bound(surface: str) -> list:
    """The options on that surface, in the table's (the fields') order."""
    return [name for name in BINDINGS if applies(name, surface)]


def request_field(name: str) -> str:
    return BINDINGS[name].request or name


def flag_of(name: str) -> str | None:
    """The option's flag as an error names it: its long spellings ("--temp/--temperature"),
    or a one-letter name's own short flag ("-k")."""
    b = BINDINGS.get(name)
    if b is None or not b.flags:
        return None
    if f"-{name}" in b.flags:
        return f"-{name}"
    return "/".join(f for f in b.flags if f.startswith("--")) or b.flags[0]


def table_problems(fields, bindings=None) -> list:
    """How the table and the options' `fields` (names, in order) disagree; [] when they do not."""
    bindings = BINDINGS if bindings is None else bindings
    problems = [] if list(bindings) == list(fields) else [f"the table's rows are not the fields {list(fields)}"]
    for name, b in bindings.items():
        if b.applies - set(SURFACES):
            problems.append(f"{name}: no surface {sorted(b.applies - set(SURFACES))}")
        if b.applies & {GENERATE, SERVE} and not b.flags:
            problems.append(f"{name}: a flag of {sorted(b.applies & {GENERATE, SERVE})} needs its flags")
        if TUI in b.applies and not b.label:
            problems.append(f"{name}: a settings row needs a label")
        if b.after is not None and not (b.after in bindings and TUI in bindings[b.after].applies):
            problems.append(f"{name}: follows {b.after!r}, which has no settings row")
    return problems

"""What the commands share: argument spellings (mlx-lm's where the same thing exists),
validation of everything before any model loads, output tables and summaries."""
from __future__ import annotations

import argparse
import json
import sys

from olifant_mlx.bindings import BINDINGS, GENERATE, bound, flag_of
from olifant_mlx.drafters.registry import help_text
from olifant_mlx.engine.options import default_of, options

MODEL_HELP = ("verifier: alias (smollm2-135m, gemma3-270m, qwen2.5-coder-1.5b), GGUF file, MLX folder or hub id "
              "(default: Mistral-7B-v0.1 if cached, else smollm2-135m; $OLIFANT_MODEL)")


def option_error(e) -> str:
    """An OptionsError as the command line says it: the option's flag, then the engine's message
    (the flag once: a message of the CLI's own that starts with it stands as it is)."""
    flag = flag_of(e.option)
    return f"{flag}: {e}" if flag and not str(e).startswith(flag) else str(e)


def draft_tokens(value: str) -> int:
    """argparse type of a -k that is no generation option (bench's, train's, demo's): k as
    the options check it (a usage error otherwise)."""
    from olifant_mlx.engine.options import OptionsError, check_option

    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be a whole number, got {value!r}") from None
    try:
        check_option("k", k)
    except OptionsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return k


def energy_help() -> str:
    from olifant_mlx.energy.backends import ENV, choices

    return f"energy meter: {choices()} (default: ${ENV}, else auto)"


def open_meter(spec):
    """The energy meter for a generation command, synchronising MLX at window edges so queued
    work lands in the window that issued it."""
    from olifant_mlx.energy import open_meter as open_backend
    from olifant_mlx.mlx_setup import mx

    return open_backend(spec, sync=mx.synchronize)
def whole_number(minimum: int, maximum: int | None = None):
    """argparse type: a whole number >= minimum (and <= maximum; a usage error naming the flag
    otherwise)."""
    import argparse

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None
        if n < minimum or (maximum is not None and n > maximum):
            said = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum:,}"
            raise argparse.ArgumentTypeError(f"must be {said}, got {value[:40]}")
        return n

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def draft_help() -> str:
    return f"drafter (default auto): {help_text()}"


# the option flags whose help is made when a parser is made, not the row's: the registry's drafters
MADE_HELPS = {"draft": draft_help}


def flag_help(name: str) -> str | None:
    """An option flag's help: made now (MADE_HELPS), else its row's."""
    made = MADE_HELPS.get(name)
    return made() if made is not None else BINDINGS[name].help


def add_weights_arg(p) -> None:
    """--weights: how an alias or GGUF file is converted (main() hands it on as $OLIFANT_GGUF_WEIGHTS)."""
    p.add_argument("--weights", choices=("fp32", "fp16", "bf16", "q4"),
                   help="an alias's or GGUF file's weight format, converted once per format (default: "
                        "q4 on macOS, fp32 elsewhere, the fastest measured; $OLIFANT_GGUF_WEIGHTS)")


def flag_dest(name: str) -> str:
    """The argparse attribute an option's flag sets: the field's name where a flag spells it
    (-k, --temperature), else argparse's own (--no-kv-cache: no_kv_cache)."""
    flags = BINDINGS[name].flags
    spelled = {f.lstrip("-").replace("-", "_") for f in flags}
    return name if name in spelled else next(f for f in flags if f.startswith("--"))[2:].replace("-", "_")


def add_option_args(p, names, **helps) -> None:
    """The flags of these GenerationOptions fields, made from their bindings (spellings, help,
    metavar) and their `Option`s (type): the default is the field's, or the parser's own
    (set_defaults); `helps`: a command's own help for a field. Values are converted here and
    checked once, where the options are made (`options_from`). A row's `alias` is a flag of
    its own (its dest the alias's), read into the option by `options_from`."""
    for name in names:
        o, b = options()[name], BINDINGS[name]
        kw = dict(dest=flag_dest(name), help=helps.get(name, flag_help(name)))
        if o.kind == "flag":
            kw.update(action="store_true")
        elif o.kind == "texts":          # repeatable, and several values after one flag
            kw.update(type=str, default=None, metavar=b.metavar, nargs="+", action="extend")
        else:
            kw.update(type=type(o.choices[0]) if o.kind == "choice" else _FLAG_TYPES[o.kind],
                      default=default_of(name), metavar=b.metavar)
        p.add_argument(*b.flags, **{k: v for k, v in kw.items() if v is not None or k == "help"})
        if b.alias:
            flag, metavar, _, help = b.alias
            p.add_argument(flag, dest=alias_dest(name), metavar=metavar, help=help)


def alias_dest(name: str) -> str:
    return BINDINGS[name].alias[0].lstrip("-").replace("-", "_")


_FLAG_TYPES = {"whole": int, "number": float, "text": str, "texts": str, "schema": str, "spec": str}


def add_generation_args(p, prompt: bool = True) -> None:
    """The flags of generate, chat, demo and serve-like commands, spelled as in mlx-lm."""
    p.add_argument("--model", help=MODEL_HELP)
    add_weights_arg(p)
    names = bound(GENERATE)
    before_prompt = names[:names.index("max_tokens")]          # --draft, -k .. --quantized-kv-start
    add_option_args(p, before_prompt)
    p.set_defaults(draft="auto")       # the commands draft unless told not to (the field's None: a Session's own)
    if prompt:
        p.add_argument("-p", "--prompt", default="hello",
                       help="the prompt ('-' reads stdin; default 'hello'): an instruction for an "
                            "instruct model, the start of the text for a base model")
    p.add_argument("--system-prompt", help="system prompt for the chat template")
    p.add_argument("--ignore-chat-template", action="store_true",
                   help="use the prompt as raw text, without the verifier's chat template")
    p.add_argument("--chat-template-config", metavar="JSON",
                   help="extra arguments for the chat template, as a JSON object")
    add_option_args(p, [n for n in names if n not in before_prompt])    # -m .. and any new option
    p.add_argument("--energy", metavar="BACKEND", help=energy_help())


# ---- mlx-lm's flags, with mlx-lm's meanings (docs/mlx-lm-parity.md) -------------------------

def str2bool(value: str) -> bool:
    """mlx-lm's --verbose: anything but false/f (any case) is true."""
    return value.lower() not in ("false", "f")


def add_adapter_arg(p) -> None:
    p.add_argument("--adapter-path", metavar="FOLDER",
                   help="LoRA adapters for the verifier (mlx-lm's flag): a folder with "
                        "adapters.safetensors and adapter_config.json, as mlx_lm.lora writes it")


def add_mlx_lm_args(p) -> None:
    """--verbose, --adapter-path, --prefill-response: generate's and chat's (the TUI has its
    own display and templates)."""
    p.add_argument("--verbose", type=str2bool, default=True, metavar="BOOL",
                   help="mlx-lm's flag: True (the default) prints the summary and notes on stderr; "
                        "False ('False' or 'F') prints only the response")
    add_adapter_arg(p)
    p.add_argument("--prefill-response", metavar="TEXT",
                   help="mlx-lm's flag: the start of the assistant's answer, put after the chat "
                        "template; the model continues it (not printed again)")


def check_adapter_path(path) -> str | None:
    """An --adapter-path folder as mlx-lm's load needs it, checked before any weights load."""
    if path is None:
        return None
    from pathlib import Path

    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"--adapter-path {path}: not a folder (mlx_lm.lora writes one with "
                         f"adapters.safetensors and adapter_config.json)")
    for name in ("adapter_config.json", "adapters.safetensors"):
        if not (folder / name).is_file():
            raise ValueError(f"--adapter-path {path}: {name} is missing from the folder")
    try:
        json.loads((folder / "adapter_config.json").read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"--adapter-path {path}: adapter_config.json is not readable JSON: {e}") from None
    return str(folder)


def add_prompt_cache_args(p) -> None:
    """mlx-lm's KV cache flags (generate): a prompt cache file."""
    p.add_argument("--prompt-cache-file", metavar="FILE",
                   help="a prompt's KV cache made by `cache-prompt` (mlx-lm's format): the prompt "
                        "continues the cached one, whose tokens are not read again")


def options_from(args):
    """GenerationOptions from the flags (validated: errors before any model loads); an option
    without a flag on this command keeps the field's default."""
    from olifant_mlx.engine.options import GenerationOptions

    values = {}
    for name, o in options().items():
        dest = flag_dest(name) if BINDINGS[name].flags else None
        if dest is None or not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        alias = BINDINGS[name].alias
        if alias and getattr(args, alias_dest(name), None) is not None:     # --draft-model MODEL
            value = alias[2] + getattr(args, alias_dest(name))
        if o.kind == "schema" and value is not None:     # a FILE, or the schema's JSON text
            from olifant_mlx.structured import read_schema

            value = read_schema(value, flag_of(name))
        values[name] = (not value if BINDINGS[name].negated else value) if o.kind == "flag" else \
            tuple(value or ()) if o.kind == "texts" else value
    return GenerationOptions(**values)


def template_kwargs(args) -> dict:
    if not getattr(args, "chat_template_config", None):
        return {}
    try:
        cfg = json.loads(args.chat_template_config)
    except ValueError as e:
        raise ValueError(f"--chat-template-config is not JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError("--chat-template-config must be a JSON object")
    return cfg


def prepare(args):
    """Everything checked before the verifier loads: options, the drafter spec and its draft
    model's tokenizer against the verifier's, the history path, the energy backend.
    Returns (options, spec, meter)."""
    from olifant_mlx.drafters import parse_spec, uses_history

    options = options_from(args)
    if options.json_schema is not None:      # compiled once without a model: an unsupported feature fails now
        from olifant_mlx.structured import check_schema

        arg = args.json_schema.strip()
        check_schema(options.json_schema, flag_of("json_schema") + ("" if arg.startswith("{") else f" {arg}"))
    template_kwargs(args)
    check_adapter_path(getattr(args, "adapter_path", None))
    if getattr(args, "adapter_path", None) and getattr(args, "sharded", None):
        raise ValueError("--adapter-path is not supported with --sharded (as in mlx-lm)")
    if getattr(args, "prefill_response", None) is not None and getattr(args, "ignore_chat_template", False):
        raise ValueError("--prefill-response starts the assistant's answer after the chat template: "
                         "it cannot go with --ignore-chat-template")
    spec = parse_spec(options.draft)       # its files read now (the option's check reads none)
    if options.history and not uses_history(spec):
        raise ValueError("--history needs a hybrid drafter: --draft auto, hybrid[:PATH] or "
                         "adaptive:hybrid[:PATH]")
    if options.history:
        from olifant_mlx.drafters.history import check_path

        check_path(options.history)      # a FIFO, a folder or a dangling link: refused now
    if options.audit_log:
        from olifant_mlx.audit import check_path as check_audit_log

        check_audit_log(options.audit_log)      # a FIFO, a folder, a torn last line: refused now
    if spec.model_file:
        check_draft_model(spec.model_file, args.model)
    if getattr(args, "prompt_cache_file", None):
        check_prompt_file(args.prompt_cache_file, args.model, options)
    for name in {n for n in (options.sources, options.precedents, spec.arg if spec.kind == "library" else None) if n}:
        check_library(name, args.model)   # a LibraryError (a ValueError) before any weights load
    if options.precedents or options.precedent_files:
        check_precedents(options, args)
    meter = open_meter(getattr(args, "energy", None))
    return options, spec, meter


def check_precedents(options, args) -> None:
    """Refuse precedents that cannot be used before the verifier's weights load (the library's
    tokenizer: check_library): a library without a passage index, a pinned file that is not
    there, or a prompt given as ids (a prefilled answer, a cached prompt), which has no request
    to add them to."""
    from olifant_mlx.option_errors import OptionFileError, OptionsError

    for flag in ("prefill_response", "prompt_cache_file"):
        if getattr(args, flag, None) is not None:
            raise OptionsError(f"--{flag.replace('_', '-')} cannot go with precedents: they go into the "
                               f"request, which is then no longer the one cached or prefilled", "precedents")
    from pathlib import Path

    from olifant_mlx import library, passages
    from olifant_mlx.precedents import library_document, not_pinnable, parse_pin

    lib = library.load(options.precedents) if options.precedents else None
    if lib is not None:
        passages.open_index(lib).close()
    for spec in options.precedent_files:
        name, _ = parse_pin(spec)
        path = Path(spec).expanduser()
        if name is not None:          # library:NAME:PATH, a document of another library
            check_library(name, args.model)
            passages.open_index(library.load(name)).close()
        elif library_document(lib, spec):
            continue
        elif not path.exists() and lib is None:
            raise OptionFileError(f"{spec}: no such file", "precedent_files")
        elif path.exists() and not_pinnable(path) is not None:
            raise OptionFileError(f"{spec}: not read: {not_pinnable(path)}", "precedent_files")


def check_draft_model(path, model_spec) -> None:
    """Refuse a draft model trained for another tokenizer before loading the verifier's weights
    (the tokenizer alone loads in a moment)."""
    from olifant_mlx.draftmodel.igtree import IGTree
    from olifant_mlx.draftmodel.open import check_model_tokenizer, model_file_kind
    from olifant_mlx.verifier import default_model, load_tokenizer

    kind = model_file_kind(path)     # a FIFO, a device or a foreign file: refused before the tokenizer loads
    name = model_spec or default_model()
    tok = load_tokenizer(name)
    fix = f"train one with `train --model {name}`" if kind is IGTree else \
        f"build one with `build-rest --tokenizer {name}`"    # rest: and ngram-cache: files
    check_model_tokenizer(path, tok.name, tok.vocab_size, tok.digest, fix=fix)


def check_library(name, model_spec) -> None:
    """Refuse a precedent library built for another tokenizer before any verifier is fetched or
    converted: two offline aliases are told apart by name (their tokenizers differ), any other
    verifier by its tokenizer, which loads in a moment."""
    from olifant_mlx.library import LibraryError, load
    from olifant_mlx.verifier import ALIASES, default_model, load_tokenizer

    lib = load(name)
    model = model_spec or default_model()
    built = lib.meta.get("tokenizer", {}).get("name")
    fits = built == model if model in ALIASES and built in ALIASES else lib.fits(load_tokenizer(model))
    if not fits:
        raise LibraryError(f"library {name} was built for tokenizer {built!r}, not {model}'s: build one "
                           f"for {model} with `library build NEW_NAME {lib.meta.get('folder', 'FOLDER')} "
                           f"--model {model}`, or use --model {built}")


def check_prompt_file(path, model_spec, options) -> None:
    """Refuse a prompt cache file made for another model before the verifier loads (its
    tokenizer loads in a moment)."""
    from olifant_mlx.engine import prompt_file
    from olifant_mlx.verifier import default_model, load_tokenizer

    if not options.kv_cache:
        raise ValueError("--prompt-cache-file holds a KV cache: it cannot go with --no-kv-cache")
    prompt_file.check(path, load_tokenizer(model_spec or default_model()))


def table(title, rows, stderr: bool = False) -> None:
    """A two-column table of (label, value) for people, on stdout (or stderr). What does not fit
    the width (80 columns in a log file) is folded onto the next line, never cut: a file's name
    is the thing its reader needs."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_header=False)
    t.add_column("", style="bold", overflow="fold")
    t.add_column("", justify="right", overflow="fold")
    for k, v in rows:
        t.add_row(k, v)
    Console(stderr=stderr).print(t)


def print_json(obj, indent=None, stream=None) -> None:
    """JSON for machines (finite numbers only), on stdout unless told otherwise."""
    out = stream or sys.stdout
    out.write(json.dumps(obj, indent=indent, allow_nan=False) + "\n")
    out.flush()


def mb(n) -> str:
    return f"{n / 1e6:.2f} MB"


def summary_lines(stats, drafted, energy, detailed: bool = False) -> list:
    """mlx-lm's summary (prompt and generation tokens/s, peak memory) and ours (drafting,
    stop reason, energy) as lines for stderr; `drafted`: the generation's Request's drafting
    (engine.request.Drafting: the drafter as asked for and as built)."""
    from olifant_mlx.mlx_setup import mx

    lines = ["=" * 10,
             f"Prompt: {stats.prompt_tokens} tokens, {stats.prompt_tps:.3f} tokens-per-sec",
             f"Generation: {stats.tokens} tokens, {stats.generation_tps:.3f} tokens-per-sec",
             f"Peak memory: {mx.get_peak_memory() / 1e9:.3f} GB"]
    drafter = drafted.spec.text if drafted.spec is not None else drafted.drafter.name
    asked = getattr(drafted.requested, "text", drafted.requested)
    label = f"{asked} -> {drafter}" if isinstance(asked, str) and asked != drafter else drafter
    lines.append(drafting_line(label, stats))
    sharded = stats.extra.get("sharded")
    if sharded:
        lines.append(f"Sharded: {sharded['mode']} parallel over {sharded['ranks']} ranks "
                     f"({sharded['backend']}); rank 0's drafts and choices reach the others in "
                     f"{sharded['collectives']:,} collectives so far ({mb(sharded['bytes'])}); energy "
                     f"and memory are rank 0's")
    if energy is not None and energy.total_j is not None:
        lines.append(f"Energy: {energy.total_j:.2f} J ({energy.j_per_100_tokens(stats.tokens) or 0:.2f} "
                     f"J/100 tokens; {energy.info.label})")
    else:
        lines.append("Energy: not measured (no energy meter here: `python -m olifant_mlx energy` "
                     "says why)")
    if detailed:
        lines.append(f"Steps: {stats.steps} ({stats.fast_path_steps} on the fast path), verifier "
                     f"positions {stats.forward_tokens}, drafting {stats.draft_s * 1e3:.1f} ms, "
                     f"verifying {stats.verify_s:.2f} s, overhead {stats.overhead_ms_per_step:.3f} ms/step")
    return lines


def drafting_line(label: str, stats) -> str:
    """The summary's drafting line: tokens per verifier pass (what drafting buys) and the passes
    it saved, the drafted tokens accepted (acceptance: of those drafted; the mean accepted
    length: per pass, defined beside it), and "—" where nothing was drafted (plain decoding).
    Passes saved are the accepted draft tokens less the passes that gave no token of their own
    (a pass whose drafts were all accepted holds the verifier's next token for the one after it,
    and a pass that feeds a held correction alone gives none): said where there were any, so a
    run whose acceptance is not 0 but which saved nothing says why."""
    drafted = stats.drafted > 0
    per_pass = f"{stats.tokens / stats.steps:.2f}" if stats.steps else "—"
    saved = stats.tokens - stats.steps
    held = stats.steps - (stats.tokens - stats.accepted)       # passes without a token of their own
    saving = f"{saved} saved" if saved >= 0 else f"{-saved} more passes than tokens"
    if drafted and held > 0:
        saving += (f": {stats.accepted} draft token{'s' * (stats.accepted != 1)} accepted, {held} "
                   f"pass{'es' * (held != 1)} with no "
                   f"token of {'their' if held != 1 else 'its'} own")
    accepted = (f"acceptance {stats.acceptance:.1%} ({stats.accepted} of {stats.drafted} drafted tokens), mean "
                f"accepted length {stats.mean_accepted_length:.2f}" if drafted else
                "acceptance —, mean accepted length —")
    return (f"Drafting: {label}: {per_pass} tokens per verifier pass ({stats.steps} passes for {stats.tokens} "
            f"tokens, {saving}); {accepted} (draft tokens accepted per verifier pass); stopped by "
            f"{stats.stop_reason or 'nothing'}")


def kv_window_note(prompt_tokens: int, options) -> str | None:
    """A warning when a drafting run's --max-kv-size window is smaller than what it will hold
    (prompt + max tokens + k): once the window wraps, every pass is restored from a snapshot
    and its accepted tokens re-fed (engine/cache.py), which can cost more than drafting saves."""
    window = options.max_kv_size
    need = prompt_tokens + options.max_tokens + options.k
    if not window or not options.kv_cache or options.k == 0 or need <= window:
        return None
    return (f"warning: --max-kv-size {window} is below prompt + max tokens + k ({prompt_tokens} + "
            f"{options.max_tokens} + {options.k} = {need}): once the window wraps, each pass is "
            f"restored and re-fed, and drafting may save nothing or cost time; give "
            f"--max-kv-size {need} or more")


def empty_answer_hint(session, prompt) -> str:
    """Why a generation that ended at once (EOS first) gave nothing, and what to try."""
    from olifant_mlx.engine import Chat

    v = session.verifier
    if isinstance(prompt, Chat):
        advice = ("the prompt went through its chat template; phrase it as an instruction, or "
                  "use --ignore-chat-template to have the text continued as it is")
    elif v.has_chat_template:
        advice = ("it is an instruct model and the prompt was sent as raw text: drop "
                  "--ignore-chat-template so the chat template is applied")
    else:
        advice = "a base model continues text: give the beginning of the text you want"
    return f"{v.name} ended its answer at once (its first token was end-of-sequence): {advice}"

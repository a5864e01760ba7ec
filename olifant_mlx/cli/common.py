"""What the commands share: argument spellings (mlx-lm's where the same thing exists),
validation of everything before any model loads, output tables and summaries."""
from __future__ import annotations

import argparse
import json
import sys

from olifant_mlx.drafters.registry import help_text

MODEL_HELP = ("verifier: alias (smollm2-135m, gemma3-270m, qwen2.5-coder-1.5b), GGUF file, MLX folder or hub id "
              "(default: Mistral-7B-v0.1 if cached, else smollm2-135m; $OLIFANT_MODEL)")
DEFAULT_K = 8


def draft_tokens(value: str) -> int:
    """argparse type of -k: a whole number of draft tokens, 0..MAX_K (a usage error otherwise)."""
    from olifant_mlx.engine.loop import MAX_K

    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be a whole number, got {value!r}") from None
    if not 0 <= k <= MAX_K:
        raise argparse.ArgumentTypeError(f"k must be between 0 and {MAX_K}, got {k}")
    return k


def energy_help() -> str:
    from olifant_mlx.energy.backends import CHOICES, ENV

    return f"energy meter: {CHOICES} (default: ${ENV}, else auto)"


def open_meter(spec):
    """The energy meter for a generation command, synchronising MLX at window edges so queued
    work lands in the window that issued it."""
    from olifant_mlx.energy import open_meter as open_backend
    from olifant_mlx.mlx_setup import mx

    return open_backend(spec, sync=mx.synchronize)
def whole_number(minimum: int):
    """argparse type: a whole number >= minimum (a usage error naming the flag otherwise)."""
    import argparse

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {n}")
        return n

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def draft_help() -> str:
    return f"drafter (default auto): {help_text()}"


def add_weights_arg(p) -> None:
    """--weights: how an alias or GGUF file is converted (main() hands it on as $OLIFANT_GGUF_WEIGHTS)."""
    p.add_argument("--weights", choices=("fp32", "fp16", "bf16", "q4"),
                   help="an alias's or GGUF file's weight format, converted once per format (default: "
                        "q4 on macOS, fp32 elsewhere, the fastest measured; $OLIFANT_GGUF_WEIGHTS)")


def add_generation_args(p, prompt: bool = True) -> None:
    """The flags of generate, chat, demo and serve-like commands, spelled as in mlx-lm."""
    p.add_argument("--model", help=MODEL_HELP)
    add_weights_arg(p)
    p.add_argument("--draft", default="auto", help=draft_help())
    p.add_argument("--draft-model", metavar="MODEL",
                   help="a small mlx-lm draft model (mlx-lm's flag): the same as --draft neural:MODEL")
    p.add_argument("-k", "--num-draft-tokens", dest="k", type=draft_tokens, default=DEFAULT_K,
                   help=f"draft tokens per step, 0..64 (the maximum for adaptive drafters; default {DEFAULT_K})")
    p.add_argument("--no-kv-cache", action="store_true", help="uncached regime: the whole sequence each step")
    p.add_argument("--max-kv-size", type=int, help="a sliding KV window of this many tokens (rotating cache)")
    if prompt:
        p.add_argument("-p", "--prompt", default="hello",
                       help="the prompt ('-' reads stdin; default 'hello'): an instruction for an "
                            "instruct model, the start of the text for a base model")
    p.add_argument("--system-prompt", help="system prompt for the chat template")
    p.add_argument("--ignore-chat-template", action="store_true",
                   help="use the prompt as raw text, without the verifier's chat template")
    p.add_argument("--chat-template-config", metavar="JSON",
                   help="extra arguments for the chat template, as a JSON object")
    p.add_argument("-m", "--max-tokens", type=int, default=256, help="tokens to generate at most (default 256)")
    add_sampling_args(p, "sampling temperature (0 = greedy, the default)")
    p.add_argument("--seed", type=int, default=0,
                   help="sampling seed: same seed, same text, with or without drafting")
    p.add_argument("--repetition-penalty", type=float, help="penalise repeated tokens (> 1)")
    p.add_argument("--repetition-context-size", type=int, default=20)
    p.add_argument("--extra-eos-token", nargs="+", default=(), metavar="TOKEN",
                   help="tokens that also end the generation")
    p.add_argument("--stop", nargs="+", default=(), metavar="TEXT",
                   help="text that ends the generation (not shown)")
    p.add_argument("--truncate", action="store_true",
                   help="a prompt too long for the verifier's context keeps its last tokens")
    p.add_argument("--history", metavar="FILE",
                   help="opt-in: a hybrid drafter also drafts from earlier sessions kept in FILE, "
                        "and this session's prompt and output are appended to it (local, mode 0600)")
    p.add_argument("--energy", metavar="BACKEND", help=energy_help())


def add_sampling_args(p, temp_help: str) -> None:
    """--temp, --top-p, --min-p, --top-k (mlx-lm's spellings)."""
    p.add_argument("--temp", "--temperature", dest="temperature", type=float, default=0.0, help=temp_help)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)


def options_from(args):
    """GenerationOptions from the flags (validated: errors before any model loads)."""
    from olifant_mlx.engine import GenerationOptions

    return GenerationOptions(k=args.k, max_tokens=args.max_tokens, kv_cache=not args.no_kv_cache,
                             max_kv_size=args.max_kv_size, temperature=args.temperature,
                             top_p=args.top_p, seed=args.seed, top_k=args.top_k, min_p=args.min_p,
                             repetition_penalty=args.repetition_penalty,
                             repetition_context_size=args.repetition_context_size,
                             stop=tuple(args.stop), extra_eos_tokens=tuple(args.extra_eos_token),
                             truncate=args.truncate, history=args.history)


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
    template_kwargs(args)
    draft = f"neural:{args.draft_model}" if getattr(args, "draft_model", None) else args.draft
    spec = parse_spec(draft)
    if options.history and not uses_history(spec):
        raise ValueError("--history needs a hybrid drafter: --draft auto, hybrid[:PATH] or "
                         "adaptive:hybrid[:PATH]")
    if options.history:
        from olifant_mlx.drafters.history import check_path

        check_path(options.history)      # a FIFO, a folder or a dangling link: refused now
    if spec.model_file:
        check_draft_model(spec.model_file, args.model)
    meter = open_meter(getattr(args, "energy", None))
    return options, spec, meter


def check_draft_model(path, model_spec) -> None:
    """Refuse a draft model trained for another tokenizer before loading the verifier's weights
    (the tokenizer alone loads in a moment)."""
    from olifant_mlx.draftmodel.igtree import IGTree
    from olifant_mlx.draftmodel.suffix import INDEX_MAGIC, NGRAM_MAGIC, load_retrieval
    from olifant_mlx.verifier import default_model, load_tokenizer

    name = model_spec or default_model()
    tok = load_tokenizer(name)
    with open(path, "rb") as f:
        retrieval = f.read(8) in (INDEX_MAGIC, NGRAM_MAGIC)
    if retrieval:      # rest: and ngram-cache: files
        load_retrieval(path, verify_checksum=False).check_tokenizer(
            tok.name, tok.vocab_size, tok.digest, fix=f"build one with `build-rest --tokenizer {name}`")
        return
    IGTree.load(path, verify_checksum=False).check_tokenizer(tok.name, tok.vocab_size, tok.digest,
                                                            fix=f"train one with `train --model {name}`")


def table(title, rows) -> None:
    """A two-column table of (label, value) for people, on stdout."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_header=False)
    t.add_column("", style="bold")
    t.add_column("", justify="right")
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


def print_json(obj, indent=None, stream=None) -> None:
    """JSON for machines (finite numbers only), on stdout unless told otherwise."""
    out = stream or sys.stdout
    out.write(json.dumps(obj, indent=indent, allow_nan=False) + "\n")
    out.flush()


def mb(n) -> str:
    return f"{n / 1e6:.2f} MB"


def summary_lines(stats, session, energy, detailed: bool = False) -> list:
    """mlx-lm's summary (prompt and generation tokens/s, peak memory) and ours (drafting,
    stop reason, energy) as lines for stderr."""
    from olifant_mlx.mlx_setup import mx

    lines = ["=" * 10,
             f"Prompt: {stats.prompt_tokens} tokens, {stats.prompt_tps:.3f} tokens-per-sec",
             f"Generation: {stats.tokens} tokens, {stats.generation_tps:.3f} tokens-per-sec",
             f"Peak memory: {mx.get_peak_memory() / 1e9:.3f} GB"]
    drafter = session.spec.text if session.spec is not None else session.drafter.name
    asked = getattr(session.requested, "text", session.requested)
    label = f"{asked} -> {drafter}" if isinstance(asked, str) and asked != drafter else drafter
    saved = stats.tokens - stats.steps
    lines.append(f"Drafting: {label}: acceptance {stats.acceptance:.1%}, mean accepted length "
                 f"{stats.mean_accepted_length:.2f}, {stats.steps} verifier passes for "
                 f"{stats.tokens} tokens ({max(saved, 0)} saved); stopped by {stats.stop_reason or 'nothing'}")
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

"""`train`, `info` and `draft`: make a draft model, describe one, draft with one alone.

Tokenizers just match: `train` trains for the default verifier (verifier.default_model())
unless --model names another verifier or --tokenizer a tokenizer; a model file records its
tokenizer (name, vocabulary size, digest), so `draft` and `info` read it from there."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from olifant_mlx.cli.common import draft_tokens, mb, print_json, table
from olifant_mlx.engine.options import default_of
from olifant_mlx.machine import default_memory_limit

DEFAULT_CORPUS = "builtin:licenses"


# ---- argument types: a bad value is a usage error naming the argument ----------------------

def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def at_least(lo: int, unit: str):
    """argparse type: a whole number >= lo."""
    def parse(text: str) -> int:
        n = _whole(text)
        if n < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo} {unit}, got {n}")
        return n
    parse.__name__ = f"at_least_{lo}"
    return parse


def window_size(text: str) -> int:
    from olifant_mlx.draftmodel.train import MAX_WINDOW

    n = _whole(text)
    if not 1 <= n <= MAX_WINDOW:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_WINDOW} context tokens, got {n}")
    return n


def holdout_share(text: str) -> float:
    from olifant_mlx.draftmodel.train import MAX_HOLDOUT

    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a fraction such as 0.1, got {text!r}") from None
    if not 0.0 <= x <= MAX_HOLDOUT:
        raise argparse.ArgumentTypeError(
            f"must be a fraction of the documents from 0 to {MAX_HOLDOUT} (more would leave too "
            f"little to train on), got {text}")
    return x


SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_size(text: str) -> int:
    """--memory-limit 4G / 512M / 64K / 1.5G / 0 -> bytes (K, M, G, T are powers of 1024; a
    trailing B or iB is allowed); 0 means no bound."""
    from olifant_mlx.draftmodel.train import MIN_MEMORY_LIMIT

    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in SIZE_UNITS else ""
    try:
        x = float(t[: len(t) - len(unit)])
    except ValueError:
        x = float("nan")
    if not 0 <= x * SIZE_UNITS[unit] < 1 << 63:       # also NaN, inf and past what C takes
        raise argparse.ArgumentTypeError(f"must be a size such as 4G, 512M or 65536 (bytes), got {text!r}")
    n = int(x * SIZE_UNITS[unit])
    if 0 < n < MIN_MEMORY_LIMIT:
        raise argparse.ArgumentTypeError(f"must be 0 (no bound) or at least 64K, got {text!r}")
    return n


def size_text(n: int) -> str:
    """Bytes for people, in --memory-limit's units: 12G, 11.77G, 512M, 65536."""
    for unit in ("T", "G", "M", "K"):
        if n >= SIZE_UNITS[unit]:
            return f"{n / SIZE_UNITS[unit]:.4g}{unit}"
    return str(n)


def permutation(text: str, window: int) -> list[int]:
    """--permutation '3,2,1,0' -> [3, 2, 1, 0], checked against --window."""
    try:
        perm = [int(x) for x in text.split(",")]
    except ValueError:
        perm = []
    if sorted(perm) != list(range(window)):
        raise ValueError(f"--permutation {text} is not an order of the window positions "
                         f"0..{window - 1} (one each, root level first, e.g. "
                         f"{','.join(map(str, reversed(range(window))))})")
    return perm


# ---- tokenizers ----------------------------------------------------------------------------

def train_tokenizer(args):
    """(tokenizer, why this one) for `train`: --tokenizer, --model's, or the default verifier's."""
    from olifant_mlx.verifier import default_model, load_tokenizer

    if args.tokenizer:
        return load_tokenizer(args.tokenizer), "as --tokenizer says"
    if args.model:
        return load_tokenizer(args.model), f"verifier {args.model}'s"
    return load_tokenizer(default_model()), "the default verifier's; --model or --tokenizer to change"


def verifier_of(tokenizer_name: str) -> str | None:
    """The verifier (or tokenizer) spec a recorded tokenizer name loads by, None if it names no
    such thing (a tokenizer from a file is recorded by its file's stem)."""
    from olifant_mlx.verifier import ALIASES, DEFAULT_MODEL
    from olifant_mlx.verifier.tokenizers import MISTRAL_ALIASES

    if tokenizer_name in MISTRAL_ALIASES:
        return DEFAULT_MODEL
    if tokenizer_name in ALIASES or os.path.exists(tokenizer_name):
        return tokenizer_name
    if tokenizer_name.count("/") == 1 and not tokenizer_name.startswith("."):
        return tokenizer_name     # a hub id
    return None


def model_tokenizer(model, path, spec: str | None = None):
    """The tokenizer a draft model was trained with: `spec` (--tokenizer), checked against the
    file, or else the one the file names."""
    from olifant_mlx.verifier import TokenizerError, load_tokenizer

    name = model.tokenizer_name
    by_name = verifier_of(name)
    if spec:
        tok = load_tokenizer(spec)
        hint = "omit --tokenizer to use it" if by_name else "pass --tokenizer with its file or folder"
        model.check_tokenizer(tok.name, tok.vocab_size, tok.digest,
                              fix=f"{path} needs tokenizer {name!r}: {hint}")
        return tok
    if by_name is None:
        raise TokenizerError(f"{path} was trained with tokenizer {name!r} (vocab {model.vocab_size:,}), "
                             f"which cannot be loaded by name: pass --tokenizer with the tokenizer "
                             f"file or model folder it was trained with")
    try:
        tok = load_tokenizer(name)
    except TokenizerError as e:
        raise TokenizerError(f"{path} was trained with tokenizer {name!r}, which cannot be loaded "
                             f"({e}); pass --tokenizer with its file or folder") from e
    model.check_tokenizer(tok.name, tok.vocab_size, tok.digest,
                          fix=f"pass --tokenizer with the tokenizer {path} was trained with")
    return tok


def files_table(files, folders=()) -> None:
    """Every file of a folder corpus: read (paragraphs, pages) or skipped, and why; each named
    relative to the folder given (`folders`: the corpora as given; files elsewhere keep their path)."""
    if files.outcomes:
        fresh = f", {files.documents_extracted} extracted afresh" if files.documents_extracted else ""
        table(f"files: {files.read} read, {files.skipped} skipped{fresh}",
              [(relative_to(path, folders), what) for path, what in files.rows()])


def relative_to(path: str, folders) -> str:
    """`path` relative to the first of `folders` that holds it (a folder's own files: as given)."""
    for folder in folders:
        if os.path.isdir(folder):
            rel = os.path.relpath(os.path.abspath(path), os.path.abspath(folder))
            if not rel.startswith(os.pardir):
                return rel
    return path


# ---- commands ------------------------------------------------------------------------------

def file_identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size


def cmd_train(args) -> int:
    """Ctrl-C before the new model is renamed onto --out: "interrupted", exit 130, --out as it
    was, at once (os._exit: daemon threads still in the C builder or a tokenizer would make the
    interpreter's teardown slow). Once it is renamed the run has succeeded: a later Ctrl-C is
    ignored and the command ends 0. The handler tells the two apart by --out's identity, which
    the rename changes atomically (a Python handler runs between bytecodes, so never inside
    the rename)."""
    if threading.current_thread() is not threading.main_thread():
        return run_train(args)
    before = file_identity(args.out)

    def on_sigint(signum, frame):
        if file_identity(args.out) != before:     # the new model is in place: the run succeeded
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        code = run_train(args)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    except BaseException:
        signal.signal(signal.SIGINT, previous)
        raise
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # written: also through the interpreter's exit
    return code


def run_train(args) -> int:
    from olifant_mlx.draftmodel.documents import reporting
    from olifant_mlx.draftmodel.train import preflight, train

    order = permutation(args.permutation, args.window) if args.permutation else args.order
    corpora = args.corpus or [DEFAULT_CORPUS]
    preflight(corpora, args.out, args.eval or (), args.text_field, args.force)  # before the tokenizer loads
    tok, why = train_tokenizer(args)
    if not args.quiet:
        sys.stderr.write(f"training for tokenizer {tok.name}, vocab {tok.vocab_size:,} ({why})\n")
    with reporting() as files:
        s = train(corpora, tok, args.out, window=args.window, order=order,
                  top_k=args.top_k, max_tokens=args.max_tokens, holdout=args.holdout,
                  eval_specs=args.eval or (), eval_max=args.eval_max, text_field=args.text_field,
                  show_progress=not args.quiet, workers=args.workers, force=args.force,
                  memory_limit=args.memory_limit, threads=args.threads, tmpdir=args.tmpdir)
    if files.outcomes:
        s["files"] = files.as_dict()
    if args.json:
        print_json(s, indent=2)
        return 0
    files_table(files, corpora)
    rows = [("model", s["out"]), ("tokenizer", f"{s['tokenizer']['name']} ({s['tokenizer']['vocab_size']})"),
            ("documents", f"{s['documents']:,}"), ("instances", f"{s['instances']:,}"),
            ("nodes", f"{s['nodes']:,}"), ("classes", f"{s['classes']:,}"),
            ("level order", " ".join(f"t{p + 1}" for p in s["permutation"])),
            ("file size", mb(s["file_bytes"])),
            ("read + tokenize", f"{s['read_tokenize_s']:.1f} s ({s['workers']} tokeniser threads)"),
            ("build", f"{s['build_s']:.1f} s ({s['threads']} threads, memory limit "
                      f"{size_text(s['memory_limit']) if s['memory_limit'] else 'none'})"),
            ("tokens/s", f"{s['tokens_per_s']:,}"),
            ("load", f"{s['load_s'] * 1e3:.1f} ms"), ("peak RSS", f"{s['peak_rss_mb']:.0f} MB")]
    for name, e in s["eval"].items():
        rows.append((f"accuracy on {name}", f"{e['accuracy']:.2%} of {e['instances']:,}"))
    table("draft model trained", rows)
    return 0


def cmd_info(args) -> int:
    from olifant_mlx.draftmodel.igtree import IGTree
    from olifant_mlx.draftmodel.open import open_model_file

    d = open_model_file(args.model, want=IGTree).describe()
    d["verifier"] = verifier_of(d["tokenizer"])
    if args.json:
        print_json(d, indent=2)
        return 0
    use = (f"generate --model {d['verifier']} --draft olifant:{args.model}" if d["verifier"] else
           f"a verifier with tokenizer {d['tokenizer']!r} (vocab {d['vocab_size']:,})")
    table(args.model, [(k, str(v)) for k, v in d.items() if k != "verifier"] + [("use with", use)])
    return 0


def cmd_draft(args) -> int:
    from olifant_mlx.draftmodel.igtree import IGTree
    from olifant_mlx.draftmodel.open import open_model_file

    m = open_model_file(args.model, want=IGTree)
    tok = model_tokenizer(m, args.model, args.tokenizer)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    ids = tok.encode(prompt)
    ans = m.draft_answers(ids, args.k, min_depth=args.min_depth, min_share=args.min_share)
    # decode with the prompt: SentencePiece drops a leading space of a lone continuation
    text = tok.decode(ids + ans["token"].tolist())[len(tok.decode(ids)):]
    if args.json:
        print_json({"prompt_tokens": len(ids), "draft": [int(t) for t in ans["token"]],
                    "text": text, "depth": ans["depth"].tolist(),
                    "share": [round(int(a["winner_count"]) / max(int(a["total"]), 1), 4) for a in ans]})
        return 0
    from rich.console import Console
    from rich.text import Text

    shown = Text(prompt)
    shown.append(text, style="bold green")
    Console().print(shown)
    for a in ans:
        sys.stderr.write(f"{a['token']:>6} {tok.decode([a['token']])!r:<16} depth {a['depth']} "
                         f"share {a['winner_count']}/{a['total']}\n")
    return 0


def build_threads(text: str) -> int:
    from olifant_mlx.draftmodel.train import MAX_THREADS

    n = _whole(text)
    if not 0 <= n <= MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be 0 (one per CPU) to {MAX_THREADS} threads, got {n}")
    return n


def temp_folder(text: str) -> str:
    from olifant_mlx.draftmodel.train import writable_folder

    if not writable_folder(text):
        raise argparse.ArgumentTypeError(f"{text} is not a writable directory")
    return text


def add_train(t):
    t.add_argument("--corpus", nargs="+", metavar="PATH",
                   help=".txt/.jsonl (.gz/.xz/.bz2), a directory, builtin:licenses, or a HF dataset "
                        f"name[:config]:split (default {DEFAULT_CORPUS})")
    who = t.add_mutually_exclusive_group()
    who.add_argument("--model", metavar="VERIFIER",
                     help="train for this verifier (its tokenizer): alias, GGUF file, MLX folder or "
                          "hub id (default: the default verifier, Mistral-7B-v0.1 if cached, else "
                          "smollm2-135m)")
    who.add_argument("--tokenizer",
                     help="train with this tokenizer instead: 'mistral', a verifier alias, a "
                          "SentencePiece .model, or a HF/mlx-lm model path")
    t.add_argument("--window", type=window_size, default=4, help="context tokens per instance (1..16)")
    t.add_argument("--order", choices=["gain_ratio", "info_gain"], default="gain_ratio")
    t.add_argument("--permutation", help="explicit level order: 0-based window positions, root "
                                         "first, e.g. 3,2,1,0")
    t.add_argument("--top-k", type=at_least(0, "classes"), default=0,
                   help="class counts stored per node beyond the winner (0 = winner only)")
    t.add_argument("--out", required=True, help="model file to write (mode 0600)")
    t.add_argument("--eval", nargs="+", metavar="PATH", help="held-out corpora to score")
    t.add_argument("--holdout", type=holdout_share, default=0.0,
                   help="fraction of documents held out of training and scored (0..0.5)")
    t.add_argument("--eval-max", type=at_least(1, "tokens"), help="score at most this many held-out tokens")
    t.add_argument("--max-tokens", type=at_least(1, "tokens"),
                   help="train on at most this many tokens (reading stops there)")
    t.add_argument("--workers", type=at_least(0, "threads"),
                   help="tokeniser threads (default: one per CPU; 0: tokenise in the reading thread)")
    t.add_argument("--memory-limit", type=byte_size, metavar="SIZE", default=default_memory_limit(),
                   help="memory for the training instances and their sorting, e.g. 4G or 512M; beyond "
                        "it they are sorted in runs on disk and merged (same model); 0: no bound "
                        f"(default: half of this machine's memory, {size_text(default_memory_limit())})")
    t.add_argument("--threads", type=build_threads, metavar="N",
                   help="build threads for statistics, sorting and the tree (default: one per CPU; "
                        "0: one per online CPU); the model does not depend on it")
    t.add_argument("--tmpdir", metavar="DIR", type=temp_folder,
                   help="folder for the temporary files of a bounded build (default: $TMPDIR, else "
                        "the folder of --out); they are unnamed, so nothing is left behind")
    t.add_argument("--force", action="store_true",
                   help="train on files that do not look like text (binary, not UTF-8)")
    t.add_argument("--text-field", default="text", help="text field of .jsonl and datasets")
    t.add_argument("--json", action="store_true", help="print the summary as JSON")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)


def add_info(i):
    i.add_argument("model")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_info)


def add_draft(d):
    d.add_argument("-m", "--model", required=True)
    d.add_argument("-p", "--prompt", required=True, help="text, or - for stdin")
    d.add_argument("-k", type=draft_tokens, default=default_of("k"))
    d.add_argument("--tokenizer", help="default: the tokenizer the model file names")
    d.add_argument("--min-depth", type=int, default=0)
    d.add_argument("--min-share", type=float, default=0.0)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_draft)

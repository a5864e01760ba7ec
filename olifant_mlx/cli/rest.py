"""`build-rest` and `rest-info`: the corpus retrieval drafters' files (rest:PATH,
ngram-cache:PATH) from a corpus, and what such a file holds."""
from __future__ import annotations

import sys

from olifant_mlx.cli.common import mb, print_json, table


def cmd_build_rest(args) -> int:
    from olifant_mlx.cli.train import files_table
    from olifant_mlx.draftmodel.corpus import check_corpora
    from olifant_mlx.draftmodel.documents import reporting
    from olifant_mlx.draftmodel.retrieval import build_retrieval
    from olifant_mlx.draftmodel.train import check_output
    from olifant_mlx.verifier import load_tokenizer

    if not args.out and not args.ngram_cache:
        raise ValueError("build-rest needs --out (a suffix index) and/or --ngram-cache PATH")
    if not 1 <= args.order <= 4:
        raise ValueError(f"--order must be 1..4, got {args.order}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    # the outputs and the corpus files, before the tokenizer loads and the corpus is read
    for out, what, example in ((args.out, "the suffix index", "corpus.sfx"),
                               (args.ngram_cache, "the n-gram cache", "corpus.ngc")):
        if out:
            check_output(out, what, example)
    check_corpora(args.corpus, args.text_field, args.force)
    tok = load_tokenizer(args.tokenizer)

    shown = []

    def progress(phase, done, total):
        if not args.quiet and phase != "reading" and (not shown or shown[-1] != phase):
            shown.append(phase)
            sys.stderr.write(f"{phase} ...\n")

    with reporting() as files:
        s = build_retrieval(args.corpus, tok, index_out=args.out, ngram_out=args.ngram_cache,
                            order=args.order, max_tokens=args.max_tokens, text_field=args.text_field,
                            on_progress=progress, force=args.force)
    if files.outcomes:
        s["files"] = files.as_dict()
    if args.json:
        print_json(s, indent=2)
        return 0
    files_table(files, args.corpus)
    rows = [("tokenizer", f"{s['tokenizer']['name']} ({s['tokenizer']['vocab_size']})"),
            ("documents", f"{s['documents']:,}"), ("tokens", f"{s['tokens']:,}"),
            ("read + tokenize", f"{s['read_tokenize_s']:.1f} s")]
    for kind, label in (("index", "suffix index"), ("ngram_cache", "n-gram cache")):
        if kind in s:
            d = s[kind]
            rows += [(label, d["out"]), (f"{label} size", f"{mb(d['file_size'])} "
                                                          f"({d['bytes_per_corpus_token']} B/token)"),
                     (f"{label} build", f"{d['build_s']:.1f} s")]
            if kind == "ngram_cache":
                rows.append(("contexts / pairs", f"{d['contexts']:,} / {d['pairs']:,}"))
    rows.append(("peak RSS", f"{s['peak_rss_mb']:.0f} MB"))
    table("retrieval drafters built", rows)
    return 0


def cmd_rest_info(args) -> int:
    from olifant_mlx.draftmodel.open import open_model_file

    d = open_model_file(args.file).describe()
    if args.json:
        print_json(d, indent=2)
    else:
        table(args.file, [(k, str(v)) for k, v in d.items()])
    return 0


def add_build_rest(b):
    b.add_argument("--corpus", nargs="+", metavar="PATH", required=True,
                   help=".txt/.jsonl (.gz/.xz), a directory, builtin:licenses, or a HF dataset "
                        "name[:config]:split")
    b.add_argument("--tokenizer", default="mistral",
                   help="'mistral' (Mistral-7B-v0.1, default), a SentencePiece .model, or a "
                        "HF/mlx-lm model path or alias")
    b.add_argument("--out", help="suffix index to write (for --draft rest:PATH)")
    b.add_argument("--ngram-cache", metavar="PATH",
                   help="static n-gram cache to write (for --draft ngram-cache:PATH)")
    b.add_argument("--order", type=int, default=2,
                   help="n-gram cache context length (llama.cpp's static cache: 2)")
    b.add_argument("--max-tokens", type=int, help="use at most this many corpus tokens")
    b.add_argument("--text-field", default="text", help="text field of .jsonl and datasets")
    b.add_argument("--force", action="store_true",
                   help="read corpus files that do not look like UTF-8 text (as train --force)")
    b.add_argument("--json", action="store_true", help="print the summary as JSON")
    b.add_argument("--quiet", action="store_true", help="no progress lines")
    b.set_defaults(func=cmd_build_rest)


def add_rest_info(i):
    i.add_argument("file")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_rest_info)

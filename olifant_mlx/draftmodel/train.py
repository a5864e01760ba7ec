"""Train an Olifant draft model: corpus -> verifier tokens -> IGTree file.

Pipeline: documents are read in the calling thread, tokenised in bounded batches on worker
threads (results come back in corpus order, so the model is byte-identical for any number
of workers) and streamed into the C builder as they come; the builder then builds on a
thread of its own while the caller waits, so Ctrl-C (or `cancel`) is honoured within about
a second in every phase. Nothing is written until the end: the model goes to a private
temporary file, is reloaded and scored there, and only then renamed over `out` with mode
0600 (it holds the corpus's n-grams) — an interrupted or failed run leaves no file.

Memory: the builder holds (window+1) x 4 bytes per token and sorts them in place, up to
`memory_limit` (default: half of this machine's memory); beyond it instances are sorted in
runs, spilled to unnamed temporary files in `tmpdir` (default $TMPDIR, else the folder of
`out`) and merged into the build, with a byte-identical model. Python holds only the batches
in flight (corpus bounds lines, documents and batches) and the ids of held-out documents (at
most eval_max of them).
"""
from __future__ import annotations

import os
import resource
import sys
import threading
import time
from contextlib import closing, nullcontext
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from olifant_mlx.draftmodel.corpus import (
    CorpusError,
    Progress,
    Timing,
    check_corpora,
    doc_starts,
    interrupts_to_the_main_thread,
    iter_documents,
    token_batches,
    tokenized_batches,
    windows,
)
from olifant_mlx.draftmodel.igtree import Builder, IGTree, IGTreeError, lib, library_version
from olifant_mlx.files import private_output, probe_folder
from olifant_mlx.machine import cpus, default_memory_limit

MAX_WINDOW = library_version()["max_window"]
MAX_HOLDOUT = 0.5       # more would leave less to train on than to score
MIN_MEMORY_LIMIT = int(lib.IGT_MIN_MEMORY_LIMIT)
MAX_THREADS = int(lib.IGT_MAX_THREADS)
CANCEL_GRACE_S = 1.0    # how long a cancelled build may take to stop before it is left behind
INTERRUPT_GRACE_S = 0.2  # the same after Ctrl-C, which must end the command within a second


class TrainingCancelled(Exception):
    """train() stopped because its `cancel` event was set."""


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def default_workers() -> int:
    """Tokeniser (and build) threads: one per CPU this process may use."""
    return cpus()


def writable_folder(path) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def spill_folder(out) -> str:
    """Where a bounded build's temporary files go: $TMPDIR if set, else the folder `out` is
    written to (or its nearest existing parent): on the disk the user chose for the model,
    not a /tmp that may be memory."""
    env = os.environ.get("TMPDIR")
    if env:
        return env
    folder = os.path.dirname(os.path.abspath(out))
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    return folder


def check_options(window: int, top_k: int, max_tokens, holdout: float, eval_max, workers,
                  memory_limit=None, threads=None, tmpdir=None) -> None:
    """ValueError naming the first bad option, before any slow work."""
    if not 1 <= window <= MAX_WINDOW:
        raise ValueError(f"window must be 1 to {MAX_WINDOW} context tokens, got {window}")
    if top_k < 0:
        raise ValueError(f"top_k must be 0 or more, got {top_k}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if not 0.0 <= holdout <= MAX_HOLDOUT:
        raise ValueError(f"holdout must be a fraction of the documents from 0 to {MAX_HOLDOUT} "
                         f"(more would leave too little to train on), got {holdout}")
    if eval_max is not None and eval_max < 1:
        raise ValueError(f"eval_max must be at least 1, got {eval_max}")
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be 0 (tokenise in this thread) or more, got {workers}")
    if memory_limit is not None and memory_limit != 0 and memory_limit < MIN_MEMORY_LIMIT:
        raise ValueError(f"memory_limit must be 0 (no bound) or at least {MIN_MEMORY_LIMIT} bytes "
                         f"(64K), got {memory_limit}")
    if threads is not None and not 0 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be 0 (one per CPU) to {MAX_THREADS}, got {threads}")
    if tmpdir is not None and not writable_folder(tmpdir):
        where = f"$TMPDIR ({tmpdir})" if tmpdir == os.environ.get("TMPDIR") else f"tmpdir {tmpdir}"
        raise ValueError(f"temporary folder {where} is not a writable directory: name one that is "
                         f"(train --tmpdir DIR), or build all in memory (--memory-limit 0)")


def check_output(out, what: str = "the model", example: str = "model.olif") -> None:
    """The file can be written there: not a folder, below a folder in which a file can really
    be made (files.probe_folder: /proc passes os.access but refuses every new file)."""
    if os.path.isdir(os.path.abspath(out)):
        raise ValueError(f"cannot write {what} to {out}: it is a directory (name a file, "
                         f"e.g. {os.path.join(str(out), example)})")
    probe_folder(out, what)


def preflight(corpora, out, eval_specs=(), text_field="text", force=False) -> None:
    """What can be checked of a run's inputs and output before any slow work (loading a
    tokenizer included): CorpusError or ValueError naming the problem."""
    if not corpora:
        raise CorpusError("no training corpus given")
    check_output(out)
    check_corpora([*corpora, *eval_specs], text_field, force)


@dataclass
class EvalResult:
    instances: int = 0
    correct: int = 0
    depth_counts: list = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.correct / self.instances if self.instances else 0.0

    def as_dict(self) -> dict:
        return {"instances": self.instances, "correct": self.correct,
                "accuracy": round(self.accuracy, 6), "match_depth_counts": self.depth_counts}


def evaluate_batches(model: IGTree, batches, max_instances: int | None = None) -> EvalResult:
    """Next-token accuracy of the model on held-out (tokens, doc_starts) batches."""
    res = EvalResult(depth_counts=[0] * (model.window + 1))
    for tokens, starts in batches:
        ctx, tgt = windows(tokens, starts, model.window, model.padding_id)
        if max_instances is not None:
            room = max_instances - res.instances
            ctx, tgt = ctx[:room], tgt[:room]
        ans = model.predict_batch(ctx)
        res.instances += int(tgt.size)
        res.correct += int(np.count_nonzero(ans["token"] == tgt))
        for d, n in enumerate(np.bincount(ans["depth"], minlength=model.window + 1)):
            res.depth_counts[d] += int(n)
        if max_instances is not None and res.instances >= max_instances:
            break
    return res


def evaluate(model: IGTree, specs, tokenizer, text_field="text", max_instances=None,
             workers: int = 0, force: bool = False) -> EvalResult:
    """Accuracy on corpora (read only as far as max_instances needs)."""
    docs = (d for spec in specs for d in iter_documents(spec, text_field, force=force))
    with closing(tokenized_batches(docs, tokenizer, workers=workers)) as batches:
        return evaluate_batches(model, batches, max_instances)


def _progress_bar(enabled: bool):
    if not enabled:
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    return Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               TaskProgressColumn(), TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
               console=Console(stderr=True), transient=False)


class Reporter:
    """Training progress: a rich bar on stderr for people, on_progress(phase, done, total)
    for callers (total None when unknown). Called from the reading and the build thread."""

    def __init__(self, bar, on_progress=None):
        self.bar = bar
        self.on_progress = on_progress
        self.detail = "0 docs, 0 tokens"
        self.read_task = bar.add_task("reading", total=None, detail=self.detail) if bar else None
        self.build_task = None

    def reading(self, p: Progress) -> None:
        phase = f"reading {os.path.basename(p.source)}"
        if self.on_progress is not None:
            self.on_progress(phase, p.done, p.total or None)
        if self.bar:
            self.bar.update(self.read_task, description=phase, completed=p.done,
                            total=p.total or None, detail=self.detail)

    def counted(self, documents: int, tokens: int) -> None:
        self.detail = f"{documents:,} docs, {tokens:,} tokens"
        if self.bar:
            self.bar.update(self.read_task, detail=self.detail)

    def building(self, phase: str, done: int, total: int) -> None:
        if self.on_progress is not None:
            self.on_progress(f"building: {phase}", done, total or None)
        if self.bar:
            if self.build_task is None:
                self.build_task = self.bar.add_task("building", total=None, detail="")
            self.bar.update(self.build_task, description=f"building: {phase}", completed=done,
                            total=total or None)


# ---- reading and tokenising ----------------------------------------------------------

def held_out_mask(first: int, count: int, share: Fraction) -> np.ndarray:
    """Which of documents first+1 .. first+count (numbered from 1) are held out: exactly
    `share` of them, evenly spread (document n when n * share passes a whole number)."""
    n = np.arange(first + 1, first + count + 1, dtype=np.int64)
    p, q = share.numerator, share.denominator
    return (n * p) // q > ((n - 1) * p) // q


def select(tokens: np.ndarray, lengths: np.ndarray, mask: np.ndarray):
    """The tokens and lengths of the documents where mask is true."""
    return tokens[np.repeat(mask, lengths)], lengths[mask]


def truncate(tokens: np.ndarray, lengths: np.ndarray, room: int):
    """The first `room` tokens, the document at the cut shortened and those after it emptied."""
    if tokens.size <= room:
        return tokens, lengths
    before = np.cumsum(lengths) - lengths
    return tokens[:room], np.clip(room - before, 0, lengths)


@dataclass
class Fed:
    """What reading gave the builder, what it held out, and where the time went."""
    documents: int = 0
    tokens: int = 0
    held: list = field(default_factory=list)   # (tokens, doc_starts) batches to score
    held_documents: int = 0
    held_tokens: int = 0
    timing: Timing = field(default_factory=Timing)
    feed_s: float = 0.0
    wall_s: float = 0.0


def _hold(fed: Fed, tokens, lengths, held, eval_max) -> None:
    """Keep held-out documents' ids for scoring (no more than eval_max tokens)."""
    fed.held_documents += int(held.sum())
    room = None if eval_max is None else eval_max - fed.held_tokens
    if not held.any() or room == 0:
        return
    tokens, lengths = select(tokens, lengths, held)
    if room is not None:
        tokens, lengths = truncate(tokens, lengths, room)
    fed.held.append((tokens, doc_starts(lengths)))
    fed.held_tokens += int(tokens.size)


def feed(builder: Builder, corpora, tokenizer, reporter: Reporter, cancel: threading.Event, *,
         max_tokens=None, holdout: float = 0.0, eval_max=None, text_field="text",
         workers: int = 0, force: bool = False) -> Fed:
    """Read, tokenise and add the corpora's documents to the builder, stopping as soon as
    max_tokens are in; every document a `holdout` share picks is kept aside instead."""
    fed = Fed()
    share = Fraction(holdout).limit_denominator(10_000)
    progress = Progress(callbacks=[reporter.reading])
    docs = (d for spec in corpora for d in iter_documents(str(spec), text_field, progress, force))
    seen = 0
    t0 = time.perf_counter()
    with closing(token_batches(docs, tokenizer, workers, fed.timing)) as batches:
        for tokens, lengths in batches:
            if cancel.is_set():
                raise TrainingCancelled("training cancelled")
            held = held_out_mask(seen, lengths.size, share)
            seen += lengths.size
            _hold(fed, tokens, lengths, held, eval_max)
            tokens, lengths = select(tokens, lengths, ~held)
            if max_tokens is not None:
                tokens, lengths = truncate(tokens, lengths, max_tokens - fed.tokens)
            starts = doc_starts(lengths)
            t = time.perf_counter()
            if tokens.size:
                builder.add_documents(tokens, starts)
            fed.feed_s += time.perf_counter() - t
            fed.documents += int(starts.size)
            fed.tokens += int(tokens.size)
            reporter.counted(fed.documents, fed.tokens)
            if max_tokens is not None and fed.tokens >= max_tokens:
                break
    fed.wall_s = time.perf_counter() - t0
    return fed


# ---- building ------------------------------------------------------------------------

def build_model(builder: Builder, reporter: Reporter, cancel: threading.Event) -> IGTree:
    """builder.build on a daemon thread while this one waits, so Ctrl-C (KeyboardInterrupt,
    re-raised) or `cancel` (TrainingCancelled) stops training at once whatever the C library
    is doing: the build is asked to stop (its progress callback answers true) and, if it is
    in a phase that does not call back, left behind after CANCEL_GRACE_S."""
    result: dict = {}

    def progress(phase, done, total):
        try:
            reporter.building(phase, done, total)
        except BaseException as e:  # never unwind through C: stop the build, re-raise below
            result["error"] = e
            return True
        return cancel.is_set()

    def run():
        interrupts_to_the_main_thread()
        try:
            result.setdefault("model", builder.build(progress))
        except BaseException as e:
            result.setdefault("error", e)

    thread = threading.Thread(target=run, daemon=True, name="olifant-build")
    thread.start()
    try:
        while thread.is_alive() and not cancel.is_set():
            thread.join(0.1)
    except KeyboardInterrupt:
        cancel.set()
        thread.join(INTERRUPT_GRACE_S)
        raise
    if cancel.is_set():
        thread.join(CANCEL_GRACE_S)
        raise TrainingCancelled("training cancelled")
    error = result.get("error")
    if isinstance(error, IGTreeError) and error.code == lib.OLIF_ERR_CANCELLED:
        raise TrainingCancelled("training cancelled") from error
    if error is not None:
        raise error
    return result["model"]


# ---- the whole run -------------------------------------------------------------------

def _watch(batches, cancel: threading.Event):
    for b in batches:
        if cancel.is_set():
            raise TrainingCancelled("training cancelled")
        yield b


def score(model: IGTree, fed: Fed, eval_specs, tokenizer, cancel, *, eval_max, text_field,
          workers, force) -> dict:
    """Accuracy on the held-out documents and on each evaluation corpus."""
    evals = {}
    if fed.held:
        evals["holdout"] = evaluate_batches(model, _watch(fed.held, cancel), eval_max).as_dict()
        evals["holdout"]["documents"] = fed.held_documents
    for spec in eval_specs:
        docs = iter_documents(str(spec), text_field, force=force)
        with closing(tokenized_batches(docs, tokenizer, workers=workers)) as batches:
            evals[str(spec)] = evaluate_batches(model, _watch(batches, cancel), eval_max).as_dict()
    return evals


def train(corpora, tokenizer, out, window: int = 4, order="gain_ratio", top_k: int = 0,
          max_tokens: int | None = None, holdout: float = 0.0, eval_specs=(),
          eval_max: int | None = None, text_field: str = "text", show_progress: bool = True,
          on_progress=None, workers: int | None = None, force: bool = False,
          cancel: threading.Event | None = None, memory_limit: int | None = None,
          threads: int | None = None, tmpdir=None) -> dict:
    """Train on corpora, save to `out` (mode 0600), reload it, evaluate; return a summary.

    Options and corpora are checked before any slow work (ValueError, CorpusError naming
    the problem). on_progress(phase, done, total) (optional, e.g. for a UI) gets the bytes
    read of each source while reading, then the build phases; total may be None when
    unknown. workers: tokeniser threads (None: one per CPU; 0: none, all in this thread).
    force: read files that do not look like text. memory_limit: bytes for the builder's
    instances and their sorting (None: default_memory_limit(); 0: no bound), beyond which
    they spill to unnamed temporary files in tmpdir (None: spill_folder(out)); threads:
    build threads (None: one per CPU). The model does not depend on workers, memory_limit or
    threads. Setting `cancel` stops the run (TrainingCancelled); so does Ctrl-C
    (KeyboardInterrupt). Either way no file is left."""
    workers = default_workers() if workers is None else workers
    threads = default_workers() if threads is None else threads
    memory_limit = default_memory_limit() if memory_limit is None else memory_limit
    tmpdir = spill_folder(out) if tmpdir is None else os.fspath(tmpdir)
    check_options(window, top_k, max_tokens, holdout, eval_max, workers, memory_limit, threads,
                  tmpdir if memory_limit else None)
    preflight(corpora, out, eval_specs, text_field, force)
    cancel = cancel if cancel is not None else threading.Event()
    builder = Builder(vocab_size=tokenizer.vocab_size, window=window, order=order, top_k=top_k,
                      tokenizer_name=tokenizer.name, tokenizer_digest=tokenizer.digest,
                      memory_limit=memory_limit or None, tmpdir=tmpdir, threads=threads)
    cpu0 = time.process_time()
    fed, model, t_build = _read_and_build(builder, corpora, tokenizer, cancel, show_progress, on_progress,
                                          max_tokens=max_tokens, holdout=holdout, eval_max=eval_max,
                                          text_field=text_field, workers=workers, force=force)
    with private_output(out) as tmp:
        model.save(tmp)
        del model
        t2 = time.perf_counter()
        model = IGTree.load(tmp)
        t_load = time.perf_counter() - t2
        evals = score(model, fed, eval_specs, tokenizer, cancel, eval_max=eval_max,
                      text_field=text_field, workers=workers, force=force)
    return {
        "out": str(out), "corpora": [str(c) for c in corpora],
        "tokenizer": tokenizer.identity(), "window": window, **_model_summary(model, fed),
        "workers": workers, "threads": threads, "memory_limit": memory_limit,
        "read_tokenize_s": round(fed.wall_s, 3),
        "read_s": round(fed.timing.read_s, 3), "tokenize_s": round(fed.timing.tokenize_s, 3),
        "feed_s": round(fed.feed_s, 3), "build_s": round(t_build, 3),
        "tokens_per_s": round(fed.tokens / max(fed.wall_s + t_build, 1e-9)),
        "load_s": round(t_load, 4), "train_cpu_s": round(time.process_time() - cpu0, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1), "eval": evals,
    }


def _read_and_build(builder, corpora, tokenizer, cancel, show_progress, on_progress, **feed_options):
    """Feed the corpora to `builder` and build the tree, under one progress bar:
    (what was fed, the model, the build's seconds)."""
    with _progress_bar(show_progress) as bar:
        reporter = Reporter(bar, on_progress)
        fed = feed(builder, corpora, tokenizer, reporter, cancel, **feed_options)
        if len(builder) == 0:
            raise CorpusError(f"corpus {', '.join(map(str, corpora))} holds no text to train on")
        t1 = time.perf_counter()
        model = build_model(builder, reporter, cancel)
        t_build = time.perf_counter() - t1
        if bar and reporter.build_task is not None:
            bar.update(reporter.build_task, description="building: done", completed=1, total=1)
    return fed, model, t_build


def _model_summary(model, fed) -> dict:
    return {"order": model.order, "permutation": model.permutation,
            "gain_ratio": [round(g, 6) for g in model.gain_ratio],
            "documents": fed.documents, "tokens": fed.tokens, "instances": model.n_instances,
            "nodes": model.n_nodes, "classes": model.n_classes, "file_bytes": model.file_size}

"""Train an Olifant draft model: corpus -> verifier tokens -> IGTree file.

Memory: the builder holds (window+1) x 4 bytes per token and sorts them in
place; documents are tokenised in batches and never held as text (measured:
100M tokens at window 4 peak at 3.0 GB, benchmarks/train_100m.py).
"""
from __future__ import annotations

import os
import resource
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np

from olifant_mlx.draftmodel.corpus import CorpusError, Progress, iter_documents, tokenized_batches, windows
from olifant_mlx.draftmodel.igtree import Builder, IGTree


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


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


def evaluate(model: IGTree, specs, tokenizer, text_field="text", max_instances=None) -> EvalResult:
    docs = (d for spec in specs for d in iter_documents(spec, text_field))
    return evaluate_batches(model, tokenized_batches(docs, tokenizer), max_instances)


def _progress_bar(enabled: bool):
    if not enabled:
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    return Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               TaskProgressColumn(), TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
               console=Console(stderr=True), transient=False)


def train(corpora, tokenizer, out, window: int = 4, order="gain_ratio", top_k: int = 0,
          max_tokens: int | None = None, holdout: float = 0.0, eval_specs=(),
          eval_max: int | None = None, text_field: str = "text", show_progress: bool = True,
          on_progress=None) -> dict:
    """Train on corpora, save to `out`, reload it memory-mapped, evaluate; return a summary.

    on_progress(phase, done, total) (optional, e.g. for a UI) gets the bytes read of each
    source while reading, then the build phases; total may be None when unknown."""
    if not corpora:
        raise CorpusError("no training corpus given")
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {holdout}")
    builder = Builder(vocab_size=tokenizer.vocab_size, window=window, order=order, top_k=top_k,
                      tokenizer_name=tokenizer.name, tokenizer_digest=tokenizer.digest)
    every = round(1 / holdout) if holdout else 0
    held_out: list[str] = []
    stats = {"documents": 0, "tokens": 0}
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    with _progress_bar(show_progress) as bar:
        read_task = bar.add_task("reading", total=None, detail="") if bar else None
        progress = Progress()
        if on_progress is not None:
            progress.callbacks.append(lambda p: on_progress(
                f"reading {os.path.basename(p.source)}", p.done, p.total or None))
        if bar:
            progress.callbacks.append(lambda p: bar.update(
                read_task, description=f"reading {os.path.basename(p.source)}",
                completed=p.done, total=p.total or None,
                detail=f"{stats['documents']:,} docs, {stats['tokens']:,} tokens"))

        def training_docs():
            n = 0
            for spec in corpora:
                for doc in iter_documents(spec, text_field, progress):
                    n += 1
                    if every and n % every == 0:
                        held_out.append(doc)
                    else:
                        yield doc

        for tokens, starts in tokenized_batches(training_docs(), tokenizer):
            if max_tokens is not None and stats["tokens"] + tokens.size > max_tokens:
                room = max_tokens - stats["tokens"]
                keep = starts < room
                tokens, starts = tokens[:room], starts[keep]
            if tokens.size:
                builder.add_documents(tokens, starts)
            stats["documents"] += int(starts.size)
            stats["tokens"] += int(tokens.size)
            if max_tokens is not None and stats["tokens"] >= max_tokens:
                break
        if len(builder) == 0:
            raise CorpusError(f"corpus {', '.join(map(str, corpora))} holds no text to train on")
        t_read = time.perf_counter() - t0

        build_task = bar.add_task("building", total=None, detail="") if bar else None

        def on_build(phase, done, total):
            if on_progress is not None:
                on_progress(f"building: {phase}", done, total or None)
            if bar:
                bar.update(build_task, description=f"building: {phase}", completed=done,
                           total=total or None, detail="")
            return False

        t1 = time.perf_counter()
        model = builder.build(on_build)
        t_build = time.perf_counter() - t1
        if bar:
            bar.update(build_task, description="building: done", completed=1, total=1)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    model.save(out)
    del model
    t2 = time.perf_counter()
    model = IGTree.load(out)
    t_load = time.perf_counter() - t2
    summary = {
        "out": str(out), "corpora": [str(c) for c in corpora],
        "tokenizer": tokenizer.identity(), "window": window, "order": model.order,
        "permutation": model.permutation, "gain_ratio": [round(g, 6) for g in model.gain_ratio],
        "documents": stats["documents"], "instances": model.n_instances,
        "nodes": model.n_nodes, "classes": model.n_classes, "file_bytes": model.file_size,
        "read_tokenize_s": round(t_read, 3), "build_s": round(t_build, 3),
        "load_s": round(t_load, 4), "train_cpu_s": round(time.process_time() - cpu0, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
    evals = {}
    if held_out:
        evals["holdout"] = evaluate_batches(model, tokenized_batches(iter(held_out), tokenizer),
                                            eval_max).as_dict()
        evals["holdout"]["documents"] = len(held_out)
    for spec in eval_specs:
        evals[str(spec)] = evaluate(model, [spec], tokenizer, text_field, eval_max).as_dict()
    summary["eval"] = evals
    return summary

"""Memory-bounded training: build a draft model from 100M tokens and report peak memory.

    python benchmarks/train_100m.py [--tokens 100000000]

The shared corpora hold about 75M Mistral tokens (all train and validation splits); their
documents are fed to the builder in order, cycling once more until the target is reached.
Reports instances, nodes, build time, file size and the process's peak RSS (the machine has
24 GiB and no swap: a run that fits is a run that did not swap).
"""
import argparse
import os
import tempfile
import time
from pathlib import Path

from olifant_mlx.draftmodel.corpus import iter_documents, tokenized_batches
from olifant_mlx.draftmodel.igtree import Builder
from olifant_mlx.verifier import load_tokenizer
from olifant_mlx.draftmodel.train import peak_rss_mb

ROOT = Path(__file__).resolve().parent.parent

SHARED = Path(os.environ.get("OLIFANT_SHARED", ROOT.parent / "shared"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100_000_000)
    args = ap.parse_args()
    tok = load_tokenizer("mistral")
    files = sorted((SHARED / "corpora").glob("*/*.txt.xz"))
    t0 = time.perf_counter()
    batches = [b for f in files for b in tokenized_batches(iter_documents(str(f)), tok, batch_docs=64)]
    t_tok = time.perf_counter() - t0
    b = Builder(vocab_size=tok.vocab_size, tokenizer_name=tok.name, tokenizer_digest=tok.digest)
    fed, rounds = 0, 0
    while fed < args.tokens:
        rounds += 1
        for tokens, starts in batches:
            room = args.tokens - fed
            if room <= 0:
                break
            if tokens.size > room:
                tokens, starts = tokens[:room], starts[starts < room]
            b.add_documents(tokens, starts)
            fed += tokens.size
    rss_before = peak_rss_mb()
    t1 = time.perf_counter()
    cpu1 = time.process_time()
    model = b.build()
    t_build, cpu_build = time.perf_counter() - t1, time.process_time() - cpu1
    with tempfile.TemporaryDirectory() as d:
        model.save(Path(d) / "m.olif")
    print(f"tokens={fed:,} (corpus passes: {rounds}, {len(files)} files, tokenised in {t_tok:.0f} s)")
    print(f"instances={model.n_instances:,} nodes={model.n_nodes:,} file={model.file_size / 1e6:.0f} MB")
    print(f"build wall={t_build:.1f} s cpu={cpu_build:.1f} s")
    print(f"peak RSS before build={rss_before:.0f} MB, overall={peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()

"""`python tests/interrupt_child.py PHASE ARGS...` runs `python -m olifant_mlx ARGS...` with
one phase stalled in a long C call that releases the GIL and does not return to Python for
minutes — as SentencePiece does on a large batch, or the C builder in a phase without
callbacks — after announcing `STALLED PHASE` on stderr. test_train_pipeline sends SIGINT then.

PHASE: tokenising (every tokenizer call stalls), building (the build stalls before it starts) or
saving (the model is written whole to its temporary, then the rename waits): test_robustness
kills the child with SIGKILL there.
"""
import hashlib
import sys
import threading
import time


def stall(phase):
    """Minutes of C without the GIL; announced from another thread once this one is in it (an
    announcement before the call could be answered before the call starts)."""
    def announce():
        time.sleep(0.5)
        sys.stderr.write(f"STALLED {phase}\n")
        sys.stderr.flush()

    threading.Thread(target=announce, daemon=True).start()
    hashlib.pbkdf2_hmac("sha256", b"key", b"salt", 10**9)


def stall_tokenising():
    import olifant_mlx.verifier as verifier

    real_load = verifier.load_tokenizer

    def load_tokenizer(spec=None):
        tok = real_load(spec)
        real_encode = tok._encode_batch

        def encode_batch(texts):
            stall("tokenising")
            return real_encode(texts)

        tok._encode_batch = encode_batch
        return tok

    verifier.load_tokenizer = load_tokenizer


def stall_building():
    from olifant_mlx.draftmodel.igtree import Builder

    real_build = Builder.build

    def build(self, progress=None):
        stall("building")
        return real_build(self, progress)

    Builder.build = build


def stall_saving():
    from olifant_mlx.draftmodel.igtree import IGTree

    real_save = IGTree.save

    def save(self, path, *args, **kw):
        real_save(self, path, *args, **kw)
        stall("saving")

    IGTree.save = save


if __name__ == "__main__":
    {"tokenising": stall_tokenising, "building": stall_building,
     "saving": stall_saving}[sys.argv[1]]()
    from olifant_mlx.cli import main

    sys.exit(main(sys.argv[2:]))

"""What a grammar library costs per token on this CPU, and how its mask meets MLX's logits.

The three well-kept grammar libraries on PyPI that constrain a language model's tokens to a JSON
schema (llguidance, xgrammar, outlines-core) are each given the contract-extraction schema of
tests/data/contracts.json and walked along the 20 contracts' true answers, as the verifier's
tokenizer writes them: at every token the mask of allowed tokens is computed (into a 32-bit
bitmask, what all three write), then the token is consumed. Measured per library and tokenizer:
the schema's compile time, the mask's time per token (median, mean, 90th percentile), the time
to consume a token, a rollback of 4 tokens and their replay (the verifier's rollback), and
whether the library says which tokens the grammar forces next (free drafts). Then the part that
is the same for all three: the bitmask applied to one row of MLX logits, as a boolean mask
(numpy's unpackbits or MLX's own shifts, then mx.where) or as an added row of 0 and -inf.

    python benchmarks/grammar_mask_cost.py [--tokenizer FOLDER ...] [--out FILE.json]

A FOLDER has the tokenizer.json of a Hugging Face fast tokenizer; by default the offline
verifiers smollm2-135m (49,152 ids) and qwen2.5-coder-1.5b (151,936) from the olifant cache.
A library that is not installed is skipped and said so: xgrammar needs torch (its bitmask is a
torch tensor; the CPU wheel is enough), so it was measured in a virtual environment of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "data" / "contracts.json"
SEPARATORS = (", ", ": ")


def default_folders() -> list:
    cache = Path(os.environ.get("OLIFANT_CACHE", Path.home() / ".cache" / "olifant_mlx")) / "models"
    return [str(cache / name) for name in ("smollm2-135m", "qwen2.5-coder-1.5b") if (cache / name).is_dir()]


def hf_tokenizer(folder: str):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(Path(folder) / "tokenizer.json"))


def logits_rows(folder: str) -> int:
    """The verifier's logits width (its config's vocab_size), which can exceed the tokenizer's."""
    try:
        return int(json.loads((Path(folder) / "config.json").read_text())["vocab_size"])
    except (OSError, KeyError, ValueError):
        return len(hf_tokenizer(folder))


def summary(us: list) -> dict:
    us = sorted(us)
    return {"median_us": round(statistics.median(us), 1), "mean_us": round(statistics.fmean(us), 1),
            "p90_us": round(us[int(0.9 * (len(us) - 1))], 1), "n": len(us)}


def walks(tok) -> list:
    data = json.loads(FIXTURE.read_text())
    return [tok.encode(json.dumps(c["facts"], separators=SEPARATORS, ensure_ascii=False), add_special_tokens=False)
            for c in data["contracts"]], data["schema"]


def allowed(bitmask_row: np.ndarray, token: int) -> bool:
    return bool((int(bitmask_row[token // 32]) >> (token % 32)) & 1)


# ---- the libraries ---------------------------------------------------------------------------

class Llguidance:
    name = "llguidance"

    def __init__(self, tok, vocab, schema):
        import llguidance
        import llguidance.hf

        self.ll = llguidance
        self.tokenizer = llguidance.hf.from_tokenizer(tok, n_vocab=vocab)
        t = time.perf_counter()
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": False, "item_separator": SEPARATORS[0],
                              "key_separator": SEPARATORS[1]})
        self.grammar = grammar
        self.matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        self.compile_s = time.perf_counter() - t
        self.bitmask = np.zeros((1, (vocab + 31) // 32), dtype=np.int32)
        self.version = llguidance.get_version() if hasattr(llguidance, "get_version") else "?"

    def fresh(self):
        self.matcher = self.ll.LLMatcher(self.tokenizer, self.grammar, log_level=0)

    def mask(self):
        v = self.bitmask[0]
        self.matcher.unsafe_compute_mask_ptr(v.ctypes.data, v.size * 4)
        return v

    def consume(self, token):
        assert self.matcher.consume_token(token), self.matcher.get_error()

    def rollback(self, n):
        self.matcher.rollback(n)

    def forced(self) -> list:
        return self.matcher.compute_ff_tokens()


class Xgrammar:
    name = "xgrammar"

    def __init__(self, tok, vocab, schema):
        import xgrammar as xgr

        self.xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab)
        t = time.perf_counter()
        compiler = xgr.GrammarCompiler(info)
        self.compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                                     separators=SEPARATORS)
        self.matcher = xgr.GrammarMatcher(self.compiled, max_rollback_tokens=16)
        self.compile_s = time.perf_counter() - t
        self.torch_mask = xgr.allocate_token_bitmask(1, vocab)
        from importlib.metadata import version

        self.version = version("xgrammar")

    def fresh(self):
        self.matcher = self.xgr.GrammarMatcher(self.compiled, max_rollback_tokens=16)

    def mask(self):
        self.matcher.fill_next_token_bitmask(self.torch_mask)
        return self.torch_mask[0].numpy()

    def consume(self, token):
        assert self.matcher.accept_token(token)

    def rollback(self, n):
        self.matcher.rollback(n)

    def forced(self) -> list:
        return list(self.matcher.find_jump_forward_string().encode())   # a string, not tokens


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, tok, vocab, schema):
        from outlines_core import Guide, Index, Vocabulary
        from outlines_core.json_schema import build_regex_from_schema

        self.Guide = Guide
        t = time.perf_counter()
        regex = build_regex_from_schema(json.dumps(schema), whitespace_pattern=r"[ ]?")
        self.index = Index(regex, outlines_vocabulary(tok, Vocabulary))
        self.guide = Guide(self.index, max_rollback=16)
        self.compile_s = time.perf_counter() - t
        self.bitmask = np.zeros((1, (vocab + 31) // 32), dtype=np.int32)
        from importlib.metadata import version

        self.version = version("outlines-core")

    def fresh(self):
        self.guide = self.Guide(self.index, max_rollback=16)

    def mask(self):
        v = self.bitmask[0]
        self.guide.write_mask_into(v.ctypes.data, v.size, 4)
        return v

    def consume(self, token):
        self.guide.advance(token, return_tokens=False)

    def rollback(self, n):
        self.guide.rollback_state(n)

    def forced(self) -> list:
        return []       # no forced-token query: a mask with one token set is the only sign


def outlines_vocabulary(tok, Vocabulary):
    """outlines-core's Vocabulary of a byte-level BPE tokenizer: token bytes -> ids (special
    tokens left out, EOS its own)."""
    unicode_to_byte = {v: k for k, v in gpt2_bytes_to_unicode().items()}
    special = set(tok.all_special_ids) | set(tok.get_added_vocab().values())
    eos = tok.eos_token_id if tok.eos_token_id is not None else min(special)
    special.add(eos)
    table = {}
    for piece, i in tok.get_vocab().items():
        if i in special:
            continue
        try:
            key = bytes(unicode_to_byte[c] for c in piece)
        except KeyError:
            key = piece.encode()
        table.setdefault(key, []).append(i)
    return Vocabulary(eos, table)


def gpt2_bytes_to_unicode() -> dict:
    """GPT-2's byte -> printable character table, which byte-level BPE vocabularies are written in."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


LIBRARIES = {"llguidance": Llguidance, "xgrammar": Xgrammar, "outlines-core": OutlinesCore}


def measure(lib, paths) -> dict:
    mask_us, consume_us, rollback_us, forced_counts, forced_us, wrong = [], [], [], [], [], 0
    for path in paths:
        lib.fresh()
        for i, token in enumerate(path):
            t0 = time.perf_counter()
            row = lib.mask()
            t1 = time.perf_counter()
            wrong += not allowed(row, token)
            t2 = time.perf_counter()
            forced_counts.append(len(lib.forced()))
            forced_us.append(1e6 * (time.perf_counter() - t2))
            t2 = time.perf_counter()
            lib.consume(token)
            t3 = time.perf_counter()
            mask_us.append(1e6 * (t1 - t0))
            consume_us.append(1e6 * (t3 - t2))
            if i >= 4 and i % 8 == 0:       # the verifier rejected 4 drafts: back, then forward again
                t4 = time.perf_counter()
                lib.rollback(4)
                for t in path[i - 3:i + 1]:
                    lib.consume(t)
                rollback_us.append(1e6 * (time.perf_counter() - t4))
    return {"version": lib.version, "compile_s": round(lib.compile_s, 3), "mask": summary(mask_us),
            "consume": summary(consume_us), "rollback4_and_replay": summary(rollback_us),
            "tokens": len(mask_us), "true_answer_refused": wrong,
            "positions_with_forced_tokens": sum(1 for n in forced_counts if n), "forced_query": summary(forced_us)}


def mlx_application(vocab: int, rounds: int = 200) -> dict:
    """The bitmask as an MLX mask over one row of logits: unpacked by numpy, or by MLX."""
    try:
        import mlx.core as mx
    except ImportError:
        return {"skipped": "mlx is not installed"}
    rng = np.random.default_rng(0)
    bitmask = rng.integers(-2**31, 2**31 - 1, size=(vocab + 31) // 32, dtype=np.int64).astype(np.int32)
    logits = mx.array(rng.standard_normal(vocab).astype(np.float32))
    shifts = mx.arange(32, dtype=mx.uint32)

    def by_numpy():
        bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:vocab].astype(bool)
        return mx.where(mx.array(bits), logits, -mx.inf)

    def by_mlx():
        words = mx.array(bitmask.view(np.uint32))
        bits = ((words[:, None] >> shifts) & 1).reshape(-1)[:vocab].astype(mx.bool_)
        return mx.where(bits, logits, -mx.inf)

    neg = np.array([-np.inf, 0.0], dtype=np.float32)

    def by_bias():          # what olifant_mlx.structured does: a row of 0 and -inf, added
        bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:vocab]
        return logits + mx.array(np.take(neg, bits))

    out = {}
    assert mx.array_equal(by_numpy(), by_mlx()).item() and mx.array_equal(by_numpy(), by_bias()).item()
    for name, f in (("numpy_unpackbits_where", by_numpy), ("mlx_shifts_where", by_mlx), ("numpy_bias_add", by_bias)):
        us = []
        for _ in range(rounds):
            t = time.perf_counter()
            mx.eval(f())
            us.append(1e6 * (time.perf_counter() - t))
        out[name] = summary(us)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", action="append", metavar="FOLDER", help="a folder with tokenizer.json (repeatable)")
    ap.add_argument("--library", action="append", choices=sorted(LIBRARIES), help="only these (repeatable)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    folders = args.tokenizer or default_folders()
    if not folders:
        ap.error("no tokenizer folder: give --tokenizer FOLDER")
    result = {"what": "per-token mask cost of grammar libraries on the contract schema", "machine": {
        "cpus": os.cpu_count(), "load_average_before": os.getloadavg(), "python": sys.version.split()[0]},
        "tokenizers": {}}
    for folder in folders:
        tok, vocab = hf_tokenizer(folder), logits_rows(folder)
        paths, schema = walks(tok)
        row = {"logits": vocab, "libraries": {}, "mlx_mask": mlx_application(vocab)}
        for name in args.library or list(LIBRARIES):
            try:
                lib = LIBRARIES[name](tok, vocab, schema)
            except ImportError as e:
                row["libraries"][name] = {"skipped": f"not installed ({e})"}
                continue
            row["libraries"][name] = measure(lib, paths)
            print(f"{Path(folder).name:20} {name:14} {json.dumps(row['libraries'][name])}", flush=True)
        print(f"{Path(folder).name:20} mlx mask       {json.dumps(row['mlx_mask'])}", flush=True)
        result["tokenizers"][Path(folder).name] = row
    result["machine"]["load_average_after"] = os.getloadavg()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

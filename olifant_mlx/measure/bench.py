"""The paper's sweep of strategies x tasks x k x regimes (`python -m olifant_mlx bench`).

Each prompt is first generated plain (the greedy reference); every strategy then runs on
the same prompt in the same process, so its speedup, ROUGE-L and exact-match flag are
relative to that reference. Every generation becomes one JSON line, appended as soon as
it finishes: a killed run resumes where it stopped (rows already present are skipped;
the reference tokens are stored with the plain row). A row is keyed by everything that
defines it (`KEY_FIELDS`): the verifier and a digest of its weights and tokenizer, the
prompt's text (a digest), max tokens, the drafter (its spec and its model file's size and
time), k and the regime, so a rerun with anything changed runs again instead of showing
old numbers as new. The results file holds generated token ids: it is created 0600.
Energy comes from the meter when one is available (with its label); process CPU seconds
per 100 tokens are always recorded, labelled as compute, never as energy.
"""
from __future__ import annotations

import copy
import csv
import hashlib
import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from olifant_mlx.drafters.costs import PassCost
from olifant_mlx.engine import Chat, GenerationOptions, OptionsError, Session, reference
from olifant_mlx.files import PRIVATE, atomic_writer, make_private, open_regular, open_regular_file, write_atomic
from olifant_mlx.measure.metrics import rouge_l

TABLE_MODE = 0o644
KEY_FIELDS = ("verifier", "verifier_id", "task", "regime", "strategy", "drafter", "k", "prompt",
              "prompt_sha256", "max_tokens")
# what aggregate() reads of every row: a line without them is not a result row
ROW_FIELDS = ("verifier", "task", "regime", "strategy", "k", "prompt", "n_tokens", "seconds",
              "plain_seconds", "acceptance", "mean_accepted_length", "rouge_l", "exact_match",
              "compute_cpu_s_per_100_tokens", "energy_j", "energy_label")


def digest(*parts) -> str:
    """A short hex digest of some strings (NUL-separated, so ("ab", "c") != ("a", "bc"))."""
    return hashlib.sha256("\0".join(str(p) for p in parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def row_key(r) -> tuple:
    """What defines a row; rows written before a field existed lack it and never match."""
    return tuple(r.get(f) for f in KEY_FIELDS)


def read_results(path) -> tuple[list, int]:
    """(rows of a results file, how many non-blank lines are not rows: cut short by a kill,
    or JSON that is not a result object)."""
    rows, skipped = [], 0
    if not Path(path).is_file():
        return rows, skipped
    with open_regular_file(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if isinstance(row, dict) and all(k in row for k in ROW_FIELDS):
                rows.append(row)
            else:
                skipped += 1
    return rows, skipped


def load_rows(path) -> list:
    """Rows of a results file; a line cut short by a kill, or that is no result row, is ignored."""
    return read_results(path)[0]


def open_results(path):
    """The results file for appending (created 0600: rows hold generated token ids); a partial
    last line left by a kill is ended first, so new rows stay whole."""
    fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, PRIVATE)
    make_private(fd)
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")
    return os.fdopen(fd, "a", encoding="utf-8")


def file_stamp(path) -> str:
    st = os.stat(path)
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


WEIGHT_SAMPLE = 4096    # leading values of every weight array that go into its fingerprint


def weights_fingerprint(model, h) -> None:
    """Feed `h` the name, shape, dtype and leading values of every weight array: cheap at any
    size, and another training run (or checkpoint) of the same architecture differs."""
    if not callable(getattr(model, "parameters", None)):
        return
    import numpy as np
    from mlx.utils import tree_flatten

    from olifant_mlx.mlx_setup import mx

    for name, p in tree_flatten(model.parameters()):
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype}".encode())
        h.update(np.asarray(p.reshape(-1)[:WEIGHT_SAMPLE].astype(mx.float32)).tobytes())


def verifier_identity(verifier) -> str:
    """A digest of what defines a verifier's output: its name and path, its tokenizer's
    vocabulary digest, the size and time of its weight and config files, and its weights."""
    path = str(getattr(verifier, "path", "") or "")
    h = hashlib.sha256(f"{verifier.name}\0{path}\0{verifier.identity.digest.hex()}".encode())
    folder = Path(path)
    if path and folder.is_dir():
        for f in sorted(folder.glob("*.safetensors")) + [folder / "config.json"]:
            if f.is_file():
                h.update(f"\0{f.name}:{file_stamp(f)}".encode())
    weights_fingerprint(verifier.model, h)
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Strategy:
    """A drafter and what defines its drafts (`spec_identity` of its spec)."""
    drafter: object
    identity: str


def spec_identity(spec) -> str:
    """A drafter spec's text and, when it reads a draft-model file, that file's size and time
    (a model retrained under the same name is another drafter)."""
    path = spec.model_file
    return spec.text + (f"@{file_stamp(path)}" if path and os.path.isfile(path) else "")


def drafter_identity(drafter, depth: int = 3) -> str:
    """A drafter object given without a spec: its class, name and settings, the drafters it
    wraps, and the description of a model it holds."""
    parts = [f"{type(drafter).__qualname__}:{getattr(drafter, 'name', '')}"]
    for key, value in sorted(getattr(drafter, "__dict__", {}).items()):
        if key.startswith("_"):
            continue
        if isinstance(value, (bool, int, float, str)):
            parts.append(f"{key}={value!r}")
        elif depth and callable(getattr(value, "draft", None)):
            parts.append(f"{key}=({drafter_identity(value, depth - 1)})")
        elif callable(getattr(value, "describe", None)):
            parts.append(f"{key}={json.dumps(value.describe(), sort_keys=True)}")
    return " ".join(parts)


def as_strategy(drafter) -> Strategy:
    return drafter if isinstance(drafter, Strategy) else Strategy(drafter, drafter_identity(drafter))


MLX_LM = "mlx-lm"


class MlxLm:
    """The user's alternative as a strategy: mlx-lm's own `stream_generate`, plain, or with a
    `draft_model` (an mlx-lm model with the verifier's tokenizer, `num_draft_tokens` = k).
    Spec: `mlx-lm` or `mlx-lm:MODEL` (a verifier spec, e.g. the verifier itself). It has only
    the KV regime; its rows carry what its responses show (tokens from the draft model count as
    accepted; a verifier pass ends with each token that is not)."""

    def __init__(self, draft: str | None = None):
        self.draft = draft or None
        self.name = f"{MLX_LM}:{self.draft}" if self.draft else MLX_LM
        self.draft_model = None

    def load(self, tokenizer_digest=None):
        """Load the draft model once (checked against the verifier's vocabulary digest)."""
        if self.draft and self.draft_model is None:
            from olifant_mlx.draftmodel.igtree import TokenizerMismatch
            from olifant_mlx.verifier import load_verifier

            v = load_verifier(self.draft)
            if tokenizer_digest is not None and v.identity.digest != tokenizer_digest:
                raise TokenizerMismatch(f"mlx-lm draft model {v.name!r} does not share the "
                                        f"verifier's tokenizer")
            self.draft_model = v.model
        return self

    def run(self, verifier, prompt_ids, k, max_tokens, eos_ids=None):
        """(tokens, Stats) of one stream_generate; time is until the last response."""
        from mlx_lm.generate import generation_stream, stream_generate

        from olifant_mlx.engine import Stats
        from olifant_mlx.mlx_setup import mx

        kw = {"draft_model": self.draft_model, "num_draft_tokens": max(k, 1)} if self.draft else {}
        tokens, drafted_tokens, passes = [], 0, 0
        t0 = time.perf_counter()
        last = None
        for r in stream_generate(verifier.model, verifier.tokenizer, list(prompt_ids),
                                 max_tokens=max_tokens, **kw):
            last = r
            if r.finish_reason is None or r.finish_reason == "length":
                tokens.append(int(r.token))
                drafted_tokens += bool(r.from_draft)
                passes += not r.from_draft
        seconds = time.perf_counter() - t0
        mx.synchronize(generation_stream)   # a pass queued past the end: not anyone's time
        st = Stats(tokens=len(tokens), steps=passes if self.draft else len(tokens),
                   prompt_tokens=len(prompt_ids), stop_reason="eos" if last and last.finish_reason == "stop"
                   else "max_tokens")
        prompt_s = last.prompt_tokens / last.prompt_tps if last and last.prompt_tps else 0.0
        st.prefill_s, st.decode_s = prompt_s, max(seconds - prompt_s, 0.0)
        if self.draft:
            st.accepted, st.drafted = drafted_tokens, passes * max(k, 1)
            st.forward_tokens = passes * (max(k, 1) + 1)
        else:
            st.forward_tokens = len(tokens)
        st.extra.update(verifier=verifier.name, drafter=self.name)
        return tokens, st


def baseline(spec: str) -> MlxLm | None:
    """An mlx-lm strategy for a bench spec `mlx-lm[:MODEL]`, else None (a drafter spec)."""
    kind, _, arg = (spec or "").partition(":")
    return MlxLm(arg) if kind == MLX_LM else None


@dataclass(frozen=True)
class Predicted:
    """A prompt with its prediction: the text the answer is expected to mostly repeat (a prompt
    file's `"prediction"`); every generation from it is given the prediction
    (Session.generate(prediction=...)), which changes what is drafted, never the output."""
    prompt: object
    prediction: str


def unpredicted(prompt) -> tuple:
    """(the prompt itself, its prediction or None)."""
    return (prompt.prompt, prompt.prediction) if isinstance(prompt, Predicted) else (prompt, None)


class ModelRunner:
    """Generations on a loaded verifier, through the Session API (energy from `meter`); an
    `MlxLm` strategy runs mlx-lm's stream_generate on the same verifier instead. `options`:
    what every run starts from (its lead rule, pass_cost and draft_cost); each run sets k,
    max_tokens and the regime. By default the lead rule plans with one pass-cost curve fitted
    over every run (the verifier's speed outlives one generation)."""

    def __init__(self, verifier, meter=None, options: GenerationOptions | None = None):
        self.verifier = verifier
        self.name = verifier.name
        self.identity = verifier_identity(verifier)
        self.meter = meter
        self.label = meter.info.label if meter is not None else "not measured"
        self.options = options or GenerationOptions(pass_cost=PassCost())

    def with_options(self, **changes):
        """The same runner, its runs starting from options with these changes (lead=False)."""
        other = copy.copy(self)
        other.options = self.options.replace(**changes)
        return other

    def prompt_id(self, prompt) -> str:
        return digest(prompt)

    def run(self, prompt, drafter, k, kv, max_tokens):
        """(tokens, Stats, energy window or None, CPU seconds) of one generation (a Predicted
        prompt's prediction given to it; mlx-lm's stream_generate takes none)."""
        prompt, prediction = unpredicted(prompt)
        if isinstance(drafter, MlxLm):
            if not kv:
                raise ValueError("mlx-lm's stream_generate has only the KV regime")
            ids = (self.verifier.chat_ids(prompt.messages, prompt.template_kwargs) if isinstance(prompt, Chat)
                   else self.verifier.encode(prompt) if isinstance(prompt, str) else list(prompt))
            start = self.meter.mark() if self.meter is not None else None
            cpu0 = time.process_time()
            tokens, st = drafter.load(self.verifier.identity.digest).run(self.verifier, ids, k, max_tokens)
            energy = self.meter.between(start, self.meter.mark()) if self.meter is not None else None
            return tokens, st, energy, time.process_time() - cpu0
        options = self.options.replace(k=k, max_tokens=max_tokens, kv_cache=kv)
        session = Session(self.verifier, drafter, options, self.meter)
        cpu0 = time.process_time()
        r = session.generate(prompt, prediction=prediction)
        return r.tokens, r.stats, r.energy, time.process_time() - cpu0


class FixedCost:
    """A verifier's pass time as a + b * tokens, fixed: what a cost-aware drafter plans with
    when the passes it sees are not a real verifier's (reference-text mode). `draft_s`: the
    drafter's time per pass the adaptive drafter's PlainGuard counts (None: the measured one;
    a cost in units of a pass, not seconds, sets 0 so that plans do not depend on timing)."""

    def __init__(self, a: float = 1.0, b: float = 0.075, draft_s: float | None = None):
        self.a, self.b, self.draft_s = a, b, draft_s

    def observe(self, tokens, seconds):
        pass

    def coefficients(self):
        return self.a, self.b

    def __call__(self, tokens):
        return self.a + self.b * tokens


# SmolLM2-135M on this project's CPU: a KV pass of 9 new tokens costs 1.65 one-token passes
# (docs/bench-reference/calibration.json), about 1 + 0.075 per extra token
REFERENCE_COST = FixedCost(1.0, 0.075, draft_s=0.0)   # a unit pass, not seconds


def reference_options(cost) -> GenerationOptions:
    """What a reference or transcript run starts from: the lead rule and a cost-aware drafter
    planning with `cost`, a modelled verifier's."""
    return GenerationOptions(pass_cost=cost, draft_cost=cost)


class ReferenceRunner:
    """`--verifier reference`: each held-out document's real continuation plays the
    verifier's output, through the same engine loop (olifant_mlx.engine.reference). Nothing
    is timed as a verifier, so rows carry no compute and no energy. The lead rule and a
    cost-aware drafter (the adaptive one) plan with a real verifier's cost curve, the options'
    pass_cost and draft_cost (REFERENCE_COST by default), since the stand-in's own pass times
    are no verifier's."""
    name = "reference"
    label = reference.LABEL
    with_options = ModelRunner.with_options

    def __init__(self, tokenizer, continuations: dict, options: GenerationOptions | None = None):
        self.tokenizer = tokenizer          # our Tokenizer (encode without BOS)
        self.continuations = continuations  # prompt text -> the document's continuation text
        self.options = options or reference_options(REFERENCE_COST)
        self.identity = digest("reference", tokenizer.name, tokenizer.vocab_size,
                               getattr(tokenizer, "digest", b"").hex())

    def prompt_id(self, prompt) -> str:
        """The prompt and its document's continuation: the reference 'verifier' answers it."""
        return digest(prompt, self.continuations[prompt])

    def run(self, prompt, drafter, k, kv, max_tokens):
        ids = self.tokenizer.encode(prompt)
        truth = self.tokenizer.encode(self.continuations[prompt])[:max_tokens]
        return self.replay(ids, truth, drafter, k, kv)

    def replay(self, ids, truth, drafter, k, kv, eos_ids=(), bos_id=None, prediction=None):
        """One generation through the engine's loop with `truth` as the verifier's output
        after prompt `ids` (a transcript replays with its verifier's EOS and BOS ids, and the
        request's prediction ids where it had one)."""
        verifier = reference.ReferenceVerifier(self.tokenizer, ids, truth)
        verifier.eos_ids, verifier.bos_id = tuple(eos_ids), bos_id
        options = self.options.replace(k=k, max_tokens=len(truth), kv_cache=kv)
        session = Session(verifier, drafter, options)
        r = session.generate(ids, prediction=prediction)
        st = r.stats            # the stand-in verifier's time is no verifier's: only drafting counts
        st.prefill_s = st.decode_s = st.verify_s = 0.0
        return r.tokens, st, None, None


def alternating_rounds(runner, prompts, runners, rounds, max_tokens, kv, on_run=None) -> list:
    """Seconds per runner, per round: each runner (label, drafter, k) generates from every
    prompt, the order rotating with round and prompt so that neither side always runs first
    on a noisy machine. Outputs must be identical (speculative decoding is exact).
    `on_run(round, prompt_index, label, tokens, stats)` sees every generation."""
    out = []
    for r in range(rounds):
        secs = {label: 0.0 for label, _, _ in runners}
        for i, text in enumerate(prompts):
            shift = (r + i) % len(runners)
            outputs = []
            for label, drafter, k in runners[shift:] + runners[:shift]:
                tokens, st, _, _ = runner.run(text, drafter, k, kv, max_tokens)
                secs[label] += st.seconds
                outputs.append(tokens)
                if on_run:
                    on_run(r, i, label, tokens, st)
            if any(o != outputs[0] for o in outputs):
                raise RuntimeError(f"outputs differ between {[label for label, _, _ in runners]}: a bug")
        out.append(secs)
    return out


def sweep(runner, tasks: dict, strategies: dict, ks, regimes, max_tokens: int, results,
          n_prompts=None, on_progress=None, mlx_lm: bool = False):
    """Run every missing cell; append rows to `results`; return this sweep's rows (the file
    may hold others: other settings, verifiers or prompts).

    runner: a ModelRunner or a ReferenceRunner; tasks: {name: [prompt texts]}; strategies:
    {name: drafter, MlxLm or Strategy} (one drafter serves every run, as in a Session: a
    learning one keeps its estimates from run to run; an MlxLm strategy runs in the KV regime
    only). With `mlx_lm` (a ModelRunner), mlx-lm's plain stream_generate also runs on every
    prompt, right after our plain, as strategy "mlx-lm" (k 0), the second reference of every
    speedup.
    """
    strategies = {name: as_strategy(s) for name, s in strategies.items()}
    fixed = {"verifier": runner.name, "verifier_id": runner.identity, "max_tokens": max_tokens}

    def cell(task, regime, i, prompt_id, strategy, drafter, k):
        return {**fixed, "task": task, "regime": regime, "strategy": strategy, "drafter": drafter,
                "k": k, "prompt": i, "prompt_sha256": prompt_id}

    def applies(s, regime):
        return regime == "kv" or not isinstance(s.drafter, MlxLm)

    refs = {MLX_LM: Strategy(MlxLm(), MLX_LM)} if mlx_lm else {}
    later = [(name, s, 0) for name, s in refs.items()] + \
        [(name, s, k) for name, s in strategies.items() for k in ks]
    done = {row_key(r): r for r in load_rows(results)}
    plan = [(task, regime, i, text, runner.prompt_id(text)) for task, texts in tasks.items()
            for regime in regimes for i, text in enumerate(texts[:n_prompts])]
    planned = [cell(task, regime, i, pid, "plain", "none", 0) for task, regime, i, _, pid in plan]
    planned += [cell(task, regime, i, pid, name, s.identity, k) for task, regime, i, _, pid in plan
                for name, s, k in later if applies(s, regime)]
    total, finished = len(planned), sum(row_key(c) in done for c in planned)
    with open_results(results) as out:
        def record(row):
            nonlocal finished
            done[row_key(row)] = row
            out.write(json.dumps(row) + "\n")
            out.flush()
            finished += 1
            if on_progress:
                on_progress(finished, total)

        for task, regime, i, text, pid in plan:
            kv = regime == "kv"
            plain = cell(task, regime, i, pid, "plain", "none", 0)
            if row_key(plain) not in done:
                ref, st, w, cpu = runner.run(text, None, 0, kv, max_tokens)
                record(make_row(plain, ref, ref, st, w, cpu))
            ref_row = done[row_key(plain)]
            for name, s, k in later:
                c = cell(task, regime, i, pid, name, s.identity, k)
                if row_key(c) in done or not applies(s, regime):
                    continue
                out_tokens, st, w, cpu = runner.run(text, s.drafter, k, kv, max_tokens)
                record(make_row(c, out_tokens, ref_row["tokens"], st, w, cpu,
                                plain_s=ref_row["seconds"]))
    return [done[row_key(c)] for c in planned]


def continuations_of(prompts, corpus) -> dict:
    """Each prompt (the first words of a held-out document) -> the rest of that document."""
    import re

    from olifant_mlx.draftmodel.corpus import iter_documents

    wanted = {" ".join(p.split()): p for p in prompts}
    found = {}
    for doc in iter_documents(corpus):
        for n in {len(p.split()) for p in prompts}:
            m = re.match(r"\s*(?:\S+\s+){" + str(n - 1) + r"}\S+", doc)
            if m and " ".join(doc[:m.end()].split()) in wanted:
                found[wanted[" ".join(doc[:m.end()].split())]] = doc[m.end():]
    missing = [p for p in prompts if p not in found]
    if missing:
        raise ValueError(f"{len(missing)} prompt(s) are not the start of any document in {corpus}: "
                         f"{missing[0][:60]!r}...")
    return found


def make_row(cell: dict, tokens, ref, stats, window, cpu_s, plain_s=None):
    """A row: the cell's key fields (KEY_FIELDS) and what one generation measured."""
    d = stats.as_dict()
    n = len(tokens)
    energy = window.as_dict(n) if window is not None else {"backend": "none", "energy_j": None}
    return {
        **cell, "tokens": tokens if cell["strategy"] == "plain" else None, "n_tokens": n,
        "seconds": d["seconds"], "tokens_per_s": d["tokens_per_s"], "steps": d["steps"],
        "acceptance": d["acceptance"], "mean_accepted_length": d["mean_accepted_length"],
        "drafted": d["drafted"], "accepted": d["accepted"], "forward_tokens": d["forward_tokens"],
        "draft_s_per_step": stats.draft_s / stats.steps if stats.steps else None,
        "overhead_ms_per_step": d["overhead_ms_per_step"],
        "rouge_l": rouge_l(ref, tokens), "exact_match": tokens == ref,
        "plain_seconds": plain_s if plain_s is not None else d["seconds"],
        "tokens_per_step": n / d["steps"] if d["steps"] else None,
        # tokens fed per pass -> passes: a KV row is costed pass by pass (curves.modelled_seconds)
        "pass_sizes": {str(size): c for size, c in sorted(stats.pass_sizes.items())},
        "partial_steps": d["partial_steps"], "led_steps": d["led_steps"],
        "reproposals": d["reproposals"],
        "compute_cpu_s_per_100_tokens": 100.0 * cpu_s / n if n and cpu_s is not None else None,
        "energy_j": energy.get("energy_j"), "j_per_100_tokens": energy.get("j_per_100_tokens"),
        "tokens_per_joule": energy.get("tokens_per_joule"), "mean_power_w": energy.get("mean_power_w"),
        "energy_label": energy.get("label", "not measured"), "energy_backend": energy.get("backend"),
        "time": time.time(),
    }


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def aggregate(rows) -> list:
    """One dict per (verifier, task, regime, strategy, k): the paper's table cells.
    `speedup_vs_mlx_lm` is the cell's throughput over mlx-lm's plain stream_generate (KV
    cache) on the same prompts, where that ran."""
    cells = defaultdict(list)
    mlx, plain = {}, {}
    for r in rows:
        cells[(r["verifier"], r["task"], r["regime"], r["strategy"], r["k"])].append(r)
        if r["strategy"] == MLX_LM and r["regime"] == "kv":
            mlx[(r["verifier"], r["task"], r["prompt"])] = r
        if r["strategy"] == "plain":
            plain[(r["verifier"], r["task"], r["regime"], r["prompt"])] = r
    out = []
    for (v, task, regime, s, k), rs in sorted(cells.items()):
        secs = sum(r["seconds"] for r in rs)
        plain_secs = sum(r["plain_seconds"] for r in rs)
        n = sum(r["n_tokens"] for r in rs)
        base = [mlx.get((v, task, r["prompt"])) for r in rs]
        vs_mlx = None
        if all(base) and secs and n:
            b_secs, b_n = sum(b["seconds"] for b in base), sum(b["n_tokens"] for b in base)
            vs_mlx = (n / secs) / (b_n / b_secs) if b_secs and b_n else None
        energy = [r["energy_j"] for r in rs]
        measured = all(e is not None for e in energy)
        refs = [plain.get((v, task, regime, r["prompt"])) for r in rs]
        modelled = None
        if all(refs) and all("forward_tokens" in r for r in rs + refs):
            ours_cost = sum(REFERENCE_COST.a * r["steps"] + REFERENCE_COST.b * r["forward_tokens"] for r in rs)
            plain_cost = sum(REFERENCE_COST.a * r["steps"] + REFERENCE_COST.b * r["forward_tokens"] for r in refs)
            modelled = plain_cost / ours_cost if ours_cost else None
        out.append({
            "verifier": v, "task": task, "regime": regime, "strategy": s, "k": k, "prompts": len(rs),
            # verifier time modelled from the passes: each costs a + b * tokens fed (REFERENCE_COST)
            "modelled_speedup": modelled,
            "tokens_per_s": n / secs if secs else None,
            "speedup": plain_secs / secs if secs and plain_secs else None,   # same prompts
            "speedup_vs_mlx_lm": vs_mlx,
            "tokens_per_pass": n / sum(r["steps"] for r in rs) if sum(r["steps"] for r in rs) else None,
            "acceptance": _mean(r["acceptance"] for r in rs),
            "mean_accepted_length": _mean(r["mean_accepted_length"] for r in rs),
            "rouge_l": _mean(r["rouge_l"] for r in rs),
            "exact_match": sum(r["exact_match"] for r in rs) / len(rs),
            "compute_cpu_s_per_100_tokens": _mean(r["compute_cpu_s_per_100_tokens"] for r in rs),
            "overhead_ms_per_step": _mean(r.get("overhead_ms_per_step") for r in rs),
            # verifier work: positions computed per output token (rows from older runs lack it)
            "verifier_tokens_per_token": (sum(r["forward_tokens"] for r in rs) / n
                                          if n and all("forward_tokens" in r for r in rs) else None),
            # passes that rejected a draft, and first drafts re-proposing a token just rejected
            "partial_steps": sum(r.get("partial_steps") or 0 for r in rs),
            "reproposals": sum(r.get("reproposals") or 0 for r in rs),
            "j_per_100_tokens": 100.0 * sum(energy) / n if measured and n else None,
            "tokens_per_joule": n / sum(energy) if measured and sum(energy) else None,
            "mean_power_w": sum(energy) / secs if measured and secs else None,
            "energy_label": rs[0]["energy_label"],
        })
    return out


COLUMNS = ["verifier", "task", "regime", "strategy", "k", "prompts", "tokens_per_s", "speedup",
           "speedup_vs_mlx_lm", "predicted_speedup", "modelled_speedup", "acceptance", "mean_accepted_length",
           "tokens_per_pass", "rouge_l", "exact_match",
           "compute_cpu_s_per_100_tokens", "overhead_ms_per_step", "verifier_tokens_per_token",
           "partial_steps", "reproposals", "j_per_100_tokens",
           "tokens_per_joule", "mean_power_w", "energy_label"]


PAPER_TABLES = (   # the paper's tables, each a view of the same cells
    ("Throughput and speedup (Tables 1/2)", ["tokens_per_s", "speedup", "speedup_vs_mlx_lm",
                                             "predicted_speedup", "modelled_speedup", "rouge_l", "exact_match",
                                             "compute_cpu_s_per_100_tokens"]),
    ("Energy (Tables 3/4)", ["j_per_100_tokens", "tokens_per_joule", "mean_power_w", "energy_label"]),
    ("Acceptance and mean accepted length (Tables 6/7)", ["acceptance", "mean_accepted_length",
                                                          "tokens_per_pass", "overhead_ms_per_step",
                                                          "verifier_tokens_per_token"]),
)


def _fmt(key, v):
    if v is None:
        return "not measured" if key in ("j_per_100_tokens", "tokens_per_joule", "mean_power_w") else "—"
    if key in ("acceptance", "exact_match"):
        return f"{v:.1%}"
    if key in ("speedup", "predicted_speedup", "speedup_vs_mlx_lm", "modelled_speedup"):
        return f"{v:.2f}x"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def add_predictions(cells, rows, calibration: dict | None) -> None:
    """Beside each measured cell, the calculator's speedup for its measured acceptance, drafting
    cost and (when calibrated) verify-cost curve; KV cells use the rejection fast-path model."""
    from olifant_mlx.measure import calc

    draft_per_step = defaultdict(list)
    for r in rows:
        if r.get("draft_s_per_step") is not None:
            draft_per_step[(r["verifier"], r["task"], r["regime"], r["strategy"], r["k"])].append(
                r["draft_s_per_step"])
    plain_step = {}
    for c in cells:
        if c["strategy"] == "plain" and c["tokens_per_s"]:
            plain_step[(c["verifier"], c["task"], c["regime"])] = 1.0 / c["tokens_per_s"]
    cal = calibration or {}
    rel = {int(k): v for k, v in (cal.get("kv_relative") or {}).items()}
    calibrated_step = {"kv": (cal.get("kv_ms") or {}).get(1) or (cal.get("kv_ms") or {}).get("1"),
                       "uncached": cal.get("uncached_full_context_ms")}
    for c in cells:
        c["predicted_speedup"] = None
        step = plain_step.get((c["verifier"], c["task"], c["regime"]))
        if step is None and calibrated_step.get(c["regime"]):
            step = calibrated_step[c["regime"]] / 1e3   # simulated verifier: a real one's cost
        if c["strategy"] == "plain" or not step or c["acceptance"] is None or c["k"] < 1:
            continue
        ds = draft_per_step.get((c["verifier"], c["task"], c["regime"], c["strategy"], c["k"]))
        cost = (sum(ds) / len(ds)) / step / c["k"] if ds else 0.0
        alpha = calc.alpha_from_acceptance(min(c["acceptance"], 1.0), c["k"])
        if c["regime"] == "kv":
            c["predicted_speedup"] = calc.speedup_fast_path(alpha, c["k"], cost, rel.get(c["k"], 1.0))
        else:  # uncached: appending k drafts to the full context is nearly free
            c["predicted_speedup"] = calc.speedup(alpha, c["k"], cost, 1.0)


def write_tables(cells, out_dir) -> dict:
    """CSV (machines) and Markdown (people) of the aggregated cells, each written atomically;
    returns the paths. They hold aggregates only (no prompt, no generated text): 0644."""
    out = Path(out_dir)
    with atomic_writer(out / "bench.csv", TABLE_MODE, binary=False) as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for c in cells:
            w.writerow({k: c.get(k) for k in COLUMNS})
    key = ["verifier", "task", "regime", "strategy", "k", "prompts"]
    lines = []
    for title, cols in PAPER_TABLES:
        cols = key + cols
        lines += [f"## {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_fmt(k, c.get(k)) for k in cols) + " |" for c in cells]
        lines.append("")
    write_atomic(out / "bench.md", "\n".join(lines), TABLE_MODE)
    return {"csv": out / "bench.csv", "markdown": out / "bench.md"}


def write_plots(cells, out_dir, note: str = "") -> dict:
    """Figure 1 (speedup vs k per regime) and Figure 2 (tokens per joule ladder, only where
    energy was measured) as PNG; needs matplotlib (pip install 'olifant_mlx[plots]'). Returns
    the paths written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    out = Path(out_dir)
    paths = {}
    regimes = sorted({c["regime"] for c in cells})
    fig, axes = plt.subplots(1, len(regimes), figsize=(5 * len(regimes), 4), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        series = defaultdict(list)
        for c in cells:
            # measured speedup; a simulated verifier has only the calculator's prediction
            v = c["speedup"] if c["speedup"] is not None else c.get("predicted_speedup")
            if c["regime"] == regime and c["strategy"] != "plain" and v is not None:
                series[(c["task"], c["strategy"])].append((c["k"], v))
        for (task, strategy), pts in sorted(series.items()):
            pts.sort()
            ax.plot([k for k, _ in pts], [v for _, v in pts], marker="o", label=f"{strategy} ({task})")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        measured = any(c["speedup"] is not None for c in cells if c["strategy"] != "plain")
        ax.set(title=f"{regime}", xlabel="draft length k",
               ylabel="speedup over plain" if measured else "predicted speedup (calculator)")
        ax.legend(fontsize=7)
    fig.suptitle("Speedup vs k" + (f" — {note}" if note else ""))
    fig.tight_layout()
    paths["speedup"] = out / "speedup_vs_k.png"
    with atomic_writer(paths["speedup"]) as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    measured = [c for c in cells if c["tokens_per_joule"] is not None]
    if not measured:            # no figure of energy that was not measured
        return paths
    fig, ax = plt.subplots(figsize=(7, 0.35 * max(len(measured), 4) + 1))
    measured.sort(key=lambda c: c["tokens_per_joule"])
    labels = [f"{c['strategy']} k={c['k']} {c['regime']} ({c['task']})" for c in measured]
    ax.barh(labels, [c["tokens_per_joule"] for c in measured])
    ax.set(xlabel=f"tokens per joule ({measured[0]['energy_label']})")
    ax.set_title("Tokens per joule" + (f" — {note}" if note else ""))
    fig.tight_layout()
    paths["tokens_per_joule"] = out / "tokens_per_joule.png"
    with atomic_writer(paths["tokens_per_joule"]) as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    return paths


def calibrate(verifier, text: str, max_new: int = 9, repeats: int = 3) -> dict:
    """The verifier's forward time for 1..max_new new tokens with a KV cache after `text`,
    and for the whole context without one (why the two regimes differ)."""
    from mlx_lm.models.cache import trim_prompt_cache

    from olifant_mlx.engine.cache import make_cache, prefill
    from olifant_mlx.mlx_setup import mx

    shard = getattr(verifier, "shard", None)
    if shard is not None:           # a sharded verifier: every rank makes the same passes
        shard.everywhere("calibrate", text=text, max_new=max_new, repeats=repeats)
    model = verifier.model
    prompt = verifier.encode(text)
    cache = make_cache(model)
    mx.eval(prefill(model, cache, prompt))
    cached = {}
    for n in range(1, max_new + 1):
        best = None
        for _ in range(repeats):
            t = time.perf_counter()
            mx.eval(model(mx.array(prompt[-n:])[None], cache=cache))
            dt = time.perf_counter() - t
            trim_prompt_cache(cache, n)
            best = dt if best is None else min(best, dt)
        cached[n] = best
    full = min(_timed(lambda: mx.eval(model(mx.array(prompt)[None]))) for _ in range(repeats))
    return {"context_tokens": len(prompt), "kv_ms": {n: 1e3 * s for n, s in cached.items()},
            "kv_relative": {n: s / cached[1] for n, s in cached.items()},
            "uncached_full_context_ms": 1e3 * full, "uncached_over_kv1": full / cached[1]}


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def read_prompts(path) -> list:
    """Prompts: a .jsonl with a "prompt" (or "text") field per line, or a "messages" list (a
    Chat, formatted by the verifier's chat template), or text one per line. A JSON line may also
    carry a "prediction" string (the text the answer is expected to mostly repeat): that prompt
    is a Predicted. A line that is not such an object is a ValueError naming the file and the line."""
    path = str(path)
    jsonl = path.endswith((".jsonl", ".json"))
    out = []
    with open_regular_file(path) as f:
        try:
            for n, line in enumerate(f, start=1):
                line = line.rstrip("\n")
                if line.strip():
                    out.append(_jsonl_prompt(line, path, n) if jsonl else line)
        except UnicodeDecodeError as e:
            raise ValueError(f"prompt file {path} is not UTF-8 text ({e.reason})") from None
    if not out:
        raise ValueError(f"prompt file {path} holds no prompt")
    return out


def _jsonl_prompt(line: str, path: str, n: int):
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
    if isinstance(obj, dict) and "prediction" in obj:
        prediction = obj["prediction"]
        if not isinstance(prediction, str):
            raise ValueError(f"{path}:{n}: \"prediction\" wants a string")
        rest = json.dumps({key: v for key, v in obj.items() if key != "prediction"})
        return Predicted(_jsonl_prompt(rest, path, n), prediction)
    if isinstance(obj, dict) and "messages" in obj:
        if not isinstance(obj["messages"], list) or not obj["messages"]:
            raise ValueError(f"{path}:{n}: \"messages\" wants a non-empty list of messages")
        try:
            return Chat(tuple(obj["messages"]))
        except OptionsError as e:
            raise ValueError(f"{path}:{n}: {e}") from None
    text = (obj.get("prompt") or obj.get("text")) if isinstance(obj, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{path}:{n}: wants an object with a non-empty \"prompt\" (or \"text\") string")
    return text

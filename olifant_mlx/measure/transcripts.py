"""Transcripts: a verifier's own greedy continuations of a prompt set, and drafters replayed on them.

Under greedy decoding which drafts a verifier accepts is a function of its own output alone:
a draft token is accepted iff it is the token the verifier emits there. So once a verifier's
greedy continuation of each prompt is known (generated once, cached), every drafter, k and
regime can be evaluated exactly without the verifier, through the engine's one loop with a
stand-in verifier that replays the transcript (engine.reference, as `--verifier reference`
replays a document's real continuation). The lead rule and a cost-aware drafter plan with a
fixed cost curve there, as in reference mode, so a live run compares equal only under the same
curve (tests/test_transcripts.py).

A transcript is cached per verifier (its identity digest), prompt and length under
`<cache>/transcripts/` (one JSON file per prompt, written atomically, 0600: prompts are user
text), so an interrupted generation resumes where it stopped.
"""
from __future__ import annotations

import json
from pathlib import Path

from olifant_mlx.engine import GenerationOptions, Session
from olifant_mlx.engine.request import prediction_ids
from olifant_mlx.files import cache_dir, read_regular, write_atomic
from olifant_mlx.measure.bench import ReferenceRunner, digest, unpredicted, verifier_identity

FORMAT = 1
LABEL = "simulated verifier: its own greedy transcript"


def transcript_file(verifier_id: str, prompt: str, max_tokens: int) -> Path:
    return cache_dir() / "transcripts" / verifier_id / f"{digest(prompt, max_tokens)}.json"


def make_transcripts(verifier, prompts, max_tokens: int, on_progress=None, drafter="none",
                     options: GenerationOptions | None = None) -> dict:
    """{prompt: transcript} for `verifier`: cached ones read, missing ones generated (greedy,
    KV cache, the engine's loop) and cached as each finishes. A transcript holds the prompt ids
    the engine fed, the tokens, their text and the verifier's EOS/BOS ids. `prompts`: texts, or
    {key text: prompt} for prompts of another kind (a Chat, or a bench.Predicted: a prompt with
    its prediction, whose ids its transcript then keeps as `prediction_ids` for the replay).
    `drafter` (a spec or a drafter) and `options` (its k; default plain decoding) only make the
    generation faster: greedy speculative output is plain decoding's, so the transcript and its
    cached file are the same."""
    vid = verifier_identity(verifier)
    out = {}
    items = prompts.items() if isinstance(prompts, dict) else ((p, p) for p in prompts)
    for i, (key, given) in enumerate(items):
        prompt, prediction = unpredicted(given)
        path = transcript_file(vid, key, max_tokens)
        t = _read(path)
        session = Session(verifier, drafter, (options or GenerationOptions(k=0)).replace(max_tokens=max_tokens))
        if t is None:
            r = session.generate(prompt, prediction=prediction)
            t = {"format": FORMAT, "verifier": verifier.name, "verifier_id": vid, "max_tokens": max_tokens,
                 "prompt": key, "prompt_ids": session.encode(prompt), "tokens": list(r.tokens),
                 "text": r.text, "eos_ids": list(verifier.eos_ids), "bos_id": verifier.bos_id}
            write_atomic(path, json.dumps(t))
        if prediction is not None:
            t = {**t, "prediction_ids": list(prediction_ids(session.verifier, prediction, len(t["prompt_ids"])))}
        out[key] = t
        if on_progress:
            on_progress(i + 1, len(prompts))
    return out


def _read(path: Path):
    try:
        t = json.loads(read_regular(path))
    except (OSError, ValueError):
        return None      # missing, or cut short before the rename could not happen: generate again
    return t if isinstance(t, dict) and t.get("format") == FORMAT else None


def write_transcript_set(path, transcripts: dict, tasks: dict | None = None) -> Path:
    """Every transcript in one JSON file (e.g. committed under docs/), with each prompt's task."""
    task_of = {p: t for t, ps in (tasks or {}).items() for p in ps}
    items = [{**t, "task": task_of.get(p)} for p, t in transcripts.items()]
    return write_atomic(Path(path), json.dumps({"format": FORMAT, "transcripts": items}, indent=1), 0o644)


def read_transcript_set(path) -> list:
    """The transcripts of a file write_transcript_set wrote (a clear error naming the file otherwise)."""
    try:
        data = json.loads(read_regular(path))
        items = data["transcripts"]
        assert data.get("format") == FORMAT and all({"prompt", "prompt_ids", "tokens"} <= set(t) for t in items)
    except (ValueError, KeyError, TypeError, AssertionError):
        raise ValueError(f"{path}: not a transcript file (bench --transcripts-out writes them)") from None
    return items


class TranscriptRunner(ReferenceRunner):
    """A sweep's runner over transcripts: each prompt's verifier output is its transcript,
    replayed through the engine's loop (ReferenceRunner.replay); no time is a verifier's. With
    `predicted`, each replay is given its transcript's prediction (`prediction_ids`), as the
    live request was: a drafter built on the hybrid drafts from it (drafters.prediction)."""
    label = LABEL

    def __init__(self, tokenizer, transcripts: dict, options=None, predicted: bool = False):
        super().__init__(tokenizer, {}, options)
        self.transcripts = transcripts
        self.predicted = predicted
        first = next(iter(transcripts.values()), {})
        self.name = f"transcript:{first.get('verifier', '?')}"
        self.identity = digest("transcript", *sorted({t.get("verifier_id", "") for t in transcripts.values()}),
                               *(("prediction",) if predicted else ()))

    def prompt_id(self, prompt) -> str:
        t = self.transcripts[prompt]
        return digest(prompt, t["tokens"])

    def run(self, prompt, drafter, k, kv, max_tokens):
        t = self.transcripts[prompt]
        return self.replay(t["prompt_ids"], t["tokens"][:max_tokens], drafter, k, kv,
                           eos_ids=t.get("eos_ids", ()), bos_id=t.get("bos_id"),
                           prediction=t.get("prediction_ids") if self.predicted else None)

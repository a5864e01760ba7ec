"""Time to first token of each turn of a chat, with and without prompt cache reuse.

    python benchmarks/prompt_cache.py [--model smollm2-135m] [--draft auto] [--turns 8]
        [--max-tokens 40] [-k 8] [--out docs/bench-prompt-cache/smollm2-135m.json]

One conversation of `--turns` questions, KV regime, the given drafter. Each turn is answered
twice, in alternating order: by a Session that keeps the conversation's PromptCache (it prefills
only the tokens past the prefix the cache shares with the prompt) and by a Session that reads the
whole conversation afresh. Per turn: prompt tokens, tokens prefilled, prefill seconds and time
to first token (the stream's start to its first emitted token) of both. The two answers must be
token for token the same (asserted): the conversation goes on with that answer.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from olifant_mlx.engine import Chat, GenerationOptions, PromptCache, Session
from olifant_mlx.files import write_atomic
from olifant_mlx.verifier import load_verifier

QUESTIONS = (
    "Draft a confidentiality clause for a software licence agreement.",
    "Make it shorter.",
    "Add a sentence on how long the obligation lasts.",
    "Now write a clause on the governing law.",
    "Which courts should have jurisdiction?",
    "Write a limitation of liability clause.",
    "Summarise the three clauses in one sentence each.",
    "Give the agreement a title.",
)


def timed(session, chat, opts, cache):
    """(tokens, text, time to first token, Stats) of one answer."""
    t0 = time.perf_counter()
    ttft, tokens, text, last = None, [], [], None
    for r in session.stream(session.plan(chat, opts, cache=cache)):
        if ttft is None and r.tokens:
            ttft = time.perf_counter() - t0
        tokens += r.tokens
        text.append(r.text)
        last = r
    return tokens, "".join(text), ttft, last.stats


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--draft", default="auto")
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("-k", type=int, default=8)
    p.add_argument("--out", default="docs/bench-prompt-cache/smollm2-135m.json")
    args = p.parse_args(argv)
    verifier = load_verifier(args.model)
    opts = GenerationOptions(k=args.k, max_tokens=args.max_tokens)
    reusing, fresh = Session(verifier, args.draft, opts), Session(verifier, args.draft, opts)
    for s in (reusing, fresh):                            # first-call costs
        s.generate("Hello", opts.replace(max_tokens=4))
    cache, chat, rows = PromptCache(), Chat(()), []
    load_before = os.getloadavg()
    for turn in range(args.turns):
        chat = chat.then("user", QUESTIONS[turn % len(QUESTIONS)])
        runs = {}
        order = ("reuse", "fresh") if turn % 2 == 0 else ("fresh", "reuse")
        for name in order:
            runs[name] = timed(reusing, chat, opts, cache) if name == "reuse" else timed(fresh, chat, opts, None)
        (tok_r, text, ttft_r, st_r), (tok_f, _, ttft_f, st_f) = runs["reuse"], runs["fresh"]
        assert tok_r == tok_f, f"turn {turn + 1}: the answers differ with and without reuse"
        cached = st_r.extra.get("cached_tokens", 0)
        rows.append({"turn": turn + 1, "prompt_tokens": st_r.prompt_tokens,
                     "prefilled_reuse": st_r.prompt_tokens - cached, "prefilled_fresh": st_f.prompt_tokens,
                     "prefill_s_reuse": round(st_r.prefill_s, 4), "prefill_s_fresh": round(st_f.prefill_s, 4),
                     "ttft_s_reuse": round(ttft_r, 4), "ttft_s_fresh": round(ttft_f, 4),
                     "answer_tokens": len(tok_r), "identical": True})
        print(json.dumps(rows[-1]), flush=True)
        chat = chat.then("assistant", text)
    result = {"command": "python benchmarks/prompt_cache.py " + " ".join(argv or sys.argv[1:]),
              "model": args.model, "drafter": reusing.spec.text if reusing.spec else args.draft,
              "k": args.k, "max_tokens": args.max_tokens, "regime": "kv",
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "cpu_count": os.cpu_count(), "turns": rows}
    write_atomic(args.out, json.dumps(result, indent=1) + "\n", mode=0o644)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The revision workload: clauses revised on instruction, the answer mostly a copy of the clause.

    python benchmarks/revision_workload.py build                       # docs/workload/revisions.jsonl
    python benchmarks/revision_workload.py transcripts --model smollm2-135m
    python benchmarks/revision_workload.py curve --model qwen2.5-coder-1.5b   # KV passes of 1..33 tokens
    python benchmarks/revision_workload.py tables [--verifiers ...] [--ks 3 5 8 16 32] [--json FILE]
    python benchmarks/revision_workload.py live --model qwen2.5-coder-1.5b [--n-prompts 8] [--rounds 2]

`build` picks 30 clauses from the shared corpora's validation splits only (never a test split):
articles of EU acts (EUR-Lex-Sum: one paragraph of an article's body, as it stands in the act,
40-200 words, a sentence with "shall") and paragraphs of medical articles (SumPubMed), one clause
per document, and writes an instruction that fits each, chosen by rules over its text: change a
number that is there (a time limit, an amount, a date, a percentage) or a party/term named there,
make an obligation between two parties named there mutual, add a proviso or a caveat, delete a
sentence, restructure (move a condition first, split a sentence), and, the hard case, rewrite in
plain language. Every prompt is the one `revise` sends (olifant_mlx.revise.revision_prompt: the
chat template for instruct models, a plain layout for the base model Gemma-3-270M) with room for
`revise.max_tokens_for` tokens, and the clause is the request's prediction.

`transcripts` records each verifier's greedy answer (docs/transcripts/revision-VERIFIER.json; drafted
with the prediction, which leaves the output as plain decoding's), each with its prediction's ids;
`curve` measures a verifier's KV cost curve out to 33-token passes (k 32) on this machine into
docs/results/curves/VERIFIER-k32.json, the load average at start and end kept in it; `tables`
replays every drafter on the transcripts (no verifier runs: measure.transcripts), those named in
PREDICTED with each revision's prediction, the planners planning with each curve's cost, and models
the speedups under this CPU's curve and under the Apple-silicon 4-bit curve built from published
measurements (docs/results/curves/apple-silicon-4bit.json): docs/results/revision-workload.json
and a Markdown table. `live` writes the prompts with their predictions (benchmarks/out/revision/
live/revisions.jsonl) and times them with `bench --experiment live` (plain, lookup, and auto with
the prediction, k 32; alternating rounds; outputs checked identical) into
docs/results/revision-live.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from olifant_mlx.files import write_atomic

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "docs" / "workload" / "revisions.jsonl"
CURVES = ROOT / "docs" / "results" / "curves"
APPLE = CURVES / "apple-silicon-4bit.json"
OUT = ROOT / "benchmarks" / "out" / "revision"
LEGAL_VALID = "legal/eurlexsum.valid.txt.xz"
MEDICAL_VALID = "medical/sumpubmed.valid.txt.xz"
MIN_WORDS, MAX_WORDS = 40, 200
# how many revisions of each kind, per scenario (30 in all)
KINDS = {"legal": {"change_number": 4, "change_name": 2, "mutual": 3, "proviso": 3, "delete_sentence": 2,
                   "restructure": 2, "plain_language": 3},
         "medical": {"change_number": 2, "change_name": 1, "proviso": 2, "delete_sentence": 2, "restructure": 1,
                     "plain_language": 3}}
GROUPS = ("legal", "medical", "plain")     # the tables' groups: plain-language rewrites, both scenarios, apart
SPECS = {"lookup": "lookup", "ngram-4": "ngram:4", "hybrid": "hybrid:{model}",
         "adaptive-hybrid": "adaptive:hybrid:{model}", "olifant": "olifant:{model}", "rest": "rest:{sfx}",
         "auto": "adaptive:hybrid:{model}+rest:{sfx}"}
PREDICTED = {"prediction": "prediction", "auto+prediction": "adaptive:hybrid:{model}+rest:{sfx}"}


def documents(name: str) -> list[str]:
    from olifant_mlx.draftmodel.corpus import iter_documents
    from olifant_mlx.measure.corpora import shared_dir

    return list(iter_documents(str(shared_dir() / "corpora" / name)))


# ---- choosing the clauses and writing their instructions ----------------------------------------

SENTENCE = re.compile(r"(?<=[.;])\s+(?=[A-Z(]|[a-z]\w+ )")
ABBREVIATIONS = re.compile(r"\b(No|Art|p|e\.g|i\.e|et al|Nos|para|approx|vs|Fig|ca)\.$")


def sentences(text: str) -> list[str]:
    """The clause's sentences (a full stop followed by a space and a capital, or in the lower-cased
    medical text a word; not after an abbreviation such as 'No.')."""
    out, start = [], 0
    for m in re.finditer(r"\.\s+", text):
        before = text[start:m.start() + 1]
        nxt = text[m.end():m.end() + 1]
        if ABBREVIATIONS.search(before) or not nxt or not (nxt.isupper() or nxt.isalpha()):
            continue
        if re.search(r"\d\.$", before) and nxt.isdigit():
            continue
        out.append(before.strip())
        start = m.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


def opening(sentence: str, words: int = 5) -> str:
    return " ".join(sentence.split()[:words])


NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
                "nine": 9, "ten": 10, "twelve": 12, "eighteen": 18, "twenty": 20, "thirty": 30, "sixty": 60}
WORDS_OF = {v: k for k, v in NUMBER_WORDS.items()} | {15: "fifteen", 24: "twenty-four", 9: "nine"}
LONGER = {1: 2, 2: 3, 3: 6, 5: 10, 6: 12, 7: 10, 10: 15, 12: 18, 14: 21, 15: 20, 20: 30, 30: 45, 45: 60, 60: 90,
          90: 120, 120: 180}
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def change_number(clause: str, scenario: str):
    """A number that is in the clause, changed: a time limit (days, weeks, months, years), an
    amount in euro, a date's year, or (medical) a percentage."""
    if scenario == "medical":
        found = (m for m in re.finditer(r"(?<=\s)(?<!\d\s)([1-9]\d?(?:\.\d)?)\s?%", clause)
                 if m.group(1) != "95")                  # not a confidence level
        m = next(found, None)
        if m:
            old = float(m.group(1))
            new = old - 4 if old > 10 else old + 2
            fmt = (lambda x: f"{x:g}%")
            return f"Correct the figure of {fmt(old)} to {fmt(new)}; it was transcribed wrongly."
        return None
    m = re.search(r"\b(\d{1,3}|" + "|".join(NUMBER_WORDS) + r") (working days|days|weeks|months|years)\b", clause)
    if m:
        word = not m.group(1).isdigit()
        n = NUMBER_WORDS[m.group(1)] if word else int(m.group(1))
        new = LONGER.get(n, 2 * n)
        shown = WORDS_OF.get(new, str(new)) if word else str(new)
        return f"Change the period of {m.group(1)} {m.group(2)} to {shown} {m.group(2)}."
    m = re.search(r"\bEUR (\d{1,3}(?: \d{3})*)\b", clause)
    if m:
        amount = int(m.group(1).replace(" ", "")) * 2
        return f"Raise the amount of EUR {m.group(1)} to EUR {format(amount, ',').replace(',', ' ')}."
    m = re.search(r"\b(?:[Bb]y|[Bb]efore|[Uu]ntil|[Ff]rom|later than) (\d{1,2}) (" + "|".join(MONTHS)
                  + r") ((?:19|20)\d\d)\b", clause)
    if m:          # a deadline or a start date, not the date of an act cited
        date = m.group(0).split(" ", 1 + m.group(0).startswith("later"))[-1]
        return f"Move the date {date} to {m.group(1)} {m.group(2)} {int(m.group(3)) + 1}."
    return None


# rarer names first, so that not every change is the Commission's
LEGAL_NAMES = (("the court or tribunal", "the competent court"), ("the applicant", "the requesting party"),
               ("the operator", "the licence holder"), ("the manufacturer", "the producer"),
               ("the competent authorities", "the national supervisory authorities"),
               ("the competent authority", "the national supervisory authority"), ("the Authority", "the Board"),
               ("the Council", "the Board of Governors"), ("the Commission", "the Agency"))
MEDICAL_NAMES = (("patients", "participants"), ("we", "the authors"))


def change_name(clause: str, scenario: str):
    """A party or term named in the clause (at least once), replaced throughout."""
    for old, new in LEGAL_NAMES if scenario == "legal" else MEDICAL_NAMES:
        if re.search(r"\b" + re.escape(old) + r"\b", clause):
            return f"Replace \"{old}\" with \"{new}\" wherever it appears, adjusting the grammar where needed."
    return None


PARTY = (r"(?:the Commission|the Member States?|Member States|the Agency|the Council|the European Parliament|"
         r"the competent authorit(?:y|ies)(?: of [A-Za-z ]+?)?|the court or tribunal|the claimant|the defendant|"
         r"the applicant|the operator|the manufacturer|the Authority|the Committee|the Secretary-General|"
         r"the [A-Z][a-z]+ (?:Agency|Authority|Office|Board|Centre|Bank|Supervisor))")
DUTY = re.compile(r"(?P<x>" + PARTY + r") shall(?: \w+)? (?P<verb>inform|notify|consult|provide|communicate|send|"
                  r"forward|transmit|supply|submit|assist|cooperate with)\b(?P<rest>[^.;]{0,80}?)\b(?P<y>" + PARTY
                  + r")", re.IGNORECASE)


def mutual(clause: str, scenario: str):
    """An obligation of one party named here towards another named here, made mutual."""
    m = DUTY.search(clause)
    if not m or m.group("x").lower().rstrip("s") == m.group("y").lower().rstrip("s"):
        return None
    x, y = (lower_article(m.group(p)) for p in ("x", "y"))
    return f"Make the obligation of {x} towards {y} mutual, so that it binds {y} towards {x} in the same way."


def lower_article(party: str) -> str:
    return "the" + party[3:] if party.startswith("The ") else party


def proviso(clause: str, scenario: str):
    """A proviso fitting the clause: (legal) the extension of a time limit that is there, (medical)
    a caveat on the findings."""
    if scenario == "medical":
        return "Add a final sentence saying that these findings still need to be confirmed by independent studies."
    m = re.search(r"\b(?:within|not later than|no later than) (\d{1,3}|" + "|".join(NUMBER_WORDS)
                  + r") (days|weeks|months)\b", clause)
    if m:
        return (f"Add a proviso that the period of {m.group(1)} {m.group(2)} may be extended once, by the same "
                f"period, on a reasoned request made before it expires.")
    return None


def delete_sentence(clause: str, scenario: str):
    """One sentence of a clause of several (the last), deleted."""
    parts = sentences(clause)
    if len(parts) < 2 or len(parts[-1].split()) < 6:
        return None
    return f"Delete the sentence beginning \"{opening(parts[-1])}\"; keep the rest as it is."


def restructure(clause: str, scenario: str):
    """A condition moved to the front of its sentence, or a long sentence split in two."""
    for s in sentences(clause):
        m = re.search(r", (where|if|unless|provided that|in so far as|when) ", s)
        if m and m.start() > 20 and not s.lower().startswith(m.group(1)):
            cond = opening(s[m.start() + 2:], 4)
            return f"Move the condition beginning \"{cond}\" to the start of its sentence."
    longest = max(sentences(clause), key=lambda s: len(s.split()))
    if len(longest.split()) >= 40 and re.search(r", (and|which|but|whereas|while) ", longest):
        return f"Split the sentence beginning \"{opening(longest)}\" into two sentences."
    return None


def plain_language(clause: str, scenario: str):
    if scenario == "legal":
        return ("Rewrite the clause in plain English for a reader without legal training, keeping every "
                "obligation, time limit and amount.")
    return "Rewrite the paragraph in plain language for a patient with no medical training, keeping every number."


WRITERS = {"change_number": change_number, "change_name": change_name, "mutual": mutual, "proviso": proviso,
           "delete_sentence": delete_sentence, "restructure": restructure, "plain_language": plain_language}


def legal_clauses(acts: list[str]):
    """(act index, line index, text) of every paragraph of an act's articles that fits: 40-200
    words, a whole paragraph ending with a full stop, with "shall", not a recital or a list item."""
    for n, act in enumerate(acts):
        lines = act.split("\n")
        first = next((i for i, ln in enumerate(lines) if re.fullmatch(r"Article 1", ln.strip())), None)
        if first is None:
            continue
        for i in range(first + 2, len(lines)):
            ln = lines[i]
            if re.match(r"(ANNEX|Done at)", ln):
                break
            if MIN_WORDS <= len(ln.split()) <= MAX_WORDS and ln.endswith(".") and " shall " in ln \
                    and not ln.startswith("(") and "Annex" not in ln[:40]:
                yield n, i, ln


def medical_clauses(articles: list[str]):
    """(article index, line index, text) of every paragraph of 40-200 words that ends a sentence."""
    for n, doc in enumerate(articles):
        for i, ln in enumerate(doc.split("\n")):
            if MIN_WORDS <= len(ln.split()) <= MAX_WORDS and ln.rstrip().endswith(".") and len(sentences(ln)) >= 2:
                yield n, i, ln


def build_items(acts: list[str], articles: list[str]) -> list[dict]:
    """The revisions: per scenario and kind (KINDS, in order), the first clauses in corpus order
    whose text the kind's writer finds what it needs in, one clause per document."""
    items = []
    for scenario, source, clauses in (("legal", LEGAL_VALID, list(legal_clauses(acts))),
                                      ("medical", MEDICAL_VALID, list(medical_clauses(articles)))):
        used = set()
        for kind, count in KINDS[scenario].items():
            found = 0
            for doc, line, text in clauses:
                if found == count:
                    break
                if doc in used:
                    continue
                instruction = WRITERS[kind](text, scenario)
                if instruction is None:
                    continue
                used.add(doc)
                found += 1
                items.append({"id": f"{scenario}-{kind}-{found}", "scenario": scenario, "kind": kind,
                              "instruction": instruction, "clause": text, "words": len(text.split()),
                              "source": {"file": source, "document": doc, "paragraph": line}})
            if found < count:
                raise SystemExit(f"only {found} {scenario} clauses for {kind}: the corpus changed?")
    return items


def cmd_build(args) -> None:
    items = build_items(documents(LEGAL_VALID), documents(MEDICAL_VALID))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items), 0o644)
    kinds = {k: sum(it["kind"] == k for it in items) for k in WRITERS}
    print(f"wrote {out}: {len(items)} revisions, {kinds}", file=sys.stderr)


def read_workload(path=WORKLOAD) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def group_of(item: dict) -> str:
    return "plain" if item["kind"] == "plain_language" else item["scenario"]


# ---- the prompts, as `revise` sends them ---------------------------------------------------------

def _key(prompt) -> str:
    """A transcript's prompt as text: a Chat's messages as JSON, a text as it is."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt.messages)


def prompts_for(session, items) -> dict:
    """{item id: Predicted(the Chat or, for a base model, the text `revise` sends; the clause)}."""
    from olifant_mlx.measure.bench import Predicted
    from olifant_mlx.revise import revision_prompt

    return {it["id"]: Predicted(revision_prompt(session, it["instruction"], it["clause"]), it["clause"])
            for it in items}


def cmd_transcripts(args) -> None:
    """Each revision's greedy answer by the verifier, drafted (the same output, sooner)."""
    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.measure.transcripts import make_transcripts, write_transcript_set
    from olifant_mlx.revise import max_tokens_for
    from olifant_mlx.verifier import load_verifier

    verifier = load_verifier(args.model)
    session = Session(verifier, "none")
    items = read_workload()
    prompts = prompts_for(session, items)
    transcripts, tasks = {}, {}
    for n, it in enumerate(items, 1):
        p = prompts[it["id"]]
        key = _key(p.prompt)
        limit = max_tokens_for(len(verifier.identity.encode(it["clause"])))
        t = make_transcripts(verifier, {key: p}, limit, drafter=args.draft, options=GenerationOptions(k=args.k))[key]
        transcripts[key] = {**t, "id": it["id"], "kind": it["kind"], "scenario": it["scenario"]}
        tasks.setdefault(group_of(it), []).append(key)
        print(f"  {n}/{len(items)} {it['id']}: {len(t['tokens'])} tokens (max {limit})", file=sys.stderr, flush=True)
    path = ROOT / "docs" / "transcripts" / f"revision-{args.model}.json"
    write_transcript_set(path, transcripts, tasks)
    print(f"wrote {path}", file=sys.stderr)


def cmd_curve(args) -> None:
    """The verifier's KV cost curve out to `--max-new`-token passes, on this machine."""
    from olifant_mlx.measure.curves import measure_curve, save_curve
    from olifant_mlx.verifier import load_verifier

    verifier = load_verifier(args.model)
    curve = measure_curve(verifier, read_workload()[0]["clause"], max_new=args.max_new, contexts=tuple(args.contexts),
                          repeats=args.repeats, uncached=False)
    path = save_curve(curve, CURVES / f"{args.model}-k32.json")
    print(f"wrote {path} (load average {curve['load_average_start']:.2f} at the start, "
          f"{curve['load_average']:.2f} at the end)", file=sys.stderr)


# ---- the Apple-silicon 4-bit curves, from published measurements ---------------------------------

MLX3791 = "https://github.com/ml-explore/mlx/pull/3791"
MLX3839 = "https://github.com/ml-explore/mlx/issues/3839"
MLX3863 = "https://github.com/ml-explore/mlx/pull/3863"
MLX4265 = "https://github.com/ml-explore/mlx/issues/4265"
# mlx#3791, Apple M5 Max 128 GB (applegpu_g17s), macOS 26: a 70B dense llama-architecture model (LLM360 K2-V2),
# affine 4-bit, group 64, whole-model forward of M rows against a warm 400-token KV cache, min of 6 reps, in ms;
# the PR's column (qmv batch limit raised to 16 on M5-class GPUs; merged)
M5MAX_70B_MS = {1: 75.9, 3: 84.8, 5: 112.7, 8: 170.8, 12: 241.5, 16: 296.0}
M5MAX_70B_QMM_12_MS = 294.6      # the same forward at 12 rows before the PR: the qmm path
# mlx#3863, Apple M3 Max: one 5120->17408 4-bit matmul through qmm (BM=32 tiles), ms: flat from 17 to 32 rows,
# then a second 32-row tile
QMM_32_MS, QMM_33_MS = 0.513, 1.002
# mlx#4265, Apple M3 Ultra, mlx 0.31.2 and 0.32.0 alike: one (M,5120)x(17408,5120)^T 4-bit matmul, queue-batched,
# relative to 1 row: near-linear to 8 rows
M3ULTRA_REL = {1: 1.0, 2: 1.83, 4: 3.26, 7: 5.28, 8: 6.12, 16: 6.32}
# mlx#3839, Apple M4 Pro 24 GB, mlx 0.32.0 (qmv_wide): one 4-bit matmul of each shape, relative to 1 row
M4PRO_REL = {"4096x6144": {2: 1.25, 3: 1.48, 4: 1.14, 6: 1.47, 8: 1.73},
             "4096x4096": {2: 1.20, 3: 1.35, 4: 1.57, 6: 1.99, 8: 2.01},
             "4096x24576": {2: 1.03, 3: 1.22, 4: 1.47, 6: 2.07, 8: 2.69},
             "12288x4096": {2: 1.18, 3: 1.40, 4: 1.52, 6: 2.05, 8: 2.46}}
# a Mistral-7B layer's weights of each shape (millions): q,k,v; o; gate+up (4096x28672, nearest 4096x24576);
# down (14336x4096, nearest 12288x4096)
M4PRO_WEIGHTS = {"4096x6144": 25.2, "4096x4096": 16.8, "4096x24576": 117.4, "12288x4096": 58.7}
MAX_ROWS = 33


def _interpolated(points: dict, n: int) -> float:
    lo = max(m for m in points if m <= n)
    hi = min(m for m in points if m >= n)
    return points[lo] if lo == hi else points[lo] + (points[hi] - points[lo]) * (n - lo) / (hi - lo)


def _curve(what: str, seconds: dict, kinds: dict) -> dict:
    """A cost curve (curves.load_curve's layout, KV only, context 400) with each point's kind."""
    return {"format": 1, "what": what, "verifier": "70B dense, affine 4-bit (published)", "max_new": MAX_ROWS,
            "machine": {"system": "Darwin", "arch": "arm64", "published": True},
            "load_average": None, "kv": {"400": {str(n): round(s, 6) for n, s in seconds.items()}}, "uncached": {},
            "points": {str(n): kinds[n] for n in seconds}}


def apple_curves() -> dict:
    """Two Apple-silicon curves of a verifier pass of 1..33 rows: 'apple', the M5 Max's 70B
    4-bit whole forward as published (mlx#3791), between its rows interpolated, past 16 rows the
    qmm path's flat cost and its second 32-row tile at 33 (mlx#3791, mlx#3863), extrapolated;
    'apple-steep', the same 1-row forward growing as one 4-bit matmul grew on an M3 Ultra where the
    weight read was not amortized (mlx#4265): a pessimistic bound."""
    ms, kinds = {}, {}
    for n in range(1, MAX_ROWS + 1):
        if n in M5MAX_70B_MS:
            ms[n], kinds[n] = M5MAX_70B_MS[n], f"measured: {MLX3791}"
        elif n < 16:
            ms[n], kinds[n] = _interpolated(M5MAX_70B_MS, n), "interpolated between the measured rows either side"
        elif n <= 32:
            ms[n] = M5MAX_70B_QMM_12_MS
            kinds[n] = (f"extrapolated: past the qmv limit of 16 rows the qmm path, ~flat in M on dense 70Bs "
                        f"({MLX3791}: {M5MAX_70B_QMM_12_MS} ms at 12 rows; {MLX3863}: one matmul's qmm time "
                        f"equal from 17 to 32 rows)")
        else:
            ms[n], kinds[n] = M5MAX_70B_QMM_12_MS * QMM_33_MS / QMM_32_MS, (
                f"extrapolated: a second 32-row qmm tile ({MLX3863}: {QMM_32_MS} -> {QMM_33_MS} ms from 32 to 33 "
                f"rows), the whole forward assumed to grow as that matmul")
    steep, steep_kinds = {}, {}
    for n in range(1, MAX_ROWS + 1):
        rel = _interpolated(M3ULTRA_REL, min(n, 16)) * (QMM_33_MS / QMM_32_MS if n == 33 else 1.0)
        steep[n] = M5MAX_70B_MS[1] * rel
        how = "measured" if n in M3ULTRA_REL else "interpolated" if n < 16 else "flat past 16, extrapolated"
        steep_kinds[n] = (f"constructed: the M5 Max's 1-row forward ({MLX3791}) times one 4-bit matmul's growth "
                          f"on an M3 Ultra ({MLX4265}: {how}"
                          f"{'; 33 rows: a second qmm tile, ' + MLX3863 if n == 33 else ''})")
    total = sum(M4PRO_WEIGHTS.values())
    composite = {n: round(sum(M4PRO_WEIGHTS[s] / total * M4PRO_REL[s][n] for s in M4PRO_REL), 3)
                 for n in (2, 3, 4, 6, 8)}
    return {
        "what": "Apple-silicon cost curves of a 4-bit verifier's pass (seconds of a KV pass of n new tokens), "
                "built from published measurements of MLX 0.32's small-M quantized matmul; nothing here was "
                "measured by this project. Drafting time in the modelled speedups is this project's CPU's.",
        "built_by": "python benchmarks/revision_workload.py apple-curve",
        "sources": {
            MLX3791: "M5 Max 128 GB, 70B dense 4-bit (K2-V2), whole forward at 1/3/5/8/12/16 rows vs a warm "
                     "400-token cache, min of 6: 75.9/84.8/112.7/170.8/241.5/296.0 ms (qmv limit 16, merged); "
                     "before it 76.4/85.0/108.2/167.9/294.6 (qmm at 12) ms; a later comment: on dense 70Bs "
                     "force-qmm is ~flat in M",
            MLX3863: "M3 Max, one 5120->17408 4-bit matmul: qmm 0.513 ms at 17-32 rows, 1.002 ms at 33",
            MLX4265: "M3 Ultra, mlx 0.31.2 and 0.32.0, one (M,5120)x(17408,5120)^T 4-bit matmul, queue-batched: "
                     "1.00/1.83/3.26/5.28/6.12/6.32x at 1/2/4/7/8/16 rows (bf16 flat at 2x from 2 rows)",
            MLX3839: "M4 Pro 24 GB, mlx 0.32.0 (qmv_wide), one 4-bit matmul per shape, relative to 1 row at "
                     "2/3/4/6/8 rows (the cross-check below)"},
        "cross_check": {
            "what": "a Mistral-7B layer's 4-bit matmuls on an M4 Pro (mlx#3839's per-shape times weighted by each "
                    "shape's weights; matmuls only), relative to 1 row, beside the M5 Max 70B whole forward's",
            "m4pro_7b_matmuls": composite,
            "m5max_70b_forward": {n: round(_interpolated(M5MAX_70B_MS, n) / M5MAX_70B_MS[1], 3) for n in composite}},
        "curves": {"apple": _curve("M5 Max, 70B 4-bit whole forward (mlx#3791), interpolated and extrapolated as "
                                   "each point says", {n: s / 1e3 for n, s in ms.items()}, kinds),
                   "apple-steep": _curve("pessimistic: the M5 Max's 1-row forward growing as one 4-bit matmul "
                                         "on an M3 Ultra (mlx#4265)", {n: s / 1e3 for n, s in steep.items()},
                                         steep_kinds)}}


def cmd_apple_curve(args) -> None:
    write_atomic(APPLE, json.dumps(apple_curves(), indent=1) + "\n", 0o644)
    print(f"wrote {APPLE}", file=sys.stderr)


# ---- the tables: every drafter replayed on the transcripts --------------------------------------

def curves_for(verifier: str) -> dict:
    """{name: cost curve}: this CPU's for the verifier (KV passes to 33 tokens; the committed
    9-token one, extended by its fit, where the long one is missing) and the Apple-silicon ones."""
    from olifant_mlx.measure.curves import load_curve

    cpu = CURVES / f"{verifier}-k32.json"
    out = {"cpu": load_curve(cpu if cpu.is_file() else CURVES / f"{verifier}.json")}
    apple = json.loads(APPLE.read_text())
    for name, c in apple["curves"].items():
        out[name] = load_curve_data(c)
    return out


def load_curve_data(curve: dict) -> dict:
    """A curve held inside another file (the Apple one's), keys back to ints as load_curve makes them."""
    return {**curve, "kv": {int(ctx): {int(n): float(s) for n, s in row.items()} for ctx, row in curve["kv"].items()},
            "uncached": {}}


def replay_options(curve: dict):
    """What the replay's planners plan with: the curve's fitted line, fixed, drafting time left
    out (so that plans do not depend on this machine's timing)."""
    from olifant_mlx.measure.bench import FixedCost, reference_options
    from olifant_mlx.measure.curves import fit

    return reference_options(FixedCost(*fit(curve), draft_s=0.0))


def cmd_tables(args) -> None:
    from olifant_mlx.drafters import build_drafter
    from olifant_mlx.measure.bench import aggregate, sweep
    from olifant_mlx.measure.corpora import task_corpus_files
    from olifant_mlx.measure.curves import add_modelled
    from olifant_mlx.measure.transcripts import TranscriptRunner, read_transcript_set
    from olifant_mlx.verifier import load_tokenizer

    rows, cpu_files = [], {}
    out = OUT / "tables"
    out.mkdir(parents=True, exist_ok=True)
    for v in args.verifiers:
        tok = load_tokenizer(v)
        ts = read_transcript_set(ROOT / "docs" / "transcripts" / f"revision-{v}.json")
        for curve_name, curve in curves_for(v).items():
            if curve_name not in args.curves:
                continue
            if curve_name == "cpu":
                cpu_files[v] = {"max_new": curve["max_new"], "load_average": [curve.get("load_average_start"),
                                                                              curve["load_average"]]}
            for predicted, specs in ((False, SPECS), (True, PREDICTED)):
                got = []
                for scenario in ("legal", "medical"):
                    mine = {t["prompt"]: t for t in ts if t["scenario"] == scenario}
                    by_group = {g: [p for p, t in mine.items() if t["task"] == g] for g in GROUPS}
                    files = task_corpus_files(scenario, tok, v, OUT / "models" / scenario, args.train_tokens)
                    drafters = {name: build_drafter(spec.format(**files), tok) for name, spec in specs.items()}
                    runner = TranscriptRunner(tok, mine, replay_options(curve), predicted=predicted)
                    results = out / f"{v}-{curve_name}-{scenario}{'-predicted' if predicted else ''}.jsonl"
                    if not args.resume:
                        results.unlink(missing_ok=True)
                    got += sweep(runner, {g: ps for g, ps in by_group.items() if ps}, drafters, args.ks, ["kv"],
                                 args.max_tokens, results)
                    print(f"  {v} {curve_name} {scenario} {'with' if predicted else 'without'} predictions: "
                          f"{len(got)} rows", file=sys.stderr, flush=True)
                cells = aggregate(got)
                add_modelled(cells, got, curve)
                rows += [{"verifier": v, "curve": curve_name, "group": c["task"], "drafter": c["strategy"],
                          "k": c["k"], "prompts": c["prompts"],
                          **{m: c.get(m) for m in ("acceptance", "mean_accepted_length", "tokens_per_pass",
                                                   "modelled_speedup")}}
                         for c in cells if c["strategy"] != "plain"]
    print(table(rows))
    summary = summarize(rows)
    print(summary_table(summary))
    if args.json:
        write_atomic(Path(args.json), json.dumps({
            "what": "every drafter replayed on each verifier's greedy revisions (docs/transcripts/revision-"
                    "VERIFIER.json), KV cache; tokens per pass exact, speedups modelled under each curve (its "
                    "planners planning with that curve's fitted line); 'plain' groups the plain-language "
                    "rewrites of both scenarios",
            "max_tokens": args.max_tokens, "regime": "kv", "specs": SPECS, "predicted_specs": PREDICTED,
            "curves": {"cpu": "docs/results/curves/VERIFIER-k32.json (this machine, measured; "
                              "VERIFIER.json, 1-9 tokens and its fit beyond, where that is missing)",
                       "cpu_files": cpu_files,
                       **{n: f"{APPLE.relative_to(ROOT)}: {c['what']}"
                          for n, c in json.loads(APPLE.read_text())["curves"].items()}},
            "summary": summary, "rows": rows}, indent=1) + "\n", 0o644)
        print(f"wrote {args.json}", file=sys.stderr)


SUMMARY_KS = (8, 16, 32)


def summarize(rows) -> list:
    """Per verifier, group and drafter: tokens per pass at k 8, 16 and 32 (planned under this
    CPU's curve) and, under each curve, the best k and its modelled speedup (its own plans)."""
    by = {(r["verifier"], r["group"], r["drafter"], r["curve"], r["k"]): r for r in rows}
    out = []
    for v, g, d in dict.fromkeys((r["verifier"], r["group"], r["drafter"]) for r in rows):
        row = {"verifier": v, "group": g, "drafter": d,
               "prompts": next(r["prompts"] for r in rows if (r["verifier"], r["group"], r["drafter"]) == (v, g, d))}
        for k in SUMMARY_KS:
            r = by.get((v, g, d, "cpu", k))
            row[f"tokens_per_pass_k{k}"] = round(r["tokens_per_pass"], 3) if r else None
        for c in dict.fromkeys(r["curve"] for r in rows):
            mine = [r for r in rows if (r["verifier"], r["group"], r["drafter"], r["curve"]) == (v, g, d, c)
                    and r["modelled_speedup"] is not None]
            best = max(mine, key=lambda r: r["modelled_speedup"], default=None)
            row[c] = {"best_k": best and best["k"], "modelled_speedup": best and round(best["modelled_speedup"], 3),
                      "tokens_per_pass": best and round(best["tokens_per_pass"], 3)}
        out.append(row)
    return out


def summary_table(summary) -> str:
    curves = [c for c in summary[0] if isinstance(summary[0][c], dict)] if summary else []
    head = ("| verifier | group | drafter | tok/pass k 8, 16, 32 | "
            + " | ".join(f"{c}: best k, modelled" for c in curves) + " |")
    lines = [head, "|---|---|---|---|" + "---|" * len(curves)]
    for r in summary:
        tpp = ", ".join("—" if r[f"tokens_per_pass_k{k}"] is None else f"{r[f'tokens_per_pass_k{k}']:.2f}"
                        for k in SUMMARY_KS)
        cells = [f"k {r[c]['best_k']}: {r[c]['modelled_speedup']:.2f}x" if r[c]["best_k"] else "—" for c in curves]
        lines.append(f"| {r['verifier']} | {r['group']} | {r['drafter']} | {tpp} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(rows, curve_names=None) -> str:
    """Markdown: per verifier, group and drafter, at each k the tokens per pass (planned under
    this CPU's curve) and the modelled speedup under each curve."""
    curve_names = curve_names or list(dict.fromkeys(r["curve"] for r in rows))
    ks = sorted({r["k"] for r in rows})
    by = {(r["verifier"], r["group"], r["drafter"], r["k"], r["curve"]): r for r in rows}
    head = "| verifier | group | drafter | " + " | ".join(f"k {k}: tok/pass, " + ", ".join(curve_names)
                                                           for k in ks) + " |"
    lines = [head, "|---|---|---|" + "---|" * len(ks)]
    for v, g, d in dict.fromkeys((r["verifier"], r["group"], r["drafter"]) for r in rows):
        cells = []
        for k in ks:
            first = by.get((v, g, d, k, curve_names[0]))
            if first is None:
                cells.append("")
                continue
            speeds = [by.get((v, g, d, k, c), {}).get("modelled_speedup") for c in curve_names]
            cells.append(f"{first['tokens_per_pass']:.2f}; " + ", ".join(f"{s:.2f}x" if s else "—" for s in speeds))
        lines.append(f"| {v} | {g} | {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---- live -------------------------------------------------------------------------------------

LIVE_SPECS = {"lookup": "lookup", "auto": "auto"}


def live_order(items: list[dict]) -> list[dict]:
    """The revisions in turn over their kinds (the first of each kind, then the second, ...), so
    that the first N of a scenario are of several kinds."""
    kinds = {}
    for it in items:
        kinds.setdefault(it["kind"], []).append(it)
    rounds = max(len(v) for v in kinds.values())
    return [v[i] for i in range(rounds) for v in kinds.values() if i < len(v)]


def live_prompts(session, folder: Path, n_prompts: dict) -> dict:
    """{scenario: its prompts file}: the first n of each scenario's revisions (live_order), each
    line the prompt `revise` sends and the clause as its prediction."""
    folder.mkdir(parents=True, exist_ok=True)
    items = read_workload()
    prompts = prompts_for(session, items)
    out = {}
    for scenario, n in n_prompts.items():
        mine = live_order([it for it in items if it["scenario"] == scenario])[:n]
        lines = []
        for it in mine:
            p = prompts[it["id"]]
            record = {"prompt": p.prompt} if isinstance(p.prompt, str) else {"messages": list(p.prompt.messages)}
            lines.append(json.dumps({**record, "prediction": p.prediction, "id": it["id"]}, ensure_ascii=False))
        out[scenario] = write_atomic(folder / f"{scenario}.jsonl", "\n".join(lines) + "\n", 0o644)
    return out


def cmd_live(args) -> None:
    """The revisions timed live by `bench --experiment live`: plain, lookup and auto (which gets
    the prediction) at one k, alternating rounds, outputs checked identical, the modelled speedup
    under the verifier's curve beside each; the load averages recorded."""
    from olifant_mlx.engine import Session
    from olifant_mlx.revise import max_tokens_for
    from olifant_mlx.verifier import load_verifier

    session = Session(load_verifier(args.model), "none")      # the prompts as `revise` makes them
    files = live_prompts(session, OUT / "live", dict(zip(("legal", "medical"), args.n_prompts)))
    if args.max_tokens is None:         # the room `revise` gives the longest clause
        clauses = [json.loads(line)["prediction"] for f in files.values() for line in Path(f).read_text().splitlines()]
        args.max_tokens = max(max_tokens_for(len(session.verifier.identity.encode(c))) for c in clauses)
    del session
    curve = next((c for c in (CURVES / f"{args.model}-k32.json", CURVES / f"{args.model}.json") if c.is_file()), None)
    cmd = [sys.executable, "-m", "olifant_mlx", "bench", "--experiment", "live", "--model", args.model,
           "--prompts", *(f"{s}={p}" for s, p in files.items()), "--n-prompts", str(max(args.n_prompts)),
           "--max-tokens", str(args.max_tokens), "-k", str(args.k), "--rounds", str(args.rounds), "--no-mlx-lm",
           "--out-dir", str(OUT), "--strategy", *(f"{label}={spec}" for label, spec in LIVE_SPECS.items())]
    cmd += ["--curve", str(curve)] if curve else ["--calibrate", "--contexts", "64", "256"]
    print(" ".join(cmd[2:]), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)
    got = json.loads((OUT / f"live-{args.model}.json").read_text())
    result = {"verifier": args.model, "k": args.k, "rounds": args.rounds, "max_tokens": args.max_tokens,
              "strategies": LIVE_SPECS, "prediction": "each revision's clause, given to every generation "
              "(only drafters built on the hybrid draft from it: auto here)",
              "machine": {"cpus": os.cpu_count()}, "command": " ".join(cmd[2:]),
              "load_average": [got["load_average_start"], got["load_average_end"]], "curve": got["curve"],
              "scenarios": {s: {"prompts": len(Path(p).read_text().splitlines()), **got["tasks"][s]["kv"]}
                            for s, p in files.items()}}
    write_atomic(Path(args.json), json.dumps(result, indent=1) + "\n", 0o644)
    print(f"wrote {args.json}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", default=str(WORKLOAD), help=f"where to write it (default {WORKLOAD.relative_to(ROOT)})")
    b.set_defaults(func=cmd_build)
    t = sub.add_parser("transcripts")
    t.add_argument("--model", default="smollm2-135m")
    t.add_argument("--draft", default="prediction", help="the drafter that records them sooner (default prediction)")
    t.add_argument("-k", type=int, default=32)
    t.set_defaults(func=cmd_transcripts)
    c = sub.add_parser("curve")
    c.add_argument("--model", default="qwen2.5-coder-1.5b")
    c.add_argument("--max-new", type=int, default=33, help="the longest pass, in new tokens (k + 1)")
    c.add_argument("--contexts", type=int, nargs="+", default=[64, 256])
    c.add_argument("--repeats", type=int, default=3)
    c.set_defaults(func=cmd_curve)
    ap_ = sub.add_parser("apple-curve", help=f"write {APPLE.relative_to(ROOT)} from the published numbers")
    ap_.set_defaults(func=cmd_apple_curve)
    tb = sub.add_parser("tables")
    tb.add_argument("--verifiers", nargs="+", default=["qwen2.5-coder-1.5b", "gemma3-270m", "smollm2-135m"])
    tb.add_argument("--ks", type=int, nargs="+", default=[3, 5, 8, 16, 32])
    tb.add_argument("--curves", nargs="+", default=["cpu", "apple", "apple-steep"],
                    help="cpu (this machine's), and the Apple-silicon curves' names")
    tb.add_argument("--max-tokens", type=int, default=1024, help="replay at most this many tokens of each answer")
    tb.add_argument("--train-tokens", type=int, default=1_000_000)
    tb.add_argument("--resume", action="store_true", help="keep the rows of an earlier run")
    tb.add_argument("--json", default=str(ROOT / "docs" / "results" / "revision-workload.json"))
    tb.set_defaults(func=cmd_tables)
    lv = sub.add_parser("live")
    lv.add_argument("--model", default="qwen2.5-coder-1.5b")
    lv.add_argument("--n-prompts", type=int, nargs=2, default=[8, 4], metavar=("LEGAL", "MEDICAL"),
                    help="the first N revisions of each scenario, over their kinds in turn")
    lv.add_argument("--rounds", type=int, default=2)
    lv.add_argument("--max-tokens", type=int, help="default: revise's room for the longest clause given")
    lv.add_argument("-k", type=int, default=32)
    lv.add_argument("--json", default=str(ROOT / "docs" / "results" / "revision-live.json"))
    lv.set_defaults(func=cmd_live)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()

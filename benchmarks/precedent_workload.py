"""The drafting workload: requests where the text the answer needs is in the prompt, and fresh ones.

    python benchmarks/precedent_workload.py build                  # docs/workload/precedents.jsonl
    python benchmarks/precedent_workload.py recall --model smollm2-135m
    python benchmarks/precedent_workload.py transcripts --model smollm2-135m [--max-tokens 96]
    python benchmarks/precedent_workload.py tables [--verifiers ...] [--ks 3 5 8] [--json FILE]
    python benchmarks/precedent_workload.py live --model qwen2.5-coder-1.5b [--scenarios ...] [--rounds 2]

Three scenarios, built from the shared corpora's validation splits only (never a test split):
- legal: a precedent library of the first 40 acts of EUR-Lex-Sum's validation split (one .txt
  per act, a paragraph per line) and instructions to draft one article of one of them, by its
  heading and the act's subject ("Draft the article headed 'Pilot studies' for a regulation on
  the European system of integrated social protection statistics"); the prompt is made as
  `generate --precedents` makes it (olifant_mlx.precedents, the default budget), so the article
  is in it when retrieval finds it;
- medical: the first ~320 words of a SumPubMed validation article pasted above "Write a short
  structured summary of the article above for a referring physician ...";
- fresh: drafting instructions with nothing to adapt.
Every prompt goes through the verifier's chat template (a base model, Gemma-3-270M, continues
the text: the precedents above it under a plain heading). `transcripts` records the verifier's
greedy answer to each (docs/transcripts/workload-VERIFIER.json); `tables` replays every drafter
on them (no verifier runs; measure.transcripts) with the modelled speedups under the verifier's
committed cost curve (docs/results/curves/VERIFIER.json), and `recall` measures retrieval:
recall@3 of the intended article. `live` writes each scenario's prompts (benchmarks/out/workload/
live/SCENARIO.jsonl: the chats, precedents in) and times them with `bench --experiment live`
(plain decoding against each drafter, KV, alternating rounds, outputs checked identical; the
modelled speedup of the same generations beside each), one bench run per scenario, all in
docs/results/precedent-live.json.
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
from olifant_mlx.measure.corpora import TRAIN, shared_dir

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "docs" / "workload" / "precedents.jsonl"
OUT = ROOT / "benchmarks" / "out" / "workload"
LEGAL_VALID = "legal/eurlexsum.valid.txt.xz"
MEDICAL_VALID = "medical/sumpubmed.valid.txt.xz"
LIBRARY_ACTS = 40
PER_SCENARIO = 12
SCENARIOS = ("legal", "medical", "fresh")
EXCERPT_WORDS = 320
GENERIC = {"definitions", "entry into force", "addressees", "subject matter", "scope", "repeal",
           "committee procedure", "committee", "amendments", "final provisions", "penalties",
           "transitional provisions", "review", "reports", "report", "implementation", "exercise of the delegation",
           "subject matter and scope", "objective", "transposition", "evaluation", "confidentiality"}
SUMMARY = ("Write a short structured summary of the article above for a referring physician: background, "
           "methods, main results and conclusion.")
FRESH = [
    "Draft a one-sentence governing-law clause for a contract under English law.",
    "Draft a confidentiality clause for a software licence agreement between Acme Ltd and Beta GmbH.",
    "Draft a force majeure clause for a supply agreement.",
    "Draft a termination clause allowing either party to end the agreement on 90 days' notice.",
    "Write a short letter to a client confirming that we have received their signed engagement letter.",
    "Draft a limitation of liability clause capping liability at the fees paid in the last 12 months.",
    "Draft a data protection clause for a processor agreement under the GDPR.",
    "Write a discharge summary paragraph for a patient treated for community-acquired pneumonia.",
    "Write a referral letter to a cardiologist for a patient with new-onset atrial fibrillation.",
    "Summarise the main risks of long-term proton pump inhibitor use for a general practitioner.",
    "Draft an assignment clause that forbids assignment without the other party's written consent.",
    "Write patient instructions for taking amoxicillin after a dental procedure.",
]
SPECS = {"lookup": "lookup", "ngram-4": "ngram:4", "hybrid": "hybrid:{model}",
         "adaptive-hybrid": "adaptive:hybrid:{model}", "olifant": "olifant:{model}", "rest": "rest:{sfx}",
         "auto": "auto"}


def documents(name: str) -> list[str]:
    from olifant_mlx.draftmodel.corpus import iter_documents

    return list(iter_documents(str(shared_dir() / "corpora" / name)))


def act_subject(lines: list[str]) -> tuple[str, str]:
    """(kind, subject) of an act: 'regulation', 'on the European system of ...'."""
    kind = lines[0].split()[0].lower() if lines else "act"
    subject = next((ln for ln in lines[1:5] if ln.startswith("on ")), "")
    return kind, re.sub(r"\s*\(Text with EEA relevance\)\s*", "", subject).strip()


def articles(lines: list[str]):
    """(heading, first body line index, body lines) of each article of an act."""
    for i, ln in enumerate(lines[:-2]):
        if re.fullmatch(r"Article \d+[a-z]?", ln.strip()):
            body = []
            for nxt in lines[i + 2:]:
                if re.fullmatch(r"(Article \d+[a-z]?|ANNEX.*|Done at .*)", nxt.strip()):
                    break
                body.append(nxt)
            yield lines[i + 1].strip(), i + 2, body


def legal_items(acts: list[str]) -> list[dict]:
    """An instruction per act (the first PER_SCENARIO acts that have a fitting article): draft
    the first article with a specific heading and a 40-160 word body."""
    items = []
    for n, act in enumerate(acts[:LIBRARY_ACTS]):
        lines = act.split("\n")
        kind, subject = act_subject(lines)
        if not subject:
            continue
        for heading, first, body in articles(lines):
            words = sum(len(b.split()) for b in body)
            if heading.lower().rstrip(".") in GENERIC or not 40 <= words <= 160 or len(heading.split()) > 10 \
                    or heading.endswith(":"):          # the article's first line, not a heading
                continue
            items.append({"id": f"legal-{n:03d}", "scenario": "legal",
                          "instruction": f"Draft the article headed '{heading}' for a {kind} {subject}.",
                          "intended": {"path": f"act-{n:03d}.txt",
                                       "paragraphs": list(range(first + 1, first + 1 + len(body)))}})
            break
        if len(items) == PER_SCENARIO + 4:
            break
    return items


def medical_items(articles_: list[str]) -> list[dict]:
    items = []
    for n, doc in enumerate(articles_):
        words = doc.split()
        if len(words) < EXCERPT_WORDS + 80:
            continue
        items.append({"id": f"medical-{n:03d}", "scenario": "medical",
                      "instruction": " ".join(words[:EXCERPT_WORDS]) + "\n\n" + SUMMARY})
        if len(items) == PER_SCENARIO:
            break
    return items


def library_folder(acts: list[str]) -> Path:
    """The legal library's folder: each act one .txt, one paragraph per line of the act."""
    folder = OUT / "acts"
    folder.mkdir(parents=True, exist_ok=True)
    for n, act in enumerate(acts[:LIBRARY_ACTS]):
        path = folder / f"act-{n:03d}.txt"
        text = "\n\n".join(ln for ln in act.split("\n")) + "\n"
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return folder


def cmd_build(args) -> None:
    acts = documents(LEGAL_VALID)
    items = legal_items(acts) + medical_items(documents(MEDICAL_VALID))
    items += [{"id": f"fresh-{i:02d}", "scenario": "fresh", "instruction": t} for i, t in enumerate(FRESH)]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "".join(json.dumps(it) + "\n" for it in items), 0o644)
    counts = {s: sum(it["scenario"] == s for it in items) for s in ("legal", "medical", "fresh")}
    print(f"wrote {out}: {counts}", file=sys.stderr)


def read_workload() -> list[dict]:
    return [json.loads(line) for line in WORKLOAD.read_text().splitlines() if line.strip()]


def workload_library(tokenizer, verifier: str):
    """The legal library for this verifier's tokenizer (built once, updated when it changes)."""
    from olifant_mlx import library, passages

    name = f"workload-{verifier}"
    folder = library_folder(documents(LEGAL_VALID))
    try:
        lib = library.load(name)
        if lib.fits(tokenizer) and lib.meta.get("passages") is not None:
            passages.open_index(lib).close()        # a PassageError when built with another index format
            return lib
    except (library.LibraryError, passages.PassageError):
        pass
    library.build(name, folder, tokenizer)
    return library.load(name)


def cmd_recall(args) -> dict:
    from olifant_mlx.verifier import load_tokenizer

    out = recall(load_tokenizer(args.model), args.model)
    print(json.dumps(out))
    return out


def recall(tok, verifier: str) -> dict:
    """recall@1 and @3 of the intended article (any of its paragraphs) for the legal instructions."""
    from olifant_mlx.passages import search

    lib = workload_library(tok, verifier)
    hits = {1: 0, 3: 0}
    legal = [it for it in read_workload() if it["scenario"] == "legal"]
    for it in legal:
        want = it["intended"]
        found = search(lib, it["instruction"], n=3)
        for n in hits:
            hits[n] += any(p.path == want["path"] and set(range(p.paragraph, p.end + 1)) & set(want["paragraphs"])
                           for p in found[:n])
    return {"library": lib.name, "instructions": len(legal),
            "recall_at_1": round(hits[1] / len(legal), 3), "recall_at_3": round(hits[3] / len(legal), 3)}


def prompts_for(session, verifier: str) -> dict:
    """{item id: the Chat (or, for a base model, the text) the verifier answers} (legal: with the
    precedents retrieved for it)."""
    from olifant_mlx.engine import GenerationOptions
    from olifant_mlx.engine.request import with_precedents

    lib = workload_library(session.verifier.identity, verifier)
    out = {}
    for it in read_workload():
        chat = session.prompt_for(it["instruction"])      # a base model (no chat template): the text
        if it["scenario"] == "legal":
            chat, _ = with_precedents(session.verifier, chat, GenerationOptions(precedents=lib.name, max_tokens=96))
        out[it["id"]] = chat
    return out


def _key(prompt) -> str:
    """A transcript's prompt as text: a Chat's messages as JSON, a text as it is."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt.messages)


def cmd_transcripts(args) -> None:
    from olifant_mlx.engine import Session
    from olifant_mlx.measure.transcripts import make_transcripts, read_transcript_set, write_transcript_set
    from olifant_mlx.verifier import load_verifier

    verifier = load_verifier(args.model)
    session = Session(verifier, "none")
    scenario = {it["id"]: it["scenario"] for it in read_workload()}
    chats = {i: chat for i, chat in prompts_for(session, args.model).items() if scenario[i] in args.scenarios}
    keyed = {_key(chat): chat for chat in chats.values()}
    ts = make_transcripts(verifier, keyed, args.max_tokens,
                          on_progress=lambda done, total: print(f"  {done}/{total} transcripts", file=sys.stderr))
    ids = {_key(chat): i for i, chat in chats.items()}
    tasks = {}
    for key in ts:
        tasks.setdefault(scenario[ids[key]], []).append(key)
    path = ROOT / "docs" / "transcripts" / f"workload-{args.model}.json"
    kept = [t for t in read_transcript_set(path) if t.get("task") not in args.scenarios] if path.is_file() else []
    for t in kept:                  # the scenarios not asked for this time stay as they were
        tasks.setdefault(t["task"], []).append(t["prompt"])
    write_transcript_set(path, {t["prompt"]: {k: v for k, v in t.items() if k != "task"} for t in kept} | ts, tasks)
    print(f"wrote {path}", file=sys.stderr)


def cmd_tables(args) -> None:
    from olifant_mlx.drafters import build_drafter
    from olifant_mlx.measure.bench import aggregate, sweep
    from olifant_mlx.measure.corpora import task_corpus_files
    from olifant_mlx.measure.curves import add_modelled, load_curve
    from olifant_mlx.measure.transcripts import TranscriptRunner, read_transcript_set
    from olifant_mlx.verifier import load_tokenizer

    rows, recalls = [], {}
    for v in args.verifiers:
        tok = load_tokenizer(v)
        recalls[v] = recall(tok, v)
        curve_file = ROOT / "docs" / "results" / "curves" / f"{v}.json"
        curve = load_curve(curve_file) if curve_file.is_file() else None
        items = read_transcript_set(ROOT / "docs" / "transcripts" / f"workload-{v}.json")
        for scenario in SCENARIOS:
            task = "medical" if scenario == "medical" else "legal"
            files = task_corpus_files(task, tok, v, OUT / "models", args.train_tokens)
            lib = workload_library(tok, v)
            ts = {t["prompt"]: t for t in items if t.get("task") == scenario}
            if not ts:          # a transcript set of some scenarios only (transcripts --scenarios)
                continue
            specs = dict(SPECS, auto=_auto_spec(files["model"], lib.index_path, files["sfx"]))
            drafters = {name: build_drafter(spec.format(**files), tok) for name, spec in specs.items()}
            results = OUT / f"tables-{v}-{scenario}.jsonl"
            got = sweep(TranscriptRunner(tok, ts), {scenario: list(ts)}, drafters, args.ks, ["kv"],
                        args.max_tokens, results, n_prompts=len(ts))
            cells = aggregate(got)
            if curve is not None:
                add_modelled(cells, got, curve)
            for c in cells:
                if c["strategy"] != "plain":
                    rows.append({"verifier": v, "scenario": scenario, "drafter": c["strategy"], "k": c["k"],
                                 "prompts": len(ts), **{m: c.get(m) for m in (
                                     "acceptance", "mean_accepted_length", "tokens_per_pass", "modelled_speedup")}})
    table(rows)
    if args.json:
        write_atomic(Path(args.json), json.dumps({"max_tokens": args.max_tokens, "regime": "kv", "specs": SPECS,
                                                   "auto": _auto_spec("TASK.olif", "LIBRARY/index.sfx", "TASK.sfx"),
                                                   "recall": recalls, "rows": rows}, indent=1) + "\n", 0o644)
        print(f"wrote {args.json}", file=sys.stderr)


# prompt lookup: the best single drafter on the transcripts (the adaptive hybrid combines two and
# auto is one over more sources); auto as `live` resolves it, beside the task's files and the library
LIVE_SPECS = {"lookup": "lookup", "auto": "auto"}


def cmd_live(args) -> None:
    """Each scenario's prompts timed live by `bench --experiment live`, one run per scenario (fresh
    drafts with the legal task's files), each added to --json (kept scenarios: those of an earlier run)
with the load averages."""
    from olifant_mlx.engine import Session
    from olifant_mlx.verifier import load_verifier

    if len(args.n_prompts) not in (1, 3):
        raise SystemExit("--n-prompts: one N, or three (legal, medical, fresh)")
    out = OUT / "live"
    out.mkdir(parents=True, exist_ok=True)
    scenario = {it["id"]: it["scenario"] for it in read_workload()}
    session = Session(load_verifier(args.model), "none")
    chats = prompts_for(session, args.model)
    del session
    path = Path(args.json)
    before = json.loads(path.read_text()) if path.is_file() else {}
    result = {"verifier": args.model, "k": args.k, "strategies": LIVE_SPECS, "machine": {"cpus": os.cpu_count()},
              "scenarios": before.get("scenarios", {}) if before.get("verifier") == args.model else {}}
    for name in args.scenarios:
        n = dict(zip(SCENARIOS, args.n_prompts * 3 if len(args.n_prompts) == 1 else args.n_prompts))[name]
        mine = [chats[i] for i in chats if scenario[i] == name][:n]
        lines = [json.dumps({"messages": list(c.messages)} if not isinstance(c, str) else {"prompt": c})
                 for c in mine]
        prompts = out / f"{name}.jsonl"
        write_atomic(prompts, "\n".join(lines) + "\n", 0o644)
        task = "medical" if name == "medical" else "legal"
        cmd = [sys.executable, "-m", "olifant_mlx", "bench", "--experiment", "live", "--model", args.model,
               "--prompts", f"{task}={prompts}", "--n-prompts", str(len(mine)), "--max-tokens", str(args.max_tokens),
               "-k", str(args.k), "--rounds", str(args.rounds), "--no-mlx-lm", "--out-dir", str(OUT),
               "--curve", str(ROOT / "docs" / "results" / "curves" / f"{args.model}.json"),
               "--strategy", *(f"{label}={spec}" for label, spec in LIVE_SPECS.items())]
        print(f"{name}: {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True)
        got = json.loads((OUT / f"live-{args.model}.json").read_text())   # the tables' models folder
        result["scenarios"][name] = {"prompts": len(mine), "rounds": args.rounds, "max_tokens": args.max_tokens,
                                     "task_files": task,
                                     "load_average": [got["load_average_start"], got["load_average_end"]],
                                     **got["tasks"][task]["kv"]}
        write_atomic(path, json.dumps(result, indent=1) + "\n", 0o644)     # each scenario as it ends
        print(f"wrote {path}", file=sys.stderr)


def _auto_spec(model, library_index, sfx) -> str:
    """`auto` as it resolves beside this workload: the adaptive hybrid over the task's IGTree,
    the library's suffix index and the task's, and the session's own text (prompt included)."""
    return f"adaptive:hybrid:{model}+rest:{library_index}+rest:{sfx}"


def table(rows) -> None:
    """A Markdown table: per verifier and scenario, tokens per pass and modelled speedup at each k."""
    ks = sorted({r["k"] for r in rows})
    print("| verifier | scenario | drafter | " + " | ".join(f"k {k}: tok/pass, modelled" for k in ks) + " |")
    print("|---|---|---|" + "---|" * len(ks))
    by = {(r["verifier"], r["scenario"], r["drafter"], r["k"]): r for r in rows}
    for v, s, d in dict.fromkeys((r["verifier"], r["scenario"], r["drafter"]) for r in rows):
        cells = []
        for k in ks:
            r = by.get((v, s, d, k))
            m = r and r.get("modelled_speedup")
            cells.append("" if r is None else f"{r['tokens_per_pass']:.2f}" + (f", {m:.2f}x" if m else ""))
        print(f"| {v} | {s} | {d} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", default=str(WORKLOAD), help=f"where to write it (default {WORKLOAD.relative_to(ROOT)})")
    b.set_defaults(func=cmd_build)
    r = sub.add_parser("recall")
    r.add_argument("--model", default="smollm2-135m")
    r.set_defaults(func=cmd_recall)
    t = sub.add_parser("transcripts")
    t.add_argument("--model", default="smollm2-135m")
    t.add_argument("--max-tokens", type=int, default=96)
    t.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    t.set_defaults(func=cmd_transcripts)
    b = sub.add_parser("tables")
    b.add_argument("--verifiers", nargs="+", default=["smollm2-135m"])
    b.add_argument("--ks", type=int, nargs="+", default=[3, 5, 8])
    b.add_argument("--max-tokens", type=int, default=96)
    b.add_argument("--train-tokens", type=int, default=1_000_000)
    b.add_argument("--json")
    b.set_defaults(func=cmd_tables)
    lv = sub.add_parser("live")
    lv.add_argument("--model", default="qwen2.5-coder-1.5b")
    lv.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    lv.add_argument("--n-prompts", type=int, nargs="+", default=[6, 3, 3], choices=range(1, 17), metavar="N",
                    help="the first N prompts of legal, medical and fresh (one N: of each)")
    lv.add_argument("--rounds", type=int, default=2)
    lv.add_argument("--max-tokens", type=int, default=96)
    lv.add_argument("-k", type=int, default=8)
    lv.add_argument("--json", default=str(ROOT / "docs" / "results" / "precedent-live.json"))
    lv.set_defaults(func=cmd_live)
    args = ap.parse_args()
    assert set(TRAIN) >= {"legal", "medical"}
    args.func(args)


if __name__ == "__main__":
    main()

"""Clause retrieval: does a drafting request as lawyers write it (parties, amounts, dates, the kind
of clause, no quoted heading) find the clause it asks for in a library of contracts?

    python benchmarks/clause_retrieval.py write [--out DIR]     # the contracts as .docx/.pdf/.md/.txt
    python benchmarks/clause_retrieval.py recall --models smollm2-135m gemma3-270m qwen2.5-coder-1.5b \
        [--workload] [--json docs/results/clause-retrieval.json]

The contracts are written for this set (docs/workload/contracts/*.txt: a `file:` and a `title:`
line, `---`, then blank-line separated paragraphs, a heading marked `# `): thirteen agreements
with headed clauses (a services agreement, an NDA, a software licence, a supply agreement, a
lease, an employment contract, a share purchase, a loan facility, a consultancy, a distribution
agreement, a data processing agreement, a SaaS subscription, a law firm's terms of business) in
Word (6), PDF (5), Markdown and plain text, their headings written as real ones are: numbered
("5. Force Majeure"), in capitals ("ARTICLE 6 - FORCE MAJEURE"), labelled ("Clause 8:
Indemnification", "Article 3: ..."), unnumbered ("Rent Review") and run into the clause's first
sentence ("5. Intellectual Property. All ..."). Several share a party, a date or a kind of
clause, so a request's names find its contract and its kind of clause the clause.
docs/workload/clauses.jsonl holds the requests, each with the contract and a phrase of the
clause it asks for: a passage is the intended clause when it is of that contract and holds the
phrase (spaces aside). The first 38 were written with the contracts, before the ranking they
measure; the 12 marked `"set": "held-out"` (phrased otherwise: no drafting verb, "we need",
questions) after it, and measured once before two changes their misses showed (results per set).
`recall` builds a library of the written contracts per verifier tokenizer and searches it as
`--precedents` does: recall@1 and @3, each request's rank, and the overlapping passages of one
document in any result list (there must be none); `--workload` adds the 16-request set of
benchmarks/precedent_workload.py (its `recall`, run as it is) for the same tokenizers.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from olifant_mlx.files import write_atomic

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "docs" / "workload" / "contracts"
REQUESTS = ROOT / "docs" / "workload" / "clauses.jsonl"
OUT = ROOT / "benchmarks" / "out" / "clauses"
RESULTS = ROOT / "docs" / "results" / "clause-retrieval.json"
LIST = 10            # passages per request in the overlap check


def read_source(path: Path) -> dict:
    """{file, title, paragraphs: [(text, is_heading)]} of a contract's source."""
    head, _, body = path.read_text(encoding="utf-8").partition("\n---\n")
    meta = dict(line.split(": ", 1) for line in head.splitlines())
    paragraphs = []
    for block in body.split("\n\n"):
        block = block.strip()
        if block:
            paragraphs.append((block[2:], True) if block.startswith("# ") else (block, False))
    return {"file": meta["file"], "title": meta["title"], "paragraphs": paragraphs}


def sources() -> list[dict]:
    return [read_source(p) for p in sorted(SOURCES.glob("*.txt"))]


def write_docx(doc: dict, path: Path) -> None:
    """Word: the first paragraph in the Title style, headings in Heading 2, the rest Normal."""
    import docx

    d = docx.Document()
    d.core_properties.title = doc["title"]
    for i, (text, heading) in enumerate(doc["paragraphs"]):
        d.add_paragraph(text, style="Title" if i == 0 else "Heading 2" if heading else None)
    d.save(path)


def write_pdf(doc: dict, path: Path) -> None:
    """A text PDF (fpdf2): the first paragraph as a bold title, headings bold, a gap between paragraphs."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title(doc["title"])
    pdf.set_margins(25, 20, 25)
    pdf.add_page()
    for i, (text, heading) in enumerate(doc["paragraphs"]):
        pdf.set_font("Helvetica", "B" if heading or i == 0 else "", 14 if i == 0 else 11)
        pdf.multi_cell(0, 5.5, text, new_x="LMARGIN", new_y="NEXT", align="C" if i == 0 else "L")
        pdf.ln(4)
    pdf.output(str(path))


def write_text(doc: dict, path: Path, markdown: bool) -> None:
    """Markdown: the title as `#`, headings as `##`; plain text: headings as lines of their own."""
    out = []
    for i, (text, heading) in enumerate(doc["paragraphs"]):
        out.append(("# " if i == 0 else "## " if heading else "") + text if markdown else text)
    path.write_text("\n\n".join(out) + "\n", encoding="utf-8")


def cmd_write(args) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for doc in sources():
        path = out / doc["file"]
        suffix = path.suffix
        if suffix == ".docx":
            write_docx(doc, path)
        elif suffix == ".pdf":
            write_pdf(doc, path)
        else:
            write_text(doc, path, markdown=suffix == ".md")
    print(f"wrote {len(sources())} contracts to {out}", file=sys.stderr)
    return out


def read_requests() -> list[dict]:
    return [json.loads(line) for line in REQUESTS.read_text(encoding="utf-8").splitlines() if line.strip()]


def squeeze(text: str) -> str:
    return " ".join(text.split())


def is_intended(passage, want: dict) -> bool:
    return passage.path == want["path"] and squeeze(want["contains"]) in squeeze(passage.text)


def overlapping(found) -> list[tuple]:
    """Pairs of passages of one document in a result list whose paragraphs overlap."""
    return [(a.citation(), b.citation()) for i, a in enumerate(found) for b in found[i + 1:]
            if a.path == b.path and a.paragraph <= b.end and b.paragraph <= a.end]


def recall(lib, requests: list[dict]) -> dict:
    """recall@1 and @3 of the intended clause, each request's rank (None: not in the first
    LIST), and every overlapping pair in any result list."""
    from olifant_mlx.passages import search

    ranks, overlaps = {}, []
    for it in requests:
        found = search(lib, it["instruction"], n=LIST)
        ranks[it["id"]] = next((i for i, p in enumerate(found, 1) if is_intended(p, it["intended"])), None)
        overlaps += [(it["id"], *pair) for pair in overlapping(found)]
    sets = {}
    for it in requests:
        sets.setdefault(it.get("set", "first"), []).append(ranks[it["id"]])
    return {"library": lib.name, **_recalls(list(ranks.values())),
            "sets": {name: _recalls(got) for name, got in sets.items()},
            "missed_at_1": sorted(i for i, r in ranks.items() if r != 1), "ranks": ranks,
            "overlapping_pairs": overlaps}


def _recalls(ranks: list) -> dict:
    n = len(ranks)
    return {"requests": n, "recall_at_1": round(sum(r == 1 for r in ranks) / n, 3),
            "recall_at_3": round(sum(r is not None and r <= 3 for r in ranks) / n, 3)}


def library_for(tokenizer, model: str, folder: Path):
    from olifant_mlx import library

    name = f"clauses-{model}"
    library.build(name, folder, tokenizer)
    return library.load(name)


def cmd_recall(args) -> dict:
    from olifant_mlx.passages import FORMAT
    from olifant_mlx.verifier import load_tokenizer

    folder = cmd_write(argparse.Namespace(out=str(OUT / "contracts")))
    result = {"requests": str(REQUESTS.relative_to(ROOT)), "contracts": len(sources()), "index_format": FORMAT,
              "models": {}}
    for model in args.models:
        got = recall(library_for(load_tokenizer(model), model, folder), read_requests())
        if args.workload:
            run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "precedent_workload.py"), "recall",
                                  "--model", model], check=True, capture_output=True, text=True)
            got["workload"] = json.loads(run.stdout.strip().splitlines()[-1])
        result["models"][model] = got
        print(f"{model}: recall@1 {got['recall_at_1']}, recall@3 {got['recall_at_3']}, missed at 1: "
              f"{got['missed_at_1']}, overlapping pairs: {len(got['overlapping_pairs'])}"
              + (f"; workload recall@1 {got['workload']['recall_at_1']}, @3 {got['workload']['recall_at_3']}"
                 if args.workload else ""), file=sys.stderr)
    if args.json:
        write_atomic(Path(args.json), json.dumps(result, indent=1, ensure_ascii=False) + "\n", 0o644)
        print(f"wrote {args.json}", file=sys.stderr)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write the contracts as .docx, .pdf, .md and .txt files")
    w.add_argument("--out", default=str(OUT / "contracts"))
    w.set_defaults(func=cmd_write)
    r = sub.add_parser("recall", help="recall@1 and @3 of the intended clause, per verifier tokenizer")
    r.add_argument("--models", nargs="+", default=["smollm2-135m"])
    r.add_argument("--workload", action="store_true", help="also the 16 requests of precedent_workload.py")
    r.add_argument("--json", help=f"write the results here (e.g. {RESULTS.relative_to(ROOT)})")
    r.set_defaults(func=cmd_recall)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()

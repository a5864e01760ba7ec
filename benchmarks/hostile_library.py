"""A library build over hostile documents (issues 37 and 45): the bombs at the sizes of the issues'
reports next to ordinary documents (and the innocent files a bomb used to take down with it),
built by `library build` in a child process; its exit code, wall time and peak RSS (its own and
its reader processes', from wait4), and each file's outcome.
Then what the reader process costs an ordinary file: ms per file read through it against the
same reader called in this process.

    python benchmarks/hostile_library.py                     # 200 ordinary documents
    python benchmarks/hostile_library.py --ordinary 50 --out /tmp/hostile

Prints one JSON object; the figures in docs/robustness.md come from it.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from olifant_mlx.draftmodel import hostile_files as hf
from olifant_mlx.files import cache_dir, write_atomic
from olifant_mlx.measure.processes import run_measured

BOMBS = {   # name: (writer, what the issue reported)
    "bomb.pdf": (lambda p: hf.write_pdf_bomb(p, 5_000_000), "SIGABRT, no library"),
    "words.eml": (lambda p: hf.write_eml_bomb(p, 20_000), "5.6 GB in 20 s"),
    "long.eml": (lambda p: hf.write_long_subject_eml(p, 20_000_000), "past 200 s"),
    "bomb.docx": (lambda p: hf.write_docx_bomb(p, 100), "past 300 s at 3.8 GB"),
    "bomb.odt": (lambda p: hf.write_odt_bomb(p, 100), "60 s, 2.1 GB"),
    "x.html": (lambda p: hf.write_html_bomb(p, 524_288), "165 s"),
    "huge.txt": (lambda p: hf.write_one_paragraph(p, 100), "SIGABRT in the tokenizer"),
    "sparse.txt": (lambda p: hf.write_sparse(p, 20), "MemoryError traceback"),
    "loop.pdf": (hf.write_page_tree_loop, "reported as a scanned PDF"),
    "deep.pdf": (hf.write_deep_page_tree, "reported as a scanned PDF"),
    "locked.docx": (hf.write_encrypted_docx, "reported as binary Word"),
    "passwd.txt": (lambda p: p.symlink_to("/etc/passwd"), "the password file read"),
    # issue 45: a 1 GB .matter side file (item 2); a .docx of 1.5 million runs past the reader's
    # memory, followed by a harmless .html, the next file the reader process reads (item 3)
    "clientx/.matter": (lambda p: hf.write_sparse_bytes(p, 1 << 30), "7.47 GB, then RuntimeError"),
    "runs.docx": (lambda p: hf.write_docx_runs(p, 1_500_000), "(itself skipped at the memory limit)"),
}
# ordinary files placed where a bomb can hurt them: each must be read
INNOCENTS = {
    "clientx/brief.txt": (lambda p: write_atomic(p, "The brief of client X.\n", 0o644),
                          "the build died of its .matter"),
    "runs~note.html": (lambda p: write_atomic(p, "<title>Note</title><p>An innocent note.</p>", 0o644),
                       "skipped as 'the reader stopped (SIGKILL)'"),
}


def ordinary(folder: Path, count: int) -> list[str]:
    """`count` small documents in the common formats, each with its own text."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for n in range(count):
        kind = ("docx", "pdf", "eml", "html", "md", "txt")[n % 6]
        path = folder / f"doc{n:04d}.{kind}"
        paras = [f"Clause {n}. The supplier shall deliver lot {n * 7 % 101} to warehouse {n % 13}.",
                 f"Payment of invoice {n} is due within {n % 60 + 1} days of delivery."]
        if kind == "docx":
            import docx

            d = docx.Document()
            for p in paras:
                d.add_paragraph(p)
            buf = io.BytesIO()
            d.save(buf)
            write_atomic(path, buf.getvalue(), 0o644)
        elif kind == "pdf":
            from fpdf import FPDF

            pdf = FPDF()
            pdf.add_page()
            pdf.set_font("Helvetica", size=11)
            for p in paras:
                pdf.multi_cell(0, 6, p, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(8)
            write_atomic(path, bytes(pdf.output()), 0o644)
        elif kind == "eml":
            write_atomic(path, f"From: a@example.org\nSubject: Matter {n}\n\n" + "\n\n".join(paras) + "\n", 0o644)
        elif kind == "html":
            write_atomic(path, "<title>Notice</title>" + "".join(f"<p>{p}</p>" for p in paras), 0o644)
        else:
            write_atomic(path, "\n\n".join(paras) + "\n", 0o644)
        names.append(path.name)
    return names


def build(folder: Path, cache: Path, tokenizer: str) -> dict:
    """`library build` in a child process: exit code, wall time, peak RSS (the largest of it
    and its reader processes, which it waits for)."""
    cmd = [sys.executable, "-m", "olifant_mlx", "library", "build", "hostile", str(folder),
           "--tokenizer", tokenizer, "--json", "--quiet"]
    m = run_measured(cmd, env={**os.environ, "OLIFANT_CACHE": str(cache)})
    summary = json.loads(m["stdout"] or b"{}") if m["code"] == 0 else {}
    return {"exit": m["code"], "wall_s": round(m["wall_s"], 1), "cpu_s": round(m["cpu_s"], 1),
            "peak_rss_mb": round(m["peak_rss_mb"]), "summary": summary,
            "stderr": m["stderr"].decode(errors="replace")[-2000:]}


def cache_with_models(root: Path) -> Path:
    """A fresh cache whose verifiers are the usual cache's, by links (the tokenizer loads offline)."""
    root.mkdir(parents=True)
    for kind in ("models", "gguf"):
        if (cache_dir() / kind).is_dir():
            (root / kind).symlink_to(cache_dir() / kind)
    return root


def reader_cost(folder: Path, names: list[str]) -> dict:
    """ms per ordinary file through the reader process against the same reader in process."""
    from olifant_mlx.draftmodel import documents, reader_process

    lim = documents.limits()
    files = [(folder / n, (folder / n).read_bytes()) for n in names if not n.endswith((".txt", ".md"))]
    reader_process.read(".html", b"<p>warm</p>", lim)          # the worker's start, once per build
    out = {}
    for how, read in (("child_ms", reader_process.read), ("in_process_ms", documents.read_in_worker)):
        t0 = time.perf_counter()
        for path, data in files:
            read(path.suffix, data, lim)
        out[how] = round(1000 * (time.perf_counter() - t0) / len(files), 2)
    t0 = time.perf_counter()
    reader_process.close_all()
    reader_process.read(".html", b"<p>warm</p>", lim)
    out["worker_start_ms"] = round(1000 * (time.perf_counter() - t0))
    return out


def outcome(f: dict | None) -> str:
    if f is None:
        return "missing"
    return f["status"] + (f": {f['reason']}" if f["reason"] else f" ({f['paragraphs']} paragraphs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ordinary", type=int, default=200, help="ordinary documents beside the bombs")
    ap.add_argument("--tokenizer", default="smollm2-135m")
    ap.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args()
    work = args.out or Path(tempfile.mkdtemp(prefix="hostile-"))
    folder, cache = work / "folder", work / "cache"
    good = ordinary(folder, args.ordinary)
    for name, (write, _) in {**BOMBS, **INNOCENTS}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write(folder / name)
    if not cache.exists():
        cache_with_models(cache)
    load_before = os.getloadavg()
    result = build(folder, cache, args.tokenizer)
    files = {f["path"]: f for f in result.pop("summary").get("files", {}).get("files", [])}
    report = {
        "exit": result["exit"], "wall_s": result["wall_s"], "cpu_s": result["cpu_s"],
        "peak_rss_mb": result["peak_rss_mb"],
        "ordinary_read": sum(files.get(n, {}).get("status") == "read" for n in good), "ordinary": len(good),
        "bombs": {n: {"was": was, "now": outcome(files.get(n))} for n, (_, was) in BOMBS.items()},
        "innocents": {n: {"was": was, "now": outcome(files.get(n))} for n, (_, was) in INNOCENTS.items()},
        "innocents_read": sum(files.get(n, {}).get("status") == "read" for n in INNOCENTS),
        "reader_cost": reader_cost(folder, good),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    if result["exit"] != 0:
        report["stderr"] = result["stderr"]
    print(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()

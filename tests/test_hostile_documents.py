"""Hostile documents and killed library builds (issue 37): every file ends as read or skipped
with its reason in bounded memory and time, and a library is always its old or its new
version. Real pieces: the reader libraries in their child process, SmolLM2's tokenizer, the C
IGTree and suffix index, real files (the bombs written small, under lowered limits), the CLI."""
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

for name in ("docx", "docx2python", "fpdf", "pypdfium2", "odf"):
    pytest.importorskip(name)

import document_fixtures as fx  # noqa: E402
from olifant_mlx.draftmodel import hostile_files as hf  # noqa: E402

from olifant_mlx import library  # noqa: E402
from olifant_mlx.draftmodel import documents  # noqa: E402
from olifant_mlx.files import locked  # noqa: E402
from olifant_mlx.verifier import load_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2-135m")      # from the shared cache, before $OLIFANT_CACHE moves


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = fx.cache_with_models(tmp_path / "cache")
    monkeypatch.setenv("OLIFANT_CACHE", str(root))
    return root


def outcomes(summary) -> dict:
    return {f["path"]: f for f in summary["files"]["files"]}


def stream_text(name: str, tokenizer) -> str:
    return tokenizer.decode([int(t) for t in np.fromfile(library.load(name).path / "tokens.u32", "<u4")])


def ordinary(folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    fx.write_docx(folder / "contract.docx")
    fx.write_pdf(folder / "precedent.pdf")
    fx.write_eml(folder / "offer.eml")
    (folder / "plain.txt").write_text("\n\n".join(fx.TXT_PARAS) + "\n")
    return ["contract.docx", "precedent.pdf", "offer.eml", "plain.txt"]


# items 1, 3, 10, 16: `library build` over a folder of bombs (small, under lowered limits) next to
# ordinary documents: exit 0, the ordinary ones read, each bomb skipped with its limit named
def test_bombs_are_skipped_with_their_reason_and_the_rest_is_read(tmp_path, cache, smollm2, monkeypatch):
    folder = tmp_path / "mixed"
    good = ordinary(folder)
    hf.write_pdf_bomb(folder / "bomb.pdf", 1_000_000)           # 20 KB, inflates to 10 MB of lines
    hf.write_docx_bomb(folder / "bomb.docx", 3)
    hf.write_odt_bomb(folder / "bomb.odt", 3)
    hf.write_one_paragraph(folder / "huge.txt", 3)
    hf.write_sparse(folder / "sparse.txt", 20)
    hf.write_page_tree_loop(folder / "loop.pdf")
    hf.write_deep_page_tree(folder / "deep.pdf")
    hf.write_encrypted_docx(folder / "locked.docx")
    monkeypatch.setenv("OLIFANT_DOC_MEMORY_BYTES", str(300 << 20))
    monkeypatch.setenv("OLIFANT_DOC_UNPACKED_BYTES", str(1 << 20))
    monkeypatch.setenv("OLIFANT_DOC_TEXT_CHARS", "2000000")
    monkeypatch.setenv("OLIFANT_DOC_FILE_BYTES", str(16 << 20))
    files = outcomes(library.build("mixed", folder, smollm2))
    assert all(files[g]["status"] == "read" for g in good), files
    want = {"bomb.pdf": "memory limit of 300 MiB", "bomb.docx": "ZIP bomb", "bomb.odt": "ZIP bomb",
            "huge.txt": "too much text", "sparse.txt": "too large: 21,474,836,480 bytes",
            "loop.pdf": "damaged", "deep.pdf": "damaged", "locked.docx": "encrypted (saved with a password)"}
    for name, reason in want.items():
        assert files[name]["status"] == "skipped" and reason in files[name]["reason"], files[name]
    assert "scanned" not in files["loop.pdf"]["reason"] + files["deep.pdf"]["reason"]
    assert library.load("mixed").meta["documents"] == len(good)


# item 3: a skip caused by a limit is not cached: under a higher limit the same file is read
def test_a_limit_skip_is_not_cached_as_damage(tmp_path, cache, monkeypatch):
    path = tmp_path / "big.docx"
    hf.write_docx_bomb(path, 0.25)
    monkeypatch.setenv("OLIFANT_DOC_UNPACKED_BYTES", str(64 << 10))
    _, first = documents.read_document(path)
    assert first.status == "skipped" and "OLIFANT_DOC_UNPACKED_BYTES" in first.reason
    assert not list((cache / "documents").glob("*.json")) if (cache / "documents").exists() else True
    monkeypatch.setenv("OLIFANT_DOC_UNPACKED_BYTES", str(8 << 20))
    ext, again = documents.read_document(path)
    assert again.status == "read" and again.paragraphs == len(ext.paragraphs) > 7_000 and ext.paragraphs[0] == "x"


# item 1: the reader process's death (memory, time) is a skip; the next file gets a fresh reader
def test_a_reader_past_its_time_is_killed_and_the_next_file_read(tmp_path, cache, monkeypatch):
    hf.write_pdf_bomb(tmp_path / "slow.pdf", 400_000)
    fx.write_pdf(tmp_path / "fine.pdf")
    monkeypatch.setenv("OLIFANT_DOC_SECONDS", "0.05")
    _, slow = documents.read_document(tmp_path / "slow.pdf")
    assert slow.status == "skipped" and "OLIFANT_DOC_SECONDS" in slow.reason, slow
    monkeypatch.delenv("OLIFANT_DOC_SECONDS")
    _, fine = documents.read_document(tmp_path / "fine.pdf")
    assert fine.status == "read" and fine.pages == 3


# item 2: a Subject of 20,000 encoded words (5.6 GB before) and a 1 MB plain one (quadratic
# before) read under a 300 MiB reader
def test_e_mail_subject_bombs_are_read_in_bounded_memory(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("OLIFANT_DOC_MEMORY_BYTES", str(300 << 20))
    hf.write_eml_bomb(tmp_path / "words.eml", 20_000)
    hf.write_long_subject_eml(tmp_path / "long.eml", 1_000_000)
    ext, outcome = documents.read_document(tmp_path / "words.eml")
    assert outcome.status == "read", outcome
    assert ext.title.startswith("GrüßeGrüße") and ext.paragraphs[-1] == "The body of the message."
    assert max(map(len, ext.paragraphs)) <= documents.LIMITS["paragraph_chars"]
    ext, outcome = documents.read_document(tmp_path / "long.eml")
    assert outcome.status == "read" and ext.paragraphs[-1] == "The body."


# item 4: '<p>' and 2^19 stray '</' (165 s before, quadratic) read well within the reader's time
def test_stray_end_tags_in_html_are_text(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("OLIFANT_DOC_SECONDS", "30")
    hf.write_html_bomb(tmp_path / "x.html", 524_288)
    ext, outcome = documents.read_document(tmp_path / "x.html")
    assert outcome.status == "read", outcome
    assert "".join(ext.paragraphs) == "</" * 524_288
    assert documents.html_paragraphs("<p>a </ b</p><p>c</p>") == ["a </ b", "c"]


# item 5: documents that resolve outside the folder are reported, not read; naming the outside
# folder itself reads them
def test_links_out_of_the_folder_are_skipped(tmp_path, cache, smollm2):
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "secret.txt").write_text("The password of the outside file.\n")
    (outside / "inner" / "other.txt").write_text("Another outside text.\n")
    folder = tmp_path / "s"
    good = ordinary(folder)
    (folder / "p.txt").symlink_to(outside / "secret.txt")
    (folder / "linked").symlink_to(outside / "inner")                    # a linked folder outside
    (folder / "sub").mkdir()
    (folder / "sub" / "back.txt").symlink_to("../plain.txt")             # inside: read
    (folder / "via").symlink_to(folder / "sub")                          # a linked folder inside...
    (folder / "sub" / "out.txt").symlink_to(outside / "inner" / "other.txt")   # ...holding a link out
    files = outcomes(library.build("s", folder, smollm2))
    for name in ("p.txt", "linked", "sub/out.txt"):       # (via: sub read once already)
        assert files[name]["status"] == "skipped" and "outside the folder" in files[name]["reason"], files[name]
        assert "name that folder itself" in files[name]["reason"]
    assert all(files[g]["status"] == "read" for g in good + ["sub/back.txt"])
    text = stream_text("s", smollm2)
    assert "Rent is due" in text and "password" not in text and "outside" not in text
    assert outcomes(library.build("out", outside, smollm2))["secret.txt"]["status"] == "read"


# item 9: a file rewritten between the reads of a build: its hash and its text are of one version
def test_a_file_changed_during_a_build_pairs_its_hash_with_its_own_text(tmp_path, cache, smollm2, monkeypatch):
    folder = tmp_path / "f"
    folder.mkdir()
    doc = folder / "a.txt"
    doc.write_text("Version A of the clause.\n")
    read_bytes = documents.read_bytes

    def then_rewrite(path, *args, **kw):
        data = read_bytes(path, *args, **kw)
        doc.write_text("Version B of the clause.\n")
        return data

    monkeypatch.setattr(documents, "read_bytes", then_rewrite)
    library.build("lib", folder, smollm2)
    monkeypatch.setattr(documents, "read_bytes", read_bytes)
    assert library.load("lib").table()[0]["hash"] == documents.digest(b"Version A of the clause.\n", ".txt")
    assert stream_text("lib", smollm2) == "Version A of the clause."
    again = library.build("lib", folder, smollm2)                        # B now: read again, not "unchanged"
    assert again["reread"] == 1 and stream_text("lib", smollm2) == "Version B of the clause."


# item 10: one long paragraph is split (bounded) before the tokenizer; a 20 GB sparse file is
# refused by its size before a byte is read
def test_a_long_paragraph_is_split_before_tokenizing(tmp_path, cache, smollm2):
    folder = tmp_path / "p"
    folder.mkdir()
    hf.write_one_paragraph(folder / "one.txt", 1)
    hf.write_sparse(folder / "sparse.txt", 20)
    summary = library.build("p", folder, smollm2)
    files = outcomes(summary)
    assert files["one.txt"]["status"] == "read" and files["one.txt"]["paragraphs"] >= (1 << 20) // 20_000
    assert "too large" in files["sparse.txt"]["reason"] and "OLIFANT_DOC_FILE_BYTES" in files["sparse.txt"]["reason"]
    ext, _ = documents.read_document(folder / "one.txt")
    assert max(map(len, ext.paragraphs)) <= 20_000 and " ".join(ext.paragraphs).split() == \
        (folder / "one.txt").read_text().split()


# issue 38 item 6: titles are the document's own, then its first heading, then the file name
def test_titles_are_the_documents_own_not_its_running_header(tmp_path, cache, smollm2):
    import docx
    from fpdf import FPDF

    folder = tmp_path / "t"
    folder.mkdir()
    d = docx.Document()
    d.sections[0].header.paragraphs[0].text = "STRICTLY CONFIDENTIAL"
    d.core_properties.title = "Share purchase agreement"
    d.add_paragraph("The buyer buys the shares.")
    d.save(folder / "spa.docx")
    d = docx.Document()
    d.sections[0].header.paragraphs[0].text = "STRICTLY CONFIDENTIAL"
    d.add_heading("Lease of the warehouse", 1)
    d.add_paragraph("The lessee pays rent.")
    d.save(folder / "lease.docx")
    pdf = FPDF()
    pdf.set_title("Opinion on liability")
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.cell(0, 8, "STRICTLY CONFIDENTIAL")
    pdf.output(str(folder / "opinion.pdf"))
    (folder / "page.html").write_text("<title>Privacy notice</title><p>CONFIDENTIAL</p><h1>Other</h1>")
    (folder / "heading.html").write_text("<p>CONFIDENTIAL</p><h2>Cookie policy</h2><p>text</p>")
    fx.write_eml(folder / "offer.eml")
    (folder / "notes.md").write_text("CONFIDENTIAL\n\n## Checklist for new clients\n\nConfirm.\n")
    (folder / "plain.txt").write_text("CONFIDENTIAL\n\nA plain precedent.\n")
    library.build("t", folder, smollm2)
    titles = {row["path"]: row["title"] for row in library.load("t").table()}
    assert titles == {"spa.docx": "Share purchase agreement", "lease.docx": "Lease of the warehouse",
                      "opinion.pdf": "Opinion on liability", "page.html": "Privacy notice",
                      "heading.html": "Cookie policy", "offer.eml": fx.EML_SUBJECT,
                      "notes.md": "Checklist for new clients", "plain.txt": "plain.txt"}


# ---- the library switch (items 11, 12) ------------------------------------------------------

def versions(name: str) -> list[str]:
    """What is left in the libraries folder for `name` besides the link and the lock file."""
    return sorted(p.name for p in library.libraries_dir().iterdir()
                  if p.name.startswith(f".{name}.") and p.name != f".{name}.lock")


def docs(name: str) -> int:
    return library.load(name).meta["documents"]


def two_versions(tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old", tmp_path / "new"
    for folder, n in ((old, 1), (new, 2)):
        folder.mkdir()
        for i in range(n):
            (folder / f"d{i}.txt").write_text(f"Clause {i} of the {folder.name} precedent.\n")
    return old, new


def make_old_layout(name: str) -> None:
    """The library as a real folder, as olifant_mlx wrote it before the link."""
    link = library.libraries_dir() / name
    target = Path(os.path.realpath(link))
    link.unlink()
    target.rename(link)


STEPS = ("written", "linked", "switched")


# item 11: a fault at every step of the switch (the rename itself failing included: "linked" is
# just before it), with the library in either layout: always the old library or the new one,
# and the next build leaves nothing behind
@pytest.mark.parametrize("layout", ["link", "folder"])
def test_a_fault_at_any_step_leaves_the_old_or_the_new_library(tmp_path, cache, smollm2, monkeypatch, layout):
    old, new = two_versions(tmp_path)
    for step in STEPS:
        library.build("lib", old, smollm2)
        if layout == "folder":
            make_old_layout("lib")
        monkeypatch.setenv("OLIFANT_LIBRARY_FAULT", f"raise:{step}")
        with pytest.raises(OSError, match=f"fault injected at {step}"):
            library.build("lib", new, smollm2)
        monkeypatch.delenv("OLIFANT_LIBRARY_FAULT")
        assert docs("lib") == (2 if step == "switched" else 1), step
        library.build("lib", new, smollm2)
        assert docs("lib") == 2 and len(versions("lib")) == 1, (step, versions("lib"))


# item 11: an older olifant_mlx killed between its two renames left no NAME and the library in
# .NAME.*.old/NAME; plus a .tmp of a kill -9: the next build takes the library back and cleans up
def test_leftovers_of_the_two_rename_swap_are_reclaimed(tmp_path, cache, smollm2):
    old, new = two_versions(tmp_path)
    library.build("lib", old, smollm2)
    make_old_layout("lib")
    root = library.libraries_dir()
    (root / ".lib.abcd1234.old").mkdir()
    (root / "lib").rename(root / ".lib.abcd1234.old" / "lib")
    (root / ".lib.wxyz5678.tmp").mkdir()
    (root / ".lib.wxyz5678.tmp" / "model.olif").write_bytes(b"half")
    (root / ".lib.b.qrst9012.tmp").mkdir()                               # library "lib.b"'s: not ours
    with pytest.raises(library.LibraryError, match="no library 'lib'"):
        library.load("lib")
    library._reclaim("lib")
    assert docs("lib") == 1 and versions("lib") == [".lib.abcd1234.old", ".lib.b.qrst9012.tmp"]
    library.build("lib", new, smollm2)
    left = versions("lib")
    assert docs("lib") == 2 and len(left) == 2 and ".lib.b.qrst9012.tmp" in left
    assert [v for v in left if v.endswith(".v")]


# item 12: builds of one name take turns on the lock; at once they never fail or leak
def test_builds_of_one_name_take_turns(tmp_path, cache, smollm2):
    old, new = two_versions(tmp_path)
    library.build("lib", old, smollm2)
    done = threading.Event()
    with locked(library.libraries_dir() / ".lib.lock"):
        t = threading.Thread(target=lambda: (library.build("lib", new, smollm2), done.set()))
        t.start()
        assert not done.wait(0.5)                                        # waiting for the lock
        assert docs("lib") == 1
    t.join()
    assert done.is_set() and docs("lib") == 2
    errors = []

    def build(folder):
        try:
            for _ in range(3):
                library.build("lib", folder, smollm2)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build, args=(f,)) for f in (old, new)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and docs("lib") in (1, 2) and len(versions("lib")) == 1


# item 11: kill -9 of `library build` at every step: the old library or the new one, and the
# next build leaves nothing behind
@pytest.mark.slow    # a CLI process per step
@pytest.mark.parametrize("layout", ["link", "folder"])
def test_kill_9_at_any_step_leaves_the_old_or_the_new_library(tmp_path, cache, smollm2, layout):
    old, new = two_versions(tmp_path)
    cmd = [sys.executable, "-m", "olifant_mlx", "library", "build", "lib", str(new),
           "--tokenizer", "smollm2-135m", "--quiet"]
    for step in STEPS:
        library.build("lib", old, smollm2)
        if layout == "folder":
            make_old_layout("lib")
        env = {**os.environ, "OLIFANT_CACHE": str(cache), "OLIFANT_LIBRARY_FAULT": f"kill:{step}"}
        run = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert run.returncode == -9, run.stderr
        assert docs("lib") == (2 if step == "switched" else 1), step
        library.build("lib", new, smollm2)
        assert docs("lib") == 2 and len(versions("lib")) == 1, (step, versions("lib"))


# item 10: a MemoryError while reading plain text in process (under a memory cap the user set)
# is a skip naming the limits to lower, not a traceback
def test_running_out_of_memory_in_process_is_a_skip(tmp_path, cache, monkeypatch):
    (tmp_path / "a.txt").write_text("Some text.\n")

    def no_memory(text):
        raise MemoryError

    monkeypatch.setattr(documents, "text_paragraphs", no_memory)
    ext, outcome = documents.read_document(tmp_path / "a.txt")
    assert ext is None and outcome.status == "skipped" and "OLIFANT_DOC_TEXT_CHARS" in outcome.reason


# issue 45 item 2: a `.matter` side file is read like a document is, bounded: a sparse 64 MB one
# (a 1 GB one took 7.47 GB before, a 4 GB one a MemoryError), a first line of 5,000 characters, a
# FIFO and a folder named .matter name no matter, are reported with the reason and never hang;
# their documents fall back to their top folder; a good one still names its matter
def test_a_matter_file_is_read_no_further_than_its_first_line(tmp_path, cache, smollm2):
    folder = tmp_path / "m"
    for sub in ("sparse", "long", "fifo", "folder", "good"):
        (folder / sub).mkdir(parents=True)
        (folder / sub / "a.txt").write_text(f"A clause of the {sub} matter.\n")
    with open(folder / "sparse" / ".matter", "wb") as f:
        f.truncate(64 << 20)
    (folder / "long" / ".matter").write_text("x" * 5000 + "\n")
    os.mkfifo(folder / "fifo" / ".matter")
    (folder / "folder" / ".matter").mkdir()
    (folder / "good" / ".matter").write_text("\n  Acme Ltd v Beta  \nsecond line\n")
    files = outcomes(library.build("m", folder, smollm2))
    assert "over 1,024 bytes" in files["sparse/.matter"]["reason"], files
    assert "over 1,024 bytes" in files["long/.matter"]["reason"]
    assert "FIFO" in files["fifo/.matter"]["reason"]
    assert "folder/.matter" not in files      # a hidden folder: never entered, and no matter file
    matters = {row["path"]: row["matter"] for row in library.load("m").table()}
    assert matters == {"sparse/a.txt": "sparse", "long/a.txt": "long", "fifo/a.txt": "fifo",
                       "folder/a.txt": "folder", "good/a.txt": "Acme Ltd v Beta"}
    assert library.read_matter(folder / "none" / ".matter") == (None, None)


# issue 45 item 3: a file past the reader's memory limit (a .docx of 200,000 runs under 300 MiB),
# then a harmless one: the harmless one is read by a fresh reader, never skipped with the bomb's
# reason ("the reader stopped (SIGKILL)": the worker that had answered was reused while it exited)
@pytest.mark.slow    # a reader up to its memory limit, twice over
def test_the_file_after_a_memory_bomb_is_read(tmp_path, cache, smollm2, monkeypatch):
    folder = tmp_path / "pair"
    folder.mkdir()
    hf.write_docx_runs(folder / "a-runs.docx", 200_000)
    (folder / "b-note.html").write_text("<title>Note</title><p>An innocent note about the lease.</p>")
    fx.write_eml(folder / "c-offer.eml")
    monkeypatch.setenv("OLIFANT_DOC_MEMORY_BYTES", str(300 << 20))
    files = outcomes(library.build("pair", folder, smollm2))
    assert "memory limit of 300 MiB" in files["a-runs.docx"]["reason"], files
    assert files["b-note.html"]["status"] == "read" and files["c-offer.eml"]["status"] == "read", files
    for _ in range(2):          # bomb, innocent, bomb, innocent: each gets its own outcome
        assert "memory limit" in documents.read_document(folder / "a-runs.docx")[1].reason
        assert documents.read_document(folder / "b-note.html")[1].status == "read"

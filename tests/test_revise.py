"""`revise` (issue 44): a document's clauses chosen (by number, heading, search, all), each revised
with the clause as the prediction, the answer cleaned and flagged, the redline written; every bad
input a clear error before the verifier loads and nothing half-written. The tiny chat verifier for
the library; SmolLM2-135M (slow) for the command, its output equal to plain decoding's."""
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from tiny_models import tiny_chat_verifier

from olifant_mlx import revise
from olifant_mlx.engine import GenerationOptions, Session
from olifant_mlx.revise import Paragraph, RevisionError

CONTRACT = [
    ("Title", "Master Services Agreement"),
    ("Heading 1", "1. Services"),
    ("Normal", "1.1 The Supplier shall provide the Services to the Customer with reasonable skill and care."),
    ("Heading 1", "2. Notices"),
    ("Normal", "2.1 The Customer shall give the Supplier notice of any claim within thirty (30) days of "
               "becoming aware of it."),
    ("Normal", "2.2 Notices shall be in writing and delivered by hand or by registered post."),
    ("Heading 1", "3. Limitation of Liability"),
    ("Normal", "3.1 The Supplier's total liability shall not exceed the fees paid in the twelve (12) months "
               "preceding the claim."),
    ("Normal", "Signed:"),
]


def write_contract(path: Path, tracked: bool = False) -> Path:
    import docx
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    d = docx.Document()
    for style, text in CONTRACT:
        p = d.add_paragraph(style=style)
        if "reasonable skill" in text:          # formatting inside a clause
            head, tail = text.split("reasonable skill")
            p.add_run(head)
            p.add_run("reasonable skill").bold = True
            p.add_run(tail)
        else:
            p.add_run(text)
        if tracked and text.startswith("2.2"):
            p._p.append(parse_xml(f'<w:ins {nsdecls("w")} w:id="90" w:author="Counsel" '
                                  f'w:date="2026-12-01T00:00:00Z"><w:r><w:t xml:space="preserve"> or e-mail'
                                  f'</w:t></w:r></w:ins>'))
    d.save(path)
    return path


def test_a_word_document_is_its_paragraphs_with_headings_and_clauses(tmp_path):
    doc = revise.read_document(write_contract(tmp_path / "msa.docx"))
    assert [p.text for p in doc.paragraphs] == [t for _, t in CONTRACT]
    assert [p.number for p in doc.paragraphs][:3] == [1, 2, 3]
    assert [p.heading > 0 for p in doc.paragraphs] == [s != "Normal" for s, _ in CONTRACT]
    assert [p.is_clause for p in doc.paragraphs].count(True) == 4      # "Signed:" is too short
    assert doc.data is not None and not doc.tracked


def test_text_and_markdown_have_paragraphs_and_headings(tmp_path):
    md = tmp_path / "nda.md"
    md.write_text("# Confidentiality\n\nThe Recipient shall keep the Information confidential for five years.\n\n"
                  "## Term\n\nThis Agreement ends on 31 December 2027 unless renewed.\n")
    doc = revise.read_document(md)
    assert [p.heading for p in doc.paragraphs] == [1, 0, 2, 0] and doc.data is None
    txt = tmp_path / "letter.txt"
    txt.write_text("Referral\n\nI would be grateful if you could see this patient with chest pain.\n")
    assert [p.heading for p in revise.read_document(txt).paragraphs] == [1, 0]


@pytest.mark.parametrize("content,message", [
    (b"PK\x03\x04 not really a zip", "not a complete ZIP|damaged|truncated"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 64 + "EncryptedPackage".encode("utf-16-le") + b"\0" * 64,
     "encrypted"),
])
def test_a_damaged_or_encrypted_word_file_is_refused_by_name(tmp_path, content, message):
    bad = tmp_path / "bad.docx"
    bad.write_bytes(content)
    with pytest.raises(RevisionError, match=message) as e:
        revise.read_document(bad)
    assert str(bad) in str(e.value)


def test_formats_not_read_and_missing_files_are_named(tmp_path):
    with pytest.raises(RevisionError, match=r"a\.pdf: revise reads .*\.docx"):
        revise.read_document(tmp_path / "a.pdf")
    with pytest.raises(RevisionError, match="no such file"):
        revise.read_document(tmp_path / "missing.docx")


@pytest.fixture
def contract(tmp_path):
    return revise.read_document(write_contract(tmp_path / "msa.docx"))


def numbers(selection):
    return [p.number for p in selection.chosen]


def test_clauses_are_chosen_by_number_heading_label_search_or_all(contract):
    assert numbers(revise.select(contract, "x", clauses=["5"])) == [5]
    assert numbers(revise.select(contract, "x", clauses=["Notices"])) == [5, 6]           # the section
    assert numbers(revise.select(contract, "x", clauses=["2. Notices"])) == [5, 6]
    assert numbers(revise.select(contract, "x", clauses=["3.1"])) == [8]                  # a clause's label
    assert numbers(revise.select(contract, "x", clauses=["8", "3"])) == [3, 8]            # document order
    assert numbers(revise.select(contract, "make the notice period sixty (60) days")) == [5]
    assert numbers(revise.select(contract, "ignored", where="liability fees")) == [8]
    assert numbers(revise.select(contract, "make it mutual", everything=True)) == [3, 5, 6, 8]


def test_a_selection_of_nothing_is_refused_with_the_ways_to_choose(contract):
    with pytest.raises(RevisionError, match="selects no clause .*--clause N.*--where.*--all"):
        revise.select(contract, "rewrite it in plain language")
    with pytest.raises(RevisionError, match="selects no clause"):
        revise.select(contract, "x", where="force majeure")
    with pytest.raises(RevisionError, match="--clause 42: it has paragraphs 1 to 9"):
        revise.select(contract, "x", clauses=["42"])
    with pytest.raises(RevisionError, match="no heading or clause starts so"):
        revise.select(contract, "x", clauses=["Governing Law"])


def test_a_paragraph_with_its_own_tracked_changes_is_refused_when_named_and_skipped_else(tmp_path):
    doc = revise.read_document(write_contract(tmp_path / "tracked.docx", tracked=True))
    assert [p.number for p in doc.tracked] == [6]
    assert doc.paragraphs[5].text.endswith("registered post. or e-mail")     # read as accepted
    with pytest.raises(RevisionError, match="¶6 has tracked changes of its own"):
        revise.select(doc, "x", clauses=["6"])
    chosen = revise.select(doc, "x", everything=True)
    assert numbers(chosen) == [3, 5, 8] and [p.number for p, _ in chosen.skipped] == [6]


def test_answers_are_cleaned_of_labels_fences_and_quotes():
    clause = "The Customer shall pay."
    assert revise.clean_answer("Revised clause: The Customer shall pay promptly.\n", clause) == \
        "The Customer shall pay promptly."
    assert revise.clean_answer("```\nThe Customer shall pay.\n```", clause) == clause
    assert revise.clean_answer('"The Customer shall pay."', clause) == clause
    assert revise.clean_answer('"Quoted" stays', '"Quoted" stays') == '"Quoted" stays'


def test_no_change_deleting_most_and_running_past_are_said():
    p = Paragraph(4, "The Customer shall notify the Supplier within thirty days of any claim.")
    same = revise.finish(p, p.text + "\n")
    assert same.status == "no change" and not same.flags and not same.changes
    changed = revise.finish(p, p.text.replace("thirty", "sixty"))
    assert changed.status == "changed" and [(c.before, c.after) for c in changed.changes] == [("thirty", "sixty")]
    assert changed.as_dict()["paragraph"] == 5 and not changed.flags
    short = revise.finish(p, "The Customer shall notify.")
    assert any(f.startswith("deleted most") for f in short.flags)
    longer = revise.finish(p, p.text + "\n\nThis revision extends the period.")
    assert any("ran past the clause" in f for f in longer.flags)


def test_the_output_is_checked_before_any_work(tmp_path, contract):
    src = contract.path
    assert revise.check_output(tmp_path / "out.docx", src) == "docx"
    with pytest.raises(RevisionError, match="suffix picks the format"):
        revise.check_output(tmp_path / "out.pdf", src)
    with pytest.raises(RevisionError, match="is the document itself"):
        revise.check_output(src, src)
    with pytest.raises(RevisionError, match="folder does not exist"):
        revise.check_output(tmp_path / "nowhere" / "out.md", src)
    with pytest.raises(RevisionError, match="/proc"):
        revise.check_output("/proc/redline.docx", src)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not os.access(locked, os.W_OK):       # root writes anywhere: the check is then moot
            with pytest.raises(RevisionError, match="not a writable directory"):
                revise.check_output(locked / "out.md", src)
    finally:
        locked.chmod(0o700)


@pytest.mark.slow        # about 1.6 s (auto resolved over the suite's caches)
def test_a_revision_is_planned_with_the_clause_as_its_prediction(contract):
    session = Session(tiny_chat_verifier(), "auto", GenerationOptions(k=32))
    encode = session.verifier.identity.encode
    clause = contract.paragraphs[4]
    request = revise.plan_revision(session, clause, "sixty days", session.options)
    assert request.prediction == tuple(encode(clause.text))
    assert request.options.max_tokens == revise.max_tokens_for(len(request.prediction))
    assert holds(request.ids, encode("Instruction: sixty days")) and holds(request.ids, encode(clause.text))
    plain = revise.plan_revision(session, clause, "sixty days", session.options, max_tokens=5, chat_template=False)
    assert plain.options.max_tokens == 5 and list(plain.ids) == encode(
        revise.revision_prompt(session, "sixty days", clause.text, chat_template=False))


def holds(ids, part) -> bool:
    ids, n = list(ids), len(part)
    return any(ids[i:i + n] == part for i in range(len(ids) - n + 1))


@pytest.mark.slow        # about 3.5 s on two cores: out of the fast loop
def test_three_hundred_pages_read_at_once_and_revise_with_moving_progress_and_bounded_memory(tmp_path, capsys):
    """A 300-page text (3,000 clauses) is read and its clauses chosen at once; 120 of them revised
    with the tiny verifier give a progress line a clause with the estimate of the time left, and
    leave nothing behind but their results: MLX's memory back where it was, Python's grown by
    less than 20 kB a clause (a leaked KV cache or stream would be far more)."""
    from olifant_mlx.cli.revise import revise_all
    from olifant_mlx.mlx_setup import mx

    clause = "The Supplier shall deliver the goods to the Customer within thirty days of the order, at its own cost."
    path = tmp_path / "long.txt"
    path.write_text("\n\n".join(f"{n}. {clause}" for n in range(3000)) + "\n")
    doc = revise.read_document(path)
    chosen = revise.select(doc, "x", everything=True).chosen
    assert len(chosen) == 3000
    session = Session(tiny_chat_verifier(), "auto", GenerationOptions(k=8, max_tokens=2))

    class Args:
        instruction, max_tokens, json = "make it sixty days", 2, False
        system_prompt, ignore_chat_template, chat_template_config = None, False, None

    revise_all(session, session.options, chosen[:5], Args, per_clause=False)      # warm: MLX's first buffers
    capsys.readouterr()
    mx.clear_cache()
    active, n = mx.get_active_memory(), 120
    tracemalloc.start()
    revisions, _ = revise_all(session, session.options, chosen[::25], Args, per_clause=False)
    grown, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    mx.clear_cache()
    assert len(revisions) == n and [r.paragraph.number for r in revisions[:2]] == [1, 26]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[")]
    assert [ln.split("]")[0] for ln in lines] == [f"[{i}/{n}" for i in range(1, n + 1)]
    assert all("left)" in ln for ln in lines[:-1]) and "left" not in lines[-1]
    assert mx.get_active_memory() <= active + (1 << 20)
    assert grown < 20_000 * n


# ---- the command, on SmolLM2-135M -----------------------------------------------------------------

def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "olifant_mlx", "revise", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_revise_writes_a_redline_equal_to_plain_decodings_answer(tmp_path, smol):
    src = write_contract(tmp_path / "msa.docx")
    out = tmp_path / "msa-redline.docx"
    common = ["-i", "make the notice period sixty (60) days", "--model", "smollm2-135m", "--json"]
    r = cli(src, *common, "--output", out)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["selected"].startswith("search") and [c["paragraph"] for c in report["clauses"]] == [5]
    clause = report["clauses"][0]
    assert clause["before"] == CONTRACT[4][1] and clause["status"] in ("changed", "no change")
    assert clause["stats"]["prediction"]["tokens"] > 10 and clause["stats"]["steps"] < clause["stats"]["tokens"]
    plain = json.loads(cli(src, *common, "--draft", "none").stdout)
    assert plain["clauses"][0]["after"] == clause["after"]
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    from olifant_mlx.redline import accepted_text, original_text

    data = out.read_bytes()
    assert accepted_text(data)[4] == clause["after"] and original_text(data) == [t for _, t in CONTRACT]
    md = tmp_path / "msa.md"
    r = cli(src, "-i", "make the notice period sixty (60) days", "--model", "smollm2-135m", "--clause", "5",
            "--output", md)
    assert r.returncode == 0, r.stderr
    assert "¶5:" in r.stdout and md.read_text().count("\n\n") >= len(CONTRACT) - 1


@pytest.mark.slow
def test_bad_input_is_refused_before_the_verifier_loads_and_nothing_is_written(tmp_path, smol):
    src = write_contract(tmp_path / "msa.docx")
    long = tmp_path / "long.docx"
    import docx

    d = docx.Document()
    d.add_paragraph("The Supplier shall " + "deliver the goods " * 3000 + "on time.")
    d.save(long)
    tracked = write_contract(tmp_path / "tracked.docx", tracked=True)
    cases = [
        ([src, "-i", "rewrite it in plain language"], "selects no clause"),
        ([tracked, "-i", "x", "--clause", "6"], "¶6 has tracked changes of its own"),
        ([long, "-i", "make it sixty days", "--clause", "1"], "more than smollm2-135m's context"),
        ([src, "-i", "sixty days", "--output", tmp_path / "no" / "such" / "out.docx"], "folder does not exist"),
        ([tmp_path / "missing.docx", "-i", "x"], "no such file"),
        ([src], "give the instruction"),
    ]
    for args, message in cases:
        r = cli(*args, "--model", "smollm2-135m")
        assert r.returncode != 0 and message in r.stderr, (args, r.stderr)
        assert "loading smollm2-135m" not in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.docx", "msa.docx", "tracked.docx"]


@pytest.mark.slow
def test_list_shows_numbers_kinds_and_tracked_paragraphs(tmp_path):
    r = cli(write_contract(tmp_path / "t.docx", tracked=True), "--list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[4].split()[:2] == ["5", "clause"] and "[tracked changes: 1]" in lines[5]
    assert lines[1].split()[:3] == ["2", "heading", "1"]


def test_what_a_clause_teaches_the_drafter_and_its_cache_go_on_to_the_next(contract):
    from olifant_mlx.engine import PromptCache

    session = Session(tiny_chat_verifier(), "auto", GenerationOptions(k=32))
    cache = PromptCache()
    first = revise.plan_revision(session, contract.paragraphs[4], "sixty days", session.options, 24, cache=cache)
    session.generate(first)
    learnt = session.learning.peek(first.drafter.keys[0])[0].acceptance.counts
    assert learnt and session.learning.peek(session.drafter.keys[0]) is None    # the session's drafter's untouched
    second = revise.plan_revision(session, contract.paragraphs[5], "sixty days", session.options, 24, first.drafting,
                                  cache)
    assert second.drafter is not first.drafter
    assert second.drafter.open([1, 2], session.learning).acceptance.counts == learnt
    assert [s.prediction for s in second.drafter.inner.sources if s.name == "prediction"] == \
        [session.verifier.identity.encode(contract.paragraphs[5].text)]
    shared = next(i for i, (a, b) in enumerate(zip(first.ids, second.ids)) if a != b)     # the instruction's part
    assert shared > 150 and session.generate(second).stats.extra["cached_tokens"] == shared

"""Precedent libraries with the real pieces: SmolLM2's tokenizer (no verifier is loaded), the C
IGTree and suffix index, real files, the CLI."""
import json
import shutil

import pytest
from document_fixtures import cache_with_models

from olifant_mlx import library
from olifant_mlx.cli import main
from olifant_mlx.drafters import build_drafter, parse_spec, resolve_auto
from olifant_mlx.drafters.registry import DrafterSpecError
from olifant_mlx.verifier import load_tokenizer

BUNDLE = ("model.olif", "index.sfx", "tokens.u32", "documents.json")


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2-135m")      # from the shared cache, before $OLIFANT_CACHE moves


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = cache_with_models(tmp_path / "cache")
    monkeypatch.setenv("OLIFANT_CACHE", str(root))
    return root


def document(n: int) -> str:
    return (f"Clause {n}. The supplier shall deliver lot {n * 7 % 101} to warehouse {n % 13}.\n\n"
            f"Payment of invoice {n} is due within {n % 60 + 1} days of delivery.\n")


def make_folder(folder, count):
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        sub = folder / f"matter{n % 10}"
        sub.mkdir(exist_ok=True)
        (sub / f"doc{n:04d}.{'md' if n % 2 else 'txt'}").write_text(document(n))
    return folder


def same_bundle(a, b):
    for name in BUNDLE:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_adding_one_document_rereads_only_it_and_equals_a_full_rebuild(tmp_path, cache, smollm2):
    folder = make_folder(tmp_path / "precedents", 1000)
    first = library.build("contracts", folder, smollm2)
    assert first["reread"] == 1000 and first["documents"] == 1000
    (folder / "matter3" / "new.txt").write_text(document(5000))
    again = library.build("contracts", folder, smollm2)
    assert again["reread"] == 1 and again["reused"] == 1000 and again["documents"] == 1001
    assert again["rebuild_s"] > 0
    shutil.rmtree(cache / "documents", ignore_errors=True)                      # nothing cached: every file read afresh
    full = library.build("full", folder, smollm2)
    assert full["reread"] == 1001 and full["files"]["extracted"] == 1001
    same_bundle(library.load("contracts").path, library.load("full").path)
    # a changed and a removed file: only the changed one read again, still equal to a full build
    (folder / "matter0" / "doc0000.txt").write_text(document(7777))
    (folder / "matter1" / "doc0001.md").unlink()
    changed = library.build("contracts", folder, smollm2)
    assert changed["reread"] == 1 and changed["documents"] == 1000
    shutil.rmtree(cache / "documents", ignore_errors=True)
    library.build("full", folder, smollm2)
    same_bundle(library.load("contracts").path, library.load("full").path)
    assert all((library.load("full").path / f).stat().st_mode & 0o777 == 0o600 for f in BUNDLE)


def test_document_table_offsets_point_into_the_token_stream(tmp_path, cache, smollm2):
    import numpy as np

    folder = make_folder(tmp_path / "precedents", 20)
    library.build("small", folder, smollm2)
    lib = library.load("small")
    stream = np.fromfile(lib.path / "tokens.u32", dtype="<u4")
    for row in lib.table():
        start = row["start"]
        n = int(row["path"].split("doc")[1].split(".")[0])
        first, second = document(n).split("\n\n")
        para = stream[start + row["paragraphs"][1]:start + row["tokens"]]
        assert smollm2.decode([int(t) for t in para]) == second.strip()
        assert first and row["title"] == row["path"].split("/")[-1] and len(row["hash"]) == 64   # no title: the name


def test_library_drafter_and_auto(tmp_path, cache, smollm2):
    folder = make_folder(tmp_path / "precedents", 50)
    library.build("contracts", folder, smollm2)
    drafter = build_drafter(parse_spec("library:contracts"), smollm2)
    prompt = smollm2.encode("Clause 12. The supplier shall deliver lot")
    drafter.start(prompt)
    draft = [int(t) for t in drafter.draft(prompt, 6)]
    # the library's document 12 goes on "84 to warehouse 12." (a draft of the length adaptive chose)
    assert len(draft) >= 2 and " 84 to warehouse 12.".startswith(smollm2.decode(draft)), smollm2.decode(draft)
    auto = resolve_auto(smollm2)
    assert auto.text.startswith("adaptive:hybrid:") and "contracts" in auto.text and "rest:" in auto.text
    with pytest.raises(DrafterSpecError, match="no library 'other'"):
        parse_spec("library:other")


def test_library_cli_build_list_info_rm_and_models(tmp_path, cache, capsys):
    folder = make_folder(tmp_path / "precedents", 12)
    (folder / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(100))
    assert main(["library", "build", "deeds", str(folder), "--tokenizer", "smollm2-135m", "--json", "--quiet"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["documents"] == 12 and s["files"]["skipped"] == 1
    assert main(["library", "list", "--json"]) == 0
    assert [d["name"] for d in json.loads(capsys.readouterr().out)] == ["deeds"]
    assert main(["library", "info", "deeds", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["table"]) == 12
    # a typo is answered with the library meant (issue 48: it said `library build deds FOLDER`)
    assert main(["generate", "--model", "smollm2-135m", "--precedents", "deds", "-p", "x"]) == 1
    err = capsys.readouterr().err
    assert "no library 'deds': did you mean 'deeds'?" in err and "library build" not in err
    assert main(["models", "--json"]) == 0
    assert [d["name"] for d in json.loads(capsys.readouterr().out)["libraries"]] == ["deeds"]
    assert main(["library", "rm", "deeds"]) == 0
    capsys.readouterr()
    assert main(["library", "info", "deeds"]) == 1 and "no library 'deeds'" in capsys.readouterr().err
    assert main(["library", "build", "x", str(tmp_path / "nowhere"), "--tokenizer", "smollm2-135m"]) == 1
    assert "is not a folder" in capsys.readouterr().err


@pytest.mark.slow    # two builds through the CLI: over the fast loop's 1.4 s
def test_library_build_says_read_of_text_and_counts_in_the_singular(tmp_path, cache, capsys):
    """Issue 48: `library build` of plain-text files said "5 extracted afresh" (text is read,
    not extracted) and a one-page PDF "1 pages"."""
    from document_fixtures import write_pdf

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("The Tenant shall pay the rent.\n\nThe Landlord shall repair.\n")
    (folder / "b.txt").write_text("One paragraph only.\n")
    assert main(["library", "build", "notes", str(folder), "--tokenizer", "smollm2-135m"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "files: 2 read, 0 skipped" in out and "extracted" not in out
    assert "read: 2 paragraphs" in out and "read: 1 paragraph " in out + " "
    assert "2 changed or new files (0 unchanged, reused)" in out
    write_pdf(folder / "c.pdf", ["A clause on one page."], header="Memo", per_page=3)
    assert main(["library", "build", "notes", str(folder), "--tokenizer", "smollm2-135m"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "files: 3 read, 0 skipped, 1 extracted afresh" in out and ", 1 page " in out + " "
    assert "1 changed or new file (2 unchanged, reused)" in out


@pytest.mark.slow    # the real offline verifier
def test_library_drafts_preserve_output_and_get_accepted(tmp_path, cache, smollm2, smol):
    from olifant_mlx.engine import generate

    prompt = smol.tokenizer.encode("Article 1\nThis Regulation lays down rules concerning the protection of")
    ref, _ = generate(smol.model, prompt, max_tokens=24)
    folder = make_folder(tmp_path / "precedents", 30)
    (folder / "regulation.md").write_text("Article 1\n\nThis Regulation lays down rules concerning the protection of"
                                          + smol.tokenizer.decode(ref) + "\n")
    library.build("regulations", folder, smollm2)
    drafter = build_drafter("library:regulations", smol.identity)
    accepted = 0
    for k in (3, 8):
        drafter.start(prompt)
        out, st = generate(smol.model, prompt, drafter, k=k, max_tokens=24)
        assert out == ref, k
        accepted += st.accepted
    assert accepted > 0

"""Damaged library metadata (issue 37, item 7): every metadata file is checked on load, and a
damaged library is a clear one-line error naming its file and the fix where it is asked for by
name, and a one-line warning where libraries are listed (`auto`, `models`, `library list`),
never a traceback. Real libraries (SmolLM2's tokenizer, the C index), real files, the CLI."""
import json

import pytest
from document_fixtures import cache_with_models

from olifant_mlx import library
from olifant_mlx.cli import main
from olifant_mlx.drafters import resolve_auto
from olifant_mlx.verifier import load_tokenizer

DAMAGE = [  # (file, bytes written over it, what the error says)
    ("library.json", b"[1,2]", "holds list"),
    ("library.json", b"{}", "no valid 'name'"),
    ("library.json", b'{"name": "x", "folder": "f", "tokenizer": [], "documents": 1, "tokens": 5, '
                     b'"built_at": "now"}', "no valid 'tokenizer'"),
    ("library.json", b"{\"name\":", "cannot be read"),
    ("library.json", b"\xff\xfe", "cannot be read"),
    ("documents.json", b"[]", "no list of documents"),
    ("documents.json", b'{"documents": [{}]}', "no valid 'id' in document 0"),
    ("documents.json", b'{"documents": 3}', "no list of documents"),
]


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2-135m")      # from the shared cache, before $OLIFANT_CACHE moves


@pytest.fixture
def cache(tmp_path, monkeypatch, smollm2):
    root = cache_with_models(tmp_path / "cache")
    monkeypatch.setenv("OLIFANT_CACHE", str(root))
    folder = tmp_path / "precedents"
    folder.mkdir()
    for n in range(6):
        (folder / f"doc{n}.txt").write_text(f"Clause {n}. The supplier shall deliver lot {n * 7}.\n")
    library.build("good", folder, smollm2)
    library.build("bad", folder, smollm2)
    library._warned.clear()
    return root


@pytest.mark.parametrize("file,data,said", DAMAGE)
def test_a_damaged_library_is_skipped_with_one_warning_and_named_on_load(cache, smollm2, capsys, file, data, said):
    target = cache / "libraries" / "bad" / file
    target.write_bytes(data)
    with pytest.raises(library.LibraryError, match=said) as e:
        library.load("bad")
    assert str(target) in str(e.value) and "library build bad" in str(e.value)
    assert "\n" not in str(e.value)
    assert [lib.name for lib in library.list_libraries()] == ["good"]
    assert "good" in resolve_auto(smollm2).text                # auto drafts from the good one
    assert main(["library", "list"]) == 0
    assert main(["models", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [d["name"] for d in json.loads(out[out.index("{"):])["libraries"]] == ["good"]
    warnings = [line for line in err.splitlines() if line.startswith("warning: skipped library 'bad'")]
    assert len(warnings) == 1 and "Traceback" not in err, err
    assert main(["library", "info", "bad"]) == 1
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_the_table_is_checked_before_provenance_reads_it(cache, smollm2):
    from olifant_mlx.provenance import find_sources

    path = cache / "libraries" / "bad" / "documents.json"
    table = json.loads(path.read_text())
    table["documents"][0]["paragraphs"] = ["x"]
    path.write_text(json.dumps(table))
    lib = library.Library("bad", path.parent, json.loads((path.parent / "library.json").read_text()))
    with pytest.raises(library.LibraryError, match="paragraph offsets or pages"):
        find_sources(lib, smollm2.encode("Clause 1. The supplier shall deliver lot 7."), tokenizer=smollm2)


def test_an_unknown_name_lists_the_others_only_when_asked(cache):
    with pytest.raises(library.LibraryError, match=r"libraries: bad, good"):
        library.load("nope")
    with pytest.raises(library.LibraryError) as e:
        library.load("nope", list_others=False)
    assert "no library 'nope'" in str(e.value) and "good" not in str(e.value)


# issue 45 item 5: a mutation fuzz of passages.sqlite (a column of one row or of every row set to a
# blob, text that is not UTF-8, NULL, a number of another kind; bytes of the file flipped; the file
# cut): every query path — search, a quoted search, the matter wall, a pinned library document —
# answers with passages of the right types or a PassageError naming the file and the rebuild (was:
# TypeError, sqlite3.OperationalError, UnicodeDecodeError tracebacks)
VALUES = ["CAST(X'466f726365' AS BLOB)", "CAST(X'ff41' AS TEXT)", "NULL", "4611686018427387904", "-3", "2.5",
          "''", "'clause'", "CAST(X'c3' AS TEXT)", "zeroblob(5)"]
COLUMNS = ("text", "title", "heading", "path", "document", "matter", "paragraph", "page", "tokens", "last",
           "body", "name")


def mutate(path, rng) -> str:
    import sqlite3

    kind = rng.randrange(10)
    data = bytearray(path.read_bytes())
    if kind == 8:                                   # bytes flipped anywhere past the header
        for _ in range(rng.randrange(1, 20)):
            data[rng.randrange(100, len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        return "flipped"
    if kind == 9:
        path.write_bytes(bytes(data[:rng.randrange(len(data))]))
        return "cut"
    column, value = rng.choice(COLUMNS), rng.choice(VALUES)
    where = "" if kind < 4 else f" WHERE rowid = {rng.randrange(1, 8)}"
    con = sqlite3.connect(path)
    with con:
        con.execute(f"UPDATE passages SET {column} = {value}{where}")
    con.close()
    return f"{column} = {value}{where}"


@pytest.mark.parametrize("runs", [40, pytest.param(800, marks=pytest.mark.slow)])
def test_a_mutated_passage_index_is_an_error_naming_it_on_every_path(cache, smollm2, capsys, runs):
    import random

    from olifant_mlx import passages, precedents
    from olifant_mlx.engine.options import OptionsError

    lib = library.load("bad")
    index = passages.path_of(lib)
    good = index.read_bytes()
    rng = random.Random(45)
    asks = [lambda: passages.search(lib, "supplier deliver lot"),
            lambda: passages.search(lib, "the 'supplier shall deliver' lot 7", n=3),
            lambda: passages.search(lib, "supplier", matter="acme"),
            lambda: passages.document_passages(lib, "doc3.txt"),
            lambda: precedents.gather(smollm2, "deliver", library="bad", pinned=("doc2.txt",)).passages]
    outcomes = {"answered": 0, "refused": 0}
    for run in range(runs):
        index.write_bytes(good)
        what = mutate(index, rng)
        for ask in asks:
            try:
                found = ask()
            except (passages.PassageError, OptionsError) as e:
                if "nor a document of library 'bad'" in str(e):     # its path changed: no such document
                    continue
                assert str(index.resolve()) in str(e) or str(index) in str(e), (run, what, e)
                assert "library build bad" in str(e) and "\n" not in str(e), (run, what, e)
                outcomes["refused"] += 1
                continue
            for p in found:
                assert isinstance(p.text, str) and isinstance(p.path, str) and isinstance(p.paragraph, int), (run, what)
                p.citation()
            outcomes["answered"] += 1
    assert outcomes["answered"] > runs // 3 and outcomes["refused"] > runs // 3, outcomes
    index.write_bytes(good)
    con = __import__("sqlite3").connect(index)
    with con:
        con.execute("UPDATE passages SET body = CAST(X'466f726365' AS BLOB)")
    con.close()
    assert main(["library", "search", "bad", "'supplier shall deliver' lot"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: library 'bad': its passage index") and "Traceback" not in err

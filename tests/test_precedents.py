"""Drafting with precedents: a library's passages searched (SQLite FTS5), chosen within a token
budget behind the matter wall, put into the prompt with their citations, and the copied spans
traced to them. Real .docx and .pdf files, SmolLM2's real tokenizer, the CLI; the slow tests
load the real verifier."""
import json
import sqlite3

import pytest
from document_fixtures import cache_with_models, write_pdf

from olifant_mlx import library, passages, precedents
from olifant_mlx.cli import main
from olifant_mlx.engine import Chat
from olifant_mlx.engine.options import GenerationOptions
from olifant_mlx.option_errors import OptionFileError, OptionsError
from olifant_mlx.verifier import load_tokenizer

CONFIDENTIALITY = ("Each party shall keep the Confidential Information of the other party strictly "
                   "confidential and shall not disclose it to any third party other than its auditors "
                   "and professional advisers, for a period of three years from the date of disclosure.")
GOVERNING_LAW = "This agreement is governed by and construed in accordance with the laws of England and Wales."
TERMINATION = "Either party may terminate this agreement by giving the other party ninety days' written notice."
RENT = "The tenant shall pay the rent quarterly in advance on the usual quarter days without deduction."
REPAIR = "The landlord shall keep the structure and exterior of the building in good and substantial repair."
SECRET = ("The auditors of Gamma Plc shall keep every record of the merger confidential for three years and "
          "disclose it to no third party.")


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2-135m")      # from the shared cache, before $OLIFANT_CACHE moves


@pytest.fixture
def cache(tmp_path, monkeypatch):       # as tests/test_library.py's
    root = cache_with_models(tmp_path / "cache")
    monkeypatch.setenv("OLIFANT_CACHE", str(root))
    return root


def write_docx(path, paragraphs, title=None):
    import docx

    d = docx.Document()
    if title:
        d.add_heading(title, level=1)
    for text in paragraphs:
        d.add_paragraph(text)
    d.save(path)


def precedent_folder(root):
    """Two matters (acme: an NDA in Word, a lease in PDF; gamma: a merger note) and a clause
    bank without a matter."""
    (root / "acme").mkdir(parents=True)
    (root / "gamma").mkdir()
    write_docx(root / "acme" / "nda.docx", [CONFIDENTIALITY, GOVERNING_LAW], title="Mutual NDA")
    write_pdf(root / "acme" / "lease.pdf", [RENT, REPAIR], header="Lease of Unit 4", per_page=2)
    write_docx(root / "gamma" / "merger.docx", [SECRET], title="Project Gamma")
    write_docx(root / "clauses.docx", [TERMINATION, GOVERNING_LAW], title="Clause bank")
    return root


@pytest.fixture
def built(tmp_path, cache, smollm2):
    folder = precedent_folder(tmp_path / "precedents")
    library.build("firm", folder, smollm2)
    return library.load("firm"), folder


def test_search_ranks_the_intended_passage_first_and_cites_it(built, capsys):
    lib, _ = built
    assert lib.meta["passages"] == 4        # a region each: a heading and what follows it, under WINDOW_TOKENS
    best = passages.search(lib, "keep confidential information from third parties, auditors, three years")
    # a passage is a region of paragraphs (a heading and the clauses under it): cited as such
    assert best[0].paragraphs() == ["Mutual NDA", CONFIDENTIALITY, GOVERNING_LAW] and best[0].path == "acme/nda.docx"
    assert best[0].citation() == "acme/nda.docx, paragraphs 1-3"
    rent = passages.search(lib, "quarterly rent paid in advance")[0]
    assert RENT in rent.paragraphs() and rent.path == "acme/lease.pdf" and rent.page == 1
    # the command: ranked passages with their citations, as a table and as JSON
    assert main(["library", "search", "firm", "rent quarterly in advance", "-n", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) <= 2 and RENT in rows[0]["text"]
    assert rows[0]["citation"].startswith("acme/lease.pdf, page 1")
    assert main(["library", "search", "firm", "terminate ninety days notice"]) == 0
    out = capsys.readouterr().out
    assert "clauses.docx" in out and "ninety" in out


def test_the_index_is_built_with_the_library_and_updated_with_it(built, smollm2, cache):
    lib, folder = built
    path = passages.path_of(lib)
    assert path.stat().st_mode & 0o777 == 0o600
    write_docx(folder / "acme" / "loan.docx", ["The borrower shall repay the loan in twelve monthly instalments."])
    library.build("firm", folder, smollm2)
    again = library.load("firm")
    assert passages.search(again, "repay loan instalments")[0].path == "acme/loan.docx"
    library.build("full", folder, smollm2)                       # a full build indexes the same rows
    rows = [sqlite3.connect(passages.path_of(library.load(n))).execute(
        "SELECT text, path, paragraph, page, matter, tokens FROM passages ORDER BY rowid").fetchall()
        for n in ("firm", "full")]
    assert rows[0] == rows[1]


def test_the_matter_wall_keeps_another_matters_document_out(built, smollm2):
    lib, _ = built
    query = "Draft a clause: the auditors keep the merger records confidential for three years"
    # without a wall the gamma merger note is the best match ...
    assert passages.search(lib, query)[0].path == "gamma/merger.docx"
    # ... for matter acme it never reaches the prompt nor the precedents list
    walled = precedents.gather(smollm2, query, library="firm", budget=2000, matter="acme")
    assert walled.passages and all(p.matter in ("acme", None) for p in walled.passages)
    assert "merger" not in walled.block and "Gamma" not in walled.block
    assert all(p.path != "gamma/merger.docx" for p in passages.search(lib, query, matter="acme", n=50))
    # pinned by name, it does
    pinned = precedents.gather(smollm2, query, library="firm", pinned=("gamma/merger.docx",), budget=2000,
                               matter="acme")
    assert pinned.passages[0].path == "gamma/merger.docx" and pinned.passages[0].pinned


def test_passages_fill_the_budget_and_go_into_the_prompt_with_citations(built, smollm2, tmp_path):
    query = "Draft the confidentiality clause for Acme Ltd and Beta GmbH: three years, auditors"
    used = precedents.gather(smollm2, query, library="firm", budget=4000, matter="acme")
    assert CONFIDENTIALITY in used.passages[0].paragraphs()
    assert 0 < used.tokens <= 4000 and "[1] acme/nda.docx, paragraphs" in used.block
    chat = precedents.with_block(Chat.of(query, system_prompt="Be brief."), used)
    assert chat.messages[0] == {"role": "system", "content": "Be brief."}
    last = chat.messages[-1]["content"]
    assert last.startswith(precedents.CHAT_HEAD) and last.endswith(f"{precedents.CHAT_TAIL}\n{query}")
    text = precedents.with_block("The Recipient shall", used)       # a base model's prompt
    assert text.startswith(precedents.TEXT_HEAD) and text.endswith("---\n\nThe Recipient shall")
    small = precedents.gather(smollm2, query, library="firm", budget=used.passages[0].tokens + 20, matter="acme")
    assert small.passages == used.passages[:1]
    lines = used.summary()
    assert lines.startswith(f"precedents: {len(used.passages)} passage") and "acme/nda.docx" in lines
    # a pinned file outside any library comes first, whole, and is cited by the name given
    outside = tmp_path / "memo.docx"
    write_docx(outside, ["Memo: the client wants a five-year term.", "Keep the auditors' carve-out."])
    both = precedents.gather(smollm2, query, library="firm", pinned=(str(outside),), budget=4000, matter="acme")
    assert [p.text for p in both.passages[:2]] == ["Memo: the client wants a five-year term.",
                                                    "Keep the auditors' carve-out."]
    assert both.passages[0].citation() == f"{outside}, paragraph 1" and both.passages[0].library is None


def test_the_copied_spans_are_traced_to_the_passages_given(built, smollm2):
    from olifant_mlx.provenance import SourceTracker

    used = precedents.gather(smollm2, "confidential information auditors three years", library="firm",
                             budget=4000)
    index = precedents.provenance_index(used, smollm2)
    copied = smollm2.encode("It says: " + CONFIDENTIALITY[:120])
    tracker = SourceTracker(index, min_tokens=8, tokenizer=smollm2)
    tracker.feed(copied)
    found = tracker.close()
    assert found and found[0].tokens >= 15
    place = found[0].places[0]
    nda = next(p for p in used.passages if CONFIDENTIALITY in p.paragraphs())
    where = nda.paragraph + nda.paragraphs().index(CONFIDENTIALITY)    # the clause's own paragraph
    assert (place.path, place.paragraph, place.document) == ("acme/nda.docx", where, nda.document)


def test_the_default_budget_grows_to_hold_the_best_passage_whole(built, smollm2):
    """A document of long paragraphs drafts without a flag: under the default budget (room
    given) the best passage goes in whole, up to what the context leaves; a budget the user
    gave is kept, and too little context is an error naming --max-tokens."""
    query = "confidential auditors"
    best = precedents.gather(smollm2, query, library="firm", budget=4000).passages
    first = max(best, key=lambda p: p.score)
    small = first.tokens // 2                   # a default budget the best passage does not fit
    grown = precedents.gather(smollm2, query, library="firm", budget=small, room=4000)
    assert [p.path for p in grown.passages] == [first.path] and grown.passages[0].text == first.text
    assert grown.budget == first.tokens + precedents.LABEL_TOKENS
    with pytest.raises(OptionsError, match=f"a precedent budget of {small} tokens holds no passage"):
        precedents.gather(smollm2, query, library="firm", budget=small)
    with pytest.raises(OptionsError, match="the 20 tokens the verifier's context leaves .* holds no passage"
                                           r".*\(max tokens\)"):
        precedents.gather(smollm2, query, library="firm", budget=20, room=20)


# issue 45 item 6: a pin naming a library's document is that document, never a file of that path in
# the working folder (which was read and cited as the library's); library:NAME:PATH pins another
# library's document whatever --precedents is (the TUI's pins are so)
def test_a_library_path_resolves_inside_its_library(built, smollm2, tmp_path, monkeypatch):
    from olifant_mlx.tui.workspace import Pins

    work = tmp_path / "work"
    (work / "gamma").mkdir(parents=True)
    write_docx(work / "gamma" / "merger.docx", ["IMPOSTER text from the working folder."])
    write_docx(work / "memo.docx", ["A memo in the working folder."])
    monkeypatch.chdir(work)
    query = "merger records"
    for spec in ("gamma/merger.docx", "./gamma//merger.docx", "library:firm:gamma/merger.docx"):
        used = precedents.gather(smollm2, query, library="firm", pinned=(spec,), budget=2000)
        first = used.passages[0]
        assert (first.library, first.path) == ("firm", "gamma/merger.docx") and SECRET in used.block, spec
        assert "IMPOSTER" not in used.block
    alone = precedents.gather(smollm2, query, pinned=("library:firm:gamma/merger.docx",), budget=2000)
    assert alone.passages[0].library == "firm" and SECRET in alone.block
    memo = precedents.gather(smollm2, query, library="firm", pinned=("memo.docx",), budget=2000)
    assert memo.passages[0].library is None and memo.passages[0].text == "A memo in the working folder."
    with pytest.raises(OptionsError, match="library 'firm' has no document 'nowhere.docx'"):
        precedents.gather(smollm2, query, pinned=("library:firm:nowhere.docx",))
    with pytest.raises(OptionsError, match="no library 'other'"):
        precedents.gather(smollm2, query, pinned=("library:other:x.docx",))
    assert precedents.in_library("../firm/x.docx") is None and precedents.in_library("/etc/passwd") is None
    monkeypatch.setattr("olifant_mlx.verifier.load_verifier", lambda *a, **k: pytest.fail("the verifier loaded"))
    assert main(["generate", "--model", "smollm2-135m", "--precedent", "library:other:x.docx", "-p", "x"]) == 1
    # the TUI's pin (library, path) is that library's document, whatever library Settings names
    pins = Pins()
    pins.toggle({"library": "firm", "path": "gamma/merger.docx"})
    pins.toggle({"library": None, "path": str(work / "memo.docx")})
    assert pins.paths() == ["library:firm:gamma/merger.docx", str(work / "memo.docx")]
    used = precedents.gather(smollm2, query, library=None, pinned=tuple(pins.paths()), budget=2000)
    assert list(dict.fromkeys((p.library, p.path) for p in used.passages)) == [
        ("firm", "gamma/merger.docx"), (None, str(work / "memo.docx"))]


# issue 45, also: full-width and ligature words (ＣＯＮＦＩＤＥＮＴＩＡＬ, ﬁnancial: PDFs keep their ligatures) are the
# letters they stand for in queries and in the index (NFKC), in library search and revise's ranking
# alike, the passages' text kept as it is; an index of format 1 is still read
def test_full_width_and_ligature_words_are_found(built, smollm2):
    lib, folder = built
    (folder / "gamma" / "accounts.txt").write_text("The ﬁnancial statements of Gamma are audited yearly.\n")
    library.build("firm", folder, smollm2)
    lib = library.load("firm")
    for query in ("ＣＯＮＦＩＤＥＮＴＩＡＬ information advisers", "confidential information advisers"):
        assert passages.search(lib, query)[0].path == "acme/nda.docx", query
    for query in ("financial statements", "ﬁnancial statements", "ｆｉｎａｎｃｉａｌ"):
        best = passages.search(lib, query)[0]
        assert best.path == "gamma/accounts.txt" and "ﬁnancial" in best.text, query     # the text as it is
    assert passages.query_words("ＣＯＮＦＩＤＥＮＴＩＡＬ ﬁnancial") == ["confidential", "financial"]
    assert passages.rank(["The ﬁnancial year.", "Rent."], "financial")[0][0] == 0
    assert passages.rank(["The financial year.", "Rent."], "ＦＩＮＡＮＣＩＡＬ")[0][0] == 0


# issue 45, also: a pinned folder is refused before the verifier loads, as a folder (was: "not a regular
# file (a FIFO, device or socket)"), its flag named once (was: "--precedent: --precedent X:")
def test_a_pinned_folder_is_refused_before_the_verifier_loads_naming_its_flag_once(built, tmp_path, monkeypatch,
                                                                                   capsys):
    from olifant_mlx.draftmodel import documents

    monkeypatch.setattr("olifant_mlx.verifier.load_verifier", lambda *a, **k: pytest.fail("the verifier loaded"))
    assert main(["generate", "--model", "smollm2-135m", "--precedent", str(tmp_path), "-p", "x"]) == 1   # a file error
    err = capsys.readouterr().err
    assert err == f"error: --precedent: {tmp_path}: not read: a folder (pin its documents one by one, or build a " \
                  "library of it)\n", err
    assert documents.not_read(tmp_path) == "a folder, not a regular file: not opened"


class ContextVerifier:
    """What engine.request.with_precedents reads of a verifier: a real tokenizer and a context length."""
    name, model, eos_ids, bos_id, has_chat_template = "ctx", None, (), None, False

    def __init__(self, tokenizer, context_length):
        self.identity, self.context_length = tokenizer, context_length

    def encode(self, text):
        return self.identity.encode(text)


# issue 45 item 4: a pinned file of 30,000 paragraphs (28.8 MB in the issue: 27.8 s and 1.43 GB at the
# default budget, a Rust abort at --precedent-tokens 1000000000) is tokenized only as far as the budget
# holds it, and a budget past the context is capped at what the context leaves
def test_a_pinned_file_is_read_only_as_far_as_the_budget_holds(smollm2, tmp_path, monkeypatch):
    from olifant_mlx.engine import Session
    from olifant_mlx.engine.request import with_precedents

    big = tmp_path / "big.txt"
    big.write_text("\n\n".join(f"Clause {i}. The supplier shall deliver lot {i}." for i in range(30_000)))
    encoded = []
    encode_batch = type(smollm2).encode_batch

    def counted(self, texts):
        encoded.append(len(texts))
        return encode_batch(self, texts)

    monkeypatch.setattr(type(smollm2), "encode_batch", counted)
    session = Session(ContextVerifier(smollm2, 2048), "none")
    prompt = "Deliver the lot to the warehouse."
    for given in (None, 1_000_000_000):
        encoded.clear()
        _, used = with_precedents(session.verifier, prompt, GenerationOptions(
            precedent_files=(str(big),), max_tokens=64, precedent_tokens=given))
        assert used.passages[0].text == "Clause 0. The supplier shall deliver lot 0." and used.passages[0].pinned
        assert used.budget <= 2048 - 64
        assert sum(p.tokens + precedents.LABEL_TOKENS for p in used.passages) <= used.budget
        assert len(used.passages) + used.left_out == 30_000      # every paragraph counted, few tokenized
        assert sum(encoded) < 2048, sum(encoded)
    assert used.budget == 2048 - len(smollm2.encode(prompt)) - 64 - 32     # capped at the context
    # a pinned document goes in from its start: once a passage does not fit, the rest stay out
    long_first = tmp_path / "long.txt"
    long_first.write_text("word " * 600 + "\n\nA short clause.")
    used = precedents.gather(smollm2, "x", pinned=(str(big), str(long_first)), budget=300)
    assert {p.path for p in used.passages} == {str(big)} and used.left_out == 30_000 - len(used.passages) + 2
    with pytest.raises(OptionsError, match=r"the 20 tokens the verifier's context leaves .*\(max tokens\)"):
        precedents.gather(smollm2, "x", pinned=(str(long_first),), budget=20, capped=True)


# issue 45 item 12: --truncate applies with precedents on: a prompt that fills the context is cut to its
# last tokens, without precedents (said in the summary), as it is without them (was: the ContextError
# "leaves no room for precedents" whatever --truncate said)
def test_truncate_applies_with_precedents_on(built, smollm2):
    from olifant_mlx.engine import ContextError, Session

    session = Session(ContextVerifier(smollm2, 256), "none")
    long = "Keep the confidential information of the other party for three years. " * 40
    opts = GenerationOptions(precedents="firm", max_tokens=32, k=0)
    with pytest.raises(ContextError, match="leaves no room for precedents"):
        session.plan(long, opts)
    request = session.plan(long, opts.replace(truncate=True))
    assert len(request.ids) == 256 - 32 and request.ids[-5:] == tuple(smollm2.encode(long)[-5:])
    assert request.precedents.passages == () and "truncated to its last tokens" in request.precedents.summary()
    short = session.plan("Keep the confidential information.", opts.replace(truncate=True))
    assert short.precedents.passages                       # room left: precedents as ever


def test_bad_precedents_get_clear_errors(built, smollm2, tmp_path, capsys, monkeypatch):
    lib, folder = built
    with pytest.raises(passages.PassageError, match="no words to search for"):
        passages.search(lib, "  ")
    with pytest.raises(passages.PassageError, match="only common words"):
        passages.search(lib, "the of and")
    with pytest.raises(OptionsError, match="a precedent budget of 20 tokens holds no passage"):
        precedents.gather(smollm2, "confidential auditors", library="firm", budget=20)
    broken = tmp_path / "broken.docx"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(OptionFileError, match="broken.docx: not read"):
        precedents.gather(smollm2, "x", pinned=(str(broken),))
    with pytest.raises(OptionsError, match="no such file nor a document of library 'firm'"):
        precedents.gather(smollm2, "x", library="firm", pinned=("nowhere/else.docx",))
    with pytest.raises(OptionsError, match="precedent budget must be"):
        GenerationOptions(precedent_tokens=0)

    # on the command line, before any verifier loads
    def no_verifier(*a, **k):
        raise AssertionError("the verifier was loaded")

    monkeypatch.setattr("olifant_mlx.verifier.load_verifier", no_verifier)
    meta = json.loads((lib.path / "library.json").read_text())
    other = {**meta, "tokenizer": {**meta["tokenizer"], "name": "gemma3-270m"}}
    (lib.path / "library.json").write_text(json.dumps(other))
    assert main(["generate", "--model", "smollm2-135m", "--precedents", "firm", "-p", "confidential"]) != 0
    err = capsys.readouterr().err
    assert "built for tokenizer 'gemma3-270m'" in err and "library build NEW_NAME" in err and "Traceback" not in err
    (lib.path / "library.json").write_text(json.dumps(meta))
    with sqlite3.connect(passages.path_of(lib)) as con:      # an index of the format before regions
        con.execute("PRAGMA user_version = 1")
    assert main(["library", "search", "firm", "rent"]) == 1
    err = capsys.readouterr().err
    assert f"is format 1, this version reads {passages.FORMAT}: rebuild it: `python -m olifant_mlx library build " \
           f"firm {folder.resolve()} --tokenizer smollm2-135m`" in err and "Traceback" not in err
    passages.path_of(lib).unlink()              # a library built before passages were indexed
    assert main(["generate", "--model", "smollm2-135m", "--precedents", "firm", "-p", "confidential"]) != 0
    err = capsys.readouterr().err
    assert "no passage index" in err and f"library build firm {folder.resolve()}" in err
    assert main(["library", "search", "firm", "rent"]) != 0
    assert "no passage index" in capsys.readouterr().err
    # a pinned file that is not there is the user's error as every missing file is (1), not a usage error (2)
    assert main(["generate", "--model", "smollm2-135m", "--precedent", str(tmp_path / "gone.pdf"), "-p", "x"]) == 1
    assert "gone.pdf: no such file" in capsys.readouterr().err
    assert main(["generate", "--model", "smollm2-135m", "--precedents", "firm", "--precedent-tokens", "0",
                 "-p", "x"]) == 2                                    # a bad number stays a usage error
    capsys.readouterr()


@pytest.mark.slow
def test_generate_with_precedents_cites_traces_and_equals_plain(built, capsys):
    """The real verifier: the passages it was given are listed, the spans it copies are traced
    to them, and drafting changes nothing in the text."""
    lib, _ = built
    args = ["generate", "--model", "smollm2-135m", "--precedents", "firm", "--ignore-chat-template", "-m", "40",
            "--min-source-tokens", "8", "--json", "-p", "Each party shall keep the Confidential Information"]
    outs = []
    for draft in ("none", "auto"):
        assert main(args + ["--draft", draft]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    plain, drafted = outs
    assert plain["text"] == drafted["text"] and plain["tokens"] == drafted["tokens"]
    cited = drafted["precedents"]
    assert cited and cited[0]["path"] == "acme/nda.docx" and CONFIDENTIALITY in cited[0]["text"]
    assert drafted["sources"], drafted["text"]
    place = drafted["sources"][0]["places"][0]          # the clause's own paragraph, under the NDA's heading
    assert (place["path"], place["paragraph"]) == ("acme/nda.docx", cited[0]["paragraph"] + 1)
    assert drafted["stats"]["steps"] < plain["stats"]["steps"]


@pytest.mark.slow
def test_the_server_takes_precedents_and_answers_with_them(built, smol, tmp_path):
    """A real server on loopback with the real verifier: the request field `precedents` (and
    `matter`) put the passages into the prompt; the answer lists them beside `sources`, which
    trace the copied spans to them, streamed or not; an unknown library lists no other. Its audit
    log names the documents cited and holds no word of the prompts, the passages or the answers."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from olifant_mlx.server.app import start
    from olifant_mlx.server.config import DrafterChoice, Limits

    from olifant_mlx.drafters.registry import parse_spec

    # the library named at start (by a drafter of it), so that a request may name it; lookup the default
    choice = DrafterChoice({"lookup": parse_spec("lookup"), "lib": parse_spec("library:firm")}, "lookup")
    log = tmp_path / "audit.jsonl"
    run = start(smol, choice, GenerationOptions(k=8, max_tokens=64, audit_log=str(log)),
                Limits(max_tokens=256, default_max_tokens=64, max_body_bytes=1 << 20, timeout_s=300))
    try:
        with httpx.Client(base_url=run.url, timeout=300) as c:
            req = {"prompt": "Each party shall keep the Confidential Information", "max_tokens": 32,
                   "precedents": "firm", "matter": "acme", "min_source_tokens": 8}
            body = c.post("/v1/completions", json=req).json()
            cited = body["precedents"]
            assert cited[0]["path"] == "acme/nda.docx" and all(p["matter"] in ("acme", None) for p in cited)
            assert body["sources"] and body["sources"][0]["places"][0]["path"] == "acme/nda.docx"
            with c.stream("POST", "/v1/completions", json={**req, "stream": True}) as r:
                events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
            assert events[-1]["precedents"] == cited and events[-1]["sources"] == body["sources"]
            assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == body["choices"][0]["text"]
            plain = c.post("/v1/completions", json={"prompt": req["prompt"], "max_tokens": 8}).json()
            assert "precedents" not in plain
            r = c.post("/v1/completions", json={**req, "precedents": "nope"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "precedents"
            assert "firm" not in r.json()["error"]["message"]
            secret = "Draft the Zanzibar-Quokka merger note"
            gamma = c.post("/v1/completions", json={"prompt": secret, "max_tokens": 24, "precedents": "firm",
                                                    "matter": "gamma"}).json()
            assert gamma["precedents"][0]["path"] == "gamma/merger.docx"
    finally:
        run.stop()
    from olifant_mlx.audit import verify

    raw = log.read_text()
    assert verify(log).intact and verify(log).lines == 5 and (log.stat().st_mode & 0o777) == 0o600
    assert "acme/nda.docx, paragraph" in raw and "gamma/merger.docx, paragraph" in raw
    said = [req["prompt"], secret, CONFIDENTIALITY, SECRET, GOVERNING_LAW, body["choices"][0]["text"],
            plain["choices"][0]["text"], gamma["choices"][0]["text"]]
    for text in said:       # not a word of it: no run of three words is there (but a citation the answer copied)
        words = text.split()
        runs = [" ".join(words[i:i + 3]) for i in range(max(len(words) - 2, 1))]
        assert not any(run in raw for run in runs if ".docx" not in run and "paragraph" not in run), text
    for word in ("Zanzibar", "Quokka", "Confidential", "auditors", "merger note"):
        assert word not in raw

"""Matter walls that hold on the server (issue 45, item 1), on real servers on loopback (the tiny
verifier, real libraries, real access and audit files, httpx): a server reaches only the
libraries named when it starts, and a request naming any other gets the answer a missing one
gets; each API key sees its own matters and the documents of no matter, by every route
(precedents retrieved, pinned documents, `sources` provenance; the server has no search route);
a request narrows its key's matters, never widens them; and the audit log of a session holds
who asked for which documents, never a word of a prompt, a passage or an output.

The library `firm` holds acme/nda.txt (matter acme), beta/merger.txt (beta), gamma/deal.txt
(gamma) and general.txt (no matter); each says "the codeword is <its secret word>", and the
acme and beta documents hold the two halves of the tiny verifier's greedy output (spans for
provenance). A word of the tiny tokenizer's decoded text is a run of letters between ids 26."""
import json
import os
import stat

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from server_helpers import LIMITS, own_cache, text_of, tiny_tokenizer  # noqa: E402
from tiny_models import ChatTok, tiny_llama  # noqa: E402

from olifant_mlx import library  # noqa: E402
from olifant_mlx.audit import key_id, verify  # noqa: E402
from olifant_mlx.cli import build_parser, main  # noqa: E402
from olifant_mlx.cli.common import options_from  # noqa: E402
from olifant_mlx.cli.serve import read_access_file  # noqa: E402
from olifant_mlx.drafters.registry import parse_spec  # noqa: E402
from olifant_mlx.engine import GenerationOptions, Session  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import ConfigError, DrafterChoice  # noqa: E402
from olifant_mlx.verifier import Verifier  # noqa: E402

KEY_A, KEY_B, KEY_P, KEY_C, KEY_S = "acme-key-0001", "beta-key-0002", "partner-key-03", "clauses-key-4", "plain-key-005"
SECRETS = {"acme": "acmesecret", "beta": "betasecret", "gamma": "gammasecret"}
DOCS = {"acme": "acme/nda.txt", "beta": "beta/merger.txt", "gamma": "gamma/deal.txt", None: "general.txt"}
PROMPT, N = "abcdefgh", 40
ASK = [{"role": "user", "content": "Repeat the codeword"}]


def words(text: str) -> str:
    """Text the tiny tokenizer decodes back as these lowercase words (a-y), a space an id 26."""
    return text_of([26 if c == " " else ord(c) - 96 for c in text])


ACCESS = "\n".join([
    "# the firm's clients: one key a line",
    json.dumps({"key": KEY_A, "id": "acme-desk", "matters": ["acme"], "libraries": ["firm"]}),
    json.dumps({"key": KEY_B, "matters": ["beta"]}),
    json.dumps({"key": KEY_P, "id": "partner", "matters": ["acme", "beta"]}),
    json.dumps({"key": KEY_C, "id": "clauses", "matters": "*", "libraries": ["clauses"]}),
    ""])


@pytest.fixture(scope="module")
def firm(tmp_path_factory):
    """The tiny verifier, its greedy output after PROMPT, and the libraries firm, clauses and
    hidden (built, never named by a server) on a cache of the module's own."""
    for _ in own_cache(tmp_path_factory):
        # the tiny chat verifier, its identity a library's tokenizer (spans traced to the passages given)
        verifier = Verifier(tiny_llama(0), ChatTok(), tiny_tokenizer(), "tiny", context_length=2048)
        output = Session(verifier, "none").generate(PROMPT, GenerationOptions(max_tokens=N)).tokens
        root = tmp_path_factory.mktemp("firm")
        for matter, path in DOCS.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            text = words(f"the codeword is {SECRETS.get(matter, 'general')} ")
            copied = {"acme": output[:20], "beta": output[20:]}.get(matter)
            (root / path).write_text(text + ("\n\n" + text_of(copied) if copied else ""))
        library.build("firm", root, tiny_tokenizer())
        for name, word in (("clauses", "clausebank"), ("hidden", "hiddenword")):
            folder = tmp_path_factory.mktemp(name)
            (folder / "bank.txt").write_text(words(f"the codeword is {word} "))
            library.build(name, folder, tiny_tokenizer())
        yield verifier, output


def serve(verifier, flags, tmp_path, keys=(), access=True, drafters=None):
    """A real server on loopback with `serve FLAGS`'s options, the access file's keys (with
    `access`) and `keys` of --api-key."""
    defaults = options_from(build_parser("olifant").parse_args(["serve", *flags]))
    entries = {}
    if access:
        (tmp_path / "access.jsonl").write_text(ACCESS)
        entries = read_access_file(tmp_path / "access.jsonl")
    specs = {"lookup": parse_spec("lookup"), **{k: parse_spec(v) for k, v in (drafters or {}).items()}}
    return start(verifier, DrafterChoice(specs, "lookup"), defaults, LIMITS,
                 api_key=[*keys, *entries] or None, access=entries)


def ask(c, key, path="/v1/chat/completions", **body):
    body = {"max_tokens": 2, **({"messages": ASK} if path.endswith("chat/completions") else {}), **body}
    return c.post(path, json=body, headers={"Authorization": f"Bearer {key}"} if key else {})


def cited(r) -> list:
    assert r.status_code == 200, r.text
    return [p["path"] for p in r.json()["precedents"]]


def spans(r) -> list:
    assert r.status_code == 200, r.text
    return [(s["start"], s["end"], s["count"], [p["path"] for p in s["places"]]) for s in r.json()["sources"]]


def test_two_keys_see_their_own_matter_and_the_matterless_documents_by_every_route(firm, tmp_path):
    verifier, output = firm
    run = serve(verifier, ["--sources", "firm", "--min-source-tokens", "8"], tmp_path, keys=[KEY_S])
    try:
        with httpx.Client(base_url=run.url, timeout=120) as c:
            for key, own, others in ((KEY_A, "acme", ("beta", "gamma")), (KEY_B, "beta", ("acme", "gamma"))):
                # retrieval: the passages given are its matter's and the matterless ones, whole or streamed
                r = ask(c, key, precedents="firm")
                assert sorted(cited(r)) == sorted([DOCS[own], DOCS[None]]), key
                with c.stream("POST", "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                              json={"messages": ASK, "max_tokens": 2, "precedents": "firm", "stream": True}) as s:
                    streamed = "".join(s.iter_text())
                assert SECRETS[own] in r.text and SECRETS[own] in streamed
                for other in others:         # not a word, a path or a matter of another matter's document
                    for text in (r.text, streamed):
                        assert SECRETS[other] not in text and DOCS[other] not in text and f'"{other}"' not in text
                # pins: its own document and the matterless one; another matter's is a missing one
                pinned = cited(ask(c, key, precedents="firm", precedent=[DOCS[own], "general.txt"]))
                assert list(dict.fromkeys(pinned))[:2] == [DOCS[own], "general.txt"]
                theirs = ask(c, key, precedents="firm", precedent=[DOCS[others[0]]])
                missing = ask(c, key, precedents="firm", precedent=["nothing/here.txt"])
                assert theirs.status_code == missing.status_code == 400 and theirs.content == missing.content
                assert theirs.json()["error"]["param"] == "precedent"
                assert others[0] not in theirs.text
            # a key bound to every matter (the server has no --matter) sees every document
            assert sorted(cited(ask(c, KEY_S, precedents="firm"))) == sorted(DOCS.values())
            # there is no search route to go round the wall by
            assert c.post("/v1/search", json={"query": "codeword"}).status_code in (401, 404)
    finally:
        run.stop()


def test_provenance_reports_only_the_spans_and_places_of_a_keys_own_documents(firm, tmp_path):
    """The output copies half of it from the acme document, half from the beta one: each key is
    told of its own half only, as if the library held nothing else (its count too), by the
    request's `sources` or the server's."""
    verifier, output = firm
    run = serve(verifier, ["--sources", "firm", "--min-source-tokens", "8"], tmp_path, keys=[KEY_S])
    try:
        with httpx.Client(base_url=run.url, timeout=120) as c:
            acme, beta = (0, 20, 1, [DOCS["acme"]]), (20, 40, 1, [DOCS["beta"]])
            for key, named, want in ((KEY_A, {}, [acme]), (KEY_A, {"sources": "firm"}, [acme]),
                                     (KEY_B, {"sources": "firm"}, [beta]), (KEY_P, {}, [acme, beta])):
                r = ask(c, key, "/v1/completions", prompt=PROMPT, max_tokens=N, **named)
                assert spans(r) == want, (key, named)
            narrowed = ask(c, KEY_P, "/v1/completions", prompt=PROMPT, max_tokens=N, matter="beta")
            assert spans(narrowed) == [beta] and "acme" not in narrowed.text
    finally:
        run.stop()


def test_a_library_not_named_at_start_is_answered_as_a_missing_one(firm, tmp_path, tmp_path_factory):
    verifier, _ = firm
    folder = tmp_path_factory.mktemp("gone")
    (folder / "x.txt").write_text(words("the codeword is gone "))
    library.build("gone", folder, tiny_tokenizer())          # on this machine, never named by the server
    run = serve(verifier, ["--precedents", "firm"], tmp_path, keys=[KEY_S],
                drafters={"lib": "library:firm"})
    try:
        with httpx.Client(base_url=run.url, timeout=120) as c:
            requests = [(key, field) for key in (KEY_S, KEY_A) for field in ("precedents", "sources")]
            there = [ask(c, key, **{field: "gone"}) for key, field in requests]
            library.remove("gone")
            gone = [ask(c, key, **{field: "gone"}) for key, field in requests]
            for (key, field), a, b in zip(requests, there, gone):
                assert (a.status_code, a.headers["content-type"], a.content) == \
                    (b.status_code, b.headers["content-type"], b.content) == \
                    (400, "application/json", b.content), (key, field)
                assert b.json()["error"] == {"message": f"{field}: no library 'gone' on this server",
                                             "type": "invalid_request_error", "param": field,
                                             "code": "library_not_found"}
            # a library named at start but not the key's (C's is `clauses`) is one it cannot tell from a missing one
            firm_to_c, none_to_c = ask(c, KEY_C, precedents="firm"), ask(c, KEY_C, precedents="nope")
            assert firm_to_c.content.replace(b"firm", b"NAME") == none_to_c.content.replace(b"nope", b"NAME")
            assert "clausebank" in ask(c, KEY_C, precedents="clauses").text      # its own is reached
            r = ask(c, KEY_C, precedents="clauses", draft="lib")   # a drafter over a library C may not reach
            assert r.status_code == 400 and r.json()["error"]["code"] == "drafter_not_allowed"
            assert "firm" not in r.text
            assert cited(ask(c, KEY_S, draft="lib"))       # a key of --api-key reaches every library named at start
    finally:
        run.stop()


def test_a_request_narrows_its_keys_matters_and_never_widens_them(firm, tmp_path):
    verifier, _ = firm
    run = serve(verifier, ["--precedents", "firm"], tmp_path, keys=[KEY_S])
    try:
        with httpx.Client(base_url=run.url, timeout=120) as c:
            both = sorted([DOCS["acme"], DOCS["beta"], DOCS[None]])
            assert sorted(cited(ask(c, KEY_P))) == both                  # its two matters, not gamma
            assert sorted(cited(ask(c, KEY_P, matter=None))) == both     # null: the key's default, never all
            assert sorted(cited(ask(c, KEY_P, matter="acme"))) == sorted([DOCS["acme"], DOCS[None]])
            assert sorted(cited(ask(c, KEY_A, matter=None))) == sorted([DOCS["acme"], DOCS[None]])
            assert sorted(cited(ask(c, KEY_S, matter="gamma"))) == sorted([DOCS["gamma"], DOCS[None]])
            assert len(cited(ask(c, KEY_S, matter=None))) == 4          # every matter: the server has no --matter
            # widening: 403, the same answer for a matter that exists and one that does not, naming neither
            for key, matter in ((KEY_A, "beta"), (KEY_P, "gamma"), (KEY_B, "acme")):
                r, nosuch = ask(c, key, matter=matter), ask(c, key, matter="nosuchmatter")
                assert r.status_code == 403 and r.content == nosuch.content
                assert r.json()["error"] == {"message": "matter: this API key may not see that matter",
                                             "type": "permission_error", "param": "matter",
                                             "code": "matter_forbidden"}
                assert matter not in r.text and "merger" not in r.text and "deal" not in r.text
            r = ask(c, KEY_A, "/v1/completions", prompt=PROMPT, matter="beta", sources="firm")
            assert r.status_code == 403                                  # the same for provenance
    finally:
        run.stop()


def test_without_keys_the_servers_matter_and_libraries_apply_to_every_request(firm, tmp_path):
    verifier, output = firm
    run = serve(verifier, ["--precedents", "firm", "--matter", "acme", "--sources", "firm",
                           "--min-source-tokens", "8"], tmp_path, access=False)
    try:
        with httpx.Client(base_url=run.url, timeout=120) as c:
            assert sorted(cited(ask(c, None))) == sorted([DOCS["acme"], DOCS[None]])
            assert sorted(cited(ask(c, None, matter=None))) == sorted([DOCS["acme"], DOCS[None]])
            assert ask(c, None, matter="beta").status_code == 403
            assert ask(c, None, precedents="hidden").json()["error"]["code"] == "library_not_found"
            got = spans(ask(c, None, "/v1/completions", prompt=PROMPT, max_tokens=N, precedents=None))
            assert got == [(0, 20, 1, [DOCS["acme"]])]
    finally:
        run.stop()


def test_an_access_file_that_cannot_work_is_refused_at_start_naming_its_line(firm, tmp_path, monkeypatch, capsys):
    import mlx_lm

    import olifant_mlx.verifier.loader as loader

    path = tmp_path / "access.jsonl"
    secret = "do-not-print-this-key"
    key = json.dumps(secret)
    bad = {
        f'{{"key": {key}, "matters": ["a"]': "line 2: not a JSON object",
        f"[{key}]": "line 2: not a JSON object",
        f'{{"key": {key}, "matter": ["a"]}}': "line 2: unknown field 'matter'",
        '{"matters": ["a"]}': 'line 2: "key" is missing',
        '{"key": "short"}': f"the key of --access-file {path}, line 2 must be at least 8",
        f'{{"key": {key}, "matters": "acme"}}': 'line 2: "matters" is a list of names',
        f'{{"key": {key}, "matters": [""]}}': 'line 2: "matters" is a list of names',
        f'{{"key": {key}, "libraries": ["../etc"]}}': "line 2: library name '../etc'",
        f'{{"key": {key}, "id": "bad id"}}': 'line 2: "id" is 1-64 letters',
        f'{{"key": {key}}}\n{{"key": {key}}}': "line 3: that key is on an earlier line",
    }
    for text, message in bad.items():
        path.write_text("# clients\n" + text + "\n")
        with pytest.raises(ConfigError) as e:
            read_access_file(path)
        assert str(e.value).startswith(f"--access-file {path}") or "--access-file" in str(e.value), text
        assert message in str(e.value) and secret not in str(e.value), (text, str(e.value))
    path.write_text("# nobody\n")
    with pytest.raises(ConfigError, match="no key in it"):
        read_access_file(path)
    entries = {k: (sorted(e.matters) if e.matters is not None else e.matters, e.libraries, e.id)
               for k, e in read_access_file(_written(path, ACCESS)).items()}
    assert entries[KEY_A] == (["acme"], frozenset({"firm"}), "acme-desk")
    assert entries[KEY_C] == (None, frozenset({"clauses"}), "clauses") and entries[KEY_B][2] is None

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(mlx_lm, "load", refuse)
    monkeypatch.setattr(loader, "load_verifier", refuse)
    path.write_text(json.dumps({"key": secret, "libraries": ["nosuchlibrary"]}) + "\n")
    assert main(["serve", "--model", "smollm2-135m", "--port", "0", "--access-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --access-file {path}: no library 'nosuchlibrary'") and secret not in err
    path.write_text(json.dumps({"key": secret, "matters": "acme"}) + "\n")
    assert main(["serve", "--model", "smollm2-135m", "--port", "0", "--access-file", str(path)]) == 1
    assert f"--access-file {path}, line 1" in capsys.readouterr().err


def _written(path, text):
    path.write_text(text)
    return path


def test_the_audit_log_of_a_session_names_who_and_which_documents_and_no_word_of_the_text(firm, tmp_path):
    """A session of real requests (two keys, precedents, pins, provenance, refusals) with secret
    words in the prompts, the passages and the outputs: the log has a line per request, who made
    it (an id, never the key), the matter, libraries and citations, and none of those words."""
    verifier, _ = firm
    log = tmp_path / "audit.jsonl"
    run = serve(verifier, ["--sources", "firm", "--min-source-tokens", "8", "--audit-log", str(log)], tmp_path,
                keys=[KEY_S])
    prompt_words = ["OBSIDIAN-MARMOT-7731", "quetzalcoatl-ledger", "VELLICHOR-99"]
    passages = []
    try:
        with httpx.Client(base_url=run.url, timeout=120) as c:
            answers = [
                ask(c, KEY_A, messages=[{"role": "user", "content": f"Repeat the codeword {prompt_words[0]}"}],
                    precedents="firm", max_tokens=24),
                ask(c, KEY_B, messages=[{"role": "user", "content": f"codeword {prompt_words[1]}"}],
                    precedents="firm", precedent=[DOCS["beta"]], max_tokens=24),
                ask(c, KEY_A, "/v1/completions", prompt=PROMPT, max_tokens=N),
                ask(c, KEY_B, "/v1/completions", prompt=PROMPT, max_tokens=N),
                ask(c, KEY_S, "/v1/completions", prompt=PROMPT, max_tokens=N, stream=True),
                ask(c, KEY_S, "/v1/completions", prompt=f"{prompt_words[2]} {PROMPT}", max_tokens=N),
            ]
            refused = [ask(c, KEY_A, matter="beta", messages=[{"role": "user", "content": prompt_words[1]}]),
                       ask(c, KEY_B, precedents="hidden", messages=[{"role": "user", "content": prompt_words[2]}]),
                       ask(c, KEY_A, precedents="firm", precedent=[DOCS["beta"]]),
                       ask(c, KEY_A, "/v1/completions", prompt=prompt_words[0], max_tokens=0)]
            assert [r.status_code for r in answers] == [200] * len(answers)
            assert [r.status_code for r in refused] == [403, 400, 400, 400]
            passages = [p["text"] for r in answers[:2] for p in r.json()["precedents"]]
            outputs = [a.json()["choices"][0].get("text") or a.json()["choices"][0]["message"]["content"]
                       for a in answers[:4] + answers[5:]]
    finally:
        run.stop()
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    assert verify(log).intact and verify(log).lines == len(answers) + len(refused)
    raw = log.read_text()
    rows = [json.loads(line) for line in raw.splitlines()]
    assert [r["key"] for r in rows] == ["acme-desk", key_id(KEY_B), "acme-desk", key_id(KEY_B), key_id(KEY_S),
                                        key_id(KEY_S), "acme-desk", key_id(KEY_B), "acme-desk", "acme-desk"]
    assert [r["outcome"] for r in rows] == ["ok"] * 6 + ["refused"] * 4
    assert rows[0]["passages"] == ["general.txt, paragraph 1", "acme/nda.txt, paragraphs 1-2"]
    assert rows[0]["matters"] == ["acme"] and rows[0]["libraries"] == ["firm"]
    assert rows[1]["passages"][0] == "beta/merger.txt, paragraph 1"
    assert rows[2]["spans"] == ["acme/nda.txt, paragraph 2"] and rows[3]["spans"] == ["beta/merger.txt, paragraph 2"]
    assert rows[2]["tokens"]["completion"] == N and rows[4]["spans"] == ["acme/nda.txt, paragraph 2",
                                                                         "beta/merger.txt, paragraph 2"]
    assert rows[6]["reason"] == "matter_forbidden" and rows[6]["asked"] == {"matter": "beta"}
    assert rows[7]["reason"] == "library_not_found" and rows[8]["status"] == 400
    # never a key, a prompt's word, a passage's word or a stretch of an output
    for key in (KEY_A, KEY_B, KEY_S):
        assert key not in raw
    for word in prompt_words + list(SECRETS.values()) + ["codeword"]:
        assert word.lower() not in raw.lower(), word
    assert len(passages) >= 4 and not any(text in raw for text in passages)
    for text in outputs:
        assert len(text) >= 12
        assert not any(text[i:i + 12] in raw for i in range(len(text) - 11)), text


def test_a_server_whose_audit_log_cannot_be_written_serves_no_request_until_it_can(firm, tmp_path):
    verifier, _ = firm
    log = tmp_path / "audit.jsonl"
    run = serve(verifier, ["--audit-log", str(log)], tmp_path, access=False)
    try:
        with httpx.Client(base_url=run.url, timeout=120) as c:
            assert ask(c, None).status_code == 200
            log.rename(tmp_path / "aside.jsonl")
            log.mkdir()                              # the log's place taken: no line can be written
            assert ask(c, None).status_code == 200   # answered; its line fails, and the server closes
            for _ in range(2):
                r = ask(c, None)
                assert r.status_code == 503 and r.json()["error"]["code"] == "audit_unavailable", r.text
            log.rmdir()
            (tmp_path / "aside.jsonl").rename(log)
            assert ask(c, None).status_code == 503   # its refusal's line is written: the log works again
            assert ask(c, None).status_code == 200
    finally:
        run.stop()
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["outcome"], r["status"]) for r in rows] == [("ok", 200), ("refused", 503), ("ok", 200)]
    assert verify(log).intact


@pytest.mark.slow
def test_the_serve_command_with_an_access_file_and_an_audit_log(tmp_path, monkeypatch):
    """`serve` itself in a subprocess (the offline verifier, a library of real text): the keys of
    --access-file see their own matters, another matter is a 403, a library not named at start
    is a missing one; the serving line lists the libraries; `audit verify` finds the chain intact
    and the log holds the keys' ids, not a word of the prompts or the documents."""
    import subprocess
    import sys

    from document_fixtures import cache_with_models
    from serve_process import free_port, stop, wait_until_serving

    from olifant_mlx.verifier import load_tokenizer

    cache = cache_with_models(tmp_path / "cache")
    monkeypatch.setenv("OLIFANT_CACHE", str(cache))
    tok = load_tokenizer("smollm2-135m")
    folder = tmp_path / "firm"
    texts = {"acme/nda.txt": "The Acme codeword is Periwinkle Falcon, kept confidential for three years.",
             "beta/merger.txt": "The Beta codeword is Tangerine Walrus, disclosed to the auditors only.",
             "general.txt": "Every codeword in this bank is confidential and shared with no third party."}
    for path, text in texts.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text + "\n")
    library.build("firm", folder, tok)
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "h.txt").write_text("The hidden codeword is Marmalade Heron.\n")
    library.build("hidden", tmp_path / "hidden", tok)
    access, log = tmp_path / "access.jsonl", tmp_path / "audit.jsonl"
    access.write_text(json.dumps({"key": KEY_A, "id": "acme-desk", "matters": ["acme"]}) + "\n"
                      + json.dumps({"key": KEY_B, "matters": ["beta"]}) + "\n")
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "olifant_mlx", "serve", "--model", "smollm2-135m", "--draft", "none",
                          "--port", str(port), "--energy", "none", "-m", "8", "--precedents", "firm",
                          "--access-file", str(access), "--audit-log", str(log)],
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "OLIFANT_CACHE": str(cache)})
    url = f"http://127.0.0.1:{port}"
    question = [{"role": "user", "content": "Tell me the Zeppelin-Okapi codeword"}]
    try:
        wait_until_serving(p, url)
        with httpx.Client(base_url=url, timeout=600) as c:
            a = ask(c, KEY_A, messages=question, max_tokens=8)
            b = ask(c, KEY_B, messages=question, max_tokens=8)
            assert sorted(cited(a)) == ["acme/nda.txt", "general.txt"] and "Tangerine" not in a.text
            assert sorted(cited(b)) == ["beta/merger.txt", "general.txt"] and "Periwinkle" not in b.text
            assert ask(c, KEY_A, messages=question, matter="beta").status_code == 403
            hidden, nope = ask(c, KEY_A, precedents="hidden"), ask(c, KEY_A, precedents="nopeno")
            assert hidden.status_code == 400 and hidden.content == nope.content.replace(b"nopeno", b"hidden")
    finally:
        code, err = stop(p)
    assert code == 0, err
    assert f"serving smollm2-135m on {url}/v1 (drafters: none; default none; energy: not measured; libraries: " \
           f"firm); API key required" in err, err
    verified = subprocess.run([sys.executable, "-m", "olifant_mlx", "audit", "verify", str(log)],
                              capture_output=True, text=True)
    assert verified.returncode == 0 and verified.stdout.startswith(f"{log}: 5 lines, chain intact"), verified
    raw = log.read_text()
    assert [json.loads(line)["key"] for line in raw.splitlines()] == ["acme-desk", key_id(KEY_B)] + ["acme-desk"] * 3
    for word in ("Zeppelin", "Okapi", "Periwinkle", "Tangerine", "Marmalade", "codeword", KEY_A, KEY_B):
        assert word not in raw and word not in err, word
    for answer in (a, b):
        text = answer.json()["choices"][0]["message"]["content"]
        assert not any(" ".join(text.split()[i:i + 2]) in raw for i in range(len(text.split()) - 1)), text

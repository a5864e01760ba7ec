"""The request value (issue 39): `plan` turns a prompt, options and a drafter into a frozen
`Request`, checked once; the Session streams it and keeps nothing a request chose, so two
requests with different drafters and libraries on one Session never see each other's; a
server request is planned once (the prompt encoded once, one options value made at most, no
drafter built). The tiny verifier and real libraries on its tokenizer; SmolLM2-135M (slow):
the text through a Request is the plain decoding's."""
import dataclasses
import time

import pytest
from server_helpers import DEFAULTS, own_cache, tiny_library, tiny_tokenizer
from tiny_models import tiny_chat_verifier

from olifant_mlx.drafters.registry import parse_spec
from olifant_mlx.engine import Chat, GenerationOptions, Request, Session, generate
from olifant_mlx.engine import request as request_module
from olifant_mlx.engine.request import sources_library, without_drafting
from olifant_mlx.provenance import find_sources

PROMPT, N = "abcdefgh", 40


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(the tiny verifier, its plain output of N tokens, the library "copied" that holds that
    output); beside it the library "elsewhere", which does not."""
    verifier = tiny_chat_verifier()
    output = Session(verifier, "none", DEFAULTS).generate(PROMPT, DEFAULTS.replace(max_tokens=N)).tokens
    cache = own_cache(tmp_path_factory)
    next(cache)                                  # $OLIFANT_CACHE on a fresh folder
    copied = tiny_library("copied", tmp_path_factory.mktemp("a"), output)
    tiny_library("elsewhere", tmp_path_factory.mktemp("b"), [7, 7, 7, 7])
    yield verifier, output, copied
    next(cache, None)


@pytest.fixture(scope="module")
def verifier(tiny):
    return tiny[0]


def test_a_request_is_frozen_and_holds_its_choices(verifier):
    session = Session(verifier, "lookup", DEFAULTS)
    r = session.plan(PROMPT, DEFAULTS.replace(max_tokens=8))
    assert isinstance(r, Request) and r.ids == tuple(verifier.encode(PROMPT))
    assert r.options.max_tokens == 8 and r.drafting.spec.text == "lookup" and r.drafter is session.drafter
    assert r.continuation and r.library is None and r.index is None and r.precedents is None
    for field, value in (("ids", (1,)), ("options", DEFAULTS), ("library", "x"), ("drafting", None)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(r, field, value)
    assert not session.plan(Chat.of(PROMPT)).continuation      # a chat's answer starts afresh
    with pytest.raises(TypeError, match="carries its options"):
        session.generate(r, DEFAULTS)
    plain = without_drafting(r)
    assert plain.options.k == 0 and plain.drafter.name == "none" and plain.ids == r.ids
    assert r.options.k == DEFAULTS.k                            # the request itself unchanged


def test_one_rule_for_the_provenance_library(verifier):
    named = DEFAULTS.replace(sources="elsewhere")
    drafted = request_module.drafting("library:copied", verifier.identity)
    assert sources_library(DEFAULTS, drafted) == "copied" and sources_library(named, drafted) == "elsewhere"
    assert sources_library(DEFAULTS, request_module.drafting("lookup", verifier.identity)) is None
    assert sources_library(DEFAULTS, None) is None


def test_the_library_a_spec_drafts_from_is_the_drafters_to_say(tiny, tmp_path):
    """drafters.auto.library_of (provenance names no drafter kind): a kind whose argument is a
    library's name, or a spec with a part over a library's own suffix index (what `auto` and
    `library:NAME` resolve to); a suffix index outside the libraries is no library's."""
    import shutil

    from olifant_mlx import library
    from olifant_mlx.drafters.auto import library_of, library_spec

    lib = library.load("copied")
    assert library_of(parse_spec("library:copied", check_files=False)) == "copied"
    assert library_of(library_spec(lib)) == "copied"
    assert library_of(parse_spec(f"rest:{lib.index_path}")) == "copied"
    outside = tmp_path / "index.sfx"
    shutil.copyfile(lib.index_path, outside)
    assert library_of(parse_spec(f"adaptive:hybrid:+rest:{outside}")) is None
    assert library_of(parse_spec("lookup")) is library_of(None) is None


def test_two_requests_on_one_session_keep_their_own_drafter_and_library(tiny):
    """Request B (another drafter, another library) planned and run between A's planning and
    its run: A still drafts from its own library and reports its spans; the Session's default
    drafter is the one it was made with."""
    verifier, output, copied = tiny
    want = find_sources(copied, output, tokenizer=tiny_tokenizer())
    assert want and max(s.tokens for s in want) >= 30
    session = Session(verifier, "library:copied", DEFAULTS.replace(max_tokens=N))
    a = session.plan(PROMPT)
    b = session.plan(PROMPT, drafter="library:elsewhere")
    assert (a.library, b.library) == ("copied", "elsewhere") and a.drafter is not b.drafter
    rb = session.generate(b)
    ra = session.generate(a)
    assert ra.tokens == rb.tokens == output                      # exact with either drafter
    assert [s.as_dict() for s in ra.sources] == [s.as_dict() for s in want]
    assert all(s.places[0].path.endswith("other.txt") for s in rb.sources)   # never the copied deed
    assert session.spec.text == "library:copied" and session.sources_library() == "copied"
    assert session.plan(PROMPT, drafter="lookup").library is None             # no library: none


def test_a_server_request_is_planned_once(verifier, monkeypatch):
    """One completion through the server's worker: the prompt encoded once, one options value
    made (max_tokens cut to the context), no drafter built, and the library drafter's spans in
    the answer without the request naming them."""
    from olifant_mlx.engine import options as options_module
    from olifant_mlx.server.config import DrafterChoice
    from olifant_mlx.engine.forward import alone
    from olifant_mlx.server.queue import Finished, GenerationQueue, Job, make_setup

    choice = DrafterChoice({"lib": parse_spec("library:copied"), "lookup": parse_spec("lookup")}, "lib")
    setup = make_setup(verifier, choice, DEFAULTS, warm_up=False)
    queue = GenerationQueue(setup)
    queue.session, queue.drafters, queue.info = setup()
    counts = {"encode": 0, "options": 0, "built": 0}
    asked = DEFAULTS.replace(max_tokens=4000)                   # past the context: cut to fit

    def counted(name, fn):
        def wrapper(*a, **kw):
            counts[name] += 1
            return fn(*a, **kw)
        return wrapper

    monkeypatch.setattr(verifier, "encode", counted("encode", verifier.encode))
    monkeypatch.setattr(options_module.GenerationOptions, "__post_init__",
                        counted("options", options_module.GenerationOptions.__post_init__))
    monkeypatch.setattr(request_module, "build_drafter", counted("built", request_module.build_drafter))
    events = []
    job = Job("cmpl-1", PROMPT, asked, "lib", time.monotonic() + 60, events.append, explicit_max=False)
    list(alone(verifier.model, queue._serve(job)))      # its passes run as they come (engine.forward)
    done = events[-1]
    assert isinstance(done, Finished), events[-1]
    assert counts == {"encode": 1, "options": 1, "built": 0}, counts
    assert done.sources and max(s["tokens"] for s in done.sources) >= 30
    assert queue.session.spec.text == "library:copied"          # the default drafter as it was


def test_the_reports_name_the_requests_drafter_not_the_sessions(verifier):
    """The CLI's summary and its saved turn, and the TUI's live panel, read what a generation ran
    with from its Request: a request drafting with lookup on a session whose default is ngram."""
    from olifant_mlx.cli.common import summary_lines
    from olifant_mlx.cli.output import answer_turn

    session = Session(verifier, "ngram", DEFAULTS)
    request = session.plan(PROMPT, DEFAULTS.replace(max_tokens=8), drafter="lookup:2")
    tokens, last = [], None
    for r in session.stream(request):
        tokens += r.tokens
        last = r
    drafting_line = next(line for line in summary_lines(last.stats, request.drafting, None) if "lookup" in line)
    assert "ngram" not in drafting_line
    assert answer_turn(session, request, "", tokens, last).drafter == "lookup:2"


# ---- SmolLM2-135M (slow): through a Request, the text is the plain decoding's ----------------

@pytest.mark.slow
def test_smollm2_requests_give_the_plain_text(smol):
    opts = GenerationOptions(k=4, max_tokens=24)
    session = Session(smol, "lookup", opts)
    for prompt in ("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND",
                   session.prompt_for("Write one sentence about software warranties.")):
        plain, _ = generate(smol.model, session.encode(prompt), max_tokens=24)
        results = {spec: session.generate(session.plan(prompt, drafter=spec)) for spec in ("lookup", "auto", "ngram")}
        results["convenience"] = session.generate(prompt)
        results["plain"] = session.generate(without_drafting(session.plan(prompt)))
        for name, r in results.items():
            assert r.tokens == plain, name
        assert len({r.text for r in results.values()}) == 1
        assert results["lookup"].stats.drafted > 0 and results["plain"].stats.drafted == 0

"""`serve` gets every option of `generate` that applies to serving from the binding table
(olifant_mlx.bindings): each is a serve flag, the server's default for requests, and a request
field that overrides it. Checked from the table against serve's argparse and the request
schema, through a request's plan, before any model loads, and on a real server on loopback
(a library named by `serve --sources` reports sources without the request naming it)."""
import json

import pytest

pytest.importorskip("pydantic")

from olifant_mlx.bindings import BINDINGS, GENERATE, REQUEST, SERVE, bound, request_field  # noqa: E402
from olifant_mlx.cli import build_parser  # noqa: E402
from olifant_mlx.cli.common import options_from  # noqa: E402
from olifant_mlx.engine import GenerationOptions  # noqa: E402
from olifant_mlx.server.config import Limits  # noqa: E402

# every serving option: serve's flag and its value, then a request's field value and the option's
SERVING = {
    "k": (["-k", "5"], 5, 2, 2),
    "max_kv_size": (["--max-kv-size", "300"], 300, 200, 200),
    "kv_bits": (["--kv-bits", "4"], 4, 8, 8),
    "kv_group_size": (["--kv-group-size", "32"], 32, 128, 128),
    "quantized_kv_start": (["--quantized-kv-start", "7"], 7, 0, 0),
    "max_tokens": (["-m", "40"], 40, 9, 9),
    "temperature": (["--temp", "0.5"], 0.5, 0.25, 0.25),
    "top_p": (["--top-p", "0.9"], 0.9, 0.5, 0.5),
    "min_p": (["--min-p", "0.1"], 0.1, 0.2, 0.2),
    "top_k": (["--top-k", "3"], 3, 4, 4),
    "repetition_penalty": (["--repetition-penalty", "1.2"], 1.2, 1.5, 1.5),
    "repetition_context_size": (["--repetition-context-size", "5"], 5, 6, 6),
    "stop": (["--stop", "END", "FIN"], ("END", "FIN"), [], ()),
    "truncate": (["--truncate"], True, False, False),
    "sources": (["--sources", "lib"], "lib", "other", "other"),
    "min_source_tokens": (["--min-source-tokens", "4"], 4, 6, 6),
    "max_verbatim": (["--max-verbatim", "5"], 5, 9, 9),
    "verbatim_action": (["--verbatim-action", "stop"], "stop", "warn", "warn"),
    "matter": (["--matter", "acme"], "acme", "beta", "beta"),
    "precedents": (["--precedents", "prec"], "prec", "other", "other"),
    "precedent_tokens": (["--precedent-tokens", "64"], 64, 32, 32),
}


# the serving options whose request field names one of the server's configured choices, never a value:
# serve's flags and the choice they configure, a configured name, a name not configured, a spec
NAMED = {"draft": (["--draft", "ngram:3"], "ngram:3", "lookup", "legal", "ngram:3")}


def parsers():
    sub = next(a for a in build_parser("olifant")._actions if a.dest == "command")
    return sub.choices["serve"], sub.choices["generate"]


def flags_of(parser) -> set:
    return {f for a in parser._actions for f in a.option_strings}


def test_every_option_of_generate_that_applies_to_serving_is_a_serve_flag_and_a_request_field():
    from olifant_mlx.server.schemas import ChatRequest, CompletionRequest

    serve, generate = parsers()
    serving = [name for name in bound(GENERATE) if name in bound(SERVE)]
    assert {"sources", "max_verbatim", "matter", "precedents", "min_source_tokens", "kv_bits"} <= set(serving)
    for name in serving:
        assert set(BINDINGS[name].flags) <= flags_of(serve) & flags_of(generate), name
    for name in bound(REQUEST):                       # the serving options and seed
        for body in (CompletionRequest, ChatRequest):
            assert request_field(name) in body.model_fields, (name, body.__name__)
    for name in set(BINDINGS) - set(bound(SERVE)):    # --history, --precedent, --no-kv-cache: not serve's
        assert not set(BINDINGS[name].flags) & flags_of(serve), name
    for name in set(BINDINGS) - set(bound(REQUEST)):
        assert request_field(name) not in CompletionRequest.model_fields, name


def test_serves_defaults_are_the_options_defaults():
    """Made from the table, not by hand: serve's defaults are the fields' but for -m (the
    server's own Limits.default_max_tokens)."""
    serve, _ = parsers()
    args = build_parser("olifant").parse_args(["serve"])
    assert options_from(args) == GenerationOptions(max_tokens=Limits.default_max_tokens)
    assert serve.get_default("max_tokens") == Limits().default_max_tokens
    serving = set(bound(SERVE)) & set(bound(REQUEST))
    assert set(SERVING) == {n for n in serving if not BINDINGS[n].named}     # every serving option is tried below
    assert set(NAMED) == {n for n in serving if BINDINGS[n].named} == {"draft"}     # ... the named ones too
    assert set(bound(SERVE)) - set(bound(REQUEST)) == {"audit_log"}     # the server's own


def test_the_audit_log_is_a_serve_flag_no_request_sets(tmp_path):
    """--audit-log is serve's (the server writes it, with each API key's id): no request field,
    and the requests' defaults carry none, so the Session writes no line of its own."""
    from olifant_mlx.cli.serve import prepare
    from olifant_mlx.server.schemas import ChatRequest, CompletionRequest

    serve, _ = parsers()
    assert "--audit-log" in flags_of(serve)
    assert "audit_log" not in CompletionRequest.model_fields and "audit_log" not in ChatRequest.model_fields
    assert "audit_log" not in bound(REQUEST)
    assert "precedent" in CompletionRequest.model_fields and "precedent_documents" in bound(REQUEST)
    path = tmp_path / "audit.jsonl"
    args = build_parser("olifant").parse_args(["serve", "--draft", "lookup", "--port", "0", "--energy", "none",
                                               "--audit-log", str(path)])
    _, defaults, *_, audit, sock = prepare(args)
    sock.close()
    assert defaults.audit_log is None and audit.path == str(path)


def plan(body, defaults):
    from olifant_mlx.server import schemas
    from olifant_mlx.server.queue import ModelInfo

    info = ModelInfo("tiny", 2048, 64, False, ("none",), "none", "none")
    req = schemas.parse_body(json.dumps({"prompt": "x", **body}).encode(), schemas.CompletionRequest)
    return schemas.plan_completion(req, info, defaults, Limits())


@pytest.mark.parametrize("name", sorted(SERVING))
def test_a_serve_flag_is_a_requests_default_and_its_field_overrides_it(name):
    argv, value, field_value, overridden = SERVING[name]
    defaults = options_from(build_parser("olifant").parse_args(["serve", *argv]))
    assert getattr(defaults, name) == value
    got = plan({}, defaults).options
    if name == "max_tokens":           # a request's default number of tokens is the server's limit's
        assert got.max_tokens == Limits().default_max_tokens
    else:
        assert getattr(got, name) == value
    assert getattr(plan({request_field(name): field_value}, defaults).options, name) == overridden


def test_a_bad_serve_flag_is_refused_before_any_model_loads(monkeypatch, tmp_path, capsys):
    import mlx_lm

    import olifant_mlx.verifier.loader as loader
    from olifant_mlx.cli import main

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(mlx_lm, "load", refuse)
    monkeypatch.setattr(loader, "load_verifier", refuse)
    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path))
    assert main(["serve", "--model", "smollm2-135m", "--port", "0", "--max-verbatim", "0"]) == 2
    assert capsys.readouterr().err == "error: --max-verbatim: max verbatim must be a whole number >= 1 " \
                                      "(or none), got 0\n"
    assert main(["serve", "--model", "smollm2-135m", "--port", "0", "--sources", "no-such-library"]) == 1
    assert "no-such-library" in capsys.readouterr().err


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The tiny verifier, its greedy output and a library holding a stretch of it, on a cache
    of the module's own."""
    pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from server_helpers import own_cache, tiny_library
    from tiny_models import tiny_chat_verifier

    from olifant_mlx.engine import Session

    for _ in own_cache(tmp_path_factory):
        verifier = tiny_chat_verifier()
        output = Session(verifier, "none").generate("abcdefgh", GenerationOptions(max_tokens=40)).tokens
        lib = tiny_library("servedlib", tmp_path_factory.mktemp("servedlib"), output[4:30])
        yield verifier, output, lib


def serve_with(verifier, flags, requests, **drafters):
    """A real server on loopback with the options of `serve FLAGS` (and more named `drafters`,
    NAME=SPEC, beside the default, lookup); the answers to `requests` (completion bodies)."""
    import httpx
    from server_helpers import LIMITS

    from olifant_mlx.drafters.registry import parse_spec
    from olifant_mlx.server.app import start
    from olifant_mlx.server.config import DrafterChoice

    defaults = options_from(build_parser("olifant").parse_args(["serve", *flags]))
    specs = {"lookup": parse_spec("lookup"), **{name: parse_spec(spec) for name, spec in drafters.items()}}
    run = start(verifier, DrafterChoice(specs, "lookup"), defaults, LIMITS)
    try:
        with httpx.Client(base_url=run.url, timeout=60) as c:
            return [c.post("/v1/completions", json=body) for body in requests]
    finally:
        run.stop()


def test_serve_sources_reach_a_request_that_names_none(served):
    """serve's --sources and --min-source-tokens: a completion that copies from the library
    reports its sources, though the request names no library."""
    from server_helpers import tiny_tokenizer

    from olifant_mlx import provenance

    verifier, output, lib = served
    r, = serve_with(verifier, ["--sources", "servedlib", "--min-source-tokens", "8"],
                    [{"prompt": "abcdefgh", "max_tokens": 40}])
    assert r.status_code == 200, r.text
    want = [s.as_dict() for s in provenance.find_sources(lib, output, min_tokens=8, tokenizer=tiny_tokenizer())]
    assert want and r.json()["sources"] == want


def test_serve_max_verbatim_guards_the_requests_that_name_a_library(served):
    """serve --max-verbatim without --sources starts (its warm-up names no library) and is the
    guard of every request: one naming a library (one the server was started with: here a
    drafter's) is stopped there, one without is told why."""
    verifier, _output, _lib = served
    stopped, refused = serve_with(verifier, ["--max-verbatim", "10", "--verbatim-action", "stop"], [
        {"prompt": "abcdefgh", "max_tokens": 40, "sources": "servedlib"}, {"prompt": "abcdefgh", "max_tokens": 4}],
        lib="library:servedlib")
    assert stopped.status_code == 200 and stopped.json()["choices"][0]["finish_reason"] == "content_filter"
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "max_verbatim"


@pytest.mark.parametrize("name", sorted(NAMED))
def test_a_named_serve_flag_configures_the_choice_a_request_field_names(name, served):
    """The draft row: `serve --draft SPEC` (and its alias --draft-model MODEL) is the drafter
    named 'default', not a value the requests' defaults carry; a request's field takes a name
    the server was configured with, or "none", on a real server: a spec or path is refused as
    invalid_drafter, another name as drafter_not_found, both 400 naming the field."""
    from olifant_mlx.cli.serve import prepare

    argv, spec, configured, unknown, refused = NAMED[name]
    choice, defaults, *_, sock = prepare(build_parser("olifant").parse_args(
        ["serve", *argv, "--port", "0", "--energy", "none"]))
    sock.close()
    assert choice.specs["default"].text == spec and getattr(defaults, name) is None
    alias, metavar, prefix, _ = BINDINGS[name].alias
    choice, *_, sock = prepare(build_parser("olifant").parse_args(
        ["serve", alias, "smollm2-135m", "--port", "0", "--energy", "none"]))
    sock.close()
    assert choice.specs["default"].text == prefix + "smollm2-135m"
    field = request_field(name)
    verifier, _output, _lib = served
    ok, plain, missing, spelled = serve_with(verifier, [], [
        {"prompt": "abcabcabc", "max_tokens": 6, field: configured},
        {"prompt": "abcabcabc", "max_tokens": 6, field: "none"},
        {"prompt": "abcabcabc", "max_tokens": 6, field: unknown},
        {"prompt": "abcabcabc", "max_tokens": 6, field: refused}])
    assert ok.status_code == plain.status_code == 200, (ok.text, plain.text)
    assert ok.json()["usage"]["drafter"] == configured and plain.json()["usage"]["drafter"] == "none"
    assert ok.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]
    for r, code in ((missing, "drafter_not_found"), (spelled, "invalid_drafter")):
        error = r.json()["error"]
        assert r.status_code == 400 and (error["param"], error["code"]) == (field, code), r.text
        assert "this server has lookup, none" in error["message"]

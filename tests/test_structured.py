"""Structured output in the engine and on the command line (olifant_mlx/structured.py,
engine/constraint.py): a JSON schema constrains every choice of the verifier, and speculative
decoding under it gives constrained plain decoding's tokens exactly, for every drafter, k and
regime; the grammar's forced tokens are drafts nobody had to propose, and a draft it forbids
never reaches the verifier. A bad schema is an error naming the flag and file before any model
loads. On the tiny model with a JSON tokenizer (tiny_models.JsonTok) and on SmolLM2 (slow); the
contract extractions: tests/data/contracts.json."""
import json
from pathlib import Path

import pytest

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from tiers import extended  # noqa: E402
from tiny_models import JsonTok, drafters, igtree_on_own_output, tiny_json_verifier  # noqa: E402

from olifant_mlx.drafters import LookupDrafter, NgramDrafter, build_drafter  # noqa: E402
from olifant_mlx.engine import Chat, GenerationOptions, Session  # noqa: E402
from olifant_mlx.engine.loop import generate, generate_steps, script_options  # noqa: E402
from olifant_mlx.engine.options import OptionsError  # noqa: E402
from olifant_mlx.structured import Grammar, SchemaError, check_schema, llg_tokenizer, read_schema  # noqa: E402

CONTRACTS = json.loads((Path(__file__).parent / "data" / "contracts.json").read_text())
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "n": {"type": "integer", "minimum": 0, "maximum": 999},
    "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["a", "bc", "def"]}, "maxItems": 3}},
    "required": ["name", "n", "ok", "tags"], "additionalProperties": False}
PROMPT = JsonTok().encode('{"name": "x", "n": 1} give json:')


@pytest.fixture(scope="module")
def verifier():
    return tiny_json_verifier()


@pytest.fixture(scope="module")
def grammar():
    eos = [0]
    return Grammar.of(json.dumps(SCHEMA), llg_tokenizer(JsonTok(), 64, eos), eos)


def run(verifier, grammar, drafter=None, **kw):
    steps = list(generate_steps(verifier.model, PROMPT, drafter, script_options(**{"max_tokens": 100, **kw}),
                                eos_ids=(0,), constraint=grammar.constraint()))
    return [t for s in steps for t in s.emitted], steps


def test_the_answer_follows_the_schema(verifier, grammar):
    tokens, steps = run(verifier, grammar, k=0)
    answer = json.loads(JsonTok().decode(tokens))
    jsonschema.validate(answer, SCHEMA)
    assert steps[-1].stop_reason == "eos"
    # and without the schema the tiny model writes no JSON at all: the constraint did it
    free, _ = generate(verifier.model, PROMPT, max_tokens=len(tokens), eos_ids=(0,))
    with pytest.raises(ValueError):
        json.loads(JsonTok().decode(free))


def test_drafting_under_the_schema_is_plain_under_it(verifier, grammar):
    """Prompt lookup and the n-gram, k 2 and 8, KV cache: constrained plain's tokens (every
    drafter, k and both regimes: the slow test below)."""
    plain, _ = run(verifier, grammar, k=0)
    for drafter in (LookupDrafter(), NgramDrafter()):
        for k in (2, 8):
            got, _ = run(verifier, grammar, drafter, k=k)
            assert got == plain, (drafter.name, k)


@pytest.mark.slow
@pytest.mark.parametrize("kv_cache", [True, False])
def test_speculative_under_the_schema_is_plain_under_it(verifier, grammar, kv_cache):
    """Every drafter of the suite (tiny_models.drafters), k 1, 3 and 8, both regimes: the same
    tokens as constrained plain decoding."""
    plain, _ = run(verifier, grammar, k=0, kv_cache=kv_cache)
    olifant = igtree_on_own_output(verifier.model)
    for drafter in drafters(verifier.model, olifant):
        for k in (1, 3, 8):
            got, _ = run(verifier, grammar, drafter, k=k, kv_cache=kv_cache)
            assert got == plain, (drafter.name, k, kv_cache)


class Stubborn:
    """Drafts the token of 'z' again and again: never JSON after the first few characters."""
    name = "stubborn"

    def start(self, prompt):
        pass

    def draft(self, context, k):
        return [JsonTok().encode("z")[0]] * k

    def accept(self, tokens):
        pass


def test_a_draft_the_grammar_forbids_never_reaches_the_verifier(verifier, grammar):
    plain, _ = run(verifier, grammar, k=0)
    got, steps = run(verifier, grammar, Stubborn(), k=6)
    assert got == plain
    check = grammar.constraint()
    check.start(PROMPT)
    seq = list(PROMPT)
    for s in steps:
        assert check.allowed(seq, s.drafted) == len(s.drafted), s      # every draft sent was allowed
        seq += s.emitted
    assert any(s.drafted for s in steps)        # the forced tokens still went as drafts


def test_forced_tokens_are_drafts_nobody_proposed(verifier, grammar):
    plain, plain_steps = run(verifier, grammar, k=0)
    got, steps = run(verifier, grammar, None, k=8)      # no drafter: the grammar's forced tokens alone
    assert got == plain
    assert len(plain_steps) == len(plain) + 1         # plain: a pass a token, and the EOS's
    forced = sum(len(s.drafted) for s in steps)
    assert forced > 0 and len(steps) < len(plain_steps)
    assert sum(s.accepted for s in steps) == forced    # a forced token is always the verifier's too


def test_the_session_constrains_with_the_option_and_drafts_the_same(verifier):
    session = Session(verifier, "lookup", GenerationOptions(max_tokens=100, json_schema=json.dumps(SCHEMA)))
    chat = Chat.of("give json")
    spec = session.generate(chat)
    plain = session.generate(chat, session.options.replace(k=0), drafter="none")
    assert spec.tokens == plain.tokens and spec.finish_reason == "eos"
    jsonschema.validate(json.loads(spec.text), SCHEMA)


def test_the_option_takes_only_a_json_object():
    for bad in ("[1, 2]", "{not json", "", 5):
        with pytest.raises(OptionsError, match="JSON schema") as e:
            GenerationOptions(json_schema=bad)
        assert e.value.option == "json_schema"
    GenerationOptions(json_schema='{"type": "object"}')


def test_a_schema_is_read_from_a_file_or_given_as_text(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(SCHEMA))
    assert json.loads(read_schema(str(f))) == SCHEMA
    assert list(json.loads(read_schema(str(f)))["properties"]) == list(SCHEMA["properties"])   # in order
    assert json.loads(read_schema('{"type": "object"}')) == {"type": "object"}
    with pytest.raises(SchemaError, match=r"--json-schema .*missing\.json: no such file"):
        read_schema(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(SchemaError, match=r"bad\.json: not valid JSON"):
        read_schema(str(tmp_path / "bad.json"))
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(SchemaError, match="a JSON schema is a JSON object"):
        read_schema(str(tmp_path / "list.json"))
    with pytest.raises(SchemaError, match="the schema is not supported|Unknown|unimplemented|not supported"):
        check_schema(json.dumps({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=x)a"}}}),
                     "--json-schema f.json")


@pytest.mark.parametrize("schema, said", [
    ("missing.json", "missing.json: no such file"),
    ("{oops", "not valid JSON"),
    ('{"type": "string", "pattern": "(?<=x)a"}', "--json-schema: "),
])
def test_generate_refuses_a_bad_schema_before_any_model_loads(tmp_path, capsys, schema, said):
    from olifant_mlx.cli import main

    code = main(["generate", "--model", str(tmp_path / "no-such-model"), "--json-schema", schema, "-p", "x"])
    err = capsys.readouterr().err
    assert code == 1 and said in err and "no-such-model" not in err, err


def test_chat_takes_the_flag_too():
    from olifant_mlx.cli import build_parser

    args = build_parser().parse_args(["chat", "--json-schema", '{"type": "object"}'])
    assert args.json_schema == '{"type": "object"}'


@pytest.mark.slow
@pytest.mark.parametrize("kv_cache", [True, pytest.param(False, marks=extended)])
def test_smollm2_speculative_under_a_schema_is_plain_under_it(smol, kv_cache):
    """A contract extraction on SmolLM2: valid against the contract schema, and the same tokens
    with lookup and n-gram drafting, k 3 and 8, as constrained plain decoding."""
    session = Session(smol, "none", GenerationOptions(max_tokens=48 if kv_cache else 24, kv_cache=kv_cache,
                                                      json_schema=json.dumps(CONTRACTS["schema"])))
    chat = Chat.of(CONTRACTS["instruction"] + "\n\n" + CONTRACTS["contracts"][1]["text"])
    plain = session.generate(chat, session.options.replace(k=0))
    for drafter, k in ((LookupDrafter(), 8), (NgramDrafter(), 3), (build_drafter("adaptive:hybrid"), 8)):
        got = session.generate(chat, session.options.replace(k=k), drafter=drafter)
        assert got.tokens == plain.tokens, (drafter.name, k)
        assert got.stats.steps < plain.stats.steps
    assert plain.text.startswith('{"parties": [{"name": "')


def test_the_tui_settings_row_takes_a_file_or_the_schema(tmp_path):
    """The Settings tab's "JSON schema" row (made from the binding table) reads as the flag does."""
    from olifant_mlx.tui.settings_tab import SettingsModel, read_option

    class Row:
        value = ""

    f = tmp_path / "s.json"
    f.write_text(json.dumps(SCHEMA))
    model = SettingsModel.start(None, "none", GenerationOptions())
    row = Row()
    for typed, want in ((str(f), SCHEMA), ('{"type": "object"}', {"type": "object"}), ("", None)):
        row.value = typed
        model.set("json_schema", lambda: read_option("json_schema", row))
        got = model.settings.options.json_schema
        assert (json.loads(got) if got else None) == want, typed
    row.value = str(tmp_path / "missing.json")
    model.set("json_schema", lambda: read_option("json_schema", row))
    assert model.settings is None and "JSON schema" in model.errors["json_schema"]


def test_without_the_library_the_error_names_the_install_command(monkeypatch, tmp_path, capsys):
    import sys

    from olifant_mlx.cli import main

    monkeypatch.setitem(sys.modules, "llguidance", None)       # as if it were not installed
    code = main(["generate", "--model", str(tmp_path / "no-such-model"), "--json-schema", '{"type": "object"}'])
    err = capsys.readouterr().err
    assert code == 1 and "pip install 'olifant_mlx[structured]'" in err and "no-such-model" not in err, err


@pytest.mark.slow
def test_smollm2_contract_extractions_parse_against_the_schema(smol):
    """benchmarks/structured_output.py's extraction, smaller: three contracts, each answer valid
    against the contract schema (docs/results/structured-extraction.json has all 20)."""
    session = Session(smol, "lookup", GenerationOptions(max_tokens=160, json_schema=json.dumps(CONTRACTS["schema"])))
    for contract in CONTRACTS["contracts"][2:5]:
        r = session.generate(Chat.of(CONTRACTS["instruction"] + "\n\n" + contract["text"]))
        assert r.finish_reason == "eos", (contract["id"], r.text)
        jsonschema.validate(json.loads(r.text), CONTRACTS["schema"])

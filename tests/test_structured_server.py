"""Structured output on the server, as OpenAI defines it: `response_format` (json_object,
json_schema) and `tools` / `tool_choice` (function calling), streamed and whole, through the
real OpenAI client on a real server on a loopback port, over the tiny model with a JSON
tokenizer (tiny_models.JsonTok). The answers follow their schemas (checked with jsonschema),
a call is `message.tool_calls` with `finish_reason` "tool_calls", drafting changes no token, and
a schema that cannot constrain an answer is a 400 naming its field before the request is
queued."""
import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("llguidance")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from pydantic import BaseModel, Field  # noqa: E402
from server_helpers import DEFAULTS, LIMITS, check_refused, sse_events  # noqa: E402
from tiny_models import tiny_json_verifier  # noqa: E402

from olifant_mlx.drafters.registry import parse_spec  # noqa: E402
from olifant_mlx.server.app import start  # noqa: E402
from olifant_mlx.server.config import DrafterChoice  # noqa: E402

SCHEMA = {"type": "object", "properties": {
    "party": {"type": "string", "maxLength": 16}, "days": {"type": "integer", "minimum": 0, "maximum": 365},
    "law": {"enum": ["england", "new york", "germany"]}},
    "required": ["party", "days", "law"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "maxLength": 12},
                                                "unit": {"enum": ["c", "f"]}},
                                                "required": ["city", "unit"], "additionalProperties": False}}}
NOTICE = {"type": "function", "function": {"name": "notice", "parameters": {"type": "object", "properties": {
    "days": {"type": "integer", "minimum": 1, "maximum": 90}}, "required": ["days"], "additionalProperties": False}}}
MSG = [{"role": "user", "content": "extract the terms"}]
FORMAT = {"type": "json_schema", "json_schema": {"name": "terms", "schema": SCHEMA, "strict": True}}


class Terms(BaseModel):
    party: str = Field(max_length=16)
    days: int = Field(ge=0, le=365)


@pytest.fixture(scope="module")
def served():
    run = start(tiny_json_verifier(), DrafterChoice({"lookup": parse_spec("lookup"), "none": parse_spec("none")},
                                                    "lookup"), DEFAULTS.replace(max_tokens=120), LIMITS)
    with httpx.Client(base_url=run.url, timeout=120) as http:
        yield run, http, openai.OpenAI(base_url=run.url + "/v1", api_key="unused", max_retries=0)
    run.stop()


def test_a_json_schema_answer_follows_it_whole_and_streamed(served):
    _, _, client = served
    whole = client.chat.completions.create(model="tiny", messages=MSG, response_format=FORMAT)
    answer = json.loads(whole.choices[0].message.content)
    jsonschema.validate(answer, SCHEMA)
    assert list(answer) == list(SCHEMA["properties"])       # the keys in the schema's order
    assert whole.choices[0].finish_reason == "stop" and whole.choices[0].message.tool_calls is None
    streamed = client.chat.completions.create(model="tiny", messages=MSG, response_format=FORMAT, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == \
        whole.choices[0].message.content
    plain = client.chat.completions.create(model="tiny", messages=MSG, response_format=FORMAT,
                                           extra_body={"draft": "none"})
    assert plain.choices[0].message.content == whole.choices[0].message.content     # drafting changes nothing
    assert whole.usage.model_extra["drafted_tokens"] > 0


def test_a_json_object_answer_is_an_object(served):
    _, _, client = served
    r = client.chat.completions.create(model="tiny", messages=MSG, response_format={"type": "json_object"},
                                       max_tokens=120)
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:       # the tiny model may still be writing it: the start is an object's all the same
        assert r.choices[0].message.content.startswith("{")


def test_the_clients_parse_gives_the_pydantic_object(served):
    """The OpenAI client's own structured output: a pydantic model as the response format."""
    _, _, client = served
    r = client.chat.completions.parse(model="tiny", messages=MSG, response_format=Terms, max_tokens=200)
    got = r.choices[0].message.parsed
    assert isinstance(got, Terms) and 0 <= len(got.party) and isinstance(got.days, int)


def test_a_named_function_is_called_whole_and_streamed(served):
    _, http, client = served
    choice = {"type": "function", "function": {"name": "get_weather"}}
    r = client.chat.completions.create(model="tiny", messages=MSG, tools=[NOTICE, WEATHER], tool_choice=choice,
                                       max_tokens=200)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    body = {"messages": MSG, "tools": [NOTICE, WEATHER], "tool_choice": choice, "stream": True, "max_tokens": 200}
    events = [json.loads(e) for e in sse_events(http.post("/v1/chat/completions", json=body).text) if e != "[DONE]"]
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    calls = [d["tool_calls"] for d in deltas if d.get("tool_calls")]
    assert len(calls) == 1 and calls[0][0]["function"] == {"name": "get_weather",
                                                           "arguments": call.function.arguments}
    assert not any(d.get("content") for d in deltas)
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_required_calls_one_of_the_tools(served):
    _, _, client = served
    r = client.chat.completions.create(model="tiny", messages=MSG, tools=[NOTICE, WEATHER], tool_choice="required",
                                       max_tokens=200)
    call = r.choices[0].message.tool_calls[0]
    tool = {"notice": NOTICE, "get_weather": WEATHER}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])
    # and a conversation that goes on after the call, with the tool's answer, is taken
    follow = MSG + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                    {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    r2 = client.chat.completions.create(model="tiny", messages=follow, tools=[NOTICE, WEATHER], tool_choice="none",
                                        max_tokens=5)
    assert r2.choices[0].message.tool_calls is None


def test_what_cannot_constrain_an_answer_is_refused(served):
    _, http, _ = served
    bad_pattern = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string",
                                                                                 "pattern": "(?<=a)b"}}}
    check_refused(http, [
        ("/v1/chat/completions", {"messages": MSG, "response_format": bad_pattern}, None, 400,
         "response_format.json_schema.schema"),
        ("/v1/chat/completions", {"messages": MSG, "response_format": {"type": "xml"}}, None, 400,
         "response_format.type"),
        ("/v1/chat/completions", {"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": [1]}}}, None, 400, "response_format.json_schema.schema"),
        ("/v1/chat/completions", {"messages": MSG, "tools": [{"type": "function"}]}, None, 400, "tools[0]"),
        ("/v1/chat/completions", {"messages": MSG, "tools": [WEATHER, WEATHER]}, None, 400, "tools[1]"),
        ("/v1/chat/completions", {"messages": MSG, "tools": [WEATHER], "tool_choice": {
            "type": "function", "function": {"name": "launch"}}}, None, 400, "tool_choice"),
        ("/v1/chat/completions", {"messages": MSG, "tool_choice": "required"}, None, 400, "tool_choice"),
        ("/v1/chat/completions", {"messages": MSG, "tools": [WEATHER], "tool_choice": "sometimes"}, None, 400,
         "tool_choice"),
    ])

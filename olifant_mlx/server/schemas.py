"""The OpenAI request bodies (pydantic, strict: "5" is not a number, true is not 1), their
checks against the server's limits, and the response and error bodies OpenAI clients parse.

A request becomes a `Plan` (prompt, GenerationOptions, drafter name, streaming) or an
`ApiError` with OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.
"""
from __future__ import annotations

import dataclasses
import json
import re
import secrets
import time
from dataclasses import dataclass

from typing import Literal

from pydantic import BaseModel, ConfigDict, FiniteFloat, ValidationError, create_model

from olifant_mlx.bindings import BINDINGS, REQUEST, bound, request_field
from olifant_mlx.drafters.prediction import PREDICTION_K
from olifant_mlx.engine.options import check_option, options
from olifant_mlx.engine.session import Chat, GenerationOptions, OptionsError
from olifant_mlx.server.config import Limits
from olifant_mlx.server.queue import ModelInfo
from olifant_mlx.server.wording import option_error

INT64 = 1 << 63
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "invalid_request_error",
               405: "invalid_request_error", 413: "invalid_request_error", 415: "invalid_request_error",
               429: "rate_limit_error", 500: "server_error", 503: "server_error", 504: "timeout_error"}
UNION_TAGS = {"str", "int", "float", "bool", "dict", "list", "none"}
UNION_HINTS = {"prompt": "must be text, a list of one text, or a list of token ids",
               "stop": "must be a text or a list of texts",
               "content": "must be text or a list of {\"type\": \"text\", \"text\": ...} parts",
               "tool_choice": "must be a text or an object",
               "prediction": "must be {\"type\": \"content\", \"content\": text or a list of text parts}"}


class ApiError(Exception):
    """An answer other than 200, in OpenAI's error shape."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return error_body(self.status, self.message, self.param, self.code)


def error_body(status: int, message: str, param=None, code=None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


# ---- request bodies -----------------------------------------------------------------------

class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(Strict):
    include_usage: bool | None = None


class ContentPart(Strict):
    type: str
    text: str | None = None


class Message(Strict):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list | None = None           # an assistant's earlier calls
    tool_call_id: str | None = None          # a tool's answer to one of them


class Prediction(Strict):
    """OpenAI's predicted output: the text the answer is expected to mostly repeat."""
    type: Literal["content"]
    content: str | list[ContentPart]


FIELD_TYPES = {"whole": int, "number": FiniteFloat, "flag": bool, "text": str, "texts": list[str], "spec": str}


def option_requests() -> dict:
    """{option: its request field} of the options a request sets by a field of their own
    (top_p, num_draft_tokens, ...: olifant_mlx.bindings); those OpenAI's bodies declare
    themselves (max_tokens, seed, stop) are read with the body's other fields (`_plan`)."""
    return {name: request_field(name) for name in bound(REQUEST) if request_field(name) not in Common.model_fields}


def option_fields() -> dict:
    """{request field: (type, None)} of option_requests(): made from the table, so a new
    option that applies to serving is a request field."""
    kinds = {field: options()[name] for name, field in option_requests().items()}
    return {field: ((Literal[o.choices] if o.kind == "choice" else FIELD_TYPES[o.kind]) | None, None)
            for field, o in kinds.items()}


def with_option_fields(body: type[Strict]) -> type[Strict]:
    """A request body with every option field (option_fields()) added to its own."""
    return create_model(body.__name__.removesuffix("Body") + "Request", __base__=body, __module__=__name__,
                        **option_fields())


class Common(Strict):
    """What completions and chat completions share, OpenAI's fields and ours; the options a
    request may set (temperature, top_p, top_k, ...) are added from the options
    (with_option_fields)."""
    model: str | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    presence_penalty: FiniteFloat | None = None
    frequency_penalty: FiniteFloat | None = None
    logit_bias: dict | None = None
    user: str | None = None
    # ours, as mlx-lm's server spells them where it has them (draft: the option's row, a configured name)
    timeout: FiniteFloat | None = None       # seconds: this request's deadline
    prediction: Prediction | None = None     # OpenAI's predicted output (chat), on completions too


class ChatBody(Common):
    messages: list[Message]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list | None = None
    tool_choice: str | dict | None = None
    response_format: dict | None = None
    chat_template_kwargs: dict | None = None


class CompletionBody(Common):
    prompt: str | list[int] | list[str]
    logprobs: int | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None


ChatRequest = with_option_fields(ChatBody)
CompletionRequest = with_option_fields(CompletionBody)


def parse_body(raw: bytes, model: type[Strict]) -> Strict:
    """The JSON object of a request body, validated: ApiError(400) naming what is wrong."""
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False, include_input=False)[0]
        param = _param(err["loc"])
        msg = UNION_HINTS.get(param.rsplit(".", 1)[-1] if param else "", err["msg"]) \
            if any(_is_tag(p) for p in err["loc"]) or err["type"] == "model_type" else err["msg"]
        raise ApiError(400, f"{param or 'body'}: {msg}", param, "invalid_type"
                       if err["type"].endswith("_type") else err["type"]) from None
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _is_tag(p) -> bool:
    """A pydantic union branch in an error's location ('str', 'list[int]'), not a field."""
    return isinstance(p, str) and (p in UNION_TAGS or "[" in p)


def _param(loc) -> str | None:
    parts = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif _is_tag(p):
            continue
        else:
            parts.append(("." if parts else "") + p)
    return "".join(parts) or None


# ---- a request, checked, as a plan ----------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    kind: str                   # "chat" | "completion"
    prompt: object              # text, token ids or a Chat
    options: GenerationOptions
    explicit_max: bool          # the client set max_tokens (else it is cut to the context)
    drafter: str                # a configured name or "none"
    stream: bool
    include_usage: bool
    timeout_s: float
    model: str
    param: str                  # the field that holds the prompt
    prediction: str | None = None   # the predicted output's text (None: no prediction)
    prediction_k: int | None = None  # the draft length it asks for (None: num_draft_tokens given)
    tools: tuple | None = None      # the functions the answer may call (their names), or None


def plan_chat(req: ChatRequest, info: ModelInfo, defaults: GenerationOptions, limits: Limits) -> Plan:
    if not info.has_chat_template:
        raise ApiError(400, f"{info.id} has no chat template (a base model): use /v1/completions "
                            f"with a prompt", "messages", "no_chat_template")
    _unsupported(req.logprobs, "logprobs", "logprobs are not available from this server")
    _unsupported(req.top_logprobs, "top_logprobs", "logprobs are not available from this server")
    tools, schema = structured_output(req)
    if not req.messages:
        raise ApiError(400, "messages: give at least one message", "messages")
    if len(req.messages) > limits.max_messages:
        raise ApiError(400, f"messages: at most {limits.max_messages} messages per request", "messages")
    messages = []
    for i, m in enumerate(req.messages):
        role = ROLES.get(m.role)
        if role is None:
            raise ApiError(400, f"messages[{i}].role must be system, developer, user, assistant or tool, "
                                f"got {m.role[:32]!r}", f"messages[{i}].role")
        if role == "assistant" and m.content is None and m.tool_calls:
            messages.append({"role": role, "content": _calls_text(m.tool_calls, i)})
        else:
            messages.append({"role": role, "content": _text(m.content, i)})
    kwargs = req.chat_template_kwargs or {}
    if len(kwargs) > 16 or not all(isinstance(k, str) and k.isidentifier() and not k.startswith("_")
                                   and isinstance(v, (str, int, float, bool, type(None)))
                                   for k, v in kwargs.items()):
        raise ApiError(400, "chat_template_kwargs: at most 16 names with plain values (text, "
                            "numbers, true/false, null)", "chat_template_kwargs")
    if set(kwargs) & {"tokenize", "add_generation_prompt", "conversation", "messages", "tools",
                      "documents", "chat_template", "continue_final_message", "return_dict"}:
        raise ApiError(400, "chat_template_kwargs: those names are the server's to set",
                       "chat_template_kwargs")
    if tools:               # the template shows them to the model where it can (Qwen's does)
        kwargs = {**kwargs, "tools": [dict(t) for t in req.tools]}
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    plan = _plan(req, "chat", Chat(tuple(messages), dict(kwargs)), max_tokens, param, info, defaults,
                 limits, "messages")
    if schema is None and tools is None:
        return plan
    return dataclasses.replace(plan, options=plan.options.replace(json_schema=schema) if schema else plan.options,
                               tools=tools)


def structured_output(req) -> tuple:
    """(the names of the functions the answer may call, or None; the JSON schema's text the
    answer is constrained to, or None) of a chat request's `response_format`, `tools` and
    `tool_choice`, as OpenAI defines them: a call is forced by tool_choice "required" (any of the
    tools) or a named function; "auto" (the default with tools) leaves the answer free, and it is
    a call when it is one as JSON; "none" never calls. Every schema is compiled here, before the
    request is queued: what cannot constrain an answer is a 400 naming its field."""
    from olifant_mlx.structured import SchemaError, check_schema, schema_text, tool_call_schema

    schema, param = _response_format(req.response_format), "response_format.json_schema.schema"
    tools, choice = _tools(req.tools), req.tool_choice
    if choice is not None and tools is None and choice != "none":
        raise ApiError(400, "tool_choice: give the tools it chooses among (tools)", "tool_choice", "invalid_value")
    if tools is not None:
        choice = "auto" if choice is None else choice
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
            if not isinstance(name, str) or name not in tools:
                raise ApiError(400, f"tool_choice: a function among the tools ({', '.join(tools)}), as "
                                    '{"type": "function", "function": {"name": NAME}}', "tool_choice", "invalid_value")
            schema, param = tool_call_schema(req.tools, name), "tools"
        elif choice == "required":
            schema, param = tool_call_schema(req.tools), "tools"
        elif choice == "none":
            tools = None
        elif choice != "auto":
            raise ApiError(400, "tool_choice must be none, auto, required or a function", "tool_choice",
                           "invalid_value")
    if schema is None:
        return tools, None
    try:
        text = schema_text(schema, param)
        check_schema(text, param)
    except SchemaError as e:
        raise ApiError(400, str(e), param, "invalid_schema") from None
    return tools, text


def _response_format(fmt):
    """The schema a response_format asks for (a dict), or None for text."""
    if fmt is None or fmt == {"type": "text"}:
        return None
    kind = fmt.get("type")
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name", ""), str):
            raise ApiError(400, 'response_format.json_schema: give {"name": ..., "schema": {...}, "strict": ...}',
                           "response_format.json_schema", "invalid_value")
        schema = spec.get("schema", {"type": "object"})
        if not isinstance(schema, dict):
            raise ApiError(400, "response_format.json_schema.schema must be a JSON schema (an object)",
                           "response_format.json_schema.schema", "invalid_value")
        return schema
    raise ApiError(400, 'response_format: the type is "text", "json_object" or "json_schema"',
                   "response_format.type", "invalid_value")


def _tools(tools) -> tuple | None:
    """The function names of a request's tools (OpenAI's shape, checked), or None for none."""
    if not tools:
        return None
    names = []
    for i, t in enumerate(tools):
        f = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
        name = f.get("name") if isinstance(f, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise ApiError(400, f'tools[{i}]: a function, {{"type": "function", "function": {{"name": NAME '
                                f'(letters, digits, _ and -, up to 64), "parameters": {{...}}}}}}', f"tools[{i}]",
                           "invalid_value")
        if not isinstance(f.get("parameters", {}), dict):
            raise ApiError(400, f"tools[{i}].function.parameters must be a JSON schema (an object)",
                           f"tools[{i}].function.parameters", "invalid_value")
        if name in names:
            raise ApiError(400, f"tools[{i}]: two functions named {name!r}", f"tools[{i}]", "invalid_value")
        names.append(name)
    return tuple(names)


def _calls_text(calls, i) -> str:
    """An assistant's earlier tool calls as the text it wrote them in (one JSON call a line)."""
    try:
        return "\n".join(json.dumps({"name": c["function"]["name"],
                                      "arguments": json.loads(c["function"]["arguments"])}) for c in calls)
    except (KeyError, TypeError, ValueError):
        raise ApiError(400, f"messages[{i}].tool_calls: each needs function.name and function.arguments (JSON text)",
                       f"messages[{i}].tool_calls", "invalid_value") from None


def tool_call(text: str, tools) -> dict | None:
    """The call an answer makes ({"name", "arguments"} as JSON, the name among `tools`), or None."""
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if not (isinstance(call, dict) and call.get("name") in tools and isinstance(call.get("arguments"), dict)):
        return None
    return {"id": "call_" + secrets.token_hex(12), "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}


def plan_completion(req: CompletionRequest, info: ModelInfo, defaults: GenerationOptions,
                    limits: Limits) -> Plan:
    if req.logprobs:
        raise ApiError(400, "logprobs: logprobs are not available from this server", "logprobs",
                       "unsupported_parameter")
    _unsupported(req.echo, "echo", "echo is not supported")
    _unsupported(req.suffix, "suffix", "suffix (insertion) is not supported")
    if req.best_of not in (None, 1):
        raise ApiError(400, "best_of: only 1 is supported", "best_of", "unsupported_parameter")
    prompt = req.prompt
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], str):
            if len(prompt) != 1:
                raise ApiError(400, "prompt: one prompt per request (n=1)", "prompt")
            prompt = prompt[0]
        else:
            if not prompt:
                raise ApiError(400, "prompt: the token list is empty", "prompt")
            if not all(0 <= t < info.vocab_size for t in prompt):
                raise ApiError(400, f"prompt: token ids must be from 0 to {info.vocab_size - 1}", "prompt")
    if isinstance(prompt, str) and not prompt:
        raise ApiError(400, "prompt: give some text", "prompt")
    return _plan(req, "completion", prompt, req.max_tokens, "max_tokens", info, defaults, limits, "prompt")


def _unsupported(value, param, message):
    if value:
        raise ApiError(400, f"{param}: {message}", param, "unsupported_parameter")


def _text(content, i) -> str:
    if content is None:
        raise ApiError(400, f"messages[{i}].content: give the message's text", f"messages[{i}].content")
    return _joined(content, f"messages[{i}].content")


def _joined(content, param) -> str:
    """Text, or its text parts joined (as OpenAI's content parts are: one after the other);
    any other part is a 400 naming `param`."""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise ApiError(400, f"{param}: only text parts are supported, got {part.type[:32]!r}", param,
                           "unsupported_content")
        texts.append(part.text)
    return "".join(texts)


def _prediction(req, defaults: GenerationOptions, changes: dict) -> tuple:
    """(the prediction's text, the draft length it asks for) of a request; (None, None) without
    one. Its length is PREDICTION_K (serve -k when higher) unless num_draft_tokens is given; a
    text that is not valid Unicode is a 400 naming the field (the tokenizer would only fail)."""
    if req.prediction is None:
        return None, None
    text = _joined(req.prediction.content, "prediction.content")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(400, f"prediction.content is not valid Unicode text: character {e.start + 1} is a lone "
                            f"surrogate U+{ord(text[e.start]):04X} (send the text as UTF-8, or the character it "
                            f"stands for)", "prediction.content", "invalid_value") from None
    return text, None if "k" in changes else max(defaults.k, PREDICTION_K)


def _plan(req, kind, prompt, max_tokens, max_param, info, defaults, limits, prompt_param) -> Plan:
    if req.model is not None and req.model != info.id:
        raise ApiError(404, f"model {req.model!r} is not served here: this server has {info.id!r} "
                            f"(GET /v1/models)", "model", "model_not_found")
    if req.n not in (None, 1):
        raise ApiError(400, "n: only n=1 is supported (one generation per request)", "n",
                       "unsupported_parameter")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise ApiError(400, f"{name}: not supported; use repetition_penalty (> 1 penalises "
                                f"repeated tokens)", name, "unsupported_parameter")
    if req.logit_bias:
        raise ApiError(400, "logit_bias: not supported", "logit_bias", "unsupported_parameter")
    if max_tokens is not None and not 1 <= max_tokens <= limits.max_tokens:
        raise ApiError(400, f"{max_param} must be from 1 to {limits.max_tokens} on this server, "
                            f"got {max_tokens}", max_param, "invalid_value")
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stops) > limits.max_stop:
        raise ApiError(400, f"stop: at most {limits.max_stop} stop sequences", "stop", "invalid_value")
    if any(not s or len(s) > limits.max_stop_chars for s in stops):
        raise ApiError(400, f"stop: every stop sequence must have 1 to {limits.max_stop_chars} "
                            f"characters", "stop", "invalid_value")
    changes = request_options(req)
    if req.seed is not None and not -INT64 <= req.seed < INT64:
        raise ApiError(400, "seed must be a 64-bit whole number", "seed", "invalid_value")
    drafter = _drafter(req.draft, info)       # the draft row's field: a configured name
    timeout = limits.timeout_s
    if req.timeout is not None:
        if not 0 < req.timeout <= limits.timeout_s:
            raise ApiError(400, f"timeout must be a number of seconds in (0, {limits.timeout_s:g}]",
                           "timeout", "invalid_value")
        timeout = float(req.timeout)
    temperature = changes.get("temperature", defaults.temperature)
    seed = req.seed
    if seed is None:        # OpenAI: no seed, a fresh draw each time (greedy ignores it)
        seed = secrets.randbits(62) if temperature > 0 else defaults.seed
    changes.update(max_tokens=max_tokens or limits.default_max_tokens, seed=seed,
                   stop=defaults.stop if req.stop is None else tuple(stops))
    try:
        options = defaults.replace(**changes)
    except OptionsError as e:          # options that do not go together (kv_bits, max_kv_size)
        raise ApiError(400, *option_error(e), "invalid_value") from None
    stream = bool(req.stream)
    if req.stream_options is not None and not stream:
        raise ApiError(400, "stream_options: only with stream: true", "stream_options")
    include_usage = bool(stream and req.stream_options and req.stream_options.include_usage)
    prediction, prediction_k = _prediction(req, defaults, changes)
    return Plan(kind, prompt, options, max_tokens is not None, drafter, stream, include_usage,
                timeout, info.id, prompt_param, prediction, prediction_k)


def request_options(req) -> dict:
    """{option: value} of the option fields a request set, each checked as the options check
    it (within the server's own limit, `server_high`): ApiError(400) naming the field. A field's
    `off` value (`"precedents": ""`) turns the option off; null leaves the server's default. A
    `named` field (draft) chooses among the server's configured names: `_drafter` checks it."""
    changes = {}
    for name, field in option_requests().items():
        value, o = getattr(req, field), options()[name]
        if value is None or BINDINGS[name].named:
            continue
        if BINDINGS[name].off is not None and value == BINDINGS[name].off:
            changes[name] = None          # off, whatever the server's default (null keeps the default)
            continue
        value = float(value) if o.kind == "number" else tuple(value) if o.kind == "texts" else value
        try:
            check_option(name, value, BINDINGS[name].server_high)
        except OptionsError as e:
            raise ApiError(400, *option_error(e), "invalid_value") from None
        changes[name] = value
    return changes


def _drafter(name, info: ModelInfo) -> str:
    """A drafter the server was configured with (serve --draft/--drafters, and "none"), by
    its name; the server's default for None. Never a spec: a path or spec is invalid_drafter,
    any other name drafter_not_found."""
    if name is None:
        return info.default_drafter
    if name in info.drafters:
        return name
    if any(c in name for c in "/\\:.~") or name.startswith("-"):
        raise ApiError(400, "draft: drafters are chosen by the name the server gave them, never by "
                            f"a path or spec; this server has {', '.join(info.drafters)}", "draft",
                       "invalid_drafter")
    raise ApiError(400, f"draft: no drafter named {name[:64]!r} here; this server has "
                        f"{', '.join(info.drafters)}", "draft", "drafter_not_found")


# ---- response bodies ------------------------------------------------------------------------

def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)


class Responder:
    """The JSON objects of one request's answer, streamed or whole."""

    def __init__(self, plan: Plan, fingerprint: str):
        self.plan = plan
        self.id = new_id(plan.kind)
        self.created = int(time.time())
        self.fingerprint = fingerprint
        self.object = "chat.completion" if plan.kind == "chat" else "text_completion"

    def _head(self, obj) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.plan.model,
                "system_fingerprint": self.fingerprint}

    def call(self, text: str, finish_reason: str) -> tuple:
        """(the tool call an answer makes, or None; its finish reason: "tool_calls" for a call)."""
        call = tool_call(text, self.plan.tools) if self.plan.tools and finish_reason == "stop" else None
        return call, "tool_calls" if call is not None else finish_reason

    def whole(self, text: str, finish_reason: str, usage: dict, sources: list | None = None,
              precedents: list | None = None) -> dict:
        if self.plan.kind == "chat":
            call, finish_reason = self.call(text, finish_reason)
            message = {"role": "assistant", "content": text} if call is None else \
                {"role": "assistant", "content": None, "tool_calls": [call]}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return with_sources({**self._head(self.object), "choices": [choice], "usage": usage}, sources, precedents)

    def chunk(self, text: str | None, finish_reason: str | None = None, first: bool = False) -> dict:
        if self.plan.kind == "chat":
            delta = {"role": "assistant", "content": text or ""} if first else \
                ({} if text is None else {"content": text})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
            obj = "text_completion"
        out = {**self._head(obj), "choices": [choice]}
        if self.plan.include_usage:
            out["usage"] = None
        return out

    def last_chunks(self, text: str, finish_reason: str) -> list:
        """The chunks that end a streamed answer with tools, whose text was held back: its tool
        call (or its text, when it makes none), then the finish reason."""
        call, finish_reason = self.call(text, finish_reason)
        if call is None:
            out = [self.chunk(text)] if text else []
        else:
            out = [self.chunk(None)]
            out[0]["choices"][0]["delta"] = {"tool_calls": [{"index": 0, **call}]}
        return out + [self.chunk(None, finish_reason)]

    def usage_chunk(self, usage: dict, sources: list | None = None, precedents: list | None = None) -> dict:
        obj = "chat.completion.chunk" if self.plan.kind == "chat" else "text_completion"
        return with_sources({**self._head(obj), "choices": [], "usage": usage}, sources, precedents)


def with_sources(body: dict, sources: list | None, precedents: list | None = None) -> dict:
    """The answer with our extensions beside `usage`: `sources` when a library was asked for,
    `precedents` (the passages the prompt was given) when precedents were."""
    if sources is not None:
        body["sources"] = sources
    if precedents is not None:
        body["precedents"] = precedents
    return body

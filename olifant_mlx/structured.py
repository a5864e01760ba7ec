"""Structured output: a JSON schema as a grammar over the verifier's tokens, through llguidance.

    text = read_schema("contract.schema.json")          # or '{"type": "object"}' (any JSON object)
    check_schema(text, "--json-schema contract.schema.json")   # before any model loads
    grammar = Grammar.of(text, verifier, eos_ids)        # compiled for the verifier's tokenizer
    constraint = grammar.constraint()                     # one generation's (engine.constraint)

The engine knows only its `Constraint` interface (engine/constraint.py); this module is the one
place that knows the library. llguidance was chosen by measuring (docs/structured-output.md,
benchmarks/grammar_mask_cost.py): tens of microseconds a mask on this CPU, a schema compiled
in tens of milliseconds (outlines-core took 28 s and 179 s), forced tokens and rollback of its
own, and no dependency (xgrammar needs torch). Its mask is a bitmask of 32-bit words, turned
here into a row of 0 and -inf that the picker adds to the verifier's logits.

JSON is written as Python's json.dumps writes it (", " and ": ", no other whitespace): the
grammar then forces every key, quote and separator, which are free drafts.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

INSTALL = "pip install 'olifant_mlx[structured]'"
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
MAX_SCHEMA_BYTES = 256 << 10
NEG = np.array([-np.inf, 0.0], dtype=np.float32)


class SchemaError(ValueError):
    """A schema that cannot constrain a generation (a user's error: the command line exits 1, the
    server answers 400); the message names where it came from."""


def library():
    """llguidance, or a SchemaError naming the install command."""
    try:
        import llguidance
    except ImportError:
        raise SchemaError(f"structured output needs llguidance: {INSTALL}") from None
    return llguidance


def schema_text(schema, what: str) -> str:
    """A schema (a dict, or its JSON text) as compact JSON text, its keys in their order (the
    answer's keys follow the properties' order); SchemaError naming `what` when it is not a JSON
    object."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise SchemaError(f"{what}: not valid JSON: {e}") from None
    if not isinstance(schema, dict):
        raise SchemaError(f"{what}: a JSON schema is a JSON object, got {type(schema).__name__}")
    return json.dumps(schema, ensure_ascii=False)


def read_schema(arg: str, what: str = "--json-schema") -> str:
    """A schema named on a command line or in a form: a FILE, or the schema itself as JSON text
    (it starts with "{"); its canonical text, checked (SchemaError naming the flag and file)."""
    arg = arg.strip()
    if arg.startswith("{"):
        return schema_text(arg, what)
    path = Path(arg).expanduser()
    where = f"{what} {arg}"
    if not path.is_file():
        raise SchemaError(f"{where}: no such file" if not path.exists() else f"{where}: not a regular file")
    if path.stat().st_size > MAX_SCHEMA_BYTES:
        raise SchemaError(f"{where}: over {MAX_SCHEMA_BYTES >> 10} KiB: not a schema")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SchemaError(f"{where}: cannot read it: {e}") from None
    return schema_text(text, where)


def grammar_text(schema: str, what: str) -> str:
    """llguidance's grammar for a schema's text, checked: SchemaError naming `what` and what
    the library refused (an unsupported keyword, a bad pattern, a $ref that goes nowhere)."""
    ll = library()
    try:
        grammar = ll.LLMatcher.grammar_from_json_schema(json.loads(schema), defaults=JSON_OPTIONS)
    except (ValueError, TypeError) as e:
        raise SchemaError(f"{what}: {e}") from None
    problem = ll.LLMatcher.validate_grammar(grammar)
    if problem and not problem.startswith("WARNING"):
        raise SchemaError(f"{what}: the schema is not supported: {problem.strip().splitlines()[0][:300]}")
    return grammar


def check_schema(schema: str, what: str) -> None:
    """SchemaError naming `what` unless the schema compiles (no model or tokenizer needed)."""
    grammar_text(schema, what)


def tool_call_schema(tools, name: str | None = None) -> dict:
    """The schema of one call of a function among `tools` (OpenAI's {"type": "function",
    "function": {"name", "parameters"}}), or of the function `name`: {"name": ..., "arguments":
    {...}}, the arguments following the function's parameters."""
    calls = []
    for tool in tools:
        f = tool["function"]
        if name is not None and f["name"] != name:
            continue
        params = f.get("parameters") or {"type": "object", "properties": {}}
        calls.append({"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": params},
                      "required": ["name", "arguments"], "additionalProperties": False})
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


class _Vocabulary:
    """A tokenizer llguidance reads from its token bytes (llguidance.TokenizerWrapper's
    shape): for a verifier whose tokenizer is not a Hugging Face fast one but says its tokens'
    bytes (`token_bytes()`), as the tests' tiny tokenizers do."""

    def __init__(self, tok, eos):
        self.tokens = list(tok.token_bytes())
        self.eos_token_id, self.bos_token_id = eos[0], None
        self.special_token_ids = list(eos)         # never text
        self._encode = tok.encode

    def __call__(self, text):
        return list(self._encode(text.decode() if isinstance(text, bytes) else text))


def llg_tokenizer(tokenizer, width: int, eos_ids):
    """llguidance's tokenizer for an mlx-lm tokenizer (its Hugging Face fast tokenizer), the
    masks `width` logits wide, every EOS id of the verifier allowed where the answer may end."""
    ll = library()
    eos = sorted(int(e) for e in eos_ids) or [0]
    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    if callable(getattr(hf, "token_bytes", None)):
        return ll.LLTokenizer(ll.TokenizerWrapper(_Vocabulary(hf, eos)), n_vocab=width, eos_token=eos)
    import llguidance.hf

    try:
        return llguidance.hf.from_tokenizer(hf, n_vocab=width, eos_token=eos)
    except ValueError as e:
        raise SchemaError(f"structured output needs a fast (Rust) Hugging Face tokenizer: {e}") from None


class Grammar:
    """A schema compiled for one verifier's tokenizer; `constraint()` is a fresh generation's."""

    def __init__(self, tokenizer, grammar: str, eos_ids, schema: str):
        self.tokenizer, self.grammar, self.eos_ids, self.schema = tokenizer, grammar, tuple(eos_ids), schema

    @classmethod
    def of(cls, schema: str, tokenizer, eos_ids, what: str = "the JSON schema") -> Grammar:
        """`tokenizer`: what llg_tokenizer made (a verifier's, made once)."""
        return cls(tokenizer, grammar_text(schema, what), eos_ids, schema)

    def constraint(self) -> SchemaConstraint:
        return SchemaConstraint(self)


class Grammars:
    """A verifier's compiled schemas: its tokenizer converted once (per set of EOS ids), a schema
    compiled once, the latest `keep` kept (a server sees the same few schemas again and again)."""

    def __init__(self, tokenizer, width: int, keep: int = 16):
        self.tokenizer, self.width, self.keep = tokenizer, width, keep
        self.compiled = {}             # (schema, EOS ids) -> Grammar, oldest first
        self.converted = None          # (EOS ids, llguidance's tokenizer)

    def get(self, schema: str, eos_ids: tuple) -> Grammar:
        key = (schema, eos_ids)
        if key not in self.compiled:
            if self.converted is None or self.converted[0] != eos_ids:
                self.converted = (eos_ids, llg_tokenizer(self.tokenizer, self.width, eos_ids))
            while len(self.compiled) >= self.keep:
                self.compiled.pop(next(iter(self.compiled)))
            self.compiled[key] = Grammar.of(schema, self.converted[1], eos_ids)
        return self.compiled[key]


class SchemaConstraint:
    """engine.constraint.Constraint over an llguidance matcher, kept in step with the sequence it
    is asked about: tokens no longer there are rolled back, new ones consumed."""

    def __init__(self, grammar: Grammar):
        ll = library()
        self.eos = list(grammar.eos_ids)
        self.matcher = ll.LLMatcher(grammar.tokenizer, grammar.grammar, log_level=0)
        if self.matcher.is_error():
            raise SchemaError(f"the JSON schema: {self.matcher.get_error()[:300]}")
        self.words = np.zeros((grammar.tokenizer.vocab_size + 31) // 32, dtype=np.int32)
        self.base, self.done = 0, []
        self.masks = 0                # masks computed in this generation (for the docs' counts)

    def start(self, prompt) -> None:
        self.matcher.reset()
        self.base, self.done, self.masks = len(prompt), [], 0

    def _sync(self, tokens) -> None:
        new = [int(t) for t in tokens[self.base:]]
        p, done = 0, self.done
        n = min(len(done), len(new))
        while p < n and done[p] == new[p]:
            p += 1
        if len(done) > p:
            self.matcher.rollback(len(done) - p)
            del done[p:]
        if len(new) > p:
            took = self.matcher.try_consume_tokens(new[p:])
            done.extend(new[p:p + took])
            if took < len(new) - p:
                raise SchemaError(f"token {new[p + took]} at answer position {p + took} is outside the grammar")

    def bias(self, tokens, width: int):
        self._sync(tokens)
        self.matcher.unsafe_compute_mask_ptr(self.words.ctypes.data, self.words.size * 4)
        self.masks += 1
        bits = np.unpackbits(self.words.view(np.uint8), bitorder="little")
        if bits.size < width:
            bits = np.concatenate([bits, np.zeros(width - bits.size, dtype=np.uint8)])
        bits = bits[:width]
        if self.matcher.is_accepting() or not bits.any():
            bits[[e for e in self.eos if e < width]] = 1     # the answer may end (any EOS)
        return np.take(NEG, bits)

    def allowed(self, tokens, drafts) -> int:
        self._sync(tokens)
        n = self.matcher.try_consume_tokens([int(t) for t in drafts]) if drafts else 0
        if n:
            self.matcher.rollback(n)
        return n

    def forced(self, tokens, limit: int) -> list:
        self._sync(tokens)
        return self.matcher.compute_ff_tokens()[:limit] if limit > 0 else []

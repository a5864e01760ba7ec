"""A generation's choices, made once: `plan` (through `Session.plan`, which gives the session's
defaults) turns what a surface received (a prompt, options, a drafter, a cache) into a frozen
`Request` that `Session.stream` runs; the prompt is built here (`with_precedents`, `encode`,
`fit_context`), from the verifier alone.

    request = session.plan(Chat.of("Draft a confidentiality clause."),
                           GenerationOptions(k=8, max_tokens=200), drafter="library:contracts")
    request.ids, request.drafting.spec, request.library, request.precedents
    for r in session.stream(request, should_stop=...): ...

mlx-lm's `stream_generate(model, tokenizer, prompt, draft_model=..., **kwargs)` takes every
choice of a generation in one call; a Request is those choices as a value, checked where it is
made: the precedents gathered, the prompt encoded and fitted to the context, `auto` resolved,
the provenance library worked out (`sources_library`, the one rule for it) and opened. Nothing
a request chooses is written on the Session, and each generation drafts with a state of its
own (drafters.base: `open`), so two requests on one Session, even streamed at once, never see
each other's drafting or library (tests/test_interleaved.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from olifant_mlx.drafters.auto import library_of, resolve_auto
from olifant_mlx.drafters.base import Drafter, NoDrafter, as_drafter
from olifant_mlx.drafters.prediction import predicting
from olifant_mlx.drafters.registry import DrafterSpec, build_drafter, parse_spec, uses_history
from olifant_mlx.engine.options import GenerationOptions
from olifant_mlx.option_errors import LibraryOptionError, OptionsError


class ContextError(ValueError):
    """A prompt that, with the tokens asked for, does not fit the verifier's context;
    `prompt_tokens` and `max_tokens` are the numbers, `what` the input that does not fit:
    "prompt", or "prediction" (then `max_tokens` is its length). `facts` say what does not fit
    and `advice` what to change: (text, option) pairs, the text with `{}` where the option is
    named (option None: none is). `worded(spell)` is the message with each option spelled as a
    surface spells it (the CLI its flag); str() spells them as people say them ("max tokens")."""

    def __init__(self, facts: str, prompt_tokens: int = 0, max_tokens: int = 0, what: str = "prompt",
                 advice=()):
        self.facts, self.advice = facts, tuple(advice)
        self.prompt_tokens, self.max_tokens, self.what = prompt_tokens, max_tokens, what
        super().__init__(self.worded(lambda option: option.replace("_", " ")))

    def worded(self, spell) -> str:
        """The message, each option of the advice spelled `spell(option)`."""
        said = [text.format(spell(option)) if option else text for text, option in self.advice]
        return f"{self.facts}: {', '.join(said)}" if said else self.facts


@dataclass(frozen=True)
class Chat:
    """A conversation: messages ({"role": "system"|"user"|"assistant", "content": text}) that
    the verifier's chat template formats, ending ready for the assistant's answer;
    `template_kwargs` are extra arguments for the template (mlx-lm's --chat-template-config)."""
    messages: tuple
    template_kwargs: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for m in self.messages:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) or \
                    m.get("role") not in ("system", "user", "assistant", "tool"):
                raise OptionsError(f"a chat message needs a role (system, user, assistant) and "
                                   f"text content, got {m!r}")

    @classmethod
    def of(cls, text: str, system_prompt: str | None = None, template_kwargs=None) -> Chat:
        msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return cls(tuple(msgs + [{"role": "user", "content": text}]), dict(template_kwargs or {}))

    def then(self, role: str, content: str) -> Chat:
        return Chat(self.messages + ({"role": role, "content": content},), self.template_kwargs)


@dataclass(frozen=True)
class Drafting:
    """A drafter with what it was built from: `requested` (a spec's text, a DrafterSpec or a
    drafter object), `spec` (the DrafterSpec built, `auto` resolved; None for an object)."""
    requested: object
    spec: DrafterSpec | None
    drafter: Drafter

    @property
    def library(self) -> str | None:
        """The library this drafter drafts from (`library:NAME`, or what `auto` chose), or None."""
        return library_of(self.spec)


def drafting(drafter, identity, history=None) -> Drafting:
    """A Drafting for a spec (text or DrafterSpec, `auto` resolved for `identity`'s verifier),
    a drafter object, or a Drafting (as it is). A session `history` is read by a hybrid only."""
    if isinstance(drafter, Drafting):
        return drafter
    if not isinstance(drafter, (str, DrafterSpec)):
        return Drafting(drafter, None, as_drafter(drafter))
    spec = drafter if isinstance(drafter, DrafterSpec) else parse_spec(drafter)
    if spec.kind == "auto":
        spec = resolve_auto(identity)
    if history is not None and not uses_history(spec):
        raise OptionsError("a session history is read only by a hybrid drafter: draft with "
                           "hybrid:PATH or adaptive:hybrid:PATH", "history")
    return Drafting(drafter, spec, build_drafter(spec, identity, history))


def sources_library(options: GenerationOptions, drafted: Drafting | None) -> str | None:
    """The library the output's provenance is reported from: options.sources, else the library
    the drafter drafts from, else None. The one rule every surface uses."""
    if options.sources:
        return options.sources
    return drafted.library if drafted is not None else None


@dataclass(frozen=True)
class Request:
    """One generation, planned and checked: the prompt's `ids` (precedents in, fitted to the
    context), the `options`, the `drafting`, the provenance `library` and the `index` its
    spans are found in (the passages given, when `traced`), the `precedents` gathered, the KV
    `cache` to start from, and whether the output continues text (`continuation`: it keeps the
    space before its first word)."""
    ids: tuple
    options: GenerationOptions
    drafting: Drafting
    eos_ids: tuple
    library: str | None = None
    index: object = None            # a provenance.LibraryIndex, or None: no spans reported
    precedents: object = None       # a precedents.Precedents, or None: none asked for
    cache: object = None            # an engine.cache PromptCache / PrefixCache, or None
    continuation: bool = False
    prediction: tuple = ()          # ids the answer is expected to mostly repeat (drafters.prediction)
    grammar: object = None          # options.json_schema compiled for the verifier (structured.Grammar), or None

    def constraint(self):
        """A fresh engine.constraint.Constraint for one generation of this request, or None."""
        return self.grammar.constraint() if self.grammar is not None else None

    @property
    def drafter(self) -> Drafter:
        return self.drafting.drafter

    @property
    def traced(self) -> bool:
        """Whether the spans are found in the passages the prompt was given."""
        return self.precedents is not None and bool(self.precedents.passages) and not self.options.sources

    def tracker(self, tokenizer=None):
        """A fresh provenance.SourceTracker for this request's generation (`tokenizer`: to
        decode the places' text), or None."""
        if self.index is None:
            return None
        from olifant_mlx.provenance import SourceTracker

        o = self.options
        return SourceTracker(self.index, o.min_source_tokens, o.max_verbatim, o.matter, tokenizer=tokenizer)


def without_drafting(request: Request) -> Request:
    """The same request decoded plainly (k 0, no drafter; the same prompt, library and
    precedents): what speculative decoding is compared with."""
    return dataclasses.replace(request, options=request.options.replace(k=0),
                               drafting=Drafting("none", None, NoDrafter()))


def plan(verifier, prompt, options: GenerationOptions, drafted: Drafting, cache=None,
         continuation: bool | None = None, fit_max_tokens: bool = False, prediction=None,
         grammar=None) -> Request:
    """The Request for `prompt` (text, token ids or a Chat) on `verifier` with `options` and
    `drafted` (Session.plan gives its defaults): the options' precedents are gathered and put
    into the prompt, which is encoded once and checked against the context (ContextError;
    `fit_max_tokens`: max_tokens is first cut to the room left). The provenance library is
    opened and checked (OptionsError). `continuation` None: True for a text prompt.
    `prediction` (text or ids: what the answer is expected to mostly repeat) is drafted from by
    a drafter built on the hybrid (auto, prediction, library:NAME, hybrid, adaptive:hybrid; others
    ignore it) and must fit the context beside the prompt (ContextError). `grammar(schema,
    eos_ids)` compiles options.json_schema (a Session's cache of them)."""
    opts = options
    if continuation is None:
        continuation = isinstance(prompt, str)
    given, used = with_precedents(verifier, prompt, opts)
    ids = encode(verifier, given)
    limit = verifier.context_length
    if fit_max_tokens and limit and 0 < limit - len(ids) < opts.max_tokens:
        opts = opts.replace(max_tokens=limit - len(ids))
    ids = fit_context(verifier, ids, opts)
    predicted = prediction_ids(verifier, prediction, len(ids))
    if predicted:
        drafted = Drafting(drafted.requested, drafted.spec, predicting(drafted.drafter, predicted))
    library = sources_library(opts, drafted)
    eos = eos_ids(verifier, opts)
    compiled = grammar(opts.json_schema, eos) if opts.json_schema is not None else None
    return Request(tuple(ids), opts, drafted, eos, library, provenance_index(verifier, opts, library, used), used,
                   cache, continuation and not isinstance(given, Chat), predicted, compiled)


def with_precedents(verifier, prompt, opts: GenerationOptions):
    """(the prompt with its precedents, the precedents.Precedents), or (prompt, None) when
    the options ask for none. The request is the query; the budget is options'
    precedent_tokens, else DEFAULT_BUDGET (or the first passage whole when it is longer and
    the context leaves room for it); either is capped at what the verifier's context leaves
    beside the prompt and the answer. A prompt that leaves no room is a ContextError, or with
    `truncate` goes without precedents (and is cut as any other)."""
    if not (opts.precedents or opts.precedent_files or opts.precedent_documents):
        return prompt, None
    from olifant_mlx import precedents

    budget, room, capped = opts.precedent_tokens, None, False
    limit = verifier.context_length
    n = len(encode(verifier, prompt)) if limit else 0
    left = limit - n - opts.max_tokens - 32 if limit else None
    if left is not None and left <= precedents.LABEL_TOKENS:
        if opts.truncate:      # the prompt alone fills the context: cut as it would be without them
            return prompt, precedents.Precedents((), "", 0, 0, opts.precedents, note=(
                "the prompt fills the context: it is truncated to its last tokens, and no room is left "
                "for precedents"))
        raise ContextError(f"{verifier.name}'s context ({limit:,} tokens) leaves no room for "
                           f"precedents beside the prompt and {opts.max_tokens:,} tokens of answer",
                           n, opts.max_tokens, advice=[("ask for fewer tokens ({})", "max_tokens")])
    if budget is None:
        room = precedents.DEFAULT_BUDGET if left is None else left
        budget = min(precedents.DEFAULT_BUDGET, room)
    elif left is not None and budget > left:
        budget, capped = left, True          # a budget past the context could never be prefilled
    used = precedents.gather(verifier.identity, precedents.query_of(prompt), opts.precedents,
                             opts.precedent_files, budget, opts.matter, room, capped, opts.matters,
                             opts.precedent_documents)
    return precedents.with_block(prompt, used), used


def encode(verifier, prompt) -> list:
    """Prompt ids: text is encoded as the verifier reads it, a Chat through its chat
    template; a list of ids is taken as is."""
    if isinstance(prompt, Chat):
        return verifier.chat_ids(prompt.messages, prompt.template_kwargs)
    if isinstance(prompt, str):
        return verifier.encode(prompt)
    return [int(t) for t in prompt]


def fit_context(verifier, ids: list, opts: GenerationOptions) -> list:
    """The prompt checked against the verifier's context before any prefill: too long is
    a ContextError with the numbers, or with `truncate` its tail (BOS kept)."""
    limit = verifier.context_length
    if not limit or len(ids) + opts.max_tokens <= limit:
        return ids
    room = limit - opts.max_tokens
    if opts.truncate and room >= 2:
        bos = [ids[0]] if ids and ids[0] == verifier.bos_id else []
        return bos + ids[len(ids) - (room - len(bos)):]
    raise ContextError(
        f"the prompt is {len(ids):,} tokens and {opts.max_tokens:,} more are asked for, but "
        f"{verifier.name}'s context holds {limit:,}", len(ids), opts.max_tokens,
        advice=[("shorten the prompt", None), ("ask for fewer tokens ({})", "max_tokens"),
                (f"or {{}} to keep the prompt's last {max(room, 0):,} tokens", "truncate")])


def eos_ids(verifier, opts: GenerationOptions) -> tuple:
    extra = tuple(verifier.token_id(t) for t in opts.extra_eos_tokens)
    return tuple(verifier.eos_ids) + extra


def prediction_ids(verifier, prediction, prompt_tokens: int) -> tuple:
    """A request's prediction as ids (text encoded as the verifier writes it, without special
    tokens); a ContextError when it does not fit the context beside the prompt's tokens."""
    if prediction is None:
        return ()
    if isinstance(prediction, str):
        ids = verifier.identity.encode(prediction) if prediction else []
    else:
        ids = [int(t) for t in prediction]
    limit = verifier.context_length
    if limit and prompt_tokens + len(ids) > limit:
        raise ContextError(f"the prediction is {len(ids):,} tokens, and with the prompt's {prompt_tokens:,} that "
                           f"is more than {verifier.name}'s context holds ({limit:,}): shorten it",
                           prompt_tokens, len(ids), "prediction")
    return tuple(ids)


def provenance_index(verifier, opts: GenerationOptions, library: str | None, used=None):
    """The index a generation's copied spans are found in: the passages the prompt was given
    (unless options.sources names a library), else the library's (behind a wall, options.matters,
    its documents of those matters and of none alone); None for none. OptionsError for a library
    missing or built for another tokenizer, or --max-verbatim without one."""
    ident = verifier.identity
    if used is not None and used.passages and not opts.sources:
        from olifant_mlx.precedents import provenance_index as of_passages

        return of_passages(used, ident)
    if library is None:
        if opts.max_verbatim is not None:
            raise OptionsError("max verbatim needs a library to compare with: a sources library, "
                               "or the drafter library:NAME", "max_verbatim")
        return None
    from olifant_mlx.library import LibraryError
    from olifant_mlx.provenance import index_of

    try:
        index = index_of(library)
    except LibraryError as e:
        raise LibraryOptionError(str(e), "sources", library) from None
    if not index.library.fits(ident):
        raise LibraryOptionError(f"library {library!r} was built for another tokenizer than "
                                 f"{verifier.name}'s: build one with `library build NEW_NAME FOLDER --model "
                                 f"{verifier.name}`", "sources", library)
    if opts.matters is not None:        # a server key's wall: the library as if it held nothing else
        from olifant_mlx.provenance import walled_index

        return walled_index(index, opts.matters)
    return index

"""The drafter registry and contract: specs validated before any model loads, one help text,
typed signals, duck-typed drafters adapted, constructors taking every parameter."""
import numpy as np
import pytest

from olifant_mlx.draftmodel.igtree import Builder, TokenizerMismatch
from olifant_mlx.drafters import (KINDS, AdaptiveDrafter, Drafter, DrafterBase, DrafterSpecError,
                                  HybridDrafter, LookupDrafter, NgramDrafter, NoDrafter,
                                  OlifantDrafter, Signal, as_drafter, build_drafter, parse_spec,
                                  uses_history)
from olifant_mlx.drafters.history import SessionHistory


class Ident:
    """A verifier's tokenizer identity, as the registry checks it."""

    def __init__(self, vocab=64, digest=bytes(32), name="tiny"):
        self.name, self.vocab_size, self.digest = name, vocab, digest

    def encode(self, text):
        return [ord(c) % 64 for c in text]

    def decode(self, ids):
        return "".join(chr(97 + i % 26) for i in ids)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    b = Builder(vocab_size=64, tokenizer_name="tiny", tokenizer_digest=bytes(32))
    b.add_document(np.random.default_rng(0).integers(0, 64, 400).tolist())
    path = tmp_path_factory.mktemp("m") / "tiny.olif"
    b.build().save(str(path))
    return path


def test_specs_parse_and_build(model_file):
    cases = {"none": NoDrafter, "plain": NoDrafter, "ngram": NgramDrafter, "ngram:3": NgramDrafter,
             "lookup:2": LookupDrafter, f"olifant:{model_file}": OlifantDrafter,
             f"hybrid:{model_file}": HybridDrafter, f"adaptive:hybrid:{model_file}": AdaptiveDrafter,
             "adaptive:ngram": AdaptiveDrafter}
    for text, cls in cases.items():
        spec = parse_spec(text)
        d = build_drafter(spec, Ident())
        assert isinstance(d, cls) and isinstance(d, Drafter), text
    assert build_drafter("ngram:3").n == 3 and build_drafter("lookup:2").max_ngram == 2
    assert parse_spec(f"adaptive:hybrid:{model_file}").model_file == str(model_file)
    assert parse_spec("plain").text == "none" and not parse_spec("none").drafts
    assert uses_history(parse_spec(f"adaptive:hybrid:{model_file}")) and not uses_history(parse_spec("ngram"))
    # the hybrid weighs the IGTree's whole chain by its learnt estimates: no fixed gate
    h = build_drafter(f"hybrid:{model_file}", Ident())
    assert (h.olifant.min_depth, h.olifant.min_share) == (0, 0.0) and h.sources == []
    assert set(KINDS) == {"auto", "none", "olifant", "ngram", "ngram-words", "lookup", "neural", "hybrid",
                          "adaptive", "rest", "ngram-cache", "library", "prediction"}
    alone = build_drafter("hybrid")                      # no draft model: the session's text only
    assert alone.olifant is None and alone.draft([5, 6, 7, 5, 6], 2) == [7, 5]


def test_bad_specs_are_clear_errors_naming_the_problem(tmp_path, model_file):
    (tmp_path / "text.olif").write_text("not a model")
    cases = {"foo": "unknown drafter", "olifant": "needs an argument", "olifant:": "needs an argument",
             f"olifant:{tmp_path / 'missing.olif'}": "missing.olif cannot be read",
             f"olifant:{tmp_path}": "not a regular file",
             f"olifant:{tmp_path / 'text.olif'}": "not an olifant draft model",
             "ngram:0": "1 to 16", "ngram:x": "whole number", "lookup:99": "1 to 16",
             "none:3": "takes no argument", "adaptive": "needs an argument",
             "adaptive:adaptive:ngram": "adaptive of adaptive", "adaptive:bogus": "unknown drafter"}
    for text, why in cases.items():
        with pytest.raises(DrafterSpecError, match=why):
            parse_spec(text)
    # a file's error names the whole spec as typed (and the flag), not its nested part
    nested = f"adaptive:hybrid:{tmp_path / 'missing.olif'}"
    with pytest.raises(DrafterSpecError) as e:
        parse_spec(nested)
    assert str(e.value).startswith(f"--draft {nested}: draft model ")
    with pytest.raises(DrafterSpecError) as e:
        parse_spec(nested, shown=f"--drafters legal={nested}")
    assert str(e.value).startswith(f"--drafters legal={nested}: ")
    with pytest.raises(TokenizerMismatch):
        build_drafter(f"olifant:{model_file}", Ident(digest=bytes(range(32))))


def test_a_fifo_is_refused_without_hanging(tmp_path):
    import os

    fifo = tmp_path / "pipe.olif"
    os.mkfifo(fifo)
    with pytest.raises(DrafterSpecError, match="not a regular file"):
        parse_spec(f"olifant:{fifo}")


def test_history_goes_to_the_hybrid_through_its_constructor(tmp_path, model_file):
    h = SessionHistory(tmp_path / "h.bin", bytes(32), 64)
    d = build_drafter(f"adaptive:hybrid:{model_file}", Ident(), history=h)
    assert d.inner.history is h
    assert build_drafter(f"hybrid:{model_file}", Ident()).history is None


def test_duck_typed_drafters_get_the_optional_methods():
    class Minimal:
        def start(self, prompt):
            self.seen = list(prompt)

        def draft(self, context, k):
            return [7] * k

        def accept(self, tokens):
            pass

    d = as_drafter(Minimal())
    assert isinstance(d, Drafter) and d.name == "Minimal" and not d.wants_bos
    d.start([1, 2])
    assert d.draft_scored([1], 3).signals == [Signal("Minimal", 0), Signal("Minimal", 1), Signal("Minimal", 2)]
    assert d.candidates([1], 2)[0].tokens == [7, 7]
    d.observe(None, True)                                       # a no-op, present
    with pytest.raises(TypeError, match="lacks accept"):
        as_drafter(type("Half", (), {"start": lambda s, p: None, "draft": lambda s, c, k: []})())
    assert isinstance(as_drafter(None), NoDrafter)
    base = as_drafter(NgramDrafter())
    assert isinstance(base, DrafterBase)


def test_signals_are_values():
    assert Signal("igtree", 3, 2) == Signal("igtree", 3, 2) and len({Signal("a"), Signal("a")}) == 1
    assert Signal("lookup", 4).share == 0


def test_hybrid_takes_extra_candidate_sources(model_file):
    spec = parse_spec(f"hybrid:{model_file}+lookup:2+ngram")
    assert spec.model_file == str(model_file) and [s.text for s in spec.sources] == ["lookup:2", "ngram"]
    assert parse_spec(spec.text) == spec and parse_spec(f"adaptive:{spec.text}").inner == spec
    h = build_drafter(spec, Ident())
    assert [type(s) for s in h.sources] == [LookupDrafter, NgramDrafter] and h.olifant is not None
    h.start([5, 6, 7, 5, 6])
    names = {sig.source for c in h.candidates([5, 6, 7, 5, 6], 3) for sig in c.signals}
    assert {"lookup", "igtree", "ngram4"} <= names       # every source offers its candidates
    alone = build_drafter("hybrid:+ngram")                # sources without a draft model
    assert alone.olifant is None and len(alone.sources) == 1
    for bad, msg in {"hybrid:+adaptive:ngram": "cannot be a hybrid's source",
                     "hybrid:+hybrid": "cannot be a hybrid's source", "hybrid:+": "empty source",
                     "hybrid:+foo": "unknown drafter", "hybrid:nowhere.olif+ngram": "cannot be read"}.items():
        with pytest.raises(DrafterSpecError, match=msg):
            parse_spec(bad)

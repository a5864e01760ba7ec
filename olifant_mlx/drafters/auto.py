"""The drafters that resolve to another spec: `auto` (the best drafter available for the
verifier's tokenizer) and `library:NAME` (a precedent library's), both the adaptive hybrid over
corpus sources and the session's own text; and the library a spec drafts from (`library_of`)."""
from __future__ import annotations

from olifant_mlx.drafters.registry import (INDEX_MAGIC, KINDS, DrafterSpec, DrafterSpecError, build_drafter,
                                           check_model_file, load_library)


def resolve_auto(tokenizer, dirs=None) -> DrafterSpec:
    """What `auto` means for a verifier's tokenizer: the adaptive hybrid over every corpus
    source found for it — the IGTree trained on the most instances (./models, the cache, the
    biggest precedent library's), the suffix indexes (the library's, and any built beside an
    IGTree for it: same name, .sfx; the biggest IGTree's first) — and the session's own text;
    with none, the session's text alone."""
    from olifant_mlx.catalog import draft_model_dirs, draft_models
    from olifant_mlx.library import best_library

    if tokenizer is None:
        return DrafterSpec("adaptive", inner=DrafterSpec("hybrid"))
    lib = best_library(tokenizer)
    folders = list(dirs if dirs is not None else draft_model_dirs()) + ([lib.path] if lib else [])
    fitting = sorted((e for e in draft_models(folders) if e.fits(tokenizer)), key=lambda e: -e.instances)
    indexes = [lib.index_path] if lib is not None else []     # the library was built for it
    for e in fitting:
        beside = e.path.with_suffix(".sfx")
        if beside.resolve() not in {p.resolve() for p in indexes} and _fits(beside, tokenizer):
            indexes.append(beside)
    rests = tuple(DrafterSpec("rest", str(path)) for path in indexes)
    inner = DrafterSpec("hybrid", str(fitting[0].path) if fitting else "", sources=rests)
    return DrafterSpec("adaptive", inner=inner)


def _fits(path, tokenizer) -> bool:
    """A suffix index built for this tokenizer (a missing, foreign or damaged file is skipped:
    auto uses what it finds)."""
    from olifant_mlx.draftmodel.igtree import IGTreeError, TokenizerMismatch
    from olifant_mlx.draftmodel.open import check_model_tokenizer
    from olifant_mlx.draftmodel.suffix import SuffixError, SuffixIndex

    try:
        check_model_file(str(path), INDEX_MAGIC)
        obj = check_model_tokenizer(path, tokenizer.name, tokenizer.vocab_size, tokenizer.digest)
    except (DrafterSpecError, TokenizerMismatch, IGTreeError, SuffixError, OSError, ValueError):
        return False
    return isinstance(obj, SuffixIndex)


def from_spec(spec, tokenizer, history):
    """`auto` (the registry's builder)."""
    return build_drafter(resolve_auto(tokenizer), tokenizer, history)


def library_spec(lib) -> DrafterSpec:
    """A library's drafter: the adaptive hybrid over its IGTree, its suffix index and the session."""
    rest = DrafterSpec("rest", str(lib.index_path))
    return DrafterSpec("adaptive", inner=DrafterSpec("hybrid", str(lib.model_path), sources=(rest,)))


def library_of(spec) -> str | None:
    """The name of the library a drafter spec drafts from (`auto` resolved first): a kind whose
    argument names a library (`library:NAME`), else the library whose suffix index one of its
    parts drafts from (what `auto` and `library:NAME` resolve to: library_spec); None for any
    other (the provenance library of engine.request.sources_library)."""
    from olifant_mlx.library import index_owner

    if spec is None:
        return None
    if KINDS[spec.kind].arg == "name":
        return spec.arg
    if spec.arg and index_owner(spec.arg) is not None:
        return index_owner(spec.arg)
    return next((name for s in (spec.inner, *spec.sources) if (name := library_of(s)) is not None), None)


def library_from_spec(spec, tokenizer, history):
    """`library:NAME` (the registry's builder)."""
    return build_drafter(library_spec(load_library(spec.text, spec.arg)), tokenizer, history)

"""Verifier names (issue 38, item 4): a `models pull` shortcut names the pulled model or says to
pull it, a bare word that names nothing is refused without asking the hub, the offline hint
lists every offline alias, and a precedent library built for another tokenizer is refused before
any verifier is fetched or converted, naming the fix. Real pieces: SmolLM2's tokenizer, a real
library bundle, huggingface_hub's own cache lookup over a cache folder laid out as the hub's."""
import pytest
from document_fixtures import smollm2_library

from olifant_mlx.cli import main
from olifant_mlx.verifier import aliases
from olifant_mlx.verifier.aliases import ALIASES, SHORTCUTS, VerifierError, resolve_model


@pytest.fixture
def no_fetch(monkeypatch):
    """Fetching, converting or loading any verifier fails the test."""
    import mlx_lm

    def refuse(*a, **kw):
        raise AssertionError("a verifier was fetched, converted or loaded")

    for name in ("alias_gguf", "gguf_model_dir"):
        monkeypatch.setattr(aliases, name, refuse)
    monkeypatch.setattr(mlx_lm, "load", refuse)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    return root


def put_in_hub_cache(root, repo, commit="0" * 40):
    """The layout huggingface_hub writes: models--OWNER--NAME/{refs/main, snapshots/COMMIT/...}."""
    entry = root / f"models--{repo.replace('/', '--')}"
    (entry / "refs").mkdir(parents=True)
    (entry / "refs" / "main").write_text(commit)
    (entry / "snapshots" / commit).mkdir(parents=True)
    (entry / "snapshots" / commit / "config.json").write_text("{}")


def test_a_shortcut_names_the_pulled_model_or_says_to_pull_it(hub_cache, no_fetch):
    with pytest.raises(VerifierError) as e:
        resolve_model("mistral")
    said = str(e.value)
    assert "models pull mistral" in said and SHORTCUTS["mistral"] in said
    assert all(alias in said for alias in ALIASES)
    put_in_hub_cache(hub_cache, SHORTCUTS["mistral"])
    assert resolve_model("mistral") == SHORTCUTS["mistral"]


def test_a_bare_word_is_refused_without_asking_the_hub(no_fetch, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--model", "mistrall", "-p", "x", "--draft", "none"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no verifier 'mistrall'") and err.count("\n") == 1
    assert all(alias in err for alias in ALIASES) and "mistral-base" in err


def test_the_offline_hint_lists_every_offline_alias(monkeypatch):
    import mlx_lm

    from olifant_mlx.verifier import load_verifier

    def unreachable(*a, **kw):
        raise OSError("no network")

    monkeypatch.setattr(mlx_lm, "load", unreachable)
    with pytest.raises(VerifierError) as e:
        load_verifier("nobody/nothing")
    assert "qwen2.5-coder-1.5b" in str(e.value) and all(alias in str(e.value) for alias in ALIASES)


@pytest.fixture
def deeds(tmp_path, monkeypatch):
    return smollm2_library(tmp_path, monkeypatch)


@pytest.mark.parametrize("how", [["--draft", "library:deeds"], ["--sources", "deeds"]])
def test_a_library_for_another_tokenizer_is_refused_before_any_fetch(deeds, no_fetch, capsys, how):
    code = main(["generate", "--model", "gemma3-270m", "-p", "x", *how])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert "deeds was built for tokenizer 'smollm2-135m', not gemma3-270m's" in err
    assert f"`library build NEW_NAME {deeds} --model gemma3-270m`" in err

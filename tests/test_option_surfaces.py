"""One option, stated once: the binding table (olifant_mlx.bindings) covers every field of
GenerationOptions, each surface it names can spell the option, a bound in the option's
definition holds on every surface, and k's default lives in one place. A new option reaching
every surface from its field and its row is tests/test_extensions.py's."""
import json

import pytest
from architecture import k_defaults, k_defaults_in  # tools/architecture.py

import olifant_mlx.engine.options as table
from olifant_mlx import bindings
from olifant_mlx.bindings import GENERATE, SERVE, TUI, bind
from olifant_mlx.engine.options import GenerationOptions, OptionsError, check_option


def test_the_binding_table_is_the_options():
    """A row per field, in order; every surface a row names can spell it (flags, a label)."""
    assert bindings.table_problems(table.options()) == []


def test_the_binding_table_check_can_fail():
    broken = {"k": bind(GENERATE, "fax"), "seed": bind(TUI, after="k"), "top_k": bind(SERVE, flags=("--top-k",))}
    assert bindings.table_problems(["k", "top_k", "seed"], broken) == [
        "the table's rows are not the fields ['k', 'top_k', 'seed']",
        "k: no surface ['fax']",
        "k: a flag of ['generate'] needs its flags",
        "seed: a settings row needs a label",
        "seed: follows 'k', which has no settings row"]


def test_ks_default_lives_in_one_place():
    """GenerationOptions.k's default is the one literal; every surface (flags, the TUI's and the
    server's defaults, the commands without options) reads it (tools/architecture.py's scan)."""
    places = [(f, where) for f, where, *_ in k_defaults()]
    assert places == [("olifant_mlx/engine/options.py", "GenerationOptions.k")], places


def test_the_k_default_scan_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f(x, k=8):\n    pass\nK_ = 3\nclass A:\n    k: int = field(8)\n"
                 "p.add_argument('-k', type=int, default=8)\np.add_argument('--gamma', '-k', default=4)\n"
                 "def g(k=None, *, num_draft_tokens=5):\n    pass\n")
    assert [what for _, what, _ in k_defaults_in(f)] == [
        "parameter k=", "the field's default", "-k default=", "parameter num_draft_tokens="]


# issue 45 item 9: repetition_context_size has an upper bound, in its definition, so every surface
# refuses 2^40 before any model loads (was: a 500 from the server; "Slice indices must be 32-bit
# integers" on the CLI after the model loaded)
def test_repetition_context_size_is_bounded_on_every_surface(monkeypatch, capsys):
    import olifant_mlx.verifier.loader as loader
    from olifant_mlx.cli import main
    from olifant_mlx.server import schemas
    from olifant_mlx.server.config import Limits
    from olifant_mlx.server.queue import ModelInfo

    with pytest.raises(OptionsError, match="repetition context size must be between 1 and 1048576 "):
        GenerationOptions(repetition_context_size=2 ** 40)
    check_option("repetition_context_size", table.MAX_REPETITION_CONTEXT)
    monkeypatch.setattr(loader, "load_verifier", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main(["generate", "--model", "smollm2-135m", "-p", "x", "--repetition-context-size", str(2 ** 40)]) == 2
    assert capsys.readouterr().err.startswith("error: --repetition-context-size: repetition context size must be")
    request = schemas.with_option_fields(schemas.CompletionBody)
    req = schemas.parse_body(json.dumps({"prompt": "x", "repetition_context_size": 2 ** 40}).encode(), request)
    with pytest.raises(schemas.ApiError) as e:
        schemas.plan_completion(req, ModelInfo("tiny", 128, 64, False, ("none",), "none", "none"),
                                GenerationOptions(), Limits())
    assert e.value.status == 400 and e.value.param == "repetition_context_size"

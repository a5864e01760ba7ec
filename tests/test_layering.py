"""The arrows issue 46 untied, kept untied (olifant_mlx.architecture's import graph): the engine
learns which options travel to a sharded verifier's ranks from the options, not from the
surfaces' table; the table stands on the options, not on a library; the command line shares the
conversation and export model with the TUI from a module of the package, not from the TUI."""
from architecture import graph

SURFACE_TABLE = "olifant_mlx.bindings"


def layering_problems(g: dict) -> list:
    """The arrows that go the wrong way in the import graph `g` ({module: imported modules})."""
    bad = []
    for m, ts in sorted(g.items()):
        if m.startswith("olifant_mlx.engine") and SURFACE_TABLE in ts:
            bad.append(f"{m} imports the surfaces' table")
        if m == SURFACE_TABLE:
            bad += [f"{m} imports {t}" for t in sorted(ts) if t != "olifant_mlx.engine.options"]
        if m.startswith("olifant_mlx.cli") and m != "olifant_mlx.cli.tui":   # the command that starts it
            bad += [f"{m} imports {t}" for t in sorted(ts) if t.startswith("olifant_mlx.tui")]
    return bad


def test_the_layers_go_one_way():
    assert layering_problems(graph()) == []


def test_the_layering_check_can_fail():
    g = {"olifant_mlx.engine.distributed": {SURFACE_TABLE},
         SURFACE_TABLE: {"olifant_mlx.engine.options", "olifant_mlx.precedents"},
         "olifant_mlx.cli.output": {"olifant_mlx.tui.conversation"},
         "olifant_mlx.cli.tui": {"olifant_mlx.tui.app"}}
    assert layering_problems(g) == [
        "olifant_mlx.bindings imports olifant_mlx.precedents",
        "olifant_mlx.cli.output imports olifant_mlx.tui.conversation",
        "olifant_mlx.engine.distributed imports the surfaces' table"]

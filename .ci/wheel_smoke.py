"""Smoke test of an installed wheel, run from a folder outside the source tree (by .ci/run):
the CLI's help and version, a generation with the offline verifier, and the TUI headless.
The suite runs it on the source tree too (tests/test_wheel_smoke.py, OLIFANT_SMOKE_SOURCE=1), so
a change the smoke test no longer fits fails there, not only at the end of CI."""
import asyncio
import importlib.util
import os
import subprocess
import sys

import olifant_mlx

assert os.environ.get("OLIFANT_SMOKE_SOURCE") or "site-packages" in olifant_mlx.__file__, \
    f"not the installed package: {olifant_mlx.__file__}"
# the source tree's tools (tools/architecture.py) are not part of the package
assert importlib.util.find_spec("olifant_mlx.architecture") is None, "the package ships tools/architecture.py"


def run(*args):
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True)
    assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


assert "generate" in run("--help").stdout
assert "--drafters" in run("serve", "--help").stdout      # the help needs no [server] extra
assert olifant_mlx.__version__ in run("--version").stdout
out = run("generate", "--model", "smollm2-135m", "--draft", "lookup", "-k", "3", "--max-tokens", "8",
          "-p", "THE SOFTWARE IS PROVIDED", "--json")
assert '"tokens"' in out.stdout, out.stdout


async def tui():
    from olifant_mlx.tui.app import OlifantApp

    prompt = "THE SOFTWARE IS PROVIDED"
    app = OlifantApp(model="smollm2-135m", draft="ngram", k=3, max_tokens=8, energy="none",
                     mode="document", prompt=prompt)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+g")                 # continue the document
        for _ in range(1200):
            await pilot.pause(0.1)
            if not app.workspace.generating:
                break
        text = app.doc_tab.editor.text
        assert text.startswith(prompt) and text[len(prompt):].strip(), "the TUI generated nothing"
        assert app.workspace.last_stats.tokens == 8
        for key in ("f2", "f4", "f5", "f6", "f7", "f3"):
            await pilot.press(key)


asyncio.run(tui())
print(f"wheel smoke test passed: olifant_mlx {olifant_mlx.__version__} from {os.path.dirname(olifant_mlx.__file__)}",
      flush=True)

"""Regenerate the TUI screenshots in docs/: `python -m olifant_mlx.tui.screenshots [--out docs]`.

Runs the app headless with the offline verifier (smollm2-135m) and a small olifant draft model
(trained here, in a temporary folder, from the MIT licence text), exports SVG, converts to PNG
with rsvg-convert (apt-get install librsvg2-bin) or cairosvg when installed. The draft model is the
demo's (builtin:licenses) when cached. The energy panel uses a recorded Apple-Silicon trace
(`--energy replay:PATH`), labelled as a replay.
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from olifant_mlx.tui.app import DEFAULT_PROMPT, OlifantApp

SIZE = (130, 40)
MIT_TAIL = (" THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND "
            "NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY "
            "CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, "
            "ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN "
            "THE SOFTWARE.")


def to_png(svg: Path, png: Path) -> None:
    # rsvg collapses the leading no-break space of a styled run unless told to preserve it
    svg.write_text(svg.read_text().replace("<svg ", '<svg xml:space="preserve" ', 1))
    if shutil.which("rsvg-convert"):
        subprocess.run(["rsvg-convert", str(svg), "-o", str(png)], check=True)
        return
    import cairosvg  # only for this script; not a project dependency

    cairosvg.svg2png(url=str(svg), write_to=str(png))


async def shoot(out: Path, draft_model: Path, energy: str | None, models_dir: Path) -> list[Path]:
    app = OlifantApp(model="smollm2-135m", draft=f"olifant:{draft_model}", k=4, max_tokens=60,
                     energy=energy, model_dirs=[models_dir])
    shots = []
    async with app.run_test(size=SIZE) as pilot:

        async def until_idle(timeout=300):
            t0 = time.monotonic()
            while app.generating and time.monotonic() - t0 < timeout:
                await pilot.pause(0.1)

        def save(name):
            app.set_focus(None)
            svg = out / f"tui-{name}.svg"
            svg.write_text(app.export_screenshot(title=f"olifant_mlx tui: {name}"))
            shots.append(svg)

        await pilot.press("ctrl+g")
        await until_idle()
        await pilot.pause(0.3)
        save("generate")
        await pilot.press("ctrl+b")
        await until_idle()
        await pilot.pause(0.3)
        save("compare")
        await pilot.press("f4")
        await pilot.pause(0.3)
        save("calculator")
        await pilot.press("f5")
        await pilot.pause(0.3)
        save("models")
    return shots


def main(argv=None, keep_svg=False) -> int:
    from olifant_mlx.draftmodel.train import train
    from olifant_mlx.files import cache_dir
    from olifant_mlx.verifier import load_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs")
    ap.add_argument("--energy", help="energy backend spec (default: a replay of ../shared's M4 trace "
                                     "when present, else auto)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    energy = args.energy
    trace = Path(__file__).resolve().parents[2] / "shared/fixtures/energy/ioreport/replay_m4_zeus_apple_silicon.json"
    if energy is None and trace.is_file():
        energy = f"replay:{trace}"
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "mit.txt"
        corpus.write_text("\n\n".join([DEFAULT_PROMPT + MIT_TAIL] * 3))
        # the demo's draft model (builtin:licenses) when `python -m olifant_mlx demo` cached it
        cached = sorted((cache_dir() / "drafts").glob("smollm2-135m-*.olif"))
        model = Path(tmp) / "mit-licence.olif"
        if cached:
            shutil.copy(cached[0], Path(tmp) / "licenses.olif")
            model = Path(tmp) / "licenses.olif"
        else:
            train([str(corpus)], load_tokenizer("smollm2-135m"), str(model), show_progress=False)
        shots = asyncio.run(shoot(out, model, energy, Path(tmp)))
        for svg in shots:
            png = svg.with_suffix(".png")
            to_png(svg, png)
            if not keep_svg:
                svg.unlink()
            print(png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Regenerate the TUI screenshots in docs/: `python -m olifant_mlx.tui.screenshots [--out docs]`.

Runs the app headless with the offline instruct verifier (smollm2-135m) at 80x24 and 160x48:
a two-turn conversation (the second answer caught while it is being drafted) and a document
being continued, then at 160x48 plain vs speculative, the calculator, the draft models and
(at 80x24) the settings. The drafter is `auto` over the demo's draft model (builtin:licenses)
when `python -m olifant_mlx demo` has cached it, else over a small model trained here, in a
temporary folder, from the MIT licence text. The energy panel uses a recorded Apple-Silicon
trace (`--energy replay:PATH`), labelled as a replay. The screenshots are SVGs (Textual's
`export_screenshot`); `--png` also turns them into PNGs with rsvg-convert (apt-get install
librsvg2-bin) or cairosvg when installed. `--export` makes only the export dialog's (80x24, a
Word file's path typed). `--sources` makes only the provenance shots: a
library built here (in a temporary cache) from the MIT licence, the document continued with
its copied spans marked, and the Sources tab (ctrl+l) with the first span's passage. `--models`
makes only the Models tab at 80x24, listing a draft model and a library built here;
`--precedents` the same library as precedents, and the Precedents tab (ctrl+j). `--review`
makes only the Review tab's (F12): a contract written here, its clauses revised on one
instruction, the first change rejected.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from olifant_mlx.files import private_output, read_regular, write_atomic
from olifant_mlx.tui.app import DEFAULT_DOCUMENT, OlifantApp

SIZES = ((80, 24), (160, 48))
PUBLIC = 0o644      # the screenshots are the docs' pictures, committed to the repository
MIT_TAIL = (" THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND "
            "NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY "
            "CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, "
            "ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN "
            "THE SOFTWARE.")
QUESTIONS = ("Write a short confidentiality clause for a consulting agreement.",
             "Now list three exceptions to it.")


def to_png(svg: Path, png: Path) -> None:
    # rsvg collapses the leading no-break space of a styled run unless told to preserve it
    write_atomic(svg, svg.read_text().replace("<svg ", '<svg xml:space="preserve" ', 1), mode=PUBLIC)
    with private_output(png, mode=PUBLIC) as tmp:       # the converter writes the file itself
        if shutil.which("rsvg-convert"):
            subprocess.run(["rsvg-convert", str(svg), "-o", str(tmp)], check=True)
            return
        import cairosvg  # only for this script; not a project dependency

        cairosvg.svg2png(url=str(svg), write_to=str(tmp))


class Camera:
    """The app under a pilot, waited on as a person would, and its screen saved as SVGs."""

    def __init__(self, app, pilot, out: Path):
        self.app, self.pilot, self.out, self.shots = app, pilot, out, []

    async def until(self, cond, timeout=600):
        t0 = time.monotonic()
        while not cond() and time.monotonic() - t0 < timeout:
            await self.pilot.pause(0.1)

    def save(self, name: str) -> None:
        self.app.set_focus(None)
        svg = self.out / f"tui-{name}.svg"
        write_atomic(svg, self.app.export_screenshot(title=f"olifant_mlx tui: {name}"), mode=PUBLIC)
        self.shots.append(svg)

    def progress(self) -> int:
        """Characters written so far by the generation in flight."""
        job = next(iter(self.app.workspace.jobs.values()), None)
        if job is None:
            return 0
        if job.kind == "chat":
            return len(job.conv.turns[job.index].content)
        return len(self.app.doc_tab.editor.text) - job.index

    async def written(self, chars: int) -> None:
        """Until the text in progress has `chars` characters (or is finished)."""
        await self.until(lambda: not self.app.workspace.generating or self.progress() >= chars)
        await self.pilot.pause(0.3)

    async def start(self, *keys) -> None:
        await self.pilot.press(*keys)
        await self.until(lambda: self.app.workspace.generating, timeout=30)
        if not self.app.workspace.generating:
            raise RuntimeError("the generation did not start: "
                               + "; ".join(n.message for n in self.app._notifications))

    async def finish(self) -> None:
        await self.until(lambda: not self.app.workspace.generating)
        await self.pilot.pause(0.3)


async def shoot(out: Path, size, draft_dir: Path, energy: str | None, max_tokens: int) -> list[Path]:
    app = OlifantApp(model="smollm2-135m", draft="auto", max_tokens=max_tokens, energy=energy,
                     model_dirs=[draft_dir])
    tag = f"{size[0]}x{size[1]}"
    async with app.run_test(size=size) as pilot:
        cam = Camera(app, pilot, out)
        # a conversation: the first answer finished (Markdown), the second caught being drafted
        for i, question in enumerate(QUESTIONS):
            app.chat_tab.composer.text = question
            await cam.start("ctrl+g")
            if i == 0:
                await cam.finish()
        await cam.written(160 if size[0] > 100 else 70)
        cam.save(f"chat-{tag}")
        await cam.finish()
        # a document being continued, with its provenance marks in the editor
        await cam.start("f3", "ctrl+g")
        await cam.written(200 if size[0] > 100 else 110)
        cam.save(f"document-{tag}")
        await cam.finish()
        if size == (80, 24):
            await pilot.press("f7")
            await pilot.pause(0.3)
            cam.save("settings-80x24")
        else:
            await cam.start("ctrl+b")
            await cam.finish()
            cam.save("compare")
            await pilot.press("f5")
            await pilot.click("#calc-measured")
            await pilot.pause(0.3)
            cam.save("calculator")
            await pilot.press("f6")
            await pilot.pause(0.3)
            cam.save("models")
    return cam.shots


async def shoot_sources(out: Path, size, max_tokens: int, precedents: bool = False) -> list[Path]:
    """The document continued over a library holding the verifier's own continuation, then
    the Sources tab: tui-sources-document-WxH.svg, tui-sources-WxH.svg; with `precedents`,
    continued with the library's passages in the prompt, then the Precedents tab:
    tui-precedents-WxH.svg."""
    from olifant_mlx.engine import GenerationOptions

    use = {"precedents": "licences"} if precedents else {"sources": "licences"}
    options = GenerationOptions(max_tokens=max_tokens, **use)
    app = OlifantApp(model="smollm2-135m", draft="auto" if precedents else "library:licences", options=options,
                     energy="none", mode="document", model_dirs=[])
    tag, shots = f"{size[0]}x{size[1]}", []
    async with app.run_test(size=size) as pilot:
        await pilot.pause(1.0)          # the app shows its document first (after a refresh)
        await pilot.press("ctrl+g")
        t0 = time.monotonic()
        while not app.workspace.current["document"].runs and time.monotonic() - t0 < 600:   # until it ends
            await pilot.pause(0.2)
        await pilot.pause(0.5)
        if not app.doc_tab.editor.copied and not precedents:
            raise RuntimeError("the continuation copied nothing from the library: "
                               + "; ".join(n.message for n in app._notifications))
        names = (((f"precedents-{tag}", ("ctrl+j",)),) if precedents else
                 ((f"sources-document-{tag}", ()), (f"sources-{tag}", ("ctrl+l",))))
        for name, keys in names:
            await pilot.press(*keys)
            await pilot.pause(0.5)
            app.set_focus(None)
            svg = out / f"tui-{name}.svg"
            write_atomic(svg, app.export_screenshot(title=f"olifant_mlx tui: {name}"), mode=PUBLIC)
            shots.append(svg)
    return shots


async def shoot_export(out: Path) -> Path:
    """The export dialog at 80x24 over the document, a Word file's path typed:
    tui-export-80x24.svg (nothing is written: the dialog is left open)."""
    app = OlifantApp(model="smollm2-135m", draft="none", energy="none", mode="document", model_dirs=[])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(1.0)          # the app shows its document first (after a refresh)
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        await pilot.press(*"~/matters/acme/nda-draft.docx")
        await pilot.pause(0.3)
        svg = out / "tui-export-80x24.svg"
        write_atomic(svg, app.export_screenshot(title="olifant_mlx tui: export-80x24"), mode=PUBLIC)
    return svg


CONTRACT = (("Title", "Master Services Agreement"), ("Heading 1", "1. Notices"),
            ("Normal", "1.1 The Customer shall notify the Supplier of any claim within thirty (30) days of "
                       "becoming aware of it."),
            ("Normal", "1.2 Notices shall be in writing and delivered by hand or by registered post."),
            ("Heading 1", "2. Liability"),
            ("Normal", "2.1 The Supplier's total liability shall not exceed the fees paid in the twelve (12) "
                       "months preceding the claim."))
REVISE = "change the period for claims from thirty (30) days to sixty (60) days"


async def shoot_review(out: Path, size) -> Path:
    """The Review tab (F12) after a run: a contract's clauses revised on one instruction, the
    first change rejected, the next one shown: tui-review-WxH.svg."""
    app = OlifantApp(model="smollm2-135m", draft="auto", energy="none", model_dirs=[])
    async with app.run_test(size=size) as pilot:
        await pilot.press("f12")
        app.query_one("#review-path").value = "msa.docx"          # in the current folder: the contract's
        await pilot.press("enter")
        t0 = time.monotonic()
        while app.query_one("ReviewTab").review is None and time.monotonic() - t0 < 60:
            await pilot.pause(0.2)
        app.query_one("#review-instruction").value = REVISE
        await pilot.press("enter", "plus", "ctrl+g")
        await pilot.pause(0.5)
        while app.workspace.generating:
            await pilot.pause(0.2)
        await pilot.press("r")
        if size[0] >= 110:
            await pilot.press("f9")
        await pilot.pause(0.5)
        app.set_focus(app.query_one("#review-clauses"))
        svg = out / f"tui-review-{size[0]}x{size[1]}.svg"
        write_atomic(svg, app.export_screenshot(title=f"olifant_mlx tui: review-{size[0]}x{size[1]}"), mode=PUBLIC)
    return svg


def review_shots(out: Path) -> list[Path]:
    """A contract written here (a temporary folder, python-docx, the current folder meanwhile),
    revised in the Review tab."""
    import os

    import docx

    out, here = out.resolve(), os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        d = docx.Document()
        for style, text in CONTRACT:
            d.add_paragraph(text, style=style)
        d.save(Path(tmp) / "msa.docx")
        os.chdir(tmp)
        try:
            return [asyncio.run(shoot_review(out, size)) for size in SIZES]
        finally:
            os.chdir(here)


@contextlib.contextmanager
def temporary_cache():
    """A temporary folder whose `cache` is $OLIFANT_CACHE meanwhile, finding the real cache's
    verifiers and draft models by links (so nothing is fetched), for libraries built here."""
    import os

    from olifant_mlx.files import cache_dir

    shared = cache_dir()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "cache"
        root.mkdir()
        for kind in ("models", "gguf", "drafts"):
            if (shared / kind).is_dir():
                (root / kind).symlink_to(shared / kind)
        old = os.environ.get("OLIFANT_CACHE")
        os.environ["OLIFANT_CACHE"] = str(root)
        try:
            yield Path(tmp)
        finally:
            if old is None:
                os.environ.pop("OLIFANT_CACHE", None)
            else:
                os.environ["OLIFANT_CACHE"] = old


def sources_shots(out: Path, max_tokens: int, precedents: bool = False) -> list[Path]:
    """Build the library in a temporary cache (the verifiers found by links), then shoot."""
    from olifant_mlx import library
    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.verifier import load_tokenizer, load_verifier

    tokenizer = load_tokenizer("smollm2-135m")
    with temporary_cache() as tmp:
        folder = tmp / "licences"
        folder.mkdir()
        # the precedent holds the verifier's own greedy continuation of the editor's text (the
        # licence as SmolLM2 remembers it, not as written), so the shot shows copied spans
        written = Session(load_verifier("smollm2-135m"), "none",
                          GenerationOptions(k=0, max_tokens=max_tokens)).generate(DEFAULT_DOCUMENT).text
        write_atomic(folder / "mit.txt", "MIT License\n\nPermission is hereby granted, free of charge, to "
                     "any person obtaining a copy of this software.\n\n" + DEFAULT_DOCUMENT + written)
        library.build("licences", folder, tokenizer)
        return [svg for size in SIZES for svg in asyncio.run(shoot_sources(out, size, max_tokens, precedents))]


async def shoot_models(out: Path, size, draft_dir: Path) -> Path:
    """The Models tab (F6) once the verifier's tokenizer has marked what fits."""
    app = OlifantApp(model="smollm2-135m", draft="auto", energy="none", model_dirs=[draft_dir])
    async with app.run_test(size=size) as pilot:
        await pilot.press("f6")
        t0 = time.monotonic()
        while app.query_one("ModelsTab").identity is None and time.monotonic() - t0 < 600:
            await pilot.pause(0.2)
        await pilot.pause(0.5)
        app.set_focus(None)
        svg = out / f"tui-models-{size[0]}x{size[1]}.svg"
        write_atomic(svg, app.export_screenshot(title=f"olifant_mlx tui: models-{size[0]}x{size[1]}"), mode=PUBLIC)
    return svg


def models_shots(out: Path) -> list[Path]:
    """The Models tab at 80x24: a draft model and a precedent library for SmolLM2 (built here, in
    a temporary cache, from the MIT licence text)."""
    from olifant_mlx import library
    from olifant_mlx.draftmodel.train import train
    from olifant_mlx.verifier import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m")
    with temporary_cache() as tmp:
        folder, drafts = tmp / "precedents", tmp / "models"
        folder.mkdir()
        drafts.mkdir()
        write_atomic(folder / "mit.txt", DEFAULT_DOCUMENT + MIT_TAIL)
        train([str(folder / "mit.txt")], tokenizer, str(drafts / "mit-licence.olif"), show_progress=False)
        library.build("licences", folder, tokenizer)
        return [asyncio.run(shoot_models(out, (80, 24), drafts))]


def only(args, out: Path) -> list[Path]:
    """The shots of one tab or dialog (--export, --models, --review, --sources, --precedents)."""
    if args.export:
        return [asyncio.run(shoot_export(out))]
    if args.models:
        return models_shots(out)
    if args.review:
        return review_shots(out)
    return sources_shots(out, args.max_tokens, args.precedents)


def main(argv=None) -> int:
    from olifant_mlx.draftmodel.train import train
    from olifant_mlx.files import cache_dir
    from olifant_mlx.verifier import load_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs")
    ap.add_argument("--energy", help="energy backend spec (default: a replay of ../shared's M4 trace "
                                     "when present, else auto)")
    ap.add_argument("-m", "--max-tokens", type=int, default=60)
    ap.add_argument("--png", action="store_true", help="also write PNGs (rsvg-convert or cairosvg)")
    ap.add_argument("--sources", action="store_true", help="only the provenance shots (Sources tab)")
    ap.add_argument("--models", action="store_true", help="only the Models tab at 80x24, with a library")
    ap.add_argument("--export", action="store_true", help="only the export dialog's shot (80x24)")
    ap.add_argument("--precedents", action="store_true", help="only the Precedents tab's shots")
    ap.add_argument("--review", action="store_true", help="only the Review tab's shots (a contract revised)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.export or args.sources or args.precedents or args.models or args.review:
        for svg in only(args, out):
            print(svg)
        return 0
    energy = args.energy
    trace = Path(__file__).resolve().parents[2] / "shared/fixtures/energy/ioreport/replay_m4_zeus_apple_silicon.json"
    if energy is None and trace.is_file():
        energy = f"replay:{trace}"
    with tempfile.TemporaryDirectory() as tmp:
        drafts = Path(tmp)
        # the demo's draft model (builtin:licenses) when `python -m olifant_mlx demo` cached it
        cached = sorted((cache_dir() / "drafts").glob("smollm2-135m-*.olif"), key=lambda p: -p.stat().st_size)
        if cached:
            write_atomic(drafts / "licenses.olif", read_regular(cached[0]))
        else:
            corpus = drafts / "mit.txt"
            write_atomic(corpus, "\n\n".join([DEFAULT_DOCUMENT + MIT_TAIL] * 3))
            train([str(corpus)], load_tokenizer("smollm2-135m"), str(drafts / "mit-licence.olif"),
                  show_progress=False)
            corpus.unlink()
        try:       # and one for another verifier's tokenizer, which the Models list marks ✗
            corpus = drafts / "mit.txt"
            write_atomic(corpus, "\n\n".join([DEFAULT_DOCUMENT + MIT_TAIL] * 3))
            train([str(corpus)], load_tokenizer("gemma3-270m"), str(drafts / "mit-for-gemma3.olif"),
                  show_progress=False)
            corpus.unlink()
        except Exception as e:      # its tokenizer is fetched on first use: offline, none
            print(f"(no gemma3-270m draft model for the Models screenshot: {e})")
        shots = []
        for size in SIZES:
            shots += asyncio.run(shoot(out, size, drafts, energy, args.max_tokens))
        for svg in shots:
            print(svg)
            if args.png:
                png = svg.with_suffix(".png")
                to_png(svg, png)
                print(png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

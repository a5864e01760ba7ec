"""The Textual UI (tui/): headless App.run_test() with a fake engine, the replay meter, a real
verifier with a real olifant model, and SVG snapshots of the static screens.

Snapshots live in tests/snapshots/; OLIFANT_UPDATE_SNAPSHOTS=1 (re)writes them.
"""
import asyncio
import os
import time
from pathlib import Path

import pytest
from rich.text import Text

from olifant_mlx.engine import Session, Step, step_kinds
from olifant_mlx.tui import render
from olifant_mlx.tui.app import OlifantApp

SNAPSHOTS = Path(__file__).parent / "snapshots"
SIZE = (120, 36)
MIT = ('THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, '
       "INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR "
       "PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE "
       "FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR "
       "OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER "
       "DEALINGS IN THE SOFTWARE.")


# ---- a fake engine ---------------------------------------------------------------------

WORDS = ["the", " warranties", " of", " merchantability", ",", " fitness", "\n", " for", " a",
         " particular", " purpose"]


class FakeDetok:
    """Like mlx-lm's streaming detokenizer: reading last_segment clears it."""

    def reset(self):
        self.text, self._seg = "", ""

    def add_token(self, t):
        self._seg += WORDS[t % len(WORDS)]
        self.text += WORDS[t % len(WORDS)]

    def finalize(self):
        pass

    @property
    def last_segment(self):
        seg, self._seg = self._seg, ""
        return seg


class FakeVerifier:
    """What a Session needs of a Verifier; the fake engine below never calls the model."""
    name = "fake-verifier"
    eos_ids = (999,)
    bos_id = None
    model = None
    identity = None
    context_length = None
    has_chat_template = False
    loads = 0

    def __init__(self):
        FakeVerifier.loads += 1

    def encode(self, text):
        return list(range(len(text.split())))

    def detokenizer(self):
        d = FakeDetok()
        d.reset()
        return d


class FakeSession(Session):
    """The real Session over a fake verifier and a scripted engine loop."""
    delay = 0.0

    def _steps(self, ids, drafter, opts, stats, on_prefill, eos_ids):
        return fake_steps(None, ids, drafter, k=opts.k, max_tokens=opts.max_tokens, stats=stats,
                          delay=self.delay)


def fake_session(model, meter, delay=0.0):
    s = FakeSession(FakeVerifier(), "none", meter=meter)
    s.delay = delay
    return s


def fake_steps(model, ids, drafter, *, k, max_tokens, stats, delay=0.0, **kw):
    """Steps of three kinds in turn: correction, bonus, plain; `max_tokens` tokens in all."""
    produced, i = 0, 0
    while produced < max_tokens:
        if k == 0:
            drafted, acc, emitted = [], 0, [produced]
        elif i % 2 == 0:
            drafted, acc, emitted = [produced, produced + 1, 5], 2, [produced, produced + 1, 4]
        else:
            drafted, acc, emitted = [produced, produced + 1], 2, [produced, produced + 1, 8]
        emitted = emitted[:max_tokens - produced]
        acc = min(acc, len(emitted))
        produced += len(emitted)
        done = produced >= max_tokens
        step = Step(index=i, drafted=drafted, accepted=acc, emitted=emitted,
                    verifier_token=emitted[-1] if len(emitted) > acc else None, fast_path=False,
                    forward_tokens=len(drafted) or 1, draft_s=0.0001, verify_s=0.001, step_s=0.0011,
                    finished=done, stop_reason="max_tokens" if done else "")
        stats.add(step)
        if delay:
            time.sleep(delay)
        yield step
        i += 1


def fake_text(n):
    out = []
    for step in fake_steps(None, [], None, k=3, max_tokens=n, stats=_Stats()):
        out.extend(WORDS[t % len(WORDS)] for t in step.emitted)
    return "".join(out)


class _Stats:
    def add(self, s):
        pass


def replay_spec(shared):
    return "replay:" + str(shared / "fixtures/energy/ioreport/replay_m4_zeus_apple_silicon.json")


def static_text(app, selector) -> str:
    content = app.query_one(selector).content
    return content.plain if isinstance(content, Text) else str(content)


async def wait_for(pilot, cond, timeout=30.0):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out waiting")
        await pilot.pause(0.05)


def fake_app(delay=0.0, **kw):
    kw.setdefault("energy", "none")
    return OlifantApp(session_factory=lambda model, meter: fake_session(model, meter, delay),
                      model_dirs=[], **kw)


# ---- pure helpers ----------------------------------------------------------------------

def test_step_kinds_and_legend():
    def step(drafted, accepted, emitted):
        return Step(index=0, drafted=drafted, accepted=accepted, emitted=emitted,
                    verifier_token=emitted[-1], fast_path=False, forward_tokens=3, draft_s=0,
                    verify_s=0, step_s=0)

    assert step_kinds(step([1, 2, 3], 1, [1, 9])) == ["accepted", "correction"]
    assert step_kinds(step([1, 2], 2, [1, 2, 7])) == ["accepted", "accepted", "bonus"]
    assert step_kinds(step([], 0, [7])) == ["plain"]
    leg = render.legend()
    styles = {str(span.style) for span in leg.spans}
    assert "bold underline yellow" in styles and "italic bold cyan" in styles
    assert "correction" in leg.plain and "accepted draft" in leg.plain


def test_calculator_reference_values():
    r = render.calculator(0.8, 4, 0.1)
    assert r["speedup"] == pytest.approx(2.4011, abs=1e-4)
    assert r["best"][0] == 6 and r["best"][1] == pytest.approx(2.4696, abs=1e-4)
    assert render.calculator(0.6, 3, 0.2)["speedup"] == pytest.approx(1.36, abs=1e-4)
    chart = render.calc_chart(r, 4).plain
    assert "◀ you" in chart.splitlines()[3] and "★ best" in chart.splitlines()[5]


# ---- fake engine in the app ------------------------------------------------------------

def test_fake_generation_streams_stats_and_replay_energy(shared):
    async def go():
        app = fake_app(energy=replay_spec(shared), max_tokens=40,   # the trace runs 20x faster
                       meter_clock=lambda: time.monotonic_ns() * 20, delay=0.02)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: not app.generating)
            assert app.output_text == fake_text(40)
            assert app.last_stats.tokens == 40
            stats = static_text(app, "#stats")
            assert "tokens              40" in stats and "acceptance" in stats
            energy = static_text(app, "#energy")
            assert "J/100 tok" in energy and "replay" in energy, energy
            assert app.last_window.total_j > 0
            # the output widget holds styled lines: accepted, correction and bonus styles
            log = app.query_one("#output")
            styles = {str(seg.style) for strip in log.lines for seg in strip if seg.style}
            assert any("underline" in s for s in styles) and any("italic" in s for s in styles)
            assert "done (max_tokens)" in static_text(app, "#status")
            # live power sparklines exist for the replay meter's domains
            assert app.query(".power")

    asyncio.run(go())


def test_none_meter_says_not_measured():
    async def go():
        app = fake_app(max_tokens=6)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: not app.generating)
            assert "not measured" in static_text(app, "#energy")
            assert app.last_window.total_j is None

    asyncio.run(go())


def test_escape_stops_generation():
    async def go():
        app = fake_app(max_tokens=100000, delay=0.01)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: app.output_text)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not app.generating, timeout=5)
            assert "stopped" in static_text(app, "#status")
            assert app.last_stats.tokens < 100000

    asyncio.run(go())


def test_errors_are_notifications_not_tracebacks():
    def broken(model, meter):
        raise RuntimeError("no such verifier: nope")

    async def go():
        app = OlifantApp(session_factory=broken, model_dirs=[], energy="replay:/no/such.json")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: not app.generating)
            await pilot.pause()
            messages = [n.message for n in app._notifications]
            assert any("no such verifier" in m for m in messages), messages
            assert any("energy meter" in m for m in messages), messages   # fell back to none
            assert "generation failed" in static_text(app, "#status")
            assert app.is_running

    asyncio.run(go())


def test_compare_plain_vs_speculative_fake():
    async def go():
        app = fake_app(max_tokens=12)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+b")
            await wait_for(pilot, lambda: not app.generating)
            result = static_text(app, "#compare-result")
            assert "speedup" in result and "x (measured)" in result, result
            assert "energy ratio not measured" in result
            assert static_text(app, "#compare-spec") == fake_text(12)

    asyncio.run(go())


def test_calculator_panel_and_use_measured():
    async def go():
        app = fake_app(max_tokens=30)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f4")
            app.query_one("#calc-alpha").value = "0.6"
            app.query_one("#calc-gamma").value = "3"
            app.query_one("#calc-c").value = "0.2"
            await pilot.pause()
            assert "speedup                = 1.3600x" in static_text(app, "#calc-summary")
            app.query_one("#calc-gamma").value = "x"
            await pilot.pause()
            assert "check the inputs" in static_text(app, "#calc-summary")
            await pilot.press("f2", "ctrl+g")
            await wait_for(pilot, lambda: not app.generating)
            await pilot.press("f4")
            await pilot.click("#calc-measured")
            await pilot.pause()
            assert app.query_one("#calc-gamma").value == "3"
            assert 0 < float(app.query_one("#calc-alpha").value) <= 1

    asyncio.run(go())


# ---- snapshots of the static screens ---------------------------------------------------

def check_snapshot(name: str, svg: str):
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("OLIFANT_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(svg)
        return
    if not path.is_file():
        pytest.fail(f"missing snapshot {path}: run with OLIFANT_UPDATE_SNAPSHOTS=1 and review it")
    assert svg == path.read_text(), f"{name} differs from {path} (OLIFANT_UPDATE_SNAPSHOTS=1 to accept)"


@pytest.mark.parametrize("tab", ["generate", "calculator", "compare"])
def test_snapshot(tab):
    async def go():
        app = fake_app(model="smollm2-135m", draft="ngram")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(f"f{['generate', 'compare', 'calculator'].index(tab) + 2}")
            app.set_focus(None)
            await pilot.pause()
            return app.export_screenshot(title=f"olifant_mlx {tab}")

    check_snapshot(f"tui_{tab}", asyncio.run(go()))


# ---- real verifier, real olifant model --------------------------------------------------

@pytest.fixture(scope="module")
def real_draft(tmp_path_factory):
    from olifant_mlx.draftmodel.train import train
    from olifant_mlx.verifier import load_tokenizer

    d = tmp_path_factory.mktemp("tui")
    corpus = d / "mit.txt"
    corpus.write_text("\n\n".join([MIT] * 3))
    tok = load_tokenizer("smollm2-135m")
    out = d / "mit.olif"
    train([str(corpus)], tok, str(out), show_progress=False)
    return corpus, out


@pytest.mark.slow
def test_real_generation_with_olifant_model(real_draft):
    _, model_path = real_draft

    async def go():
        app = OlifantApp(model="smollm2-135m", draft=f"olifant:{model_path}", k=4, max_tokens=24,
                         energy="none", model_dirs=[model_path.parent])
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: not app.generating, timeout=120)
            assert "failed" not in static_text(app, "#status"), static_text(app, "#status")
            assert app.output_text.strip()
            s = app.last_stats
            assert s.tokens > 0 and s.steps > 0 and s.accepted > 0
            assert f"tokens        {s.tokens:8d}" in static_text(app, "#stats")
            spec_text = app.output_text
            shown = "\n".join(strip.text for strip in app.query_one("#output").lines)
            shown += static_text(app, "#tail")
            assert shown.replace("\n", "").replace(" ", "") == spec_text.replace("\n", "").replace(" ", "")
            # the same prompt, plain then speculative: identical output, measured speedup
            await pilot.press("ctrl+b")
            await wait_for(pilot, lambda: not app.generating, timeout=120)
            result = static_text(app, "#compare-result")
            assert "outputs identical: yes" in result, result
            assert static_text(app, "#compare-spec") == spec_text

    asyncio.run(go())


@pytest.mark.slow
def test_models_panel_lists_and_trains(real_draft, tmp_path):
    corpus, model_path = real_draft

    async def go():
        app = OlifantApp(model="smollm2-135m", energy="none", model_dirs=[model_path.parent, tmp_path],
                         session_factory=fake_session)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f5")
            table = app.query_one("#model-table")
            assert table.row_count == 1
            await pilot.click("#use-model")
            assert app.query_one("#draft").value == f"olifant:{model_path}"
            app.query_one("#corpus").value = str(corpus)
            app.query_one("#train-out").value = "mine"
            await pilot.click("#train-go")
            await wait_for(pilot, lambda: table.row_count == 2, timeout=60)
            assert (tmp_path / "mine.olif").is_file()
            assert "trained" in static_text(app, "#train-status")
            assert not app.query_one("#train-progress").display

    asyncio.run(go())

"""The Models tab lists precedent libraries (issue 38, item 8) beside the draft models: a real
library built for SmolLM2's tokenizer, marked for the verifier's tokenizer, used as
`library:NAME` when it fits and refused when it does not; driven by Textual's pilot."""
import asyncio

import pytest
from document_fixtures import smollm2_library
from tui_fakes import FAKE_IDENTITY, fake_session, wait_for

from olifant_mlx.tui.app import OlifantApp
from olifant_mlx.verifier import load_tokenizer


@pytest.fixture
def deeds(tmp_path, monkeypatch):
    return smollm2_library(tmp_path, monkeypatch)


@pytest.mark.slow       # the app, SmolLM2's tokenizer and a library build: about 4 s
def test_models_tab_lists_a_library_and_uses_it_when_it_fits(deeds, tmp_path):
    smollm2 = load_tokenizer("smollm2-135m")

    async def go():
        app = OlifantApp(model="smollm2-135m", energy="none", model_dirs=[tmp_path / "none"],
                         session_factory=fake_session)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("f6")
            tab = app.query_one("ModelsTab")
            await wait_for(pilot, lambda: tab.identity is not None)     # SmolLM2's, from --model
            table = app.query_one("#model-table")
            row = table.get_row("library:deeds")
            assert row[0] == "library:deeds" and row[1].startswith("smollm2-135m") and row[5] == str(deeds)
            assert row[2].startswith("✓")
            tab.set_identity(FAKE_IDENTITY)                              # a verifier of another tokenizer
            assert table.get_row("library:deeds")[2].startswith("✗")
            await pilot.click("#use-model")
            assert app.query_one("#set-drafter").value != "library"      # refused
            tab.set_identity(smollm2)
            assert table.get_row("library:deeds")[2].startswith("✓")
            await pilot.click("#use-hybrid")
            assert app.query_one("#set-drafter").value == "library"
            assert app.query_one("#set-draft-arg").value == "deeds"

    asyncio.run(go())

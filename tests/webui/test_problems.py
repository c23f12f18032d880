"""The Voices page says why a preset or a reference voice is not usable (the `problem` of
GET /v1/presets and /v1/voices/references), in headless Chromium (Debian's, via Playwright).
Rows as an older Voxgate left them: a preset named as the embedded voice's own voice, and a
preset named as a reference voice (in another case). Before, the page listed both as if fine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import references
from gateway.library import Library
from tests.conftest import LiveServer, run_server
from tests.gateway.test_references import recording
from tests.webui.conftest import HAS_CHROMIUM

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("problems")

    async def older_version() -> None:
        library = await Library.open(data / "voxgate.db")
        store = references.ReferenceStore(library, data / "references")
        for name in ("Ann", "Todd"):
            await store.add(name, f"Hello, this is {name}.", references.to_pcm16(recording(2.0)), f"{name}.wav")
        await library.put_preset("TODD", "piper-joe", "default", 1.0, {}, create=True)
        await library.put_preset("default", "piper-joe", "default", 1.3, {}, create=True)
        await library.close()

    asyncio.run(older_version())
    yield from run_server(data)


def test_the_voices_page_says_why_a_preset_or_reference_voice_is_not_usable(server: LiveServer,
                                                                             page: sync_api.Page) -> None:
    page.goto(f"{server.url}/voices")
    preset = page.locator('tr[data-preset="default"] .problem')
    sync_api.expect(preset).to_have_text(
        "Not usable: model 'piper-joe' has a voice named 'default', which requests get instead of this preset; "
        "create it again under another name")
    assert page.locator('tr[data-preset="TODD"] .problem').count() == 0  # (usable: it is what requests get)
    hidden = page.locator('tr[data-reference="Todd"] .problem')
    sync_api.expect(hidden).to_contain_text("Not usable: preset 'TODD' (saved by an older Voxgate) has this name")
    assert page.locator('tr[data-reference="Ann"] .problem').count() == 0
    sync_api.expect(page.locator('tr[data-reference="Todd"] .transcript')).to_contain_text("Hello, this is Todd.")

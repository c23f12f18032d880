"""The Voices page's Try when its take fails part way, after some audio came: what came plays out,
then the row says why it ended (as the studio does). Headless Debian Chromium via Playwright.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.realtime import Session
from tests.conftest import LiveServer, run_server
from tests.webui.conftest import HAS_CHROMIUM, LONG_TEXT

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"))


# What #form-status said, and when (ms on the page's clock).
SAID = """
window.said = [];
document.addEventListener("DOMContentLoaded", () => new MutationObserver(() => {
  window.said.push([performance.now(), document.querySelector("#form-status").textContent]);
}).observe(document.querySelector("#form-status"), { childList: true, characterData: true, subtree: true }));
"""


def test_a_try_that_fails_part_way_plays_what_came_then_says_so(server: LiveServer, page: sync_api.Page,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A Try whose connection was lost after some audio came said "Could not speak: ..." at once while
    that audio played on, with Try enabled again during the playback."""
    on_audio = Session.on_audio
    sent_ms: list[float] = []

    async def cut_off(self: Session, utterance: Any, pcm: Any, words: Any, estimated: bool) -> None:
        await on_audio(self, utterance, pcm, words, estimated)
        if len(pcm):  # (one chunk, then the connection closes)
            sent_ms.append(1000 * len(pcm) / utterance.sample_rate)
            await self.connection.close(1012, "it is restarting")

    monkeypatch.setattr(Session, "on_audio", cut_off)
    page.add_init_script(SAID)
    page.goto(f"{server.url}/voices")
    page.wait_for_function("document.querySelector('#p-voice').options.length > 0")
    page.fill("#sample", LONG_TEXT)
    page.click("#p-try")
    page.locator("#form-status", has_text="that came before it failed").wait_for(timeout=60_000)
    assert page.is_disabled("#p-try")  # (what came plays)
    page.locator("#form-status", has_text="The server closed the connection").wait_for(timeout=30_000)
    assert page.is_enabled("#p-try")
    said = page.evaluate("window.said")
    playing = next(t for t, text in said if "that came before it failed" in text)
    ended = next(t for t, text in said if "closed the connection" in text)
    assert ended - playing > sent_ms[0] - 400, (said, sent_ms)  # said once what came had played
    final = page.inner_text("#form-status")
    assert final.startswith(f"Could not speak it all (the {sent_ms[0] / 1000:.1f} s that came has played): "), final
    assert page.get_attribute("#form-status", "data-kind") == "error"

"""What the studio keeps and says of a take that ended part way: stopped (the kept take is what was
heard, to the worklet's own position) or failed after some audio came (the figures say what the page
measured). Headless Debian Chromium via Playwright.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.realtime import Session
from tests.conftest import LiveServer, run_server
from tests.webui.conftest import HAS_CHROMIUM, LONG_TEXT, open_studio

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"))


# Stop pressed `after_ms` after the worklet's latest position report (they come every 200 ms of audio):
# returns the position that report said.
STOP_BETWEEN_REPORTS = """async (afterMs) => {
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const last = window.voxgate.playedMs;
  while (window.voxgate.playedMs === last) await sleep(2);
  const reported = window.voxgate.playedMs;
  await sleep(afterMs);
  document.querySelector("#stop").click();
  return reported;
}"""


def test_a_take_stopped_part_way_keeps_all_that_was_heard(server: LiveServer, page: sync_api.Page) -> None:
    """A take stopped while it played out was kept cut at the last position report, up to 200 ms (one
    report) short of what had played when Stop was pressed."""
    open_studio(page, server.url)
    before = len(httpx.get(f"{server.url}/v1/takes").json()["data"])
    page.fill("#text", LONG_TEXT)
    page.click("#speak")
    page.locator("#status", has_text="synthesised)").wait_for(timeout=60_000)  # (it plays out now)
    page.wait_for_function("window.voxgate.playedMs > 1000", timeout=30_000)
    reported = page.evaluate(STOP_BETWEEN_REPORTS, 150)
    page.wait_for_function(f"window.voxgate.takes === {before + 1}", timeout=30_000)
    played = page.evaluate("window.voxgate.playedMs")  # (the worklet's position when it was stopped)
    kept = page.evaluate("window.voxgate.lastKept.audio_ms")
    assert played >= reported + 100, (reported, played)
    assert abs(kept - played) < 15, (reported, played, kept)
    said = page.inner_text("#status")
    heard = f"{played / 1000:.1f} s"
    assert f"Stopped after {heard} of" in said and f"the take keeps the {heard} heard." in said, (said, played)


def test_a_take_that_failed_part_way_shows_the_ttfa_measured_and_stalls_unknown(
        server: LiveServer, page: sync_api.Page, monkeypatch: pytest.MonkeyPatch) -> None:
    """A take whose connection was lost after some audio came showed "0" stalls and no TTFA ("–"), though
    audio had come and the page had measured when: no utterance.done came to say either."""
    on_audio = Session.on_audio

    async def cut_off(self: Session, utterance: Any, pcm: Any, words: Any, estimated: bool) -> None:
        await on_audio(self, utterance, pcm, words, estimated)
        if len(pcm):  # (one chunk, then the connection closes)
            await self.connection.close(1012, "it is restarting")

    monkeypatch.setattr(Session, "on_audio", cut_off)
    open_studio(page, server.url)
    before = len(httpx.get(f"{server.url}/v1/takes").json()["data"])
    page.fill("#text", LONG_TEXT)
    page.click("#speak")
    page.locator("#status", has_text="The server closed the connection").wait_for(timeout=60_000)
    page.wait_for_function(f"window.voxgate.takes === {before + 1}", timeout=30_000)
    done = page.evaluate("window.voxgate.lastDone")
    assert done["ttfa_ms"] is not None and 0 < done["ttfa_ms"] < 60_000, done
    assert done["stalls"] is None, done  # (unknown: the server never said)
    assert page.inner_text("#ttfa") not in ("–", "") and page.inner_text("#stalls") == "–"
    said = page.inner_text("#status")
    assert "stall" not in said, said
    take = httpx.get(f"{server.url}/v1/takes").json()["data"][0]
    assert take["ttfa_ms"] is not None and abs(take["ttfa_ms"] - done["ttfa_ms"]) < 1, (take, done)
    assert take["stalls"] is None, take  # (kept as unknown, not 0) ...
    row = page.locator(f"#takes li[data-take-id='{take['id']}']").inner_text()
    assert "stalls unknown" in row and "0 stalls" not in row, row  # ... and listed so

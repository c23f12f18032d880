"""The studio while it speaks, as new users tried it (a trial that found these): the wait for a
model to load said why, and the keyboard stops what plays. Headless Debian Chromium via Playwright.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, run_server
from tests.webui.conftest import HAS_CHROMIUM, LONG_TEXT, open_studio

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"))


def test_the_status_says_the_model_is_loading(server: LiveServer, page: sync_api.Page,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A Speak with the model not loaded yet waited seconds on "Synthesising…", with no sign why."""
    residency = server.app_state.residency
    load = residency._loader

    def slow_load(*args: Any) -> Any:
        time.sleep(2.0)  # (in the load's worker thread): a load the page can be seen waiting for
        return load(*args)

    monkeypatch.setattr(residency, "_loader", slow_load)
    httpx.post(f"{server.url}/v1/models/piper-joe/unload", json={})
    assert not httpx.get(f"{server.url}/v1/models/piper-joe").json()["loaded"]
    open_studio(page, server.url)
    page.fill("#text", "Said once the model has loaded.")
    page.click("#speak")
    page.locator("#status", has_text="Loading the model piper-joe").wait_for(timeout=10_000)
    assert page.get_attribute("#status", "aria-live") == "polite"
    page.locator("#status", has_text="Done:").wait_for(timeout=60_000)

    # Loaded now: the next Speak says nothing of a load.
    page.evaluate("window.voxgate.loadingSeen = null")
    page.click("#speak")
    page.locator("#status", has_text="Done:").wait_for(timeout=60_000)
    assert page.evaluate("window.voxgate.loadingSeen") is None


def test_escape_stops_what_plays_but_not_in_a_dialog(server: LiveServer, page: sync_api.Page) -> None:
    """There was no keyboard way to stop a take but Tab to Stop."""
    open_studio(page, server.url)
    before = len(httpx.get(f"{server.url}/v1/takes").json()["data"])
    page.fill("#text", LONG_TEXT)
    page.focus("#text")
    page.keyboard.press("Control+Enter")
    page.wait_for_function("window.voxgate.playedMs > 1500", timeout=60_000)
    page.focus("#text")  # (from wherever the keyboard is)
    page.keyboard.press("Escape")  # (synthesis may have ended by now: it stops the playback then)
    page.locator("#status", has_text="Stopped").wait_for(timeout=10_000)
    assert page.evaluate("window.voxgate.playerState") == "idle" and page.is_disabled("#stop")
    assert page.input_value("#text") == LONG_TEXT  # (Escape did nothing else to the text)
    assert server.wait_idle() == 0
    page.wait_for_function(f"window.voxgate.takes === {before + 1}", timeout=30_000)  # what was heard, kept
    assert page.get_attribute("#stop", "aria-keyshortcuts") == "Escape"

    # In a dialog, Escape is the dialog's: it closes, and the take plays on.
    page.uncheck("#keep")
    page.click("#speak")
    page.wait_for_function("window.voxgate.playerState === 'playing'", timeout=60_000)
    page.evaluate("document.querySelector('#signin').showModal(); document.querySelector('#signin-key').focus()")
    page.keyboard.press("Escape")
    assert not page.evaluate("document.querySelector('#signin').open")
    page.wait_for_timeout(300)
    assert page.is_enabled("#stop") and page.evaluate("window.voxgate.playerState") != "idle"
    page.keyboard.press("Escape")  # ... and the next one stops it
    page.wait_for_function("window.voxgate.playerState === 'idle'", timeout=10_000)
    page.locator("#status", has_text="Stopped").wait_for(timeout=10_000)

    # A take's replay stops too.
    replay = page.locator("#takes li.take audio").first
    replay.evaluate("(a) => a.play()")
    page.wait_for_function("document.querySelector('#takes li.take audio').currentTime > 0.1")
    page.keyboard.press("Escape")
    page.wait_for_function("document.querySelector('#takes li.take audio').paused", timeout=5_000)
    assert not replay.evaluate("(a) => a.ended")  # paused part way, not played out

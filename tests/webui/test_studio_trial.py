"""The studio as a new user tried it (a trial that found these): typed text kept across pages,
a take in progress not lost to a reload unwarned, lists that follow other tabs, and the Speed
slider off for models that speak at their own pace. Headless Debian Chromium via Playwright.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import LiveServer, run_server
from tests.webui.conftest import HAS_CHROMIUM

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")
SAMPLE = "Hello! This is Voxgate"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"))


def open_studio(page: sync_api.Page, server: LiveServer) -> None:
    page.goto(f"{server.url}/")
    page.wait_for_function("document.querySelector('#voice').options.length > 0")


def test_the_text_is_kept_as_a_draft_across_pages(server: LiveServer, page: sync_api.Page) -> None:
    """Typed text came back as the sample after a visit to another page with the nav bar."""
    open_studio(page, server)
    assert page.input_value("#text").startswith(SAMPLE)  # no draft yet: the sample
    text = "My own words, typed before a look at the Voices page."
    page.fill("#text", text)
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Voices").click()
    page.wait_for_url("**/voices")
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Studio").click()
    page.wait_for_function("document.querySelector('#voice').options.length > 0")
    assert page.input_value("#text") == text
    assert page.inner_text("#count-n") == str(len(text))  # counted as restored
    page.reload()
    page.wait_for_function("document.querySelector('#voice').options.length > 0")
    assert page.input_value("#text") == text
    page.fill("#text", "")  # emptied: the draft is forgotten, the next visit starts from the sample
    open_studio(page, server)
    assert page.input_value("#text").startswith(SAMPLE)


LONG_TEXT = " ".join(["It was a bright cold day in April, and the clocks were striking thirteen."] * 6)


def test_leaving_while_a_take_plays_asks_first(server: LiveServer, page: sync_api.Page) -> None:
    """A take is kept once it has played: a reload or another page mid-playback lost it unsaid."""
    dialogs: list[str] = []

    def stay(dialog: sync_api.Dialog) -> None:
        dialogs.append(dialog.type)
        dialog.dismiss()  # stay on the page

    page.on("dialog", stay)
    open_studio(page, server)
    before = len(httpx.get(f"{server.url}/v1/takes").json()["data"])
    page.fill("#text", LONG_TEXT)
    page.click("#speak")
    page.wait_for_function("window.voxgate.playedMs > 500", timeout=60_000)
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Voices").click()
    page.wait_for_timeout(300)
    assert dialogs == ["beforeunload"]
    assert page.url.rstrip("/") == server.url and page.is_enabled("#stop")  # still here, still playing
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function("window.voxgate.lastKept !== null", timeout=30_000)  # what was heard, kept
    assert len(httpx.get(f"{server.url}/v1/takes").json()["data"]) == before + 1

    page.uncheck("#keep")  # nothing would be kept: nothing to ask about
    page.click("#speak")
    page.wait_for_function("document.querySelector('#status').textContent.startsWith('Playing')",
                           timeout=60_000)
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Voices").click()
    page.wait_for_url("**/voices")
    assert dialogs == ["beforeunload"]
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Studio").click()
    page.wait_for_function("document.querySelector('#voice').options.length > 0")
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Voices").click()
    page.wait_for_url("**/voices")  # (done: no question)
    assert dialogs == ["beforeunload"]

"""Every page of the studio audited by axe-core (tests/webui/axe.py) in its main states: empty,
with content, with an error shown, with the sign-in dialog open, and at a phone's width (360 px)
and at 200% zoom (a 1280x800 window is 640x400 CSS pixels then), where nothing may scroll
sideways (WCAG 1.4.10). No serious or critical violation may be found. Found by an accessibility
trial: a table that scrolled sideways at 360 px with nothing in it the keyboard could reach, and
the API page 560 px wide on a 360 px screen. The keyboard itself: test_keyboard.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, run_server
from tests.gateway.test_keys import create_key
from tests.webui.axe import assert_accessible, axe_source, overflow_x
from tests.webui.conftest import DESKTOP, HAS_CHROMIUM

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")

PAGES = ["/", "/projects", "/library", "/voices", "/live", "/docs", "/no-such-page"]
NARROW = {"width": 360, "height": 740}
ZOOM_200 = {"width": DESKTOP["width"] // 2, "height": DESKTOP["height"] // 2}
# What each page fetches before it is drawn (the audit must not run on a page half filled).
READY = {"/": "document.querySelector('#voice').options.length > 0",
         "/projects": "document.querySelector('#np-speaker').options.length > 0",
         "/library": "document.querySelector('#catalog li, #catalog-status:not(:empty)') !== null"
                     " && document.querySelector('#installed tr') !== null",
         "/voices": "document.querySelector('#p-voice').options.length > 0",
         "/live": "document.querySelector('#sessions').textContent !== '–'"}


@pytest.fixture(autouse=True)
def _axe() -> None:
    axe_source()  # skips where axe-playwright-python is not installed


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    """A preset, a take and a project whose passages have takes."""
    for server in run_server(tmp_path_factory.mktemp("data")):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            client.post("/v1/presets", json={"name": "Calm Joe", "model": "piper-joe", "voice": "default",
                                             "speed": 0.9}).raise_for_status()
            client.post("/v1/takes?text=A+kept+take.&model=piper-joe&voice=default&sample_rate=22050",
                        content=b"\0" * 44100, headers={"Content-Type": "audio/pcm"}).raise_for_status()
            project = client.post("/v1/projects", json={"name": "Book", "model": "piper-joe"}).json()
            client.post(f"/v1/projects/{project['id']}/import", json={
                "text": "# One\n\nIt was a cold day.\n\nThe clocks struck.", "format": "markdown",
                "apply": True}).raise_for_status()
            client.post(f"/v1/projects/{project['id']}/generate", json={}).raise_for_status()
            for _ in range(600):
                if client.get(f"/v1/projects/{project['id']}/job").json()["state"] != "running":
                    break
                time.sleep(0.1)
        yield server, project["id"]


def open_page(page: Any, url: str, path: str) -> None:
    page.goto(url + path)
    ready = READY.get(path)
    if path.startswith("/projects/"):
        ready = "document.querySelector('#passages li.passage') !== null"
    if ready:
        page.wait_for_function(ready, timeout=30_000)
    page.wait_for_timeout(200)  # (the last of a page's fetches drawn)


@pytest.mark.parametrize("path", PAGES)
def test_each_page_empty(empty: LiveServer, page: Any, path: str) -> None:
    open_page(page, empty.url, path)
    assert_accessible(page, f"{path} (empty)")


@pytest.mark.parametrize("viewport", [DESKTOP, NARROW, ZOOM_200], ids=["desktop", "360px", "zoom200"])
def test_each_page_with_content(full: tuple[LiveServer, str], page: Any, viewport: dict[str, int]) -> None:
    server, project_id = full
    page.set_viewport_size(viewport)
    for path in [*PAGES, f"/projects/{project_id}"]:
        open_page(page, server.url, path)
        where = f"{path} at {viewport['width']}x{viewport['height']}"
        assert_accessible(page, where)
        assert overflow_x(page) == 0, f"{where} scrolls sideways"
    # A table that scrolls sideways (the narrow screen's) takes the keyboard, named by its heading.
    page.goto(server.url + "/voices")
    page.wait_for_selector("#presets tr")
    for wrap in page.query_selector_all(".table-wrap"):
        scrolls = wrap.evaluate("w => w.scrollWidth > w.clientWidth + 1")
        assert (wrap.get_attribute("tabindex") == "0") == scrolls


def test_errors_shown(full: tuple[LiveServer, str], page: Any) -> None:
    server, project_id = full
    open_page(page, server.url, "/")
    page.fill("#text", "  ")
    page.click("#speak")
    page.locator("#status", has_text="Type some text").wait_for()
    assert_accessible(page, "the studio's error")

    open_page(page, server.url, "/projects")
    page.click("#np-create")
    page.locator("#np-status[data-kind=error]").wait_for()
    assert_accessible(page, "a new project's error")

    open_page(page, server.url, "/voices")
    page.fill("#p-name", "bad/name")
    page.click("#p-save")
    page.locator("#p-name-err", has_text="characters").wait_for()
    assert_accessible(page, "a preset's error")

    open_page(page, server.url, f"/projects/{project_id}")
    page.fill("#s-name", "")
    page.click("#settings button[type=submit]")
    page.locator("#s-status[data-kind=error]").wait_for()
    assert_accessible(page, "a project's settings error")


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("data")
    create_key(data, "studio", "--scope", "admin")
    yield from run_server(data, auth="required")


def test_sign_in_dialog(keyed: LiveServer, page: Any) -> None:
    page.goto(keyed.url + "/")
    page.locator("#signin").wait_for(state="visible")
    assert_accessible(page, "the sign-in dialog")
    page.fill("#signin-key", "vxg_00000000_wrong")
    page.press("#signin-key", "Enter")
    page.locator("#signin-status", has_text="unknown or revoked").wait_for()
    assert_accessible(page, "the sign-in dialog's error")
    page.keyboard.press("Escape")
    page.locator("#signin").wait_for(state="hidden")
    assert_accessible(page, "a page signed out")

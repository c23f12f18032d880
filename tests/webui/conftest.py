"""Browser fixtures for the page tests: Debian's Chromium driven by Playwright.

Screenshots go to a temporary folder unless `VOXGATE_SCREENSHOTS` names one (e.g.
`VOXGATE_SCREENSHOTS=docs/screenshots` to refresh the pictures README.md links), so a
test run never rewrites tracked files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--autoplay-policy=no-user-gesture-required"]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
HAS_CHROMIUM = Path(CHROMIUM).exists()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("VOXGATE_SCREENSHOTS")
    path = Path(folder).resolve() if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, args=ARGS,
            headless=True, viewport=DESKTOP, accept_downloads=True)
        context.set_default_timeout(30_000)
        yield context
        context.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    # What a test left in this browser's storage (the studio's draft, its Keep takes) is not the next
    # test's: the profile lasts the module.
    try:
        page.evaluate("() => { try { localStorage.clear(); } catch { /* a page with no storage */ } }")
    except sync_api.Error:  # (a page closed or navigating away: nothing to clear there)
        pass
    page.close()
    assert not errors, errors


LONG_TEXT = " ".join(["It was a bright cold day in April, and the clocks were striking thirteen."] * 6)


def open_studio(page: Any, url: str) -> None:
    """The studio at server `url`, once its voices are listed (its scripts have run)."""
    page.goto(f"{url}/")
    page.wait_for_function("document.querySelector('#voice').options.length > 0")


def slow_network(page: Any, latency_ms: int = 800) -> None:
    """Every request of `page` from now on answered `latency_ms` later (Chromium's network emulation, CDP),
    as on a slow network: a second click can come before the first one's answer."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions",
             {"offline": False, "latency": latency_ms, "downloadThroughput": -1, "uploadThroughput": -1})

"""The studio on a server that needs keys (found by a new-user trial: with `auth = "required"` every
call of the pages was a 401, with nowhere to give a key). The page asks for one, the server keeps it
as a cookie (gateway/studio_key.py), and fetches, `<audio src>` and the realtime WebSocket carry it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import LiveServer, run_server
from tests.gateway.test_keys import create_key
from tests.webui.conftest import HAS_CHROMIUM

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    data = tmp_path_factory.mktemp("data")
    key = create_key(data, "studio", "--scope", "admin")
    for server in run_server(data, auth="required"):
        yield server, key


def test_the_studio_signs_in_speaks_and_signs_out(keyed: tuple[LiveServer, str], page: sync_api.Page) -> None:
    server, key = keyed
    page.goto(f"{server.url}/")
    dialog = page.locator("#signin")
    dialog.wait_for(state="visible")
    assert "needs an API key" in page.inner_text("#signin-status")
    page.fill("#signin-key", "vxg_00000000_wrong")
    page.click("#signin-form button[type=submit]")
    page.locator("#signin-status", has_text="unknown or revoked").wait_for()
    assert dialog.is_visible()
    page.fill("#signin-key", key)
    page.click("#signin-form button[type=submit]")
    dialog.wait_for(state="hidden")
    page.wait_for_function("document.querySelector('#voice').options.length > 0")  # the call that asked, again
    cookies = {c["name"]: c for c in page.context.cookies(server.url)}
    assert cookies["voxgate_key"]["httpOnly"] and cookies["voxgate_key"]["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == "voxgate_signed_in=1"  # the key itself is out of the page's reach

    page.fill("#text", "Signed in, and speaking through the realtime socket.")
    page.click("#speak")  # the WebSocket's handshake carries the cookie
    page.wait_for_function("window.voxgate.lastDone !== null", timeout=60_000)
    assert page.evaluate("window.voxgate.lastDone.audio_ms") > 1000
    page.wait_for_selector("#takes li.take audio")
    loaded = page.evaluate("""async () => {
        const audio = document.querySelector('#takes li.take audio');
        audio.preload = 'auto'; audio.load();
        await new Promise((ok, fail) => { audio.oncanplay = ok; audio.onerror = () => fail(audio.error.code); });
        return audio.duration; }""")
    assert loaded > 1.0  # <audio src> sent the cookie too

    page.click("#signout")
    page.wait_for_load_state()
    page.locator("#signin").wait_for(state="visible")  # signed out: asked again
    assert "voxgate_key" not in {c["name"] for c in page.context.cookies(server.url)}
    assert httpx.get(f"{server.url}/v1/models").status_code == 401  # (a client without the cookie)

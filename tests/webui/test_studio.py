"""The browser studio in headless Chromium (Debian's /usr/bin/chromium via Playwright).

One browser per module against one live server. The pages are driven as a user would,
and checked against what the server saw (playback reports, engine jobs, takes, presets).
The Library page has its own module (test_library.py), projects theirs (test_projects.py).
Screenshots of every page go to the `screenshots` folder (tests/webui/conftest.py).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.realtime import Session
from tests.conftest import LiveServer, run_server
from tests.webui.conftest import DESKTOP, HAS_CHROMIUM, PHONE, slow_network

sync_api = pytest.importorskip("playwright.sync_api")
LONG_TEXT = " ".join([
    "The quick brown fox jumps over the lazy dog.", "It was a bright cold day in April, and the clocks were striking thirteen.",
    "Call me Ishmael.", "Some years ago, never mind how long precisely, I thought I would sail about a little.",
] * 4)

pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"))


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, bool]]:
    """Every `playback.position` the server receives, as (played_ms, playing)."""
    seen: list[tuple[float, bool]] = []
    original = Session.playback

    async def playback(self: Session, event: dict[str, Any]) -> None:
        seen.append((event["played_ms"], event["playing"]))
        await original(self, event)

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
    assert download.value.suggested_filename == f"hello-from-the-studio-this-sentence-is-a_default_{take_id}.mp3"


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
    assert not done["cancelled"] and done["audio_ms"] > 20_000  # all synthesised, not all heard yet
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function("window.voxgate.lastKept !== null", timeout=30_000)
    played = page.evaluate("window.voxgate.playedMs")
    take = httpx.get(f"{server.url}/v1/takes").json()["data"][0]
    assert len(httpx.get(f"{server.url}/v1/takes").json()["data"]) == len(before) + 1
    # (How much was heard when synthesis ended depends on the machine's load: with EDF the
    # engine need not run far ahead of the listener.)
    assert abs(take["audio_ms"] - played) < 300 and take["audio_ms"] < done["audio_ms"] - 1000, (take, played)
    assert page.inner_text("#status").startswith("Stopped after") and "heard" in page.inner_text("#status")
    assert page.is_enabled("#speak") and page.is_disabled("#stop")


def test_a_preset_is_created_tried_and_used_in_the_studio(server: LiveServer, page: sync_api.Page) -> None:
    page.goto(f"{server.url}/voices")
    page.wait_for_function("document.querySelector('#p-voice').options.length > 0")
    page.get_by_label("Name", exact=True).fill("Narrator")
    page.get_by_label("Voice", exact=True).select_option("default")
    page.locator("#p-speed").fill("1.5")
    page.get_by_label("Name", exact=True).press("Enter")  # the form submits from the keyboard
    page.wait_for_selector("tr[data-preset='Narrator']")
    assert httpx.get(f"{server.url}/v1/presets/Narrator").json()["speed"] == 1.5
    assert page.input_value("#p-speed") == "1"  # the next preset starts from the default speed

    page.get_by_label("Name", exact=True).fill("Narrator")  # a duplicate is refused, in the page
    page.get_by_role("button", name="Create preset").click()
    page.wait_for_selector("#form-status[data-kind='error']")
    assert "exists" in page.inner_text("#p-name-err") and page.get_attribute("#p-name", "aria-invalid") == "true"

    page.get_by_role("button", name="Try Narrator").click()
    row_status = page.locator("tr[data-preset='Narrator'] .status")
    row_status.filter(has_text="Spoke").wait_for(timeout=60_000)

    page.get_by_role("link", name="Use Narrator in the studio").click()
    page.wait_for_function("document.querySelector('#voice').value === 'Narrator'")
    assert page.input_value("#speed") == "1.5"
    page.fill("#text", "Presets keep a voice and its speed.")
    num_takes = page.evaluate("window.voxgate.takes")
    page.click("#speak")
    page.wait_for_function("window.voxgate.lastDone !== null", timeout=60_000)
    assert not page.evaluate("window.voxgate.lastDone.cancelled")
    page.wait_for_function(f"window.voxgate.takes > {num_takes}", timeout=60_000)  # kept once it has played
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


def test_presets_of_another_tab_show_when_the_voices_page_is_seen_again(server: LiveServer,
                                                                          page: sync_api.Page) -> None:
    """A preset made or deleted in another tab (or by the API) showed on the Voices page only after a
    reload: a deleted one stayed, and its Delete, Try and Edit failed with "no preset"."""
    assert httpx.post(f"{server.url}/v1/presets", json={"name": "Elsewhere"}).status_code == 201
    page.goto(f"{server.url}/voices")
    page.wait_for_selector("tr[data-preset='Elsewhere']")
    assert httpx.delete(f"{server.url}/v1/presets/Elsewhere").status_code == 204
    assert httpx.post(f"{server.url}/v1/presets", json={"name": "Newcomer"}).status_code == 201
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    page.wait_for_selector("tr[data-preset='Newcomer']", timeout=5_000)
    page.wait_for_selector("tr[data-preset='Elsewhere']", state="detached", timeout=5_000)
    assert httpx.delete(f"{server.url}/v1/presets/Newcomer").status_code == 204


def test_a_double_click_on_create_preset_says_created(server: LiveServer, page: sync_api.Page) -> None:
    """On a slow network a second click on Create preset, before the first was answered, sent it
    again: the preset was made, and the page said "Could not create" (the name is taken: by it)."""
    page.goto(f"{server.url}/voices")
    page.wait_for_function("document.querySelector('#p-voice').options.length > 0")
    slow_network(page)
    page.fill("#p-name", "Twice Clicked")
    page.dblclick("#p-save")
    page.wait_for_selector("tr[data-preset='Twice Clicked']", timeout=10_000)
    page.wait_for_timeout(2_000)  # (the second answer, had there been a second request)
    assert page.inner_text("#form-status") == "Created “Twice Clicked”."
    assert page.get_attribute("#p-name", "aria-invalid") is None
    assert httpx.delete(f"{server.url}/v1/presets/Twice Clicked").status_code == 204


def test_preset_settings_are_edited_and_checked_in_the_page(server: LiveServer, page: sync_api.Page) -> None:
    page.goto(f"{server.url}/voices")
    page.wait_for_function("document.querySelector('#p-voice').options.length > 0")
    page.get_by_label("Name", exact=True).fill("Steady")
    page.get_by_label("noise_scale").fill("7")  # out of range: refused, in the page, at the field
    page.get_by_role("button", name="Create preset").click()
    page.locator("#form-status[data-kind='error']").wait_for()
    assert "see the field marked" in page.inner_text("#form-status")
    # beside its field, in the field's words (found by a new-user trial: "Settings.noise_scale must be ...")
    assert page.inner_text("#p-set-noise_scale-err").startswith("Must be a number")
    assert page.get_attribute("#p-set-noise_scale", "aria-invalid") == "true"
    assert httpx.get(f"{server.url}/v1/presets/Steady").status_code == 404
    # A number the browser cannot read ("1e") was dropped from the preset unseen (a new-user trial).
    page.get_by_label("noise_scale").fill("0.5")
    page.get_by_label("noise_w_scale").press_sequentially("1e")
    page.get_by_role("button", name="Create preset").click()
    page.locator("#p-set-noise_w_scale-err", has_text="must be a number").wait_for()
    assert page.inner_text("#p-set-noise_w_scale-err") == "Must be a number."  # as the server's (it said "Noise_w_scale")
    assert httpx.get(f"{server.url}/v1/presets/Steady").status_code == 404
    page.get_by_label("noise_w_scale").fill("")
    page.get_by_label("noise_scale").fill("0.3")
    page.get_by_label("noise_w_scale").fill("0")
    page.get_by_role("button", name="Create preset").click()
    page.wait_for_selector("tr[data-preset='Steady']")
    assert httpx.get(f"{server.url}/v1/presets/Steady").json()["settings"] == {"noise_scale": 0.3, "noise_w_scale": 0}
    assert page.input_value("#p-set-noise_scale") == ""  # the form is back to the defaults
    page.get_by_role("button", name="Edit Steady").click()
    sync_api.expect(page.locator("#p-set-noise_scale")).to_have_value("0.3")  # filled once the preset is read
    page.get_by_label("noise_w_scale").fill("")
    page.get_by_role("button", name="Save changes").click()
    page.locator("#form-status[data-kind='ok']").wait_for()
    assert httpx.get(f"{server.url}/v1/presets/Steady").json()["settings"] == {"noise_scale": 0.3}
    assert httpx.delete(f"{server.url}/v1/presets/Steady").status_code == 204


def test_the_live_page_shows_only_the_lanes_a_model_has(server: LiveServer, page: sync_api.Page) -> None:
    assert httpx.post(f"{server.url}/v1/audio/speech", json={"input": "Lanes.", "response_format": "wav"},
                      timeout=60).status_code == 200
    lanes = httpx.get(f"{server.url}/v1/stats").json()["models"]["piper-joe"]["lanes"]
    assert list(lanes) == ["synth"]  # Piper has no LM lanes (prefill, decode) nor codec lanes
    page.goto(f"{server.url}/live")
    cell = page.locator("tr[data-model='piper-joe'] td.batch")
    cell.filter(has_text="synthesis").wait_for()
    assert "LM" not in cell.inner_text() and "decode" not in cell.inner_text()
    assert page.locator("#batch-legend span").all_inner_texts() == ["synthesis"]


def test_studio_is_usable_from_the_keyboard(server: LiveServer, page: sync_api.Page) -> None:
    open_studio(page, server)
    page.focus("#text")
    order = []
    for _ in range(5):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id"))
    assert order == ["model", "voice", "speed", "keep", "speak"]
    # Speak disables itself: the keyboard goes to Stop, not to <body> (found by a new-user trial).
    page.keyboard.press("Enter")
    page.wait_for_function("document.activeElement.id === 'stop'")
    page.keyboard.press("Enter")
    page.wait_for_function("document.activeElement.id === 'speak'")


def test_a_take_deleted_in_another_tab_leaves_the_list(server: LiveServer, page: sync_api.Page) -> None:
    """Delete on a take another tab had deleted said "Could not delete: no take ..." and left the
    take in the list for good (found by a new-user trial): the list is refreshed instead."""
    take = httpx.post(f"{server.url}/v1/takes", json={
        "text": "Gone elsewhere.", "model": "piper-joe", "voice": "default", "sample_rate": 24000,
        "audio": base64.b64encode(b"\0\0" * 2400).decode()}).json()
    open_studio(page, server)
    item = page.locator(f"li[data-take-id='{take['id']}']")
    item.wait_for()
    assert httpx.delete(f"{server.url}/v1/takes/{take['id']}").status_code == 204  # the other tab
    item.get_by_role("button", name="Delete").click()
    item.wait_for(state="detached")
    assert page.inner_text("#takes-status") == ""
    assert page.evaluate("document.activeElement.id") == "takes-h"


def test_text_with_nothing_to_speak_is_refused_in_the_page(server: LiveServer, page: sync_api.Page) -> None:
    """Spaces: the page's own check. Emoji alone go to the server (its text_emoji setting decides: the
    page refused what `text_emoji = "name"` speaks, found by a new-user trial), whose error shows."""
    open_studio(page, server)
    page.fill("#text", "   ")
    page.click("#speak")
    page.locator("#status", has_text="Type some text").wait_for()
    page.fill("#text", "😀🎉")
    page.click("#speak")
    page.locator("#status[data-kind='error']", has_text="nothing").wait_for(timeout=30_000)
    assert page.is_enabled("#speak") and page.evaluate("window.voxgate.lastDone") is None


def test_the_folder_form_is_off_where_the_server_takes_no_folders(server: LiveServer, page: sync_api.Page) -> None:
    """Without `local_model_roots` the Library's "Add a model folder" form was there to fill in, and only
    its submit said the feature is off, marking the path as wrong (found by a new-user trial)."""
    page.goto(f"{server.url}/library")
    page.wait_for_selector("#installed tr", state="attached")
    assert not page.is_visible("#folder-form")
    assert "local_model_roots" in page.inner_text("#folder-off")


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

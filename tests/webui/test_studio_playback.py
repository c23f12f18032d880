"""The studio while it speaks, as new users tried it (a trial that found these): the wait for a
model to load said why, and the keyboard stops what plays. Headless Debian Chromium via Playwright.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
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


def test_a_long_model_load_is_polled_less_and_less_often(server: LiveServer, page: sync_api.Page,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait for a model to load asked GET /v1/models/{id} every 0.4 s for as long as the load took
    (150 requests for a minute's load): now at once, then less and less often (up to every 2 s)."""
    residency = server.app_state.residency
    load = residency._loader

    def slow_load(*args: Any) -> Any:
        time.sleep(6.0)  # (in the load's worker thread): a long load
        return load(*args)

    monkeypatch.setattr(residency, "_loader", slow_load)
    httpx.post(f"{server.url}/v1/models/piper-joe/unload", json={})
    open_studio(page, server.url)
    page.uncheck("#keep")
    asked: list[float] = []
    page.on("request", lambda r: asked.append(time.monotonic()) if r.url.endswith("/v1/models/piper-joe") else None)
    page.fill("#text", "Said once the model has loaded.")
    clicked = time.monotonic()
    page.click("#speak")
    page.locator("#status", has_text="Loading the model piper-joe").wait_for(timeout=10_000)
    assert time.monotonic() - clicked < 2.0  # (said as soon as it was seen: no slower at the start)
    page.locator("#status", has_text="Done:").wait_for(timeout=60_000)
    during = [t - clicked for t in asked]
    # (every 0.4 s: 2.5 a second; now 4 in the first 2 s, then one each 2 s)
    assert 3 <= len(during) <= 5 + during[-1] / 2, during


def test_a_take_stopped_while_the_model_loads_says_so(server: LiveServer, page: sync_api.Page,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped while its model loaded, a take said "Stopped after 0.0 s of 0.0 s." (once the cancelled
    utterance's end came, over the "Stopped." said at once)."""
    residency = server.app_state.residency
    load = residency._loader
    loading = threading.Event()

    def slow_load(*args: Any) -> Any:
        loading.set()  # (the text was sent: its utterance asked for the model)
        time.sleep(2.0)  # (in the load's worker thread): a load the page can be seen waiting for
        return load(*args)

    monkeypatch.setattr(residency, "_loader", slow_load)
    httpx.post(f"{server.url}/v1/models/piper-joe/unload", json={})
    open_studio(page, server.url)
    before = len(httpx.get(f"{server.url}/v1/takes").json()["data"])
    page.fill("#text", "Stopped before a word of it.")
    page.click("#speak")
    assert loading.wait(30)
    page.click("#stop")
    page.wait_for_function("window.voxgate.lastDone !== null && window.voxgate.lastDone.cancelled", timeout=10_000)
    # (said once the player has told where it stopped: a moment after the Stop)
    page.locator("#status", has_text="Stopped before").wait_for(timeout=5_000)
    assert page.inner_text("#status") == "Stopped before any audio came."
    assert len(httpx.get(f"{server.url}/v1/takes").json()["data"]) == before  # nothing heard, nothing kept
    assert server.wait_idle() == 0


def test_a_stop_before_the_session_is_ready_is_not_ignored(server: LiveServer, page: sync_api.Page,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A Stop pressed while the Speak was still getting its session ready (a slow network, a busy
    server) was ignored: the text was sent once the session was ready, and the take played after all."""
    update = Session.update

    async def slow_update(self: Session, session: Any) -> None:
        await asyncio.sleep(1.0)  # (the answer a slow network or server gives): a Stop comes before it
        await update(self, session)

    monkeypatch.setattr(Session, "update", slow_update)
    open_studio(page, server.url)
    page.uncheck("#keep")
    sent: list[str] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda frame: sent.append(str(frame))))
    page.fill("#text", "The words of the take that was stopped.")
    page.click("#speak")
    page.click("#stop")
    assert page.inner_text("#status") == "Stopped." and page.is_enabled("#speak")
    page.fill("#text", "The words of the next take.")
    page.click("#speak")  # (its session is answered after the first's)
    page.locator("#status", has_text="Done:").wait_for(timeout=60_000)
    spoken = [frame for frame in sent if "text.append" in frame]
    assert spoken and all("the next take" in frame for frame in spoken), spoken
    assert page.evaluate("window.voxgate.lastDone.audio_ms") > 500


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


# The browser's sound, as it fails on a user's machine: each AudioContext made is kept in
# window.contexts, and window.refuseSound makes resume() wait for ever (Chrome's answer to a page its
# autoplay policy does not let play) with the context "suspended"; window.failPlayer makes loading the
# player's AudioWorklet module fail; window.said lists what #status said.
SOUND = """
window.contexts = [];
window.refuseSound = false;
const Real = window.AudioContext;
window.AudioContext = class extends Real {
  constructor(...args) { super(...args); window.contexts.push(this); }
  get state() { return window.refuseSound ? "suspended" : super.state; }
  resume() { return window.refuseSound ? new Promise(() => {}) : super.resume(); }
};
window.failPlayer = false;  // the player's module not loaded (as when the browser aborts it)
const addModule = AudioWorklet.prototype.addModule;
AudioWorklet.prototype.addModule = function (...args) {
  return window.failPlayer ? Promise.reject(new DOMException("Unable to load a worklet's module.", "AbortError"))
                           : addModule.apply(this, args);
};
window.said = [];
document.addEventListener("DOMContentLoaded", () => new MutationObserver(() => {
  window.said.push(document.querySelector("#status").textContent);
}).observe(document.querySelector("#status"), { childList: true, characterData: true, subtree: true }));
"""


def test_sound_the_browser_will_not_play_is_said_once_not_waited_for(server: LiveServer,
                                                                     page: sync_api.Page) -> None:
    """A Speak the browser did not let play sound (autoplay refused: Chrome leaves resume() pending)
    waited on "Synthesising…" for ever, with Speak disabled; a context that failed half made (no player)
    answered the next Speak with "Error: Cannot read properties of null"."""
    page.add_init_script(SOUND)
    open_studio(page, server.url)
    page.evaluate("window.refuseSound = true")
    page.fill("#text", "Not heard.")
    for _ in range(2):  # the same words each time, not a new error
        page.click("#speak")
        page.locator("#status", has_text="The browser has not let this page play sound").wait_for(timeout=10_000)
        assert page.is_enabled("#speak") and page.is_disabled("#stop")
    errors = [s for s in page.evaluate("window.said") if s.startswith("The browser")]
    assert len(set(errors)) == 1 and "allow sound for this site" in errors[0], errors
    assert page.get_attribute("#status", "data-kind") == "error"

    # Allowed now: the same page speaks.
    page.evaluate("window.refuseSound = false")
    page.click("#speak")
    page.locator("#status", has_text="Done:").wait_for(timeout=60_000)

    # A player that could not be made: said, and made again by the next Speak.
    open_studio(page, server.url)
    page.evaluate("window.failPlayer = true")
    page.click("#speak")
    page.locator("#status", has_text="The browser could not start playing sound").wait_for(timeout=10_000)
    assert "AbortError" in page.inner_text("#status") and page.is_enabled("#speak")
    page.evaluate("window.failPlayer = false")
    page.click("#speak")
    page.locator("#status", has_text="Done:").wait_for(timeout=60_000)


def test_sound_lost_while_a_take_plays_ends_it_with_one_message(server: LiveServer, page: sync_api.Page) -> None:
    """The sound device going away mid-take (Chrome fires an error event; the system suspends the
    context) left the page on "Playing…" for ever, Stop the only way out."""
    page.add_init_script(SOUND)
    open_studio(page, server.url)
    before = len(httpx.get(f"{server.url}/v1/takes").json()["data"])
    page.fill("#text", LONG_TEXT)
    for n, lose in enumerate(["ctx.dispatchEvent(new Event('error')); ctx.suspend().catch(() => {})",
                              "ctx.suspend()"]):
        page.click("#speak")
        page.wait_for_function("window.voxgate.playedMs > 500", timeout=60_000)
        page.evaluate("window.said = []")
        page.evaluate(f"() => {{ const ctx = window.contexts[{n}]; {lose}; }}")
        page.locator("#status", has_text="Playback stopped: the sound device").wait_for(timeout=10_000)
        assert page.is_enabled("#speak") and page.is_disabled("#stop")
        page.wait_for_timeout(500)  # (the state changes that come with it)
        said = page.evaluate("window.said")
        assert len([s for s in said if s.startswith("Playback stopped")]) == 1, said
        assert "connected" in said[-1] and not said[-1].startswith("Error"), said
        assert server.wait_idle() == 0  # the synthesis was cancelled, or had ended

    # The next Speak opens the sound again.
    page.fill("#text", "Heard again.")
    page.click("#speak")
    page.locator("#status", has_text="Done:").wait_for(timeout=60_000)
    assert page.evaluate("window.contexts.length") == 3
    assert len(httpx.get(f"{server.url}/v1/takes").json()["data"]) >= before + 1


def test_a_server_stopping_mid_take_is_said_with_what_to_do(tmp_path: Path, page: sync_api.Page) -> None:
    """The server stopped (Ctrl-C, a restart) while a take was spoken: the studio said only "Error:
    The realtime connection closed", not that the server had gone, nor what to do."""
    stopping = run_server(tmp_path, graceful_shutdown_s=1.0)
    server = next(stopping)
    try:
        open_studio(page, server.url)
        page.uncheck("#keep")
        page.fill("#text", LONG_TEXT * 3)
        page.click("#speak")
        page.wait_for_function("window.voxgate.playedMs > 500", timeout=60_000)
    finally:
        stopping.close()  # (the server's shutdown: sessions still speaking are closed with 1012)
    # What came before the close plays out (test below); stopped, the close is said with the Stop.
    page.locator("#status", has_text="that came before the take failed").wait_for(timeout=15_000)
    page.click("#stop")
    page.locator("#status", has_text="Stopped after").wait_for(timeout=5_000)  # (once the player said where)
    said = page.inner_text("#status")
    assert "The server closed the connection" in said and "Stopped after" in said, said
    assert "press Speak again once it is back" in said and "realtime connection closed" not in said, said
    assert page.is_enabled("#speak")


def test_a_connection_lost_mid_take_plays_what_came_then_says_so(server: LiveServer, page: sync_api.Page,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The realtime connection lost part way through a take (a server restart, a network drop): the
    error was said at once and Speak enabled while the audio that had come played on, and what was
    heard was not kept, where a Stop or a lost sound device keeps it. Now what came plays out, Speak
    waits for it, and one message says why the take ended and what it keeps."""
    on_audio = Session.on_audio
    sent_ms: list[float] = []  # the audio each take had sent when its connection was closed

    async def cut_off(self: Session, utterance: Any, pcm: Any, words: Any, estimated: bool) -> None:
        await on_audio(self, utterance, pcm, words, estimated)
        if len(pcm):  # (one chunk, then the connection closes)
            sent_ms.append(1000 * len(pcm) / utterance.sample_rate)
            await self.connection.close(1012, "it is restarting")

    monkeypatch.setattr(Session, "on_audio", cut_off)
    page.add_init_script(SOUND)  # (window.said)
    open_studio(page, server.url)
    before = len(httpx.get(f"{server.url}/v1/takes").json()["data"])
    page.fill("#text", LONG_TEXT)
    page.click("#speak")
    page.locator("#status", has_text="that came before the take failed").wait_for(timeout=60_000)
    assert page.is_disabled("#speak") and page.is_enabled("#stop")  # (it plays)
    page.locator("#status", has_text="The server closed the connection").wait_for(timeout=30_000)
    said = page.inner_text("#status")
    assert "(it is restarting): press Speak again once it is back." in said, said
    assert said.endswith(" heard.") and "The take keeps the" in said, said
    assert page.is_enabled("#speak") and page.evaluate("window.voxgate.playerState") == "idle"
    assert len([s for s in page.evaluate("window.said") if "closed the connection" in s]) == 1  # said once
    page.wait_for_function(f"window.voxgate.takes === {before + 1}", timeout=30_000)
    assert abs(page.evaluate("window.voxgate.lastKept.audio_ms") - sent_ms[0]) < 50  # all that came, heard

    # Stopped while what came plays: the Stop says so, with the failure, and keeps what was heard.
    page.click("#speak")
    page.locator("#status", has_text="that came before the take failed").wait_for(timeout=60_000)
    page.wait_for_function("window.voxgate.playedMs > 300", timeout=10_000)  # (some heard, by the reports)
    page.click("#stop")
    page.locator("#status", has_text="Stopped after").wait_for(timeout=5_000)
    said = page.inner_text("#status")
    assert said.startswith("Error: The server closed the connection") and "Stopped after" in said, said
    assert "that came; the take keeps the" in said and page.is_enabled("#speak"), said
    page.wait_for_function(f"window.voxgate.takes === {before + 2}", timeout=30_000)
    assert page.evaluate("window.voxgate.lastKept.audio_ms") < sent_ms[1]

"""Takes in the studio and in projects, as new users tried them (a trial that found these): one
plays at a time, and a download has a name that says what it is. Headless Debian Chromium via
Playwright.
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


def add_take(server: LiveServer, text: str, voice: str = "default", seconds: float = 4.0) -> dict[str, Any]:
    """A take of `seconds` of silence (it plays as long as speech would)."""
    query = httpx.QueryParams(text=text, model="piper-joe", voice=voice, sample_rate=24000)
    res = httpx.post(f"{server.url}/v1/takes?{query}", content=b"\0\0" * int(24000 * seconds),
                     headers={"Content-Type": "audio/pcm"})
    assert res.status_code == 201, res.text
    take: dict[str, Any] = res.json()
    return take


def playing(audio: Any) -> bool:
    return bool(audio.evaluate("(a) => !a.paused && !a.ended"))


def start(audio: Any) -> None:
    audio.evaluate("(a) => a.play()")  # (as its own play button does)
    audio.page.wait_for_function("(a) => a.currentTime > 0.1", arg=audio.element_handle())


def test_one_take_plays_at_a_time_in_the_studio(server: LiveServer, page: sync_api.Page) -> None:
    """A take started while another played left both playing over each other."""
    first, second = add_take(server, "First take."), add_take(server, "Second take.")
    open_studio(page, server.url)
    a = page.locator(f"li[data-take-id='{first['id']}'] audio")
    b = page.locator(f"li[data-take-id='{second['id']}'] audio")
    start(a)
    start(b)
    assert playing(b) and not playing(a)  # the first gave way

    # Speak: the replay gives way to the new take ...
    page.uncheck("#keep")
    page.fill("#text", LONG_TEXT)
    page.click("#speak")
    page.wait_for_function("window.voxgate.playedMs > 300", timeout=60_000)
    assert not playing(b)
    # ... and a replay started meanwhile stops the live take, as Stop does.
    start(a)
    page.wait_for_function("window.voxgate.playerState === 'idle'", timeout=10_000)
    page.locator("#status", has_text="Stopped").wait_for(timeout=10_000)
    assert page.is_disabled("#stop") and playing(a)
    a.evaluate("(a) => a.pause()")


def test_one_take_plays_at_a_time_in_a_project(server: LiveServer, page: sync_api.Page) -> None:
    """The trial's case: a project's takes, each with its own player."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Players"}).json()
    base = f"{server.url}/v1/projects/{project['id']}"
    text = "The keeper climbed the stairs at dusk, and lit the lamp.\n\nFar out, a ship answered him."
    httpx.post(f"{base}/import", json={"text": text, "format": "text", "apply": True}).raise_for_status()
    httpx.post(f"{base}/generate", json={}).raise_for_status()
    deadline = time.monotonic() + 60
    while httpx.get(f"{base}/job").json()["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    page.goto(f"{server.url}/projects/{project['id']}")
    a = page.get_by_label("Listen to take 1 of passage 1")
    b = page.get_by_label("Listen to take 1 of passage 2")
    b.wait_for()
    start(a)
    start(b)
    assert playing(b) and not playing(a)
    start(a)
    assert playing(a) and not playing(b)


def test_a_download_is_named_after_the_take(server: LiveServer, page: sync_api.Page) -> None:
    """Every download was `take-<id>.wav`: a folder of them said nothing of what each holds."""
    take = add_take(server, 'Grüß Gott, Émile! <break time="500ms"/> A name / with "odd" bits: *.wav?',
                    voice="Slow Joe.v2", seconds=0.5)
    open_studio(page, server.url)
    row = page.locator(f"li[data-take-id='{take['id']}']")
    for fmt in ("WAV", "MP3"):
        with page.expect_download() as download:
            row.get_by_role("link", name=f"Download as {fmt}").click()
        name = download.value.suggested_filename
        assert name == f"gruss-gott-emile-a-name-with-odd-bits_slow-joe-v2_{take['id']}.{fmt.lower()}"


def labels(page: sync_api.Page, selector: str) -> list[str]:
    return [str(label) for label in page.eval_on_selector_all(
        f"#takes li.take {selector}", "(els) => els.map((e) => e.getAttribute('aria-label'))")]


def test_takes_made_in_the_same_second_have_distinct_labels(server: LiveServer, page: sync_api.Page,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Takes were named by the time they were made, to the second: two made in the same second (a
    Speak stopped at once and pressed again) had the same labels ("Replay take from 12:00:01"), and
    the same time shown, so a user could not tell which was which."""
    for take in httpx.get(f"{server.url}/v1/takes").json()["data"]:
        httpx.delete(f"{server.url}/v1/takes/{take['id']}").raise_for_status()
    second = float(int(time.time()))
    clock = iter([second + 0.1, second + 0.4, second + 0.7])
    monkeypatch.setattr("gateway.takes.time", type("Clock", (), {"time": staticmethod(lambda: next(clock))}))
    first, other = add_take(server, "The same words.", seconds=0.5), add_take(server, "The same words.", seconds=0.5)
    assert int(first["created_at"]) == int(other["created_at"])
    open_studio(page, server.url)
    page.wait_for_function("document.querySelectorAll('#takes li.take').length === 2")
    replays = labels(page, "audio")
    assert len(set(replays)) == 2 and replays[0] == f"{replays[1]} (2)", replays  # (newest first)
    for selector in ("button", "a.button"):
        assert len(set(labels(page, selector))) == len(labels(page, selector)), labels(page, selector)
    shown = page.eval_on_selector_all("#takes .take-when", "(els) => els.map((e) => e.textContent)")
    assert shown == [replays[0].removeprefix("Replay take from "), replays[1].removeprefix("Replay take from ")]

    # A third in that second, listed when the page is seen again; then the first deleted here.
    add_take(server, "The same words.", seconds=0.5)
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    page.wait_for_function("document.querySelectorAll('#takes li.take').length === 3")
    assert len(set(labels(page, "audio"))) == 3
    page.locator(f"li[data-take-id='{first['id']}']").get_by_role("button", name="Delete").click()
    page.wait_for_function("document.querySelectorAll('#takes li.take').length === 2")
    replays = labels(page, "audio")
    assert len(set(replays)) == 2 and replays[0] == f"{replays[1]} (2)", replays


def test_takes_past_the_first_hundred_are_said_and_can_be_listed(server: LiveServer, page: sync_api.Page) -> None:
    """The studio listed the newest 100 takes (GET /v1/takes' default limit) as if they were all: the
    others, still on the server's disk, could not be replayed, downloaded or deleted from the page."""
    for take in httpx.get(f"{server.url}/v1/takes", params={"limit": 1000}).json()["data"]:
        httpx.delete(f"{server.url}/v1/takes/{take['id']}").raise_for_status()
    oldest = add_take(server, "The oldest take.", seconds=0.05)
    for i in range(102):
        add_take(server, f"Take number {i}.", seconds=0.05)
    open_studio(page, server.url)
    page.wait_for_function("document.querySelectorAll('#takes li.take').length === 100")
    more = page.locator("#takes-more")
    more.wait_for()
    assert more.inner_text().startswith("The newest 100 of 103 takes are listed.")
    page.get_by_role("button", name="Show 3 more").click()
    page.wait_for_function("document.querySelectorAll('#takes li.take').length === 103")
    assert more.is_hidden() and page.evaluate("document.activeElement.id") == "takes-h"
    page.locator(f"li[data-take-id='{oldest['id']}']").get_by_role("button", name="Delete").click()
    page.wait_for_function("document.querySelectorAll('#takes li.take').length === 102")
    assert more.is_hidden()

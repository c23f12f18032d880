"""The studio with the keyboard alone, as someone who uses no mouse (and a screen reader) does:
every stop of the Tab order shows where it is, buttons work with Enter and Space, and a control
that disables or hides itself hands the keyboard on instead of dropping it to <body>. Form errors
are tied to their fields (aria-invalid, aria-describedby). Found by an accessibility trial:
Generate and Install dropped the keyboard to the top of the page, the sign-in dialog closed by
Escape did too, the amber focus ring was 2:1 on white, the character counter announced every
keystroke, and the projects' and sign-in's errors were not tied to their fields.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, run_server
from tests.gateway.test_keys import keyed_server
from tests.webui.conftest import HAS_CHROMIUM

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")

FOCUSED = """() => { const e = document.activeElement;
  return e === document.body || !e ? null : (e.id || e.getAttribute('aria-label') || e.textContent.trim()); }"""
# What shows the focus: the outline, and inside it the navy ring that makes it 3:1 on white.
INDICATOR = """() => { const s = getComputedStyle(document.activeElement);
  return [s.outlineStyle, s.outlineColor, s.boxShadow]; }"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    for server in run_server(tmp_path_factory.mktemp("data")):
        httpx.post(f"{server.url}/v1/presets", json={"name": "Calm Joe", "model": "piper-joe", "voice": "default",
                                                     "speed": 0.9}).raise_for_status()
        yield server


def focused(page: Any) -> str | None:
    return page.evaluate(FOCUSED)


def tab_to(page: Any, target: str, limit: int = 60) -> list[str]:
    """Tab until the element `target` (an id or accessible name) has the focus; every stop on the
    way must show it (a visible outline). Returns the stops."""
    stops: list[str] = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        name = focused(page)
        assert name is not None, f"the keyboard fell to <body> after {stops}"
        style, _color, _shadow = page.evaluate(INDICATOR)
        tag = page.evaluate("document.activeElement.tagName")
        if tag != "AUDIO":  # (its inner controls draw their own ring)
            assert style != "none", f"no focus indicator on {name}"
        stops.append(name)
        if name == target:
            return stops
    raise AssertionError(f"{target} is not in the Tab order: {stops}")


def test_studio_by_keyboard_alone(server: LiveServer, page: Any) -> None:
    page.goto(server.url + "/")
    page.wait_for_function("document.querySelector('#voice').options.length > 1")
    stops = tab_to(page, "text")
    assert stops[0] == "Skip to content"
    assert page.get_attribute("#text", "aria-describedby") == "count"  # the counter is read with the field
    assert page.get_attribute("#count", "aria-live") is None  # ... not at each keystroke
    page.keyboard.press("Control+A")
    page.keyboard.type("Typed, switched and spoken with the keyboard alone.")
    assert tab_to(page, "model") == ["model"]
    tab_to(page, "voice")
    page.keyboard.press("ArrowDown")  # to the preset: its speed comes with it
    assert page.input_value("#voice") == "Calm Joe" and page.inner_text("#speed-out") == "0.90×"
    tab_to(page, "speed")
    page.keyboard.press("ArrowRight")
    assert page.inner_text("#speed-out") == "0.95×"
    tab_to(page, "keep")
    page.keyboard.press("Space")
    assert not page.is_checked("#keep")
    page.keyboard.press("Space")
    assert page.is_checked("#keep")
    tab_to(page, "speak")
    style, color, shadow = page.evaluate(INDICATOR)
    assert style == "solid" and "rgb(22, 32, 58)" in shadow, (color, shadow)  # the navy inner ring
    page.keyboard.press("Enter")
    page.wait_for_function("document.activeElement.id === 'stop'")  # Speak disabled itself: on to Stop
    page.wait_for_function("window.voxgate.lastDone !== null", timeout=60_000)
    page.locator("#status", has_text="Done:").wait_for(timeout=30_000)
    assert focused(page) == "speak"  # ... and back when it is over
    page.wait_for_selector("#takes li.take")
    take = page.locator("#takes li.take").first
    assert take.get_by_role("link", name="Download as MP3: take from").count() == 1  # named with its take
    tab_to(page, take.get_by_role("button").get_attribute("aria-label"))
    page.keyboard.press("Enter")  # Delete: the keyboard goes to the Takes heading
    page.wait_for_function("document.activeElement.id === 'takes-h'")
    assert page.locator("#takes li.take").count() == 0


def test_studio_says_the_limit_once(server: LiveServer, page: Any) -> None:
    page.goto(server.url + "/")
    page.wait_for_function("document.querySelector('#voice').options.length > 0")
    limit = int(page.get_attribute("#text", "data-max"))
    page.fill("#text", "a" * (limit - 1))
    page.focus("#text")
    page.keyboard.press("End")
    page.keyboard.type("b")
    assert page.inner_text("#status") == f"The text is at the {limit}-character limit of one request."
    page.keyboard.press("Backspace")
    assert page.inner_text("#status") == ""


def test_a_preset_by_keyboard(server: LiveServer, page: Any) -> None:
    page.goto(server.url + "/voices")
    page.wait_for_function("document.querySelector('#p-voice').options.length > 0")
    tab_to(page, "p-name")
    page.keyboard.type("bad/name")
    page.keyboard.press("Enter")
    page.locator("#p-name-err", has_text="characters").wait_for()
    assert focused(page) == "p-name" and page.get_attribute("#p-name", "aria-invalid") == "true"
    assert "p-name-err" in page.get_attribute("#p-name", "aria-describedby").split()
    page.keyboard.press("Control+A")
    page.keyboard.type("Keyboard Joe")
    page.keyboard.press("Enter")
    page.locator("#form-status", has_text="Created").wait_for()
    assert page.get_attribute("#p-name", "aria-invalid") is None
    assert httpx.get(f"{server.url}/v1/presets/Keyboard%20Joe").status_code == 200


def test_a_project_by_keyboard(server: LiveServer, page: Any) -> None:
    page.goto(server.url + "/projects")
    page.wait_for_function("document.querySelector('#np-speaker').options.length > 0")
    tab_to(page, "np-name")
    page.keyboard.press("Enter")  # no name: the error is the field's
    page.locator("#np-status[data-kind=error]").wait_for()
    assert focused(page) == "np-name" and page.get_attribute("#np-name", "aria-invalid") == "true"
    assert page.get_attribute("#np-name", "aria-describedby") == "np-status"
    page.keyboard.type("Read by keyboard")
    page.keyboard.press("Enter")
    page.wait_for_url("**/projects/prj-*")
    page.wait_for_selector("#editor:not([hidden])")
    tab_to(page, "i-text")
    page.keyboard.type("It was a cold day.\n\nThe clocks struck thirteen.")
    tab_to(page, "i-preview")
    page.keyboard.press("Enter")
    page.wait_for_selector("#preview:not([hidden])")
    tab_to(page, "i-append")
    page.keyboard.press("Space")
    page.wait_for_selector("#passages li.passage")
    page.focus("#g-all")
    page.keyboard.press("Enter")
    page.wait_for_function("window.voxgate.job && window.voxgate.job.state !== 'running'", timeout=120_000)
    page.locator("#g-status", has_text="Generated 2 passages").wait_for()
    # Generate disabled itself (nothing is out of date) and Cancel hid: the keyboard is kept near.
    assert focused(page) in ("g-all", "g-cancel", "generate-h"), focused(page)
    page.fill("#s-name", "")
    page.focus("#s-name")
    page.keyboard.press("Enter")
    page.locator("#s-status[data-kind=error]").wait_for()
    assert page.get_attribute("#s-name", "aria-invalid") == "true"
    assert page.get_attribute("#s-name", "aria-describedby") == "s-status"


def test_a_projects_takes_and_joins_keep_the_keyboard(server: LiveServer, page: Any) -> None:
    """Each button of a take or a join (Choose, Trim silence, Undo, −/+) redraws the passages and
    joins: the keyboard fell to <body>, back at the top of the page, after every one."""
    base = f"{server.url}/v1/projects"
    project = httpx.post(base, json={"name": "Kept focus"}).json()
    base = f"{base}/{project['id']}"
    httpx.post(f"{base}/import", json={"text": "One.\n\nTwo.", "format": "text", "apply": True}).raise_for_status()
    first = httpx.get(base).json()["passages"][0]["id"]
    for body in ({}, {"passages": [first]}):
        httpx.post(f"{base}/generate", json=body).raise_for_status()
        deadline = time.monotonic() + 60
        while httpx.get(f"{base}/job").json()["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
    page.goto(f"{server.url}/projects/{project['id']}")
    page.wait_for_selector("li.join")

    def press(name: str, done: str) -> str | None:
        page.get_by_role("button", name=name, exact=True).focus()
        page.keyboard.press("Enter")
        page.wait_for_function(done, timeout=30_000)
        page.wait_for_timeout(300)
        return focused(page)

    passage = "window.voxgate.project.passages"
    # Take 2 is chosen, so its Choose is disabled: the keyboard stays with the take.
    assert press("Choose take 2 of passage 1", f"{passage}[0].chosen_take === {passage}[0].takes[1].id") \
        == "Edit take 2 of passage 1"
    press("Edit take 1 of passage 2", "true")
    assert press("Trim silence of take 1 of passage 2", f"{passage}[1].takes[0].num_edits === 1") \
        == "Trim silence of take 1 of passage 2"
    assert press("Undo the last edit of take 1 of passage 2", f"{passage}[1].takes[0].num_edits === 0") \
        == "Edit take 1 of passage 2"  # (Undo is disabled with no edit left)
    assert press("Lengthen the pause after passage 1", f"{passage}[0].pause_after_ms === 600") \
        == "Lengthen the pause after passage 1"
    assert press("Delete take 1 of passage 1", f"{passage}[0].takes.length === 1") == "Edit take 1 of passage 1"


def test_a_project_deleted_by_keyboard_keeps_the_keyboard_in_the_list(server: LiveServer, page: Any) -> None:
    """Delete removed its own row, and the keyboard fell to <body>, at the top of the page."""
    first = httpx.post(f"{server.url}/v1/projects", json={"name": "Keyboard first"}).json()
    httpx.post(f"{server.url}/v1/projects", json={"name": "Keyboard second"}).raise_for_status()
    page.goto(f"{server.url}/projects")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete project Keyboard second").focus()
    page.keyboard.press("Enter")
    page.locator("#list-status", has_text="Deleted").wait_for()
    page.wait_for_timeout(300)
    assert focused(page) == "list-h" or focused(page) == f"Delete project {first['name']}", focused(page)


def test_load_by_keyboard_keeps_the_row(server: LiveServer, page: Any) -> None:
    httpx.post(f"{server.url}/v1/models/piper-joe/unload", json={}, timeout=30)
    page.goto(server.url + "/library")
    page.wait_for_selector("#installed tr")
    tab_to(page, "Load piper-joe")
    page.keyboard.press("Enter")  # the table is drawn again: the keyboard stays with the model
    page.wait_for_function("document.activeElement.getAttribute('aria-label') === 'Unload piper-joe'", timeout=60_000)
    page.keyboard.press("Enter")
    page.wait_for_function("document.activeElement.getAttribute('aria-label') === 'Load piper-joe'", timeout=60_000)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    yield from keyed_server(tmp_path_factory, "studio", "--scope", "admin")


def test_sign_in_by_keyboard(keyed: tuple[LiveServer, str], page: Any) -> None:
    server, key = keyed
    page.goto(server.url + "/")
    page.locator("#signin").wait_for(state="visible")
    assert focused(page) == "signin-key"
    assert page.get_attribute("#signin-key", "aria-describedby") == "signin-status"  # why it asks
    page.keyboard.type("vxg_00000000_wrong")
    page.keyboard.press("Enter")
    page.locator("#signin-status", has_text="unknown or revoked").wait_for()
    assert page.get_attribute("#signin-key", "aria-invalid") == "true" and focused(page) == "signin-key"
    page.keyboard.press("Escape")  # closed: the keyboard goes to the header's Sign in, not to <body>
    page.locator("#signin").wait_for(state="hidden")
    # (the dialog's close handler moves the focus after it hides: wait for it, as for the dialog)
    page.wait_for_function("document.activeElement && document.activeElement.id === 'signout'", timeout=10_000)
    assert focused(page) == "signout" and page.inner_text("#signout") == "Sign in"
    page.keyboard.press("Enter")
    page.locator("#signin").wait_for(state="visible")
    assert focused(page) == "signin-key" and page.get_attribute("#signin-key", "aria-invalid") is None
    page.keyboard.type(key)
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelector('#voice').options.length > 0")  # reloaded, signed in

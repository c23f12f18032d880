"""Studio projects in headless Chromium, as a studio user works: buttons that come back when nothing
changed, another tab's work, a slow network, editing while a generation runs, typed words kept by a
split or a merge, a speaker no longer offered, and which passage failed (found by a studio-user trial)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, run_server
from tests.webui.conftest import HAS_CHROMIUM, LONG_TEXT, slow_network
from tests.webui.test_projects import project_state

pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"))


def generated(base: str, body: dict[str, Any] | None = None) -> None:
    """Generate (the out-of-date passages, or `body`'s) through the API, and wait for the job."""
    httpx.post(f"{base}/generate", json=body or {}).raise_for_status()
    deadline = time.monotonic() + 60
    while httpx.get(f"{base}/job").json()["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)


def test_a_passage_button_comes_back_when_nothing_changed(server: LiveServer, page: Any) -> None:
    """A passage's button disabled itself until the list was drawn again, which it is not when the
    project is unchanged: Delete stayed disabled after its confirmation was cancelled, and Generate
    after the generation it started was cancelled before a take came."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Unchanged"}).json()
    httpx.post(f"{server.url}/v1/projects/{project['id']}/import",
               json={"text": f"{LONG_TEXT}\n\nTwo.", "format": "text", "apply": True}).raise_for_status()
    page.goto(f"{server.url}/projects/{project['id']}")
    page.wait_for_function("document.querySelectorAll('li.passage').length === 2")
    page.once("dialog", lambda dialog: dialog.dismiss())
    delete = page.get_by_role("button", name="Delete passage 2")
    delete.click()
    page.wait_for_timeout(500)
    assert delete.is_enabled()
    assert len(httpx.get(f"{server.url}/v1/projects/{project['id']}").json()["passages"]) == 2
    generate = page.get_by_role("button", name="Generate passage 1", exact=True)
    generate.click()
    page.wait_for_function("window.voxgate.job && window.voxgate.job.state === 'running'")
    page.get_by_role("button", name="Cancel generation").click()
    page.wait_for_function("window.voxgate.job.state === 'cancelled'")
    assert page.evaluate("window.voxgate.project.passages[0].takes.length") == 0
    page.wait_for_function("!document.querySelector('li.passage button[aria-label=\"Generate passage 1\"]').disabled",
                           timeout=5_000)


def test_shortening_a_pause_of_0_leaves_the_join_buttons_usable(server: LiveServer, page: Any) -> None:
    """− at a pause of 0 ms asked for 0 again: the project was unchanged, so the join was not drawn
    again, and −, + and Reset stayed disabled."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Zero pause"}).json()
    base = f"{server.url}/v1/projects/{project['id']}"
    httpx.post(f"{base}/import", json={"text": "One.\n\nTwo.", "format": "text", "apply": True}).raise_for_status()
    generated(base)
    first = httpx.get(base).json()["passages"][0]["id"]
    httpx.patch(f"{base}/passages/{first}", json={"pause_ms": 0}).raise_for_status()
    page.goto(f"{server.url}/projects/{project['id']}")
    shorter = page.get_by_role("button", name="Shorten the pause after passage 1")
    shorter.click()
    page.wait_for_timeout(500)
    for name in ("Shorten the pause after passage 1", "Lengthen the pause after passage 1",
                 "Reset the pause after passage 1"):
        assert page.get_by_role("button", name=name, exact=False).is_enabled(), name


def test_work_of_another_tab_shows_when_the_page_is_seen_again(server: LiveServer, page: Any) -> None:
    """A generation started in another tab (or by the API), and a project made there, showed only
    after a reload: the passages stayed "not generated", Generate still offered them."""
    page.goto(f"{server.url}/projects")
    page.wait_for_function("document.querySelector('#np-speaker').options.length > 0")
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Made elsewhere"}).json()
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    page.wait_for_selector(f"li[data-project='{project['id']}']", timeout=5_000)

    base = f"{server.url}/v1/projects/{project['id']}"
    httpx.post(f"{base}/import", json={"text": "One.\n\nTwo.", "format": "text", "apply": True}).raise_for_status()
    page.goto(f"{server.url}/projects/{project['id']}")
    page.wait_for_function("document.querySelectorAll('li.passage').length === 2")
    httpx.post(f"{base}/generate", json={}).raise_for_status()
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    page.wait_for_function("window.voxgate.project.num_out_of_date === 0", timeout=60_000)
    page.wait_for_selector("li.join")
    page.locator("#g-status", has_text="Generated 2 passages").wait_for()
    assert page.inner_text("#g-all") == "Generate out-of-date passages (0)"


def test_a_double_click_on_a_slow_network_does_it_once(server: LiveServer, page: Any) -> None:
    """On a slow network a second click, before the first request was answered, sent it again:
    Create project made two projects, and Add these passages added the passages twice."""
    page.goto(f"{server.url}/projects")
    page.wait_for_function("document.querySelector('#np-speaker').options.length > 0")
    slow_network(page)
    page.fill("#np-name", "Slow network")
    page.dblclick("#np-create")
    page.wait_for_url("**/projects/prj-*")
    page.wait_for_function("window.voxgate.project !== null")
    page.wait_for_timeout(1_000)
    made = [p for p in httpx.get(f"{server.url}/v1/projects").json()["data"] if p["name"] == "Slow network"]
    assert len(made) == 1, made
    page.fill("#i-text", "One.\n\nTwo.")
    page.get_by_role("button", name="Preview the split").click()
    page.locator("#preview-list li").first.wait_for()
    page.dblclick("#i-append")
    page.wait_for_function("window.voxgate.project.passages.length === 2")
    page.wait_for_timeout(2_000)
    assert len(httpx.get(f"{server.url}/v1/projects/{made[0]['id']}").json()["passages"]) == 2


def test_a_passage_edited_while_it_is_generated_is_generated_again(server: LiveServer, page: Any) -> None:
    """The page says "you can go on editing" while it generates; a passage whose text was saved while
    the job spoke it got the take of its old text, and the job ended "Generated 2 passages." with that
    passage out of date. The page asks for it again (the job drops the ask if the take is current)."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Edited meanwhile"}).json()
    httpx.post(f"{server.url}/v1/projects/{project['id']}/import",
               json={"text": f"{LONG_TEXT}\n\nTwo.", "format": "text", "apply": True}).raise_for_status()
    page.goto(f"{server.url}/projects/{project['id']}")
    page.wait_for_function("document.querySelectorAll('li.passage').length === 2")
    first = project_state(page)["passages"][0]["id"]
    page.get_by_role("button", name="Generate out-of-date passages (2)").click()
    page.wait_for_function(f"window.voxgate.job && window.voxgate.job.current === '{first}'")
    page.get_by_label("Text of passage 1", exact=True).fill("A new first passage.")
    page.get_by_role("button", name="Save the text of passage 1").click()
    page.wait_for_function("window.voxgate.job && window.voxgate.job.state === 'done'", timeout=120_000)
    page.wait_for_function("window.voxgate.project.num_out_of_date === 0", timeout=5_000)
    passage = project_state(page)["passages"][0]
    chosen = next(t for t in passage["takes"] if t["id"] == passage["chosen_take"])
    assert chosen["text"] == "A new first passage."


def test_split_at_the_cursor_splits_the_text_as_typed(server: LiveServer, page: Any) -> None:
    """With words typed and not yet saved, Split at cursor split the saved text at the cursor's offset
    in the typed one (mid-word), and the typed words were lost."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Split typed"}).json()
    base = f"{server.url}/v1/projects/{project['id']}"
    httpx.post(f"{base}/import", json={"text": "Alpha beta gamma. Delta epsilon.", "format": "text",
                                       "apply": True}).raise_for_status()
    page.goto(f"{server.url}/projects/{project['id']}")
    box = page.get_by_label("Text of passage 1", exact=True)
    box.fill("Zero one two three. Alpha beta gamma. Delta epsilon.")
    box.evaluate("(t) => t.setSelectionRange(20, 20)")
    page.get_by_role("button", name="Split passage 1 at the cursor").click()
    page.wait_for_function("window.voxgate.project.passages.length === 2")
    assert [p["text"] for p in httpx.get(base).json()["passages"]] == [
        "Zero one two three.", "Alpha beta gamma. Delta epsilon."]


def test_merge_keeps_the_words_typed_in_both_passages(server: LiveServer, page: Any) -> None:
    """Merge with words typed and not saved merged the saved texts: the typed words were dropped
    without a word (the draft kept across a redraw only while the passage's text is unchanged)."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Merge typed"}).json()
    base = f"{server.url}/v1/projects/{project['id']}"
    httpx.post(f"{base}/import", json={"text": "One.\n\nTwo.", "format": "text", "apply": True}).raise_for_status()
    page.goto(f"{server.url}/projects/{project['id']}")
    page.get_by_label("Text of passage 1", exact=True).fill("One, typed.")
    page.get_by_label("Text of passage 2", exact=True).fill("Two, typed.")
    page.get_by_role("button", name="Merge passage 1 with passage 2").click()
    page.wait_for_function("window.voxgate.project.passages.length === 1")
    assert httpx.get(base).json()["passages"][0]["text"] == "One, typed. Two, typed."


def test_a_speaker_no_longer_offered_is_shown_not_hidden(server: LiveServer, page: Any) -> None:
    """A passage's speaker that is no longer offered (its preset deleted, or a voice of the model the
    project had before) showed as "Project default": the passage then failed to generate with an
    unknown voice the page did not show; and the project's, so shown as the first voice, was
    changed to it by any Save settings (a rename)."""
    assert httpx.post(f"{server.url}/v1/presets", json={"name": "Gone Soon", "speed": 1.1}).status_code == 201
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Lost speaker", "speaker": "Gone Soon"}).json()
    base = f"{server.url}/v1/projects/{project['id']}"
    httpx.post(f"{base}/import", json={"text": "One.\n\nTwo.", "format": "text", "apply": True}).raise_for_status()
    second = httpx.get(base).json()["passages"][1]["id"]
    httpx.patch(f"{base}/passages/{second}", json={"speaker": "Gone Soon"}).raise_for_status()
    assert httpx.delete(f"{server.url}/v1/presets/Gone Soon").status_code == 204
    page.goto(f"{server.url}/projects/{project['id']}")
    page.wait_for_function("document.querySelector('#s-speaker').options.length > 0")
    speaker = page.get_by_label("Speaker of passage 2")
    speaker.locator("option[value='Gone Soon']").wait_for(state="attached")
    assert speaker.input_value() == "Gone Soon"
    assert "not available" in speaker.locator("option:checked").inner_text()
    assert page.input_value("#s-speaker") == "Gone Soon"
    page.fill("#s-name", "Lost speaker, renamed")
    page.get_by_role("button", name="Save settings").click()
    page.locator("#s-status[data-kind]").wait_for()
    assert httpx.get(base).json()["speaker"] == "Gone Soon"  # not changed in silence to the first voice


def test_a_failed_passage_is_named_by_its_number(server: LiveServer, page: Any) -> None:
    """A job's failures were said as their messages alone ("1 failed: model 'piper-joe' has no voice
    or preset …"): which of the passages failed was not said."""
    assert httpx.post(f"{server.url}/v1/presets", json={"name": "Short Lived"}).status_code == 201
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "One fails"}).json()
    base = f"{server.url}/v1/projects/{project['id']}"
    httpx.post(f"{base}/import", json={"text": "One.\n\nTwo.\n\nThree.", "format": "text", "apply": True}).raise_for_status()
    second = httpx.get(base).json()["passages"][1]["id"]
    httpx.patch(f"{base}/passages/{second}", json={"speaker": "Short Lived"}).raise_for_status()
    assert httpx.delete(f"{server.url}/v1/presets/Short Lived").status_code == 204
    page.goto(f"{server.url}/projects/{project['id']}")
    page.get_by_role("button", name="Generate out-of-date passages (3)").click()
    page.locator("#g-status[data-kind='error']").wait_for(timeout=60_000)
    assert page.inner_text("#g-status").startswith("1 of 3 passages failed: passage 2: "), page.inner_text("#g-status")


def test_leaving_with_a_passage_text_not_saved_asks_first(server: LiveServer, page: Any) -> None:
    """Words typed in a passage and not saved were lost without a word by a reload or a link."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Unsaved words"}).json()
    httpx.post(f"{server.url}/v1/projects/{project['id']}/import",
               json={"text": "One.", "format": "text", "apply": True}).raise_for_status()
    dialogs: list[str] = []

    def stay(dialog: Any) -> None:
        dialogs.append(dialog.type)
        dialog.dismiss()  # stay on the page

    page.on("dialog", stay)
    page.goto(f"{server.url}/projects/{project['id']}")
    box = page.get_by_label("Text of passage 1", exact=True)
    box.fill("One, and more words.")
    page.get_by_role("link", name="All projects").click()
    page.wait_for_timeout(300)
    assert dialogs == ["beforeunload"] and box.input_value() == "One, and more words."
    page.get_by_role("button", name="Save the text of passage 1").click()
    page.wait_for_function("window.voxgate.project.passages[0].text === 'One, and more words.'")
    page.get_by_role("link", name="All projects").click()
    page.wait_for_url(f"{server.url}/projects")
    assert dialogs == ["beforeunload"]  # (saved: nothing to ask about)


@pytest.fixture(scope="module")
def with_folders(tmp_path_factory: pytest.TempPathFactory, orpheus_tiny: Path) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"), local_model_roots=(str(orpheus_tiny.parent),))


def test_a_project_whose_model_was_removed_can_be_given_another(with_folders: LiveServer, page: Any,
                                                                orpheus_tiny: Path) -> None:
    """A project whose model was removed from the library opened as "Could not open the project:
    unknown model": the pause was left empty, so Save settings said "type a number of milliseconds",
    and the Model picker showed the default model as if it were the project's."""
    server = with_folders
    install = {"path": str(orpheus_tiny), "family": "orpheus", "id": "short-lived"}
    assert httpx.post(f"{server.url}/v1/library/install", json=install, timeout=60).status_code in (200, 201)
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Model gone", "model": "short-lived",
                                                            "speaker": "leo"}).json()
    assert httpx.delete(f"{server.url}/v1/library/models/short-lived").status_code in (200, 204)
    page.goto(f"{server.url}/projects/{project['id']}")
    page.locator("#s-status", has_text="no longer installed").wait_for()
    assert page.inner_text("#p-status") == ""
    assert page.input_value("#s-model") == "short-lived" and page.input_value("#s-pause") == "500"
    page.select_option("#s-model", "piper-joe")
    page.wait_for_function("[...document.querySelector('#s-speaker').options].some((o) => o.value === 'default')")
    page.get_by_role("button", name="Save settings").click()
    page.locator("#s-status", has_text="Saved.").wait_for()
    assert httpx.get(f"{server.url}/v1/projects/{project['id']}").json()["model"] == "piper-joe"


def test_split_with_the_cursor_at_an_end_says_where_to_put_it(server: LiveServer, page: Any) -> None:
    """With the cursor at the start or the end of the text (where a click on Split leaves it when the
    text was never clicked), Split said "at must be a character offset inside the text (1-19)"."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Split where"}).json()
    httpx.post(f"{server.url}/v1/projects/{project['id']}/import",
               json={"text": "Alpha beta. Gamma delta.", "format": "text", "apply": True}).raise_for_status()
    page.goto(f"{server.url}/projects/{project['id']}")
    page.get_by_role("button", name="Split passage 1 at the cursor").click()
    status = page.locator("li.passage .status[data-kind='error']")
    status.wait_for()
    assert status.inner_text() == ("Could not split at cursor: put the cursor in the text where the passage "
                                   "should be split, then press Split at cursor.")
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == "Text of passage 1"


def test_settings_changed_elsewhere_are_not_undone_by_a_save_here(server: LiveServer, page: Any) -> None:
    """The settings form was filled once: a project renamed in another tab kept its old name here, and
    a Save of another setting (the pause) named it back. Seen again, the form is filled again (unless
    something is typed in it)."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "First name"}).json()
    page.goto(f"{server.url}/projects/{project['id']}")
    page.wait_for_function("document.querySelector('#s-pause').value === '500'")
    httpx.patch(f"{server.url}/v1/projects/{project['id']}", json={"name": "Renamed elsewhere"}).raise_for_status()
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    page.wait_for_function("document.querySelector('#s-name').value === 'Renamed elsewhere'", timeout=5_000)
    page.fill("#s-pause", "750")
    page.get_by_role("button", name="Save settings").click()
    page.locator("#s-status", has_text="Saved.").wait_for()
    saved = httpx.get(f"{server.url}/v1/projects/{project['id']}").json()
    assert (saved["name"], saved["pause_ms"]) == ("Renamed elsewhere", 750)
    # Typed and not saved: kept when the page is seen again.
    page.fill("#s-name", "Typed here")
    httpx.patch(f"{server.url}/v1/projects/{project['id']}", json={"pause_ms": 300}).raise_for_status()
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    page.wait_for_timeout(1_000)
    assert page.input_value("#s-name") == "Typed here"


def test_generate_speaks_the_text_as_typed(server: LiveServer, page: Any) -> None:
    """With words typed and not saved, a passage's Generate made a take of the saved text, shown as
    up to date beside the typed words it did not say."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Generate typed"}).json()
    httpx.post(f"{server.url}/v1/projects/{project['id']}/import",
               json={"text": "The old words.", "format": "text", "apply": True}).raise_for_status()
    page.goto(f"{server.url}/projects/{project['id']}")
    page.get_by_label("Text of passage 1", exact=True).fill("The new words.")
    page.get_by_role("button", name="Generate passage 1", exact=True).click()
    page.wait_for_function("window.voxgate.project.passages[0].takes.length === 1", timeout=60_000)
    passage = project_state(page)["passages"][0]
    assert passage["text"] == passage["takes"][0]["text"] == "The new words."


def test_generate_out_of_date_passages_speaks_the_text_as_typed(server: LiveServer, page: Any) -> None:
    """With words typed and not saved in a passage that was out of date, "Generate out-of-date passages"
    made a take of the saved text: the typed words were not saved (a passage's own Generate, a split
    and a merge save them first), and the passage showed "up to date" beside words it did not say.
    Words typed in a passage that was up to date make it one to generate too."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Generate all typed"}).json()
    base = f"{server.url}/v1/projects/{project['id']}"
    httpx.post(f"{base}/import", json={"text": "One, as imported.\n\nTwo, as imported.", "format": "text",
                                       "apply": True}).raise_for_status()
    generated(base, {"passages": [project_state_id(base, 1)]})  # passage 2 alone is out of date
    page.goto(f"{server.url}/projects/{project['id']}")
    button = page.get_by_role("button", name="Generate out-of-date passages (1)")
    button.wait_for()
    page.get_by_label("Text of passage 2", exact=True).fill("Two, as typed.")
    button.click()
    page.wait_for_function("window.voxgate.job && window.voxgate.job.state === 'done'", timeout=60_000)
    page.wait_for_function("window.voxgate.project.passages[1].takes.length === 1", timeout=10_000)
    second = httpx.get(base).json()["passages"][1]
    assert second["text"] == second["takes"][0]["text"] == "Two, as typed."

    # Nothing out of date, words typed in passage 1: the button offers it, and speaks them.
    page.wait_for_function("document.querySelector('#g-all').disabled")
    page.get_by_label("Text of passage 1", exact=True).fill("One, as typed.")
    page.get_by_role("button", name="Generate out-of-date passages (1)").click()
    page.wait_for_function("window.voxgate.project.passages[0].takes.length === 2", timeout=60_000)
    first = httpx.get(base).json()["passages"][0]
    assert first["text"] == "One, as typed." and not first["out_of_date"]
    assert [t["text"] for t in first["takes"]].count("One, as typed.") == 1

    # Words the server refuses (none): said with the passage they are of, and nothing generated.
    page.get_by_label("Text of passage 2", exact=True).fill("")
    page.get_by_role("button", name="Generate out-of-date passages (1)").click()
    page.locator("#g-status", has_text="Could not start: passage 2:").wait_for()
    assert httpx.get(base).json()["passages"][1]["text"] == "Two, as typed."


def project_state_id(base: str, n: int) -> str:
    """The id of passage `n` (1-based) of the project at `base`."""
    passage_id: str = httpx.get(base).json()["passages"][n - 1]["id"]
    return passage_id


def test_an_added_text_leaves_the_import_box(server: LiveServer, page: Any, tmp_path: Path) -> None:
    """Once its passages were added, the text (and the file chosen) stayed in the import form, where a
    second Preview and Add added every passage again."""
    project = httpx.post(f"{server.url}/v1/projects", json={"name": "Import once"}).json()
    page.goto(f"{server.url}/projects/{project['id']}")
    page.wait_for_function("window.voxgate.project !== null")
    story = tmp_path / "story.txt"
    story.write_text("One.\n\nTwo.", encoding="utf-8")
    page.set_input_files("#i-file", str(story))
    page.wait_for_function("document.querySelector('#i-text').value.includes('Two.')")
    page.get_by_role("button", name="Preview the split").click()
    page.get_by_role("button", name="Add these passages").click()
    page.wait_for_function("window.voxgate.project.passages.length === 2")
    assert page.input_value("#i-text") == "" and page.evaluate("document.querySelector('#i-file').files.length") == 0
    page.get_by_role("button", name="Preview the split").click()
    page.locator("#i-status[data-kind='error']", has_text="Choose a file or paste a text first").wait_for()
    assert page.is_hidden("#preview")
    assert len(httpx.get(f"{server.url}/v1/projects/{project['id']}").json()["passages"]) == 2

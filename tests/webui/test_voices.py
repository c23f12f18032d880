"""The Voices page's reference voices and voice design in headless Chromium (Debian's, via
Playwright), against one live server. Reference voices: a WAV made here is uploaded, listed,
played and deleted; bad uploads show the server's message by the field it names; Chromium's
fake microphone (`--use-fake-device-for-media-stream`) records one. Design: tiny random
Qwen3-TTS models (a VoiceDesign one and a CustomVoice one, which the page must not offer)
speak a description, which is saved as a preset. Cloning: a tiny random Base model speaks with a
reference voice ("Speak with this voice"). Presets themselves: tests/webui/test_studio.py.
"""

from __future__ import annotations

import io
import json
import shutil
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from gateway.cli import main
from tests.conftest import LiveServer, run_server
from tests.webui.conftest import ARGS, CHROMIUM, DESKTOP, HAS_CHROMIUM, PHONE

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium (scripts/test.sh installs it)")

MEDIA_ARGS = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]
DESCRIPTION = "A deep, calm voice, speaking slowly."
MAX_FRAMES = 16  # tiny random weights make noise: cap its length (generation_config.json)


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _qwen_folder(source: Path, out: Path, model_type: str) -> Path:
    shutil.copytree(source, out)
    for name, change in (("config.json", {"tts_model_type": model_type}),
                         ("generation_config.json", {"max_new_tokens": MAX_FRAMES})):
        data = json.loads((out / name).read_text())
        (out / name).write_text(json.dumps({**data, **change}))
    return out


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The embedded voice and, where torch is installed, a VoiceDesign, a CustomVoice and a Base model."""
    root = tmp_path_factory.mktemp("voices-page")
    data = root / "data"
    if _has_torch():
        tiny, base = request.getfixturevalue("qwen3_tts_tiny"), request.getfixturevalue("qwen3_tts_tiny_base")
        for model_id, source, model_type in (("tiny-design", tiny, "voice_design"),
                                             ("tiny-custom", tiny, "custom_voice"), ("tiny-clone", base, "base")):
            folder = _qwen_folder(source, root / model_id, model_type)
            assert main(["models", "add", "--family", "qwen3_tts", "--path", str(folder), "--id", model_id,
                         "--data-dir", str(data)]) == 0
    yield from run_server(data)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """tests/webui/conftest.py's browser with a fake microphone (a tone) and no permission prompt."""
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, args=ARGS + MEDIA_ARGS,
            headless=True, viewport=DESKTOP)
        context.set_default_timeout(30_000)
        yield context
        context.close()


def _wav_file(path: Path, seconds: float, rate: int = 16000) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    samples = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return path


def _open(page: sync_api.Page, server: LiveServer) -> None:
    page.goto(f"{server.url}/voices")
    page.wait_for_function("document.querySelector('#p-voice').options.length > 0")


def _references(server: LiveServer) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = httpx.get(f"{server.url}/v1/voices/references").json()["data"]
    return data


def _fill_reference(page: sync_api.Page, name: str, transcript: str) -> None:
    page.get_by_label("Reference name").fill(name)
    page.get_by_label("Transcript").fill(transcript)


def test_a_reference_is_uploaded_listed_played_and_deleted(server: LiveServer, page: sync_api.Page,
                                                           tmp_path: Path) -> None:
    _open(page, server)
    assert page.is_visible("#refs-empty")
    _fill_reference(page, "Ada", "Hello, this is Ada reading a short line.")
    page.get_by_label("Audio file").set_input_files(str(_wav_file(tmp_path / "ada.wav", 2.0)))
    page.get_by_role("button", name="Add reference voice").click()
    row = page.locator("tr[data-reference='Ada']")
    row.wait_for()
    assert "2.0 s" in row.inner_text() and "Hello, this is Ada" in row.inner_text()
    assert "Added “Ada”" in page.inner_text("#ref-form-status")
    assert page.input_value("#r-name") == "" and page.input_value("#r-transcript") == ""  # ready for the next
    (ada,) = _references(server)
    assert ada["source_name"] == "ada.wav" and abs(ada["audio_ms"] - 2000) < 1
    # offered where a Base model can clone it (this server has one when torch is installed)
    assert page.get_by_role("button", name="Speak with Ada").is_visible() == _has_torch()
    assert page.is_visible("#c-none") != _has_torch()

    page.get_by_role("button", name="Play Ada").click()  # the stored 24 kHz WAV, played through
    row.locator(".status", has_text="Played 2.0 s").wait_for(timeout=15_000)
    assert page.evaluate("document.querySelector('#ref-player').src").endswith("/v1/voices/references/Ada/audio")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete Ada").click()
    row.wait_for(state="detached")
    assert _references(server) == [] and page.is_visible("#refs-empty")
    assert httpx.get(f"{server.url}/v1/voices/references/Ada").status_code == 404
    assert list((server.settings.data_dir / "references").glob("*.wav")) == []  # its file went too


def test_a_bad_upload_shows_the_servers_message_by_the_field(server: LiveServer, page: sync_api.Page,
                                                             tmp_path: Path) -> None:
    _open(page, server)
    good = _wav_file(tmp_path / "good.wav", 1.5)
    add = page.get_by_role("button", name="Add reference voice")

    _fill_reference(page, "Blank", "   ")
    page.get_by_label("Audio file").set_input_files(str(good))
    add.click()
    page.locator("#r-transcript-err", has_text="The transcript is empty.").wait_for()
    assert page.get_attribute("#r-transcript", "aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "r-transcript"  # where to fix it
    assert page.inner_text("#r-audio-err") == "" and page.inner_text("#r-name-err") == ""

    page.get_by_label("Transcript").fill("Words.")
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("these are notes, not a recording")
    page.get_by_label("Audio file").set_input_files(str(not_audio))
    add.click()
    page.locator("#r-audio-err", has_text="not a readable WAV, FLAC, Ogg or MP3 file").wait_for()
    assert page.inner_text("#r-audio-err").startswith("The recording is")
    assert page.get_attribute("#r-transcript", "aria-invalid") is None  # the last error's field only

    page.get_by_label("Audio file").set_input_files(str(_wav_file(tmp_path / "short.wav", 0.4)))
    add.click()
    page.locator("#r-audio-err", has_text="a reference must be 1 to 30 s").wait_for()

    page.get_by_label("Reference name").fill("-bad name")
    page.get_by_label("Audio file").set_input_files(str(good))
    add.click()
    page.locator("#r-name-err", has_text="The name must be").wait_for()
    assert _references(server) == []  # nothing half-kept

    page.get_by_label("Reference name").fill("Taken")
    add.click()
    page.locator("tr[data-reference='Taken']").wait_for()
    _fill_reference(page, "Taken", "Again.")
    page.get_by_label("Audio file").set_input_files(str(good))
    add.click()
    page.locator("#r-name-err", has_text="exists").wait_for()
    assert "Could not add the reference voice" in page.inner_text("#ref-form-status")
    assert [r["name"] for r in _references(server)] == ["Taken"]
    assert httpx.delete(f"{server.url}/v1/voices/references/Taken").status_code == 204


def test_a_recording_from_the_microphone_is_uploaded(server: LiveServer, page: sync_api.Page) -> None:
    _open(page, server)
    assert "of at most 30 s" in page.inner_text(".recorder")  # the server's limit
    _fill_reference(page, "Mic", "A line read into the microphone.")
    page.focus("#r-record")
    page.keyboard.press("Enter")  # from the keyboard: Record, then Stop (focus moves there)
    page.wait_for_function("document.activeElement.id === 'r-stop'")
    page.wait_for_function("parseFloat(document.querySelector('#r-elapsed').textContent) >= 1.6", timeout=20_000)
    page.keyboard.press("Enter")
    page.locator("#ref-form-status", has_text="Recorded").wait_for()
    assert page.is_visible("#r-preview") and page.is_enabled("#r-record") and page.is_disabled("#r-stop")
    recorded = float(page.inner_text("#r-elapsed").split()[0])
    page.get_by_role("button", name="Add reference voice").click()
    page.locator("tr[data-reference='Mic']").wait_for()
    (mic,) = _references(server)
    assert mic["source_name"] == "recording.wav" and abs(mic["audio_ms"] - 1000 * recorded) < 150, (mic, recorded)
    audio = httpx.get(f"{server.url}{mic['audio_url']}")
    with wave.open(io.BytesIO(audio.content)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    assert np.abs(pcm).max() > 1000  # the fake microphone's tone, not silence
    assert page.is_hidden("#r-preview")  # the form is ready for the next
    assert httpx.delete(f"{server.url}/v1/voices/references/Mic").status_code == 204


@pytest.mark.skipif(not _has_torch(), reason="the VoiceDesign model needs torch")
def test_a_voice_is_designed_heard_and_saved_as_a_preset(server: LiveServer, page: sync_api.Page) -> None:
    _open(page, server)
    page.wait_for_function("document.querySelector('#d-model').options.length > 0")
    options = page.eval_on_selector_all("#d-model option", "os => os.map((o) => o.value)")
    assert options == ["tiny-design"]  # not the CustomVoice model, nor Piper
    assert page.is_hidden("#d-none")

    page.get_by_label("Voice description").fill("  ")
    page.get_by_role("button", name="Hear it").click()
    page.locator("#d-instruct-err", has_text="The description is empty").wait_for()

    page.get_by_label("Voice description").fill(DESCRIPTION)
    page.get_by_label("Sample text").fill("Hello there.")
    page.get_by_role("button", name="Hear it").click()
    page.wait_for_function("window.voxgate.designed > 0", timeout=120_000)  # the audio element played it through
    assert page.inner_text("#design-status").startswith("Played the designed voice")
    duration = page.evaluate("document.querySelector('#d-audio').duration")
    assert 2 * 0.08 - 0.01 <= duration <= MAX_FRAMES * 0.08 + 0.01  # 80 ms frames
    assert page.inner_text("#d-instruct-err") == ""
    assert server.wait_idle() == 0

    page.get_by_label("Preset name").fill("Calm")
    page.get_by_role("button", name="Save as preset").click()
    page.locator("tr[data-preset='Calm']").wait_for()  # the preset list heard of it
    preset = httpx.get(f"{server.url}/v1/presets/Calm").json()
    assert (preset["model"], preset["voice"], preset["settings"]) == ("tiny-design", "default",
                                                                      {"instructions": DESCRIPTION})
    page.get_by_role("button", name="Save as preset").click()  # the name is taken: said by the field
    page.locator("#d-preset-err", has_text="exists").wait_for()

    # Editing the preset's speed keeps the description the preset form has no field for.
    page.get_by_role("button", name="Edit Calm").click()
    page.wait_for_function("document.activeElement.id === 'p-model'")  # the form holds the preset now
    page.locator("#p-speed").fill("1.25")
    page.get_by_role("button", name="Save changes").click()
    page.locator("#form-status[data-kind='ok']").wait_for()
    preset = httpx.get(f"{server.url}/v1/presets/Calm").json()
    assert preset["speed"] == 1.25 and preset["settings"] == {"instructions": DESCRIPTION}
    assert httpx.delete(f"{server.url}/v1/presets/Calm").status_code == 204


@pytest.mark.skipif(not _has_torch(), reason="the Base model needs torch")
def test_a_reference_voice_speaks_with_a_base_model(server: LiveServer, page: sync_api.Page, tmp_path: Path) -> None:
    files = {"audio": ("eve.wav", _wav_file(tmp_path / "eve.wav", 1.5).read_bytes(), "audio/wav")}
    answer = httpx.post(f"{server.url}/v1/voices/references", data={"name": "Eve", "transcript": "Eve speaking."},
                        files=files, headers={"Origin": server.url})
    assert answer.status_code == 201, answer.text
    _open(page, server)
    page.wait_for_function("document.querySelector('#c-model').options.length > 0")
    options = page.eval_on_selector_all("#c-model option", "os => os.map((o) => o.value)")
    assert options == ["tiny-clone"] and page.is_hidden("#c-none")  # only the Base model
    speak = page.get_by_role("button", name="Speak with Eve")

    page.get_by_label("Text to speak").fill("   ")
    speak.click()
    page.locator("#c-text-err", has_text="The text is empty").wait_for()
    assert page.get_attribute("#c-text", "aria-invalid") == "true"

    page.get_by_label("Text to speak").fill("Hello there.")
    speak.click()
    page.wait_for_function("window.voxgate.cloned > 0", timeout=120_000)  # the audio element played it through
    assert page.inner_text("#clone-status").startswith("Played “Eve”")
    duration = page.evaluate("document.querySelector('#c-audio').duration")
    assert 2 * 0.08 - 0.01 <= duration <= MAX_FRAMES * 0.08 + 0.01  # 80 ms frames
    assert page.inner_text("#c-text-err") == ""
    assert server.wait_idle() == 0
    assert httpx.delete(f"{server.url}/v1/voices/references/Eve").status_code == 204


def test_every_control_is_labelled_and_fits_a_phone(server: LiveServer, page: sync_api.Page,
                                                    tmp_path: Path) -> None:
    files = {"audio": ("x.wav", _wav_file(tmp_path / "x.wav", 1.2).read_bytes(), "audio/wav")}
    answer = httpx.post(f"{server.url}/v1/voices/references", data={"name": "A rather long reference name",
                        "transcript": "A transcript long enough to wrap on a phone's narrow screen, twice over."},
                        files=files, headers={"Origin": server.url})
    assert answer.status_code == 201, answer.text
    page.set_viewport_size(PHONE)
    _open(page, server)
    page.locator("tr[data-reference='A rather long reference name']").wait_for()
    unlabelled = page.evaluate("""() => [
        ...document.querySelectorAll('input, select, textarea, button, audio[controls]')]
        .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                       && !e.getAttribute('aria-labelledby') && !(e.tagName === 'BUTTON' && e.textContent.trim()))
        .map((e) => e.id || e.outerHTML)""")
    assert unlabelled == []
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert httpx.delete(f"{server.url}/v1/voices/references/A rather long reference name").status_code == 204

"""Every route that keeps or speaks text refuses what `/v1/audio/speech` refuses and takes what it
takes: the text as the text frontend reads it, not the raw characters (the trial's finding:
passages, imports and takes checked the raw text, so an emoji the server names was refused and
markup it leaves out was kept, then failed to generate). `/v1/audio/clone`'s `text` is
tested with a Base model, in test_clone_e2e.py."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.settings import load_settings
from tests.conftest import local_client

SPOKEN = ["😀", "Hello."]  # an emoji alone is words when the server names emoji
UNSPOKEN = ['<break time="500ms"/>', "<!-- a note -->", "!!!"]  # markup only (letters in it); no letters


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = load_settings(env={}, data_dir=tmp_path_factory.mktemp("data"), text_emoji="name",
                             min_free_memory_mb=0)
    with local_client(create_app(settings)) as test_client:
        yield test_client


def _speech(client: TestClient, text: str) -> tuple[int, dict[str, Any] | None]:
    with client.stream("POST", "/v1/audio/speech", json={"input": text, "response_format": "pcm"}) as answer:
        if answer.status_code == 200:
            return 200, None
        answer.read()
        return answer.status_code, answer.json()["error"]


def _error(answer: Any) -> dict[str, Any] | None:
    return None if answer.status_code in (200, 201) else answer.json()["error"]


def _as_speech_says(error: dict[str, Any] | None) -> tuple[str, str] | None:
    """An error of the `text` field as speech words it for its `input`."""
    if error is None:
        return None
    assert error["field"] == "text" and error["message"].startswith("text "), error
    return "input", "input " + error["message"].removeprefix("text ")


def test_passages_take_and_refuse_what_speech_does(client: TestClient) -> None:
    project = client.post("/v1/projects", json={"name": "Checks"}).json()
    pid = project["id"]
    first = client.post(f"/v1/projects/{pid}/passages", json={"text": "Start."}).json()["passages"][0]["id"]
    for text in SPOKEN + UNSPOKEN:
        status, speech = _speech(client, text)
        assert (status == 200) == (text in SPOKEN), (text, speech)
        expected = None if speech is None else (speech["field"], speech["message"])
        added = client.post(f"/v1/projects/{pid}/passages", json={"text": text})
        assert _as_speech_says(_error(added)) == expected, (text, added.text)
        edited = client.patch(f"/v1/projects/{pid}/passages/{first}", json={"text": text})
        assert _as_speech_says(_error(edited)) == expected, (text, edited.text)
    assert [p["text"] for p in client.get(f"/v1/projects/{pid}").json()["passages"]] == ["Hello.", "😀", "Hello."]


def test_an_imported_block_is_kept_if_speech_says_something(client: TestClient) -> None:
    pid = client.post("/v1/projects", json={"name": "Import"}).json()["id"]
    preview = client.post(f"/v1/projects/{pid}/import", json={"text": "One.\n\n🎉\n\n!!!\n", "format": "text"})
    assert [p["text"] for p in preview.json()["passages"]] == ["One.", "🎉"], preview.text


def test_a_passage_speech_would_say_is_generated(client: TestClient) -> None:
    """The generation checked the raw text again, so a passage it had kept failed there."""
    pid = client.post("/v1/projects", json={"name": "Emoji"}).json()["id"]
    assert client.post(f"/v1/projects/{pid}/passages", json={"text": "😀"}).status_code == 201
    assert client.post(f"/v1/projects/{pid}/generate", json={}).status_code in (200, 202)
    deadline = time.monotonic() + 60
    while (job := client.get(f"/v1/projects/{pid}/job").json())["state"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert job["failed"] == 0 and job["errors"] == [], job
    [passage] = client.get(f"/v1/projects/{pid}").json()["passages"]
    assert len(passage["takes"]) == 1 and passage["takes"][0]["audio_ms"] > 0


def test_takes_take_and_refuse_what_speech_does(client: TestClient) -> None:
    silence = base64.b64encode(b"\0\0" * 2400).decode("ascii")
    for text in SPOKEN + UNSPOKEN:
        _, speech = _speech(client, text)
        expected = None if speech is None else (speech["field"], speech["message"])
        kept = client.post("/v1/takes", json={"text": text, "model": "piper-joe", "voice": "default",
                                              "sample_rate": 24000, "audio": silence})
        assert _as_speech_says(_error(kept)) == expected, (text, kept.text)

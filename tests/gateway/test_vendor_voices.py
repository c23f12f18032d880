"""A vendor voice id that names a speaker preset of another model than the request's `model_id`:
the error names the vendor's own field (ElevenLabs `voice_id`, in the path; Cartesia `voice.id`,
or `voice` when it is a string) in the vendor's error shape, on every ElevenLabs and Cartesia
route, through a real server with two models; and an unknown model with a preset (every route)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from models.piper import embedded_model_path
from tests.conftest import LiveServer, run_server
from tests.gateway.test_cartesia import socket

FORMAT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}
EL_PATHS = ("", "/stream", "/with-timestamps", "/stream/with-timestamps")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """piper-joe (the embedded voice) and joe-two; `fixed` is a preset of joe-two."""
    other = {"id": "joe-two", "family": "piper", "path": str(embedded_model_path())}
    for server in run_server(tmp_path_factory.mktemp("data"), models=(other,)):
        created = httpx.post(f"{server.url}/v1/presets", json={"name": "fixed", "model": "joe-two"})
        assert created.status_code == 201, created.text
        yield server


def _conflict(error: dict[str, Any], field: str) -> None:
    assert error["code"] == "invalid_input" and error["field"] == field, error
    assert "'fixed' is a preset of model 'joe-two'" in error["message"] and "model_id" in error["message"], error


@pytest.mark.parametrize("path", EL_PATHS)
def test_elevenlabs_http_names_voice_id(live: LiveServer, path: str) -> None:
    response = httpx.post(f"{live.url}/v1/text-to-speech/fixed{path}", json={"text": "hi", "model_id": "piper-joe"})
    assert response.status_code == 400, response.text
    _conflict(response.json()["error"], "voice_id")


@pytest.mark.parametrize("route", ["stream-input", "multi-stream-input"])
def test_elevenlabs_sockets_name_voice_id(live: LiveServer, route: str) -> None:
    url = f"{live.ws_url}/v1/text-to-speech/fixed/{route}?model_id=piper-joe&output_format=pcm_16000"
    with connect(url, open_timeout=10) as ws:
        error = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1008
    assert error["error"] == "invalid_input" and "contextId" not in error
    _conflict(error, "voice_id")


@pytest.mark.parametrize(("voice", "field"), [({"mode": "id", "id": "fixed"}, "voice.id"), ({"id": "fixed"}, "voice.id"),
                                              ("fixed", "voice")])
def test_cartesia_http_names_voice_id(live: LiveServer, voice: object, field: str) -> None:
    body = {"model_id": "piper-joe", "transcript": "hi", "voice": voice, "output_format": FORMAT}
    for path in ("/tts/bytes", "/tts/sse"):
        response = httpx.post(f"{live.url}{path}", json=body)
        assert response.status_code == 400, response.text
        _conflict(response.json()["error"], field)


def test_cartesia_socket_names_voice_id(live: LiveServer) -> None:
    with socket(live) as ws:
        ws.send(json.dumps({"context_id": "c", "model_id": "piper-joe", "transcript": "hi",
                            "voice": {"mode": "id", "id": "fixed"}, "output_format": FORMAT}))
        error = json.loads(ws.recv(timeout=10))
    assert (error["type"], error["context_id"], error["done"], error["status_code"]) == ("error", "c", True, 400)
    error["code"] = error["error_code"]
    _conflict(error, "voice.id")


def test_a_model_id_that_is_no_string_is_named_model_id(live: LiveServer) -> None:
    response = httpx.post(f"{live.url}/v1/text-to-speech/x", json={"text": "hi", "model_id": 3})
    assert response.status_code == 400 and response.json()["error"]["field"] == "model_id", response.text
    response = httpx.post(f"{live.url}/tts/bytes", json={"model_id": 3, "transcript": "hi", "output_format": FORMAT})
    assert response.status_code == 400 and response.json()["error"]["field"] == "model_id", response.text


def _unknown_model(error: dict[str, Any], field: str) -> None:
    assert error["code"] == "unknown_model" and error["field"] == field, error
    assert error["message"].startswith("unknown model 'nope'; installed: "), error


def test_an_unknown_model_with_a_preset_is_an_unknown_model_on_every_route(live: LiveServer) -> None:
    """`{"model": "nope", "voice": "fixed"}` was a 400 about the preset ("'fixed' is a preset of model
    'joe-two', not of 'nope'") where `{"model": "nope"}` alone is a 404 unknown_model: the model is
    checked before the preset is judged (found by a new-user trial)."""
    response = httpx.post(f"{live.url}/v1/audio/speech", json={"input": "hi", "model": "nope", "voice": "fixed"})
    assert response.status_code == 404, response.text
    _unknown_model(response.json()["error"], "model")
    response = httpx.post(f"{live.url}/v1/text/normalize", json={"input": "hi", "model": "nope", "voice": "fixed"})
    assert response.status_code == 404, response.text
    _unknown_model(response.json()["error"], "model")
    for path in EL_PATHS:
        response = httpx.post(f"{live.url}/v1/text-to-speech/fixed{path}", json={"text": "hi", "model_id": "nope"})
        assert response.status_code == 404, response.text
        _unknown_model(response.json()["error"], "model_id")
    body = {"model_id": "nope", "transcript": "hi", "voice": {"mode": "id", "id": "fixed"}, "output_format": FORMAT}
    response = httpx.post(f"{live.url}/tts/bytes", json=body)
    assert response.status_code == 404, response.text
    _unknown_model(response.json()["error"], "model_id")
    with connect(f"{live.ws_url}/v1/realtime", open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        ws.send(json.dumps({"type": "session.update", "session": {"model": "nope", "voice": "fixed"}}))
        event = json.loads(ws.recv(timeout=10))
        assert event["type"] == "error", event
        _unknown_model(event["error"], "session.model")
        ws.send(json.dumps({"type": "session.update", "session": {"voice": "fixed"}}))  # the session lives on
        updated = json.loads(ws.recv(timeout=10))
        assert updated["type"] == "session.updated" and updated["session"]["model"] == "joe-two", updated

"""ElevenLabs-compatible HTTP routes (gateway/elevenlabs_http.py), through a real uvicorn server on loopback."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import httpx
import pytest
import soundfile as sf

from tests.conftest import LiveServer
from tests.gateway.test_elevenlabs import LONG


def test_http_convert_stream_and_timestamps(client: httpx.Client) -> None:
    body = {"text": "Hello from the HTTP route.", "model_id": "eleven_multilingual_v2"}
    whole = client.post("/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb", json=body)
    assert whole.status_code == 200 and whole.headers["content-type"] == "audio/mpeg"
    pcm, rate = sf.read(io.BytesIO(whole.content))
    assert rate == 44100 and len(pcm) / rate > 1.0
    streamed = client.post("/v1/text-to-speech/x/stream?output_format=pcm_16000", json=body)
    assert streamed.headers["content-type"] == "audio/pcm" and len(streamed.content) > 32000
    stamped = client.post("/v1/text-to-speech/x/with-timestamps?output_format=pcm_24000", json=body).json()
    alignment = stamped["alignment"]
    assert "".join(alignment["characters"]).split() == body["text"].split()
    assert alignment["character_start_times_seconds"] == sorted(alignment["character_start_times_seconds"])
    seconds = len(base64.b64decode(stamped["audio_base64"])) / 2 / 24000
    assert abs(alignment["character_end_times_seconds"][-1] - seconds) < 0.1
    lines = client.post("/v1/text-to-speech/x/stream/with-timestamps?output_format=pcm_24000",
                        json={"text": "One sentence here. And another one."}).text.splitlines()
    chunks = [json.loads(line) for line in lines]
    words = "".join("".join(c["alignment"]["characters"]) for c in chunks if c["alignment"]).split()
    assert words == "One sentence here. And another one.".split()


def test_a_preset_named_after_the_vendor_voice_id_applies(server: LiveServer, client: httpx.Client) -> None:
    body = {"text": "The quick brown fox jumps over the lazy dog."}
    plain = client.post("/v1/text-to-speech/unknown-id?output_format=pcm_16000", json=body).content
    assert client.post("/v1/presets", json={"name": "EXAVITQu4vr4xnSDxMaL", "speed": 2.0}).status_code == 201
    fast = client.post("/v1/text-to-speech/EXAVITQu4vr4xnSDxMaL?output_format=pcm_16000", json=body)
    assert len(fast.content) < 0.7 * len(plain)
    assert fast.headers["x-voxgate-preset"] == "EXAVITQu4vr4xnSDxMaL"


@pytest.mark.parametrize(("path", "body", "status", "field"), [
    ("/v1/text-to-speech/x", {}, 400, "text"),
    ("/v1/text-to-speech/x", {"text": ""}, 400, "text"),
    ("/v1/text-to-speech/x?output_format=mp3_1_2", {"text": "hi"}, 400, "output_format"),
    ("/v1/text-to-speech/x/stream", {"text": "hi", "model_id": "nope"}, 404, "model_id"),
    ("/v1/text-to-speech/x/with-timestamps", {"text": "hi", "voice_settings": {"speed": 0}}, 400,
     "voice_settings.speed"),
    ("/v1/text-to-speech/x", {"text": "x" * 5000}, 422, "text"),
    ("/v1/text-to-speech/x", {"text": "hi", "voice_settings": "x"}, 400, "voice_settings"),
    ("/v1/text-to-speech/x", {"text": "hi", "apply_text_normalization": 7}, 400, "apply_text_normalization"),
])
def test_http_errors_name_the_field(client: httpx.Client, path: str, body: dict[str, Any], status: int,
                                    field: str) -> None:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["field"] == field


@pytest.mark.parametrize("route", ["", "/stream", "/stream/with-timestamps"])
def test_an_http_stream_failing_after_the_first_chunk_is_logged_with_its_request_and_cut(
        server: LiveServer, client: httpx.Client, monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    """An engine error after the first chunk ended the audio streams with a warning naming no request
    and the NDJSON stream with its error line and no warning at all; neither access line said `cut=`
    (Cartesia's /tts/bytes and /tts/sse log the request's id and note it: gateway/vendor_http.py)."""
    from tests.conftest import server_log
    from tests.gateway.test_access_log import access_line
    from tests.gateway.test_vendor_failures import fail_after_first_chunk

    fail_after_first_chunk(monkeypatch, "el-")
    with server_log("gateway.access", "gateway.vendor_http") as records:
        response = client.post(f"/v1/text-to-speech/x{route}?output_format=pcm_24000", json={"text": LONG})
        assert response.status_code == 200 and response.content, response.text
        request_id = response.headers["x-request-id"]
        assert request_id.startswith("el-"), request_id
        assert "cut=generation_failed" in access_line(records, request_id)
        warned = [r.getMessage() for r in records if r.name == "gateway.vendor_http"]
        assert any(request_id in line and "wrong slot" in line for line in warned), warned
    if route.endswith("with-timestamps"):  # its error line names the request too, as Cartesia's SSE error event
        last = json.loads(response.text.splitlines()[-1])
        assert last["code"] == "generation_failed" and last["request_id"] == request_id, last
    assert server.wait_idle() == 0

"""POST /v1/audio/speech through a real uvicorn server on loopback."""

from __future__ import annotations

import base64
import io
import json
import time

import httpx
import numpy as np
import pytest
import soundfile as sf
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import LiveServer

TWO_SENTENCES = "The quick brown fox jumps over the lazy dog. It was a bright, cold day in April."


def speak(client: httpx.Client, **body: object) -> httpx.Response:
    return client.post("/v1/audio/speech", json={"input": TWO_SENTENCES, **body})


def decode(data: bytes, fmt: str) -> tuple[np.ndarray, int]:
    if fmt == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0, 24000
    with sf.SoundFile(io.BytesIO(data)) as f:  # streamed WAV says "unknown length": read blocks
        blocks = list(f.blocks(blocksize=4096, dtype="float32"))
        return np.concatenate(blocks), f.samplerate


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3", "opus"])
def test_each_format_decodes_to_speech(client: httpx.Client, fmt: str) -> None:
    response = speak(client, model="piper-joe", voice="default", response_format=fmt)
    assert response.status_code == 200, response.text
    audio, rate = decode(response.content, fmt)
    assert rate == 24000
    assert len(audio) / rate > 1.0
    assert np.sqrt(np.mean(audio ** 2)) > 0.01  # not silence


def test_streamed_mp3_decodes_as_long_as_the_wav(client: httpx.Client) -> None:
    # A streamed MP3 has no Xing frame (it is filled in at close): libsndfile tells its length
    # from its size and first frame, which is right only for CBR. VBR read 1-2 s short here.
    steady = {"name": "steady", "model": "piper-joe", "voice": "default", "settings": {"noise_w_scale": 0}}
    assert client.post("/v1/presets", json=steady).status_code in (201, 409)
    text = (f"{TWO_SENTENCES} Winston Smith slipped quickly through the glass doors of Victory Mansions. "
            "A kilo of sugar costs three euros and twenty cents, and nobody asks why.")
    wav, _ = decode(speak(client, input=text, voice="steady", response_format="wav").content, "wav")
    response = speak(client, input=text, voice="steady", response_format="mp3")
    assert response.status_code == 200 and response.headers["content-type"] == "audio/mpeg"
    mp3, rate = sf.read(io.BytesIO(response.content), dtype="float32")
    assert rate == 24000 and len(wav) > 10 * rate
    lame_delay, frame = 576 + 529, 1152  # LAME's encoder delay (no Xing frame says so), one frame of padding
    assert 0 <= len(mp3) - len(wav) <= lame_delay + frame, (len(mp3), len(wav))


def test_wav_has_a_header_players_accept(client: httpx.Client) -> None:
    data = speak(client, response_format="wav").content
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    info = sf.info(io.BytesIO(data))
    assert info.samplerate == 24000 and info.channels == 1 and info.subtype == "PCM_16"


def test_sse_audio_concatenates_to_the_plain_response(client: httpx.Client) -> None:
    # VITS draws phoneme durations at random; a preset with noise_w_scale=0 fixes them,
    # so two syntheses of the same text have the same length.
    steady = {"name": "steady", "model": "piper-joe", "voice": "default", "settings": {"noise_w_scale": 0}}
    assert client.post("/v1/presets", json=steady).status_code in (201, 409)
    plain = speak(client, voice="steady", response_format="pcm").content
    events = []
    with client.stream("POST", "/v1/audio/speech", json={
            "input": TWO_SENTENCES, "voice": "steady", "response_format": "pcm",
            "stream_format": "sse"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert events[-1]["type"] == "speech.audio.done"
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2  # one per sentence at least: it really streamed
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert len(audio) == len(plain)


def test_openai_names_map_to_the_defaults(client: httpx.Client) -> None:
    response = speak(client, model="tts-1", voice="nova", response_format="pcm")
    assert response.status_code == 200
    assert response.headers["x-voxgate-model"] == "piper-joe"
    assert response.headers["x-voxgate-voice"] == "default"


def test_instructions_are_accepted_and_flagged_as_ignored(client: httpx.Client) -> None:
    response = speak(client, response_format="pcm", instructions="Speak cheerfully.")
    assert response.status_code == 200
    assert response.headers["x-voxgate-instructions"] == "ignored"


def test_speed_changes_duration(client: httpx.Client) -> None:
    slow = len(speak(client, response_format="pcm", speed=0.5).content)
    fast = speak(client, response_format="pcm", speed=2.0)
    assert slow > 2.5 * len(fast.content)
    assert "x-voxgate-speed" not in fast.headers  # piper follows it


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"input": ""}, 400, "input"),
    ({"input": "   \n\t "}, 400, "input"),
    ({"input": "!!! ... ???"}, 400, "input"),
    ({"input": 42}, 400, "input"),
    ({}, 400, "input"),
    ({"input": "x" * 4097}, 422, "input"),
    ({"input": "Hello.", "model": "no-such-model"}, 404, "model"),
    ({"input": "Hello.", "model": ""}, 400, "model"),  # (it spoke with the default model: a client's unset variable)
    ({"input": "Hello.", "model": " "}, 400, "model"),
    ({"input": "Hello.", "voice": "no-such-voice"}, 404, "voice"),
    ({"input": "Hello.", "response_format": "ogg"}, 400, "response_format"),
    ({"input": "Hello.", "stream_format": "chunks"}, 400, "stream_format"),
    ({"input": "Hello.", "speed": 0.1}, 400, "speed"),
    ({"input": "Hello.", "speed": 4.5}, 400, "speed"),
    ({"input": "Hello.", "speed": "fast"}, 400, "speed"),
    ({"input": "Hello.", "instructions": ["x"]}, 400, "instructions"),
    ({"input": "Hello.", "foo": 1}, 400, "foo"),
    ({"text": "Hello."}, 400, "text"),
])
def test_bad_input_is_a_4xx_naming_the_field(server: LiveServer, client: httpx.Client,
                                             body: dict, status: int, field: str) -> None:
    response = client.post("/v1/audio/speech", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field and error["code"] and error["message"]
    assert server.wait_idle() == 0


@pytest.mark.parametrize("path", ["/v1/audio/speech", "/v1/audio/design"])
def test_an_empty_model_is_a_400_and_none_is_the_default(client: httpx.Client, path: str) -> None:
    """`"model": ""` spoke with default_model, as if the field were left out: almost always a client
    whose model variable was unset. It is refused naming `model` (on /v1/audio/design too, where it
    meant the VoiceDesign model); null and no `model` still mean the default."""
    extra = {"instruct": "A calm voice."} if path == "/v1/audio/design" else {}
    refused = client.post(path, json={"input": "Hello.", "model": "", **extra})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_input" and error["field"] == "model", error
    assert error["message"].startswith("model is empty: name a model, or leave model out"), error
    if path == "/v1/audio/speech":
        for body in ({"input": "Hi."}, {"input": "Hi.", "model": None}):
            spoken = client.post(path, json={**body, "response_format": "pcm"})
            assert spoken.status_code == 200 and spoken.headers["x-voxgate-model"] == "piper-joe", spoken.text


@pytest.mark.parametrize("path", ["/v1/audio/speech", "/v1/audio/design"])
def test_an_unknown_field_is_a_400_naming_it(server: LiveServer, client: httpx.Client, path: str) -> None:
    # Not spoken with the defaults in silence: a misspelt option (`sped`) would go unnoticed.
    response = client.post(path, json={"input": "Hello.", "sped": 2.0, "voice": "default", "zzz": 1})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert {**error, "message": ""} == {"code": "invalid_input", "message": "", "field": "sped", "param": "sped",
                                        "type": "invalid_request_error"}
    assert error["message"].startswith(f"unknown field 'sped'; {path} takes ") and "stream_format" in error["message"]
    assert server.wait_idle() == 0


def test_malformed_json_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", content=b'{"input": "Hello', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_a_json_array_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", json=["Hello"])
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_an_empty_body_says_so(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", content=b"", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    assert "body is empty" in response.json()["error"]["message"]


def test_wrong_content_type_is_415(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", content=b"input=Hello", headers={"content-type": "text/plain"})
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert response.json()["error"]["field"] == "Content-Type"
    other = client.post("/v1/audio/speech", content=b"<x/>", headers={"content-type": "application/xml"})
    assert other.status_code == 415 and other.json()["error"]["field"] == "Content-Type"  # the route's own check


def test_body_over_the_maximum_is_413(server: LiveServer, client: httpx.Client) -> None:
    big = json.dumps({"input": "Hello.", "pad": "x" * server.settings.max_body_bytes}).encode()
    response = client.post("/v1/audio/speech", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"


def test_unknown_route_and_method_are_json_errors(client: httpx.Client) -> None:
    assert client.get("/v1/nothing").json()["error"]["code"] == "not_found"
    response = client.get("/v1/audio/speech")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/realtime"), ("POST", "/tts/websocket"),
                                              ("GET", "/v1/text-to-speech/alloy/stream-input")])
def test_plain_http_to_a_websocket_route_is_told_to_upgrade(client: httpx.Client, method: str, path: str) -> None:
    body = {"json": {"transcript": "Hello."}} if method == "POST" else {}
    response = client.request(method, path, **body)  # curl on a WebSocket URL: the route exists
    assert response.status_code == 426 and response.headers["upgrade"] == "websocket"
    error = response.json()["error"]
    assert error["code"] == "upgrade_required" and "WebSocket" in error["message"]


def test_disconnect_mid_stream_leaves_no_job(server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # ~4,000 characters (under max_input_chars): four engine requests of up to 1,000 characters
    # for piper, submitted one after another as the listener takes the audio (gateway/stitch.py).
    text = " ".join(f"This is sentence number {i} of a long text." for i in range(88))
    assert len(text) <= server.app_state.settings.max_input_chars
    engine = server.app_state.engine
    submitted: list[str] = []
    submit = engine.submit
    monkeypatch.setattr(engine, "submit", lambda spec: (submitted.append(spec.request_id), submit(spec))[1])
    with httpx.Client(base_url=server.url, timeout=60) as client:
        with client.stream("POST", "/v1/audio/speech", json={"input": text, "response_format": "pcm"}) as response:
            assert response.status_code == 200
            next(response.iter_bytes())  # audio has started, then we hang up
            at_hangup = len(submitted)
    assert 1 <= at_hangup < 3, submitted  # the utterance was under way, most of it still to come
    assert server.wait_idle() == 0  # the request in flight was cancelled, no slot is left
    time.sleep(0.5)
    assert len(submitted) <= at_hangup + 1, submitted  # and the rest of the text was never started


def test_models_voices_and_health(client: httpx.Client) -> None:
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    joe = next(m for m in models["data"] if m["id"] == "piper-joe")
    assert joe["family"] == "piper" and joe["object"] == "model" and "loaded" in joe
    voices = client.get("/v1/audio/voices", params={"model": "piper-joe"}).json()["data"]
    assert {"id": "default", "model": "piper-joe"}.items() <= voices[0].items()
    assert client.get("/v1/audio/voices", params={"model": "nope"}).status_code == 404
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["schema_version"] >= 1
    assert b"voxgate_ttfa_seconds" in client.get("/metrics").content


def test_beyond_the_queue_limit_is_503_with_retry_after(tmp_path) -> None:
    import concurrent.futures

    from tests.conftest import run_server

    text = " ".join(f"This is sentence number {i} of a long text." for i in range(20))
    for server in run_server(tmp_path, max_running=1, max_waiting=1):
        with httpx.Client(base_url=server.url, timeout=120) as client:
            assert client.post("/v1/audio/speech", json={"input": "Warm up.", "response_format": "pcm"}).is_success

            def post(_: int) -> httpx.Response:
                return client.post("/v1/audio/speech", json={"input": text, "response_format": "pcm"})

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                responses = list(pool.map(post, range(4)))
        statuses = sorted(r.status_code for r in responses)
        assert statuses.count(200) >= 2 and 503 in statuses, statuses
        busy = next(r for r in responses if r.status_code == 503)
        assert busy.json()["error"]["code"] == "overloaded" and busy.headers["retry-after"] == "1"
        assert busy.json()["error"]["field"] == "model"  # (it named none: found by a new-user trial)
        assert server.wait_idle() == 0
        # Each 503 is one refusal in /metrics (the engine's stats snapshot follows its steps).
        def refused() -> float:
            families = text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text)
            return next(s.value for f in families for s in f.samples
                        if s.name == "voxgate_refused_requests_total" and s.labels == {"model": "piper-joe"})

        deadline = time.monotonic() + 5
        while refused() != statuses.count(503) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refused() == statuses.count(503)


def test_an_unknown_voice_error_does_not_echo_a_huge_name(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", json={"input": "hi", "voice": "v" * 60000})
    assert response.status_code == 404 and response.json()["error"]["field"] == "voice"
    assert len(response.content) < 2000

"""OpenAI fidelity of /v1/audio/speech, checked with the `openai` SDK where it can be."""

from __future__ import annotations

import inspect
import json

import httpx
import openai
import pytest
from openai.resources.audio.speech import Speech

from gateway.speech import SPEECH_FIELDS
from tests.conftest import LiveServer

TEXT = "Checking the OpenAI details."


@pytest.fixture
def sdk(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1", max_retries=0)


def test_dated_model_names_map_like_undated_ones(sdk: openai.OpenAI) -> None:
    with sdk.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts-2025-12-15", voice="alloy", input=TEXT, response_format="pcm") as response:
        assert response.headers["x-voxgate-model"] == "piper-joe"
        assert len(response.read()) > 24000


def test_voice_as_an_object(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": {"id": "default"}, "input": TEXT,
                                                     "response_format": "wav"})
    assert response.status_code == 200 and response.headers["x-voxgate-voice"] == "default"
    bad = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": {"name": "x"}, "input": TEXT})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "voice.id"
    extra = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": {"id": "alloy", "foo": 1, "bar": 2},
                                                  "input": TEXT})  # (was spoken, the keys ignored)
    assert extra.status_code == 400, extra.text
    error = extra.json()["error"]
    assert error["field"] == error["param"] == "voice.bar"
    assert error["message"] == "unknown field 'voice.bar'; voice as an object takes only id"
    design = client.post("/v1/audio/design", json={"voice": {"id": "alloy", "foo": 1}, "input": TEXT,
                                                   "instruct": "A calm voice."})
    assert design.status_code == 400 and design.json()["error"]["field"] == "voice.foo"


def test_errors_carry_type_param_and_a_request_id(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.audio.speech.create(model="tts-1", voice="alloy", input="", response_format="mp3")
    error = caught.value
    assert error.code == "invalid_input" and error.param == "input" and error.type == "invalid_request_error"
    assert isinstance(error.body, dict) and error.body["field"] == "input"
    assert error.request_id and error.request_id.startswith("req_")
    with pytest.raises(openai.BadRequestError) as empty:  # spoke in the default voice (found by a new-user trial)
        sdk.audio.speech.create(model="tts-1", voice="", input=TEXT)
    assert empty.value.param == "voice" and "voice is empty" in empty.value.message
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.audio.speech.create(model="no-such-model", voice="alloy", input=TEXT)
    assert missing.value.param == "model" and missing.value.type == "invalid_request_error"


def test_successful_responses_carry_a_request_id(client: httpx.Client) -> None:
    assert client.get("/v1/models").headers["x-request-id"].startswith("req_")
    speech = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": TEXT})
    assert speech.headers["x-request-id"].startswith("speech-")  # the engine request's own id


def test_aac_is_refused_with_the_formats_listed(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": TEXT,
                                                     "response_format": "aac"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "response_format" and "wav, pcm, flac, mp3, opus" in error["message"]


def test_sse_done_event_carries_usage(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": TEXT,
                                                     "response_format": "pcm", "stream_format": "sse"})
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    done = events[-1]
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert usage["input_characters"] == len(TEXT)
    assert usage["output_bytes"] == pytest.approx(usage["output_audio_ms"] / 1000 * 24000 * 2, abs=48)


def test_every_field_the_sdk_sends_is_taken(sdk: openai.OpenAI) -> None:
    # Unknown fields are refused (400 naming them), so every field of OpenAI's own must be known.
    sent = {name for name in inspect.signature(Speech.create).parameters
            if name != "self" and not name.startswith("extra_") and name != "timeout"}
    assert sent == {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format"}
    assert sent <= SPEECH_FIELDS
    with sdk.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT, instructions="Calmly.", response_format="pcm", speed=1.0,
            stream_format="audio") as response:
        assert response.headers["x-voxgate-instructions"] == "ignored"  # accepted, and said to be ignored
        assert len(response.read()) > 24000


def test_a_field_beyond_openais_and_voxgates_is_refused(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, extra_body={"sample_rate": 16000})
    error = caught.value
    assert error.code == "invalid_input" and error.param == "sample_rate" and error.type == "invalid_request_error"
    assert "unknown field 'sample_rate'" in error.message

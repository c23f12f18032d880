"""The qwen3_tts family through the gateway: `voxgate models add`, then `/v1/audio/speech` with
the real `openai` SDK, `/v1/audio/design`, `/v1/realtime`, and the 4xx answers naming their field.

Tiny random weights make noise whose length depends on when the stop id is sampled, so the
model folders here cap generation at `MAX_FRAMES` (their `generation_config.json`), and a
preset forces an exact length where a test counts samples.
"""

from __future__ import annotations

import io
import json
import wave
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np
import openai
import pytest
from websockets.sync.client import connect

from gateway.cli import main
from tests.conftest import LiveServer, run_server
from tests.gateway.test_realtime import speak

pytest.importorskip("torch")

MAX_FRAMES = 16
FORCED = 12
SAMPLES_PER_FRAME = 1920  # 80 ms at 24 kHz
DESCRIPTION = "A deep, calm voice."


def _folder(source: Path, out: Path, model_type: str) -> Path:
    from tests.models.test_qwen3_tts_runner import variant

    folder = variant(source, out, tts_model_type=model_type)
    generation = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**generation, "max_new_tokens": MAX_FRAMES}))
    return folder


@pytest.fixture(scope="module")
def server(qwen3_tts_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("qwen-e2e")
    data = root / "data"
    for model_id, model_type in (("tiny-qwen", "custom_voice"), ("tiny-design", "voice_design"),
                                 ("tiny-base", "base")):
        folder = _folder(qwen3_tts_tiny, root / model_id, model_type)
        assert main(["models", "add", "--family", "qwen3_tts", "--path", str(folder), "--id", model_id,
                     "--data-dir", str(data)]) == 0
    for live in run_server(data):
        with httpx.Client(base_url=live.url, timeout=120) as client:
            for name, model, voice, more in (("forced", "tiny-qwen", "ryan", {}),
                                             ("designed", "tiny-design", "default", {}),
                                             ("described", "tiny-design", "default", {"instructions": DESCRIPTION})):
                settings = {"force_tokens": FORCED, "seed": 1, **more}
                preset = {"name": name, "model": model, "voice": voice, "settings": settings}
                assert client.post("/v1/presets", json=preset).status_code == 201
        yield live


@pytest.fixture
def sdk(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1", max_retries=0, timeout=120)


def _wav(data: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        return np.frombuffer(w.readframes(w.getnframes()), "<i2")


def _frames(pcm: np.ndarray) -> int:
    assert len(pcm) % SAMPLES_PER_FRAME == 0 and np.abs(pcm).max() > 0
    return len(pcm) // SAMPLES_PER_FRAME


def test_speech_with_the_openai_sdk_as_wav_pcm_and_sse(sdk: openai.OpenAI, server: LiveServer) -> None:
    with sdk.audio.speech.with_streaming_response.create(model="tiny-qwen", voice="ryan", input="Hello there.",
                                                         response_format="wav") as response:
        assert response.headers["x-voxgate-model"] == "tiny-qwen" and response.headers["x-voxgate-voice"] == "ryan"
        assert 2 <= _frames(_wav(response.read())) <= MAX_FRAMES  # the stop id is masked for 2 frames
    with sdk.audio.speech.with_streaming_response.create(model="tiny-qwen", voice="forced", input="Hello there.",
                                                         response_format="pcm",
                                                         instructions="Speak slowly.") as response:
        assert "x-voxgate-instructions" not in response.headers  # followed, not ignored
        assert "x-voxgate-speed" not in response.headers  # none was asked for
    with sdk.audio.speech.with_streaming_response.create(model="tiny-qwen", voice="forced", input="Hello there.",
                                                         response_format="pcm", speed=2.0) as response:
        assert response.headers["x-voxgate-speed"] == "ignored"  # a speech LM speaks at its own pace
        assert _frames(np.frombuffer(response.read(), "<i2")) == FORCED
        assert _frames(np.frombuffer(response.read(), "<i2")) == FORCED
    with sdk.audio.speech.with_streaming_response.create(model="tiny-qwen", voice="forced", input="Hello there.",
                                                         response_format="pcm", stream_format="sse") as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_bytes"] == FORCED * 3840
    assert server.wait_idle() == 0


def test_errors_name_their_field(sdk: openai.OpenAI, server: LiveServer) -> None:
    # one request that succeeds first, so that the model is loaded whichever tests ran before this one
    assert sdk.audio.speech.create(model="tiny-qwen", voice="ryan", input="Hi.", response_format="pcm").content
    with pytest.raises(openai.NotFoundError) as unknown:
        sdk.audio.speech.create(model="tiny-qwen", voice="nobody", input="Hi.")
    assert unknown.value.param == "voice"
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.audio.speech.create(model="tiny-base", voice="default", input="Hi.", instructions="Whisper.")
    assert refused.value.param == "voice" and "cloned voice" in refused.value.message  # the voice is checked first
    with pytest.raises(openai.BadRequestError) as base:
        sdk.audio.speech.create(model="tiny-base", voice="default", input="Hi.")
    assert base.value.param == "voice" and "cloned voice" in base.value.message
    with httpx.Client(base_url=server.url, timeout=60) as client:
        bad = client.post("/v1/presets", json={"name": "hot", "model": "tiny-qwen", "voice": "ryan",
                                               "settings": {"subtalker_temperature": 9}})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "settings.subtalker_temperature"
        assert client.get("/health").status_code == 200
        stats = client.get("/v1/stats").json()["models"]["tiny-qwen"]
        assert stats["has_backbone"] and stats["running"] == stats["waiting"] == 0
        assert 'model="tiny-qwen"' in client.get("/metrics").text
    assert server.wait_idle() == 0  # nothing leaked


def test_design_makes_a_voice_from_a_description(server: LiveServer) -> None:
    body = {"model": "tiny-design", "input": "Hello there.", "instruct": DESCRIPTION, "response_format": "wav"}
    with httpx.Client(base_url=server.url, timeout=120) as client:
        response = client.post("/v1/audio/design", json=body)
        assert response.status_code == 200, response.text
        assert 2 <= _frames(_wav(response.content)) <= MAX_FRAMES
        forced = client.post("/v1/audio/design", json={**body, "voice": "designed", "response_format": "pcm"})
        assert _frames(np.frombuffer(forced.content, "<i2")) == FORCED
        # the description is the prompt's: a preset keeping it reaches the engine as `instruct` does.
        # (Compared at the engine's door, not as audio: two separate requests' samples differ in the
        # last bits when the BLAS picks a different thread count on a loaded machine, and a random
        # model's near-equal logits then sample other codes.)
        engine = server.app_state.engine
        submitted: list[Any] = []
        submit = engine.submit
        engine.submit = lambda spec: submitted.append(spec) or submit(spec)  # type: ignore[method-assign]
        try:
            speech = {"model": "tiny-design", "input": "Hello there.", "response_format": "pcm"}
            kept = client.post("/v1/audio/speech", json={**speech, "voice": "described"})
            again = client.post("/v1/audio/design", json={**body, "voice": "designed", "response_format": "pcm"})
            plain = client.post("/v1/audio/speech", json={**speech, "voice": "designed"})
        finally:
            engine.submit = submit  # type: ignore[method-assign]
        assert kept.status_code == again.status_code == plain.status_code == 200
        assert _frames(np.frombuffer(kept.content, "<i2")) == FORCED
        described, designed, undescribed = (dict(spec.options) for spec in submitted)
        assert described == designed and described["instructions"] == DESCRIPTION
        assert "instructions" not in undescribed and {**undescribed, "instructions": DESCRIPTION} == described
        streamed = client.post("/v1/audio/design", json={**body, "voice": "designed", "stream": True})
        assert streamed.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert {e["type"] for e in events} == {"speech.audio.delta", "speech.audio.done"}
        from_preset = client.post("/v1/audio/design", json={k: v for k, v in body.items() if k != "instruct"}
                                  | {"voice": "described", "response_format": "pcm"})  # the preset keeps one
        assert from_preset.status_code == 200, from_preset.text
        assert _frames(np.frombuffer(from_preset.content, "<i2")) == FORCED
        for change, field in (({"instruct": None}, "instruct"), ({"instruct": "  "}, "instruct"),
                              ({"instructions": "A high voice."}, "instructions"),
                              ({"instruct": 3}, "instruct"), ({"model": "tiny-qwen"}, "model"),
                              ({"stream": "yes"}, "stream")):
            refused = client.post("/v1/audio/design", json={k: v for k, v in {**body, **change}.items()
                                                            if v is not None})
            assert refused.status_code == 400, (change, refused.text)
            assert refused.json()["error"]["field"] == field, change
    assert server.wait_idle() == 0


def test_models_say_their_model_type(server: LiveServer) -> None:
    """`model_type` tells a client (the Voices page) which models `/v1/audio/design` takes."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        types = {m["id"]: m["model_type"] for m in client.get("/v1/models").json()["data"]}
        assert types == {"piper-joe": None, "tiny-qwen": "custom_voice", "tiny-design": "voice_design",
                         "tiny-base": "base"}
        assert client.get("/v1/models/tiny-design").json()["model_type"] == "voice_design"


def test_realtime_speaks_with_a_qwen3_tts_preset(server: LiveServer) -> None:
    with connect(f"{server.ws_url}/v1/realtime") as ws:
        assert json.loads(ws.recv())["type"] == "session.created"
        ws.send(json.dumps({"type": "session.update", "session": {"voice": "forced"}}))
        assert json.loads(ws.recv())["session"]["model"] == "tiny-qwen"
        events, audio = speak(ws, "Hello there.", timeout=120)
        samples = len(audio) // 2
    assert events[-1]["type"] == "utterance.done", events
    assert samples == FORCED * SAMPLES_PER_FRAME


def test_design_without_a_model_uses_the_one_voice_design_model(server: LiveServer) -> None:
    """The trial: no `model` meant `default_model` (the embedded voice), which cannot design
    voices. With one VoiceDesign model installed it is that one, as with an OpenAI model name."""
    body = {"input": "Hello there.", "instruct": DESCRIPTION, "response_format": "wav"}
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for model in ({}, {"model": "tts-1"}, {"model": None}):
            response = client.post("/v1/audio/design", json={**body, **model})
            assert response.status_code == 200, (model, response.text)
            assert response.headers["x-voxgate-model"] == "tiny-design"
            assert len(_wav(response.content)) > 0
        empty = client.post("/v1/audio/design", json={**body, "model": ""})  # a client's bug: not the default
        assert empty.status_code == 400 and empty.json()["error"]["field"] == "model", empty.text
        # A model that designs no voice is the 400 naming model, a Base one too (found by a new-user trial: a
        # Base model's own check came first, asking for a reference voice, field voice)
        for model in ("tiny-base", "piper-joe"):
            refused = client.post("/v1/audio/design", json={**body, "model": model})
            assert refused.status_code == 400 and refused.json()["error"]["field"] == "model", refused.text
        assert client.post("/v1/audio/design", json={**body, "model": "nope"}).status_code == 404
        # A preset of a model that designs no voice, no model sent: the 400 named `model` (found by a new-user trial)
        assert client.post("/v1/presets", json={"name": "plain-joe", "model": "piper-joe", "voice": "default"}) \
            .status_code == 201
        try:
            refused = client.post("/v1/audio/design", json={**body, "voice": "plain-joe"})
            assert refused.status_code == 400 and refused.json()["error"]["field"] == "voice", refused.text
            assert refused.json()["error"]["message"].startswith(
                "preset 'plain-joe' uses model 'piper-joe', which is not a VoiceDesign model")
        finally:
            client.delete("/v1/presets/plain-joe")
    assert server.wait_idle() == 0


@pytest.mark.parametrize("designers", [0, 2], ids=["none", "several"])
def test_design_without_a_model_and_no_single_voice_design_model_is_a_400_naming_model(
        qwen3_tts_tiny: Path, tmp_path: Path, designers: int) -> None:
    data = tmp_path / "data"
    names = [f"design-{i}" for i in range(designers)]
    for name in names:
        folder = _folder(qwen3_tts_tiny, tmp_path / name, "voice_design")
        assert main(["models", "add", "--family", "qwen3_tts", "--path", str(folder), "--id", name,
                     "--data-dir", str(data)]) == 0
    for live in run_server(data):
        with httpx.Client(base_url=live.url, timeout=60) as client:
            refused = client.post("/v1/audio/design", json={"input": "Hello there.", "instruct": DESCRIPTION})
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["field"] == "model" and error["param"] == "model", error
            if designers:
                assert error["message"] == ("model is required here: several VoiceDesign models are installed "
                                            "(design-0, design-1) and the default model is none of them; name "
                                            "one as model")
            else:
                assert error["message"] == ("model is required: /v1/audio/design needs a VoiceDesign model (a "
                                            "qwen3_tts model of type voice_design), none is installed, and the "
                                            "default model 'piper-joe' cannot design voices (docs/qwen3_tts.md "
                                            "says where to get one)")
            # The request's own fields first, as /v1/audio/clone: a missing instruct was the model's 400 here,
            # an empty one the instruct's (a new user's trial); so are the other fields' errors.
            for change, field in (({}, "instruct"), ({"instruct": ""}, "instruct"), ({"speed": 9}, "speed"),
                                  ({"busy_timeout_ms": -1}, "busy_timeout_ms"), ({"code": "x"}, "code"),
                                  ({"voice": 3}, "voice")):
                own = client.post("/v1/audio/design", json={"input": "Hello there.", **change})
                assert own.status_code == 400 and own.json()["error"]["field"] == field, (change, own.text)
            named = client.post("/v1/audio/design", json={"input": "Hi.", "instruct": DESCRIPTION,
                                                          "model": names[0] if names else "piper-joe",
                                                          "response_format": "pcm"})
            assert named.status_code == (200 if names else 400), named.text


def test_design_finds_a_preset_in_any_case_as_speech_does(server: LiveServer) -> None:
    """The trial: `/v1/audio/design` with `voice: "WARM"` for a preset "warm" keeping a description
    was a 400 (instruct required), while `/v1/audio/speech` found the preset (README: a preset is
    found in any case)."""
    body = {"input": "Hello there.", "response_format": "pcm"}
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for voice in ("described", "DESCRIBED", "Described"):
            designed = client.post("/v1/audio/design", json={**body, "voice": voice})
            assert designed.status_code == 200, (voice, designed.text)
            assert designed.headers["x-voxgate-preset"] == "described"
            assert _frames(np.frombuffer(designed.content, "<i2")) == FORCED
    assert server.wait_idle() == 0

"""Voice cloning through the gateway, against a running server (httpx: no SDK has a clone call):
`POST /v1/audio/clone` with an uploaded recording or a library reference voice, a reference
voice by name in `/v1/audio/speech`, `/v1/realtime` and a preset, the reference cache, and
every bad input answered with a 4xx naming its field.

The Base model is the tiny random checkpoint with both encoders (tests/conftest.py), its
generation capped at `MAX_FRAMES`; a preset forces an exact length where a test counts.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np
import pytest
from websockets.sync.client import connect

from gateway.cli import main
from tests.conftest import LiveServer, run_server
from tests.gateway.test_qwen3_tts_e2e import MAX_FRAMES, SAMPLES_PER_FRAME, _folder, _frames, _wav
from tests.gateway.test_realtime import speak
from tests.gateway.test_references import _float_wav

pytest.importorskip("torch")

FORCED = 10
REF_TEXT = "The quick brown fox."


def _recording(seconds: float, rate: int = 16000, seed: int = 0, fmt: str = "WAV") -> bytes:
    """A speech-like test recording (harmonics of a wandering pitch) as a file's bytes."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    t = np.arange(int(rate * seconds)) / rate
    phase = 2 * np.pi * np.cumsum(130 + 25 * np.sin(2 * np.pi * 0.8 * t)) / rate
    wave = sum(np.sin(k * phase) / k for k in range(1, 5)) * 0.25 + 0.01 * rng.standard_normal(t.shape)
    out = io.BytesIO()
    sf.write(out, wave.astype(np.float32), rate, format=fmt)
    return out.getvalue()


@pytest.fixture(scope="module")
def server(qwen3_tts_tiny: Path, qwen3_tts_tiny_base: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("clone-e2e")
    data = root / "data"
    for model_id, source, model_type in (("tiny-clone", qwen3_tts_tiny_base, "base"),
                                         ("tiny-qwen", qwen3_tts_tiny, "custom_voice")):
        folder = _folder(source, root / model_id, model_type)
        assert main(["models", "add", "--family", "qwen3_tts", "--path", str(folder), "--id", model_id,
                     "--data-dir", str(data)]) == 0
    for live in run_server(data):
        with httpx.Client(base_url=live.url, timeout=120) as client:
            for name, seed in (("alice", 1), ("bob", 2)):
                uploaded = client.post("/v1/voices/references", data={"name": name, "transcript": REF_TEXT},
                                       files={"audio": (f"{name}.wav", _recording(2.0, seed=seed), "audio/wav")})
                assert uploaded.status_code == 201, uploaded.text
            preset = {"name": "alice-forced", "model": "tiny-clone", "voice": "alice",
                      "settings": {"force_tokens": FORCED, "seed": 3}}
            assert client.post("/v1/presets", json=preset).status_code == 201
        yield live


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as http:
        yield http


def _clone(client: httpx.Client, files: dict[str, Any] | None = None, **fields: str) -> httpx.Response:
    """A multipart POST (text fields as parts without a file name, as a browser's FormData sends them)."""
    form = {"text": "Hello there.", "model": "tiny-clone", **fields}
    parts: list[tuple[str, Any]] = [(k, (None, v)) for k, v in form.items() if v is not None]
    return client.post("/v1/audio/clone", files=parts + list((files or {}).items()))


def _cache(server: LiveServer) -> Any:
    """The reference cache of the server's loaded Base model (models/qwen3_tts_references.py), read
    through its runner (`Qwen3TTSRunner.model`: the in-process model, whose `prepare` fills it)."""
    from models.qwen3_tts_references import caches

    resident = server.app_state.residency._residents["tiny-clone"]  # the test reaches in: no API exposes it
    assert resident.runner is not None
    cache = resident.runner.model.references  # type: ignore[attr-defined]
    assert cache in caches()  # what the gateway's `forget` reaches
    return cache


def test_clone_from_an_uploaded_recording_as_wav_and_sse(client: httpx.Client, server: LiveServer) -> None:
    recording = {"ref_audio": ("me.flac", _recording(1.5, rate=44100, fmt="FLAC"), "audio/flac")}
    response = _clone(client, recording, ref_text=REF_TEXT, response_format="wav")
    assert response.status_code == 200, response.text
    assert response.headers["x-voxgate-model"] == "tiny-clone" and response.headers["x-voxgate-voice"] == "upload"
    assert 2 <= _frames(_wav(response.content)) <= MAX_FRAMES
    streamed = _clone(client, recording, ref_text=REF_TEXT, stream="true", response_format="pcm")
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_bytes"] > 0
    assert {e["type"] for e in events} == {"speech.audio.delta", "speech.audio.done"}
    assert server.wait_idle() == 0


def test_a_library_voice_speaks_in_clone_speech_and_a_preset(client: httpx.Client, server: LiveServer) -> None:
    by_name = _clone(client, voice="alice", response_format="pcm")
    assert by_name.status_code == 200, by_name.text
    assert by_name.headers["x-voxgate-voice"] == "alice" and _frames(np.frombuffer(by_name.content, "<i2")) >= 2
    speech = client.post("/v1/audio/speech", json={"model": "tiny-clone", "voice": "bob", "input": "Hello there.",
                                                   "response_format": "pcm"})
    assert speech.status_code == 200, speech.text
    assert speech.headers["x-voxgate-voice"] == "bob"
    forced = client.post("/v1/audio/speech", json={"voice": "alice-forced", "input": "Hello there.",
                                                   "response_format": "pcm"})
    assert forced.status_code == 200, forced.text
    assert _frames(np.frombuffer(forced.content, "<i2")) == FORCED
    assert server.wait_idle() == 0


def test_realtime_speaks_with_a_reference_voice(server: LiveServer) -> None:
    with connect(f"{server.ws_url}/v1/realtime") as ws:
        assert json.loads(ws.recv())["type"] == "session.created"
        ws.send(json.dumps({"type": "session.update", "session": {"model": "tiny-clone", "voice": "alice"}}))
        updated = json.loads(ws.recv())
        assert updated["type"] == "session.updated", updated
        assert updated["session"]["voice"] == "alice"
        ws.send(json.dumps({"type": "session.update", "session": {"voice": "alice-forced"}}))
        assert json.loads(ws.recv())["type"] == "session.updated"
        events, audio = speak(ws, "Hello there.", timeout=120)
        samples = len(audio) // 2
        assert events[-1]["type"] == "utterance.done", events
        assert samples == FORCED * SAMPLES_PER_FRAME
        ws.send(json.dumps({"type": "session.update", "session": {"model": "tiny-clone", "voice": "nobody"}}))
        error = json.loads(ws.recv())
        assert error["type"] == "error" and error["error"]["field"] == "session.voice"


def test_a_session_on_a_deleted_reference_voice_is_told_so(client: httpx.Client, server: LiveServer) -> None:
    """Found by a new-user trial: a realtime session kept speaking in a reference voice deleted after its
    session.update, which every new REST request refused. Its next utterance fails naming session.voice."""
    uploaded = client.post("/v1/voices/references", data={"name": "carol", "transcript": REF_TEXT},
                           files={"audio": ("carol.wav", _recording(2.0, seed=5), "audio/wav")})
    assert uploaded.status_code == 201, uploaded.text
    with connect(f"{server.ws_url}/v1/realtime") as ws:
        assert json.loads(ws.recv())["type"] == "session.created"
        ws.send(json.dumps({"type": "session.update", "session": {"model": "tiny-clone", "voice": "carol",
                                                                  "sample_rate": 24000}}))
        assert json.loads(ws.recv())["type"] == "session.updated"
        events, audio = speak(ws, "Hello there.", timeout=120)
        assert events[-1]["type"] == "utterance.done" and events[-1]["error"] is None and audio, events
        assert client.delete("/v1/voices/references/carol").status_code == 204
        ws.send(json.dumps({"type": "text.append", "text": "Hello again."}))
        ws.send(json.dumps({"type": "text.flush"}))
        error = json.loads(ws.recv(timeout=60))
        assert error["type"] == "error" and error["error"]["field"] == "session.voice", error
        assert "'carol' was deleted" in error["error"]["message"]
        done = json.loads(ws.recv(timeout=60))
        assert done["type"] == "utterance.done" and done["error"] == "unknown_voice", done
    assert server.wait_idle() == 0


def test_a_voice_used_again_is_not_encoded_again_and_deleting_it_drops_it(client: httpx.Client,
                                                                          server: LiveServer) -> None:
    assert _clone(client, voice="alice", response_format="pcm").status_code == 200
    cache = _cache(server)
    misses, hits = cache.misses, cache.hits
    again = _clone(client, voice="alice", response_format="pcm")
    assert again.status_code == 200
    assert cache.misses == misses and cache.hits > hits  # every engine request of it was a hit
    uploaded = client.post("/v1/voices/references", data={"name": "carol", "transcript": REF_TEXT},
                           files={"audio": ("c.wav", _recording(1.2, seed=9), "audio/wav")})
    assert uploaded.status_code == 201
    assert _clone(client, voice="carol", response_format="pcm").status_code == 200
    assert cache.misses == misses + 1
    entries = len(cache)
    assert client.delete("/v1/voices/references/carol").status_code == 204
    assert len(cache) == entries - 1  # its encoding went with it
    gone = _clone(client, voice="carol")
    assert gone.status_code == 404 and gone.json()["error"]["field"] == "voice"
    assert server.wait_idle() == 0


def test_bad_clone_requests_are_refused_naming_the_field(client: httpx.Client, server: LiveServer) -> None:
    wav = ("r.wav", _recording(1.5), "audio/wav")
    cases: list[tuple[dict[str, Any] | None, dict[str, Any], int, str]] = [
        ({"ref_audio": wav}, {"ref_text": REF_TEXT, "text": None}, 400, "text"),
        ({"ref_audio": wav}, {"ref_text": REF_TEXT, "text": "   "}, 400, "text"),
        ({"ref_audio": wav}, {}, 400, "ref_text"),
        (None, {}, 400, "ref_audio"),
        ({"ref_audio": wav}, {"ref_text": REF_TEXT, "voice": "alice"}, 400, "ref_audio"),
        ({"ref_audio": ("r.wav", b"not audio at all", "audio/wav")}, {"ref_text": REF_TEXT}, 400, "ref_audio"),
        ({"ref_audio": ("r.wav", b"", "audio/wav")}, {"ref_text": REF_TEXT}, 400, "ref_audio"),
        ({"ref_audio": ("r.wav", _recording(0.4), "audio/wav")}, {"ref_text": REF_TEXT}, 422, "ref_audio"),
        ({"ref_audio": ("r.wav", _recording(31.0, rate=8000), "audio/wav")}, {"ref_text": REF_TEXT}, 422,
         "ref_audio"),
        ({"ref_audio": ("r.wav", _float_wav(np.zeros(36000)), "audio/wav")}, {"ref_text": REF_TEXT}, 422,
         "ref_audio"),  # silent: the trial's was cloned from
        ({"ref_audio": ("r.wav", _float_wav(np.full(36000, np.nan)), "audio/wav")}, {"ref_text": REF_TEXT}, 400,
         "ref_audio"),  # NaN samples: the trial's were cloned from as silence
        (None, {"voice": "nobody"}, 404, "voice"),
        (None, {"voice": "alice", "model": "tiny-qwen"}, 400, "model"),
        (None, {"voice": "alice", "model": "piper-joe"}, 400, "model"),
        (None, {"voice": "alice", "model": "no-such-model"}, 404, "model"),
        (None, {"voice": "alice", "response_format": "aac"}, 400, "response_format"),
        (None, {"voice": "alice", "stream": "maybe"}, 400, "stream"),
        (None, {"voice": "alice", "speed": "2"}, 400, "speed"),
    ]
    for files, fields, status, field in cases:
        response = _clone(client, files, **fields)
        assert response.status_code == status, (fields, response.text)
        assert response.json()["error"]["field"] == field, (fields, response.json())
    as_json = client.post("/v1/audio/clone", json={"text": "Hi.", "voice": "alice"})
    assert as_json.status_code == 415
    too_large = _clone(client, {"ref_audio": ("big.wav", b"\0" * (17 * 1024 * 1024), "audio/wav")},
                       ref_text=REF_TEXT)
    assert too_large.status_code == 413 and too_large.json()["error"]["field"] == "ref_audio"
    no_reference = client.post("/v1/audio/speech", json={"model": "tiny-clone", "input": "Hi."})
    assert no_reference.status_code == 400 and no_reference.json()["error"]["field"] == "voice"
    assert server.wait_idle() == 0  # nothing leaked


def test_clone_text_is_checked_as_speech_checks_its_input(client: httpx.Client) -> None:
    """As read by the text frontend, not raw (the trial's finding): markup alone was refused naming
    `input`, a field clone does not have, and an emoji alone for lacking letters, whatever the
    server's text_emoji said."""
    for text, message in (('<break time="500ms"/>', "text has nothing to speak once markup, code and emoji are "
                                                    "left out"),
                          ("😀", "text has nothing that can be spoken (no letters or digits; emoji are dropped "
                                 "unless the server's text_emoji is \"name\")")):
        refused = _clone(client, voice="alice", text=text)
        assert refused.status_code == 400, refused.text
        assert (refused.json()["error"]["field"], refused.json()["error"]["message"]) == ("text", message)
        speech = client.post("/v1/audio/speech", json={"model": "tiny-clone", "voice": "alice", "input": text})
        assert speech.json()["error"]["message"] == message.replace("text", "input", 1).replace(
            "the server's text_emoji", "emoji")


def test_presets_may_name_a_reference_voice_of_a_base_model(client: httpx.Client) -> None:
    missing = client.post("/v1/presets", json={"name": "ghost", "model": "tiny-clone", "voice": "nobody"})
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "voice"
    other = client.post("/v1/presets", json={"name": "mix", "model": "tiny-qwen", "voice": "alice"})
    assert other.status_code == 404 and other.json()["error"]["field"] == "voice"
    made = client.post("/v1/presets", json={"name": "bob-preset", "model": "tiny-clone", "voice": "bob"})
    assert made.status_code == 201 and made.json()["voice"] == "bob"


def test_the_vendor_routes_speak_with_a_reference_voice(client: httpx.Client, server: LiveServer) -> None:
    """An ElevenLabs `voice_id` or a Cartesia `voice.id` naming a reference voice, with a Base model."""
    eleven = client.post("/v1/text-to-speech/alice?output_format=pcm_24000",
                         json={"text": "Hello there.", "model_id": "tiny-clone"})
    assert eleven.status_code == 200, eleven.text
    assert _frames(np.frombuffer(eleven.content, "<i2")) >= 2
    cartesia = client.post("/tts/bytes", headers={"Cartesia-Version": "2024-11-13"},
                           json={"model_id": "tiny-clone", "transcript": "Hello there.",
                                 "voice": {"mode": "id", "id": "bob"},
                                 "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}})
    assert cartesia.status_code == 200, cartesia.text
    assert _frames(np.frombuffer(cartesia.content, "<i2")) >= 2
    unknown = client.post("/v1/text-to-speech/nobody", json={"text": "Hi.", "model_id": "tiny-clone"})
    assert unknown.status_code == 404 and "'nobody'" in unknown.json()["error"]["message"]  # the name typed
    assert unknown.json()["error"]["field"] == "voice_id"
    assert server.wait_idle() == 0


def test_a_project_speaks_with_a_reference_voice(client: httpx.Client, server: LiveServer) -> None:
    from tests.gateway.test_projects import imported, new_project, wait_job

    project = new_project(client, model="tiny-clone", speaker="alice")
    pid = imported(client, project["id"], "Hello there.\n\nAnd again.")["id"]
    passages = client.get(f"/v1/projects/{pid}").json()["passages"]
    assert client.patch(f"/v1/projects/{pid}/passages/{passages[1]['id']}", json={"speaker": "bob"}).status_code == 200
    assert client.post(f"/v1/projects/{pid}/generate", json={}).status_code == 202
    done = wait_job(client, pid)
    assert done["state"] == "done" and done["done"] == 2 and done["failed"] == 0, done
    takes = [p["takes"][0] for p in client.get(f"/v1/projects/{pid}").json()["passages"]]
    assert [t["voice"] for t in takes] == ["alice", "bob"]
    bad = client.patch(f"/v1/projects/{pid}/passages/{passages[1]['id']}", json={"speaker": "nobody"})
    assert bad.status_code == 404 and bad.json()["error"]["field"] == "speaker"  # as for any unknown voice
    assert server.wait_idle() == 0


def test_x_vector_only_clones_without_a_transcript(client: httpx.Client, server: LiveServer) -> None:
    """qwen-tts's x_vector_only_mode: the speaker embedding alone, so no `ref_text`; the prompt
    carries none of the recording's frames."""
    recording = {"ref_audio": ("me.wav", _recording(1.5), "audio/wav")}
    response = _clone(client, recording, x_vector_only="true", response_format="pcm")
    assert response.status_code == 200, response.text
    assert _frames(np.frombuffer(response.content, "<i2")) >= 2
    library = _clone(client, voice="alice", x_vector_only="TRUE", response_format="pcm")
    assert library.status_code == 200 and library.headers["x-voxgate-voice"] == "alice"
    bad = _clone(client, recording, x_vector_only="maybe")
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "x_vector_only"
    assert server.wait_idle() == 0


def test_a_base_model_lists_and_takes_only_reference_voices(client: httpx.Client, server: LiveServer) -> None:
    """Its own `default` is no voice it can speak in: not listed, refused in presets and
    projects up front; a preset whose reference is deleted says so."""
    voices = client.get("/v1/audio/voices", params={"model": "tiny-clone"}).json()["data"]
    assert {(v["id"], v["kind"]) for v in voices if v["kind"] != "preset"} == {("alice", "reference"),
                                                                              ("bob", "reference")}
    assert set(client.get("/v1/models/tiny-clone").json()["voices"]) == {"alice", "bob"}
    for body, field in (({"name": "b1", "model": "tiny-clone"}, "voice"),
                        ({"name": "b2", "model": "tiny-clone", "voice": "default"}, "voice"),
                        ({"name": "b3", "model": "tiny-clone", "voice": "alice",
                          "settings": {"instructions": "happy"}}, "settings.instructions")):
        refused = client.post("/v1/presets", json=body)
        assert refused.status_code == 400 and refused.json()["error"]["field"] == field, refused.text
    project = client.post("/v1/projects", json={"name": "p", "model": "tiny-clone"})
    assert project.status_code == 400 and project.json()["error"]["field"] == "speaker", project.text
    speech = client.post("/v1/audio/speech", json={"model": "tiny-clone", "voice": "default", "input": "Hi."})
    assert speech.status_code == 400 and "cloned voice" in speech.json()["error"]["message"]
    told = client.post("/v1/audio/speech", json={"model": "tiny-clone", "voice": "alice", "input": "Hi.",
                                                 "instructions": "Whisper."})
    assert told.status_code == 400 and told.json()["error"]["field"] == "instructions"
    carol = client.post("/v1/voices/references", data={"name": "carol", "transcript": REF_TEXT},
                        files={"audio": ("c.wav", _recording(2.0, seed=4), "audio/wav")})
    assert carol.status_code == 201
    assert client.post("/v1/presets", json={"name": "carol-p", "model": "tiny-clone", "voice": "carol"}).status_code == 201
    assert client.get("/v1/presets/carol-p").json()["usable"] is True
    assert client.delete("/v1/voices/references/carol").status_code == 204
    gone = client.get("/v1/presets/carol-p").json()
    assert gone["usable"] is False and "'carol' is gone" in gone["problem"]
    both = _clone(client, {"ref_audio": ("r.wav", _recording(1.5), "audio/wav")}, x_vector_only="true",
                  ref_text=REF_TEXT)
    assert both.status_code == 400 and both.json()["error"]["field"] == "ref_text"
    assert server.wait_idle() == 0


def test_a_base_model_has_no_default_voice_and_a_request_without_one_is_told_which_exist(
        client: httpx.Client) -> None:
    """The trial: /v1/audio/voices marked its first reference voice the default, as README says a
    request without a voice gets, but such a request was refused. Now none is marked, and the
    refusal (no voice, `default`, an OpenAI voice name; speech and the vendor routes) names
    `voice` (Cartesia's `voice.id` on its route), says there is no default voice and lists the
    reference voices."""
    voices = client.get("/v1/audio/voices", params={"model": "tiny-clone"}).json()["data"]
    assert [v["default"] for v in voices if v["kind"] == "reference"] == [False, False]
    builtin = client.get("/v1/audio/voices", params={"model": "piper-joe"}).json()["data"]
    assert [v["id"] for v in builtin if v.get("default")] == ["default"]  # other models keep theirs
    asks = [client.post("/v1/audio/speech", json={"model": "tiny-clone", "input": "Hi.", **voice})
            for voice in ({}, {"voice": "alloy"}, {"voice": {"id": "nova"}}, {"voice": "default"})]
    asks.append(client.post("/tts/bytes", json={"model_id": "tiny-clone", "transcript": "Hi.",
                                                "voice": {"mode": "id", "id": ""},
                                                "output_format": {"container": "wav", "encoding": "pcm_s16le",
                                                                  "sample_rate": 24000}}))
    for refused, field in zip(asks, ["voice"] * 4 + ["voice.id"]):
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["field"] == field, error
        assert error["message"] == ("model 'tiny-clone' is a Base model: it speaks only in a cloned voice and has "
                                    f"no default voice; {field} must name a reference voice (reference voices: alice, "
                                    "bob), or clone from a recording with POST /v1/audio/clone"), error
    named = client.post("/v1/audio/speech", json={"model": "tiny-clone", "voice": "alice", "input": "Hi.",
                                                  "response_format": "wav"})
    assert named.status_code == 200, named.text


def test_an_unknown_voice_of_a_base_model_lists_its_reference_voices(client: httpx.Client,
                                                                       server: LiveServer) -> None:
    """The trial: `{"model": <Base>, "voice": "Nobody"}` was a 404 saying "voices: default", the
    one voice a Base model refuses. Now it lists the reference voices (and the model's presets),
    on speech and in a realtime session's update (naming `session.voice`)."""
    refused = client.post("/v1/audio/speech", json={"model": "tiny-clone", "voice": "Nobody", "input": "Hi."})
    assert refused.status_code == 404, refused.text
    error = refused.json()["error"]
    assert error["field"] == "voice" and error["code"] == "unknown_voice"
    assert error["message"].startswith("model 'tiny-clone' is a Base model and has no reference voice or preset "
                                       "'Nobody'; reference voices: alice, bob; presets: alice-forced"), error
    assert "default" not in error["message"]
    with connect(f"{server.ws_url}/v1/realtime") as ws:
        json.loads(ws.recv())  # session.created
        ws.send(json.dumps({"type": "session.update", "session": {"model": "tiny-clone", "voice": "Nobody"}}))
        event = json.loads(ws.recv())
        # An empty voice is refused (it meant the default voice); a Base model's refusal still says why
        ws.send(json.dumps({"type": "session.update", "session": {"model": "tiny-clone", "voice": ""}}))
        empty = json.loads(ws.recv())
    assert event["type"] == "error" and event["error"]["field"] == "session.voice", event
    assert "reference voices: alice, bob" in event["error"]["message"]
    assert empty["type"] == "error" and empty["error"]["field"] == "session.voice", empty
    assert "has no default voice" in empty["error"]["message"] and "alice, bob" in empty["error"]["message"], empty


def test_an_openai_model_name_or_none_clones_with_the_base_model(client: httpx.Client) -> None:
    """`model: tts-1` was a 404 here, though an OpenAI model name means `default_model` wherever a
    model is named (found by a new-user trial); the server's default_model is the embedded voice, no
    Base model, so it means what no model means: the first Base model by id."""
    for model in ("tts-1", None):
        response = _clone(client, voice="alice", model=model, response_format="pcm")  # type: ignore[arg-type]
        assert response.status_code == 200, (model, response.text)
        assert response.headers["x-voxgate-model"] == "tiny-clone"

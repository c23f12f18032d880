"""Reference recordings (/v1/voices/references) through a real uvicorn server, with httpx multipart."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from gateway import references
from tests.conftest import LiveServer

URL = "/v1/voices/references"


def recording(seconds: float, rate: int = 44100, channels: int = 2, fmt: str = "WAV") -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * 220 * t)
    buffer = io.BytesIO()
    sf.write(buffer, np.stack([wave] * channels, axis=1), rate, format=fmt, subtype="PCM_16")
    return buffer.getvalue()


def _float_wav(samples: np.ndarray, rate: int = 24000) -> bytes:
    """A float32 WAV of `samples` as they are (NaN kept: the trial's file stored silence)."""
    buffer = io.BytesIO()
    sf.write(buffer, samples.astype(np.float32), rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


def upload(client: httpx.Client, name: str = "anna", transcript: str = "Hello, this is Anna.",
           audio: bytes | None = None, filename: str = "anna.wav", **extra: str) -> httpx.Response:
    data: dict[str, Any] = {"name": name, "transcript": transcript, **extra}
    files = {"audio": (filename, recording(2.0) if audio is None else audio, "audio/wav")}
    return client.post(URL, data={k: v for k, v in data.items() if v is not None}, files=files)


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()["error"]
    return body


def test_upload_list_fetch_and_delete(client: httpx.Client, server: LiveServer) -> None:
    created = upload(client)
    assert created.status_code == 201, created.text
    voice = created.json()
    assert voice["name"] == "anna" and voice["transcript"] == "Hello, this is Anna."
    assert voice["sample_rate"] == 24000 and voice["audio_ms"] == 2000.0 and voice["source_name"] == "anna.wav"
    assert [v["name"] for v in client.get(URL).json()["data"]] == ["anna"]
    assert client.get(f"{URL}/anna").json()["transcript"] == "Hello, this is Anna."
    audio = client.get(voice["audio_url"])
    samples, rate = sf.read(io.BytesIO(audio.content), dtype="float32")
    assert audio.headers["content-type"] == "audio/wav" and rate == 24000 and samples.shape == (48000,)
    assert 0.25 < float(np.abs(samples).max()) < 0.35  # stereo averaged, resampled, not rescaled
    error(upload(client), 409)
    flac = upload(client, "anna flac", audio=recording(1.5, rate=16000, channels=1, fmt="FLAC"), filename="a.flac")
    assert flac.status_code == 201 and flac.json()["audio_ms"] == 1500.0
    folder = server.settings.data_dir / "references"
    assert len(list(folder.iterdir())) == 2
    assert client.delete(f"{URL}/anna").status_code == 204
    assert client.delete(f"{URL}/anna flac").status_code == 204
    assert error(client.get(f"{URL}/anna"), 404)["field"] == "name"
    assert error(client.delete(f"{URL}/anna"), 404)["code"] == "reference_not_found"
    assert list(folder.iterdir()) == [] and client.get(URL).json()["data"] == []


@pytest.mark.parametrize("kwargs, status, field, words", [
    ({"audio": b"RIFF....WAVEjunk"}, 400, "audio", "not a readable"),
    ({"audio": recording(0.5)}, 422, "audio", "0.50 s long"),
    ({"audio": recording(31.0, rate=8000, channels=1)}, 422, "audio", "31.00 s long"),
    ({"audio": _float_wav(np.zeros(48000))}, 422, "audio", "silent (every sample is 0)"),
    ({"audio": _float_wav(np.full(48000, np.nan))}, 400, "audio", "not finite numbers"),
    ({"transcript": None}, 400, "transcript", "transcript is required"),
    ({"transcript": "   "}, 400, "transcript", "empty"),
    ({"transcript": "x" * 1001}, 422, "transcript", "limit is 1000"),
    ({"name": "-bad"}, 400, "name", "name must be"),
    ({"name": "Zoë"}, 400, "name", "ASCII letters (A-Z, a-z)"),  # "letters" said, but only ASCII ones are
    ({"name": "ok\n"}, 400, "name", "name must be"),
    ({"mood": "happy"}, 400, "mood", "unknown field"),
])
def test_bad_uploads_are_refused_and_store_nothing(client: httpx.Client, server: LiveServer, kwargs: dict[str, Any],
                                                   status: int, field: str, words: str) -> None:
    body = error(upload(client, **kwargs), status)
    assert body["field"] == field and words in body["message"]
    assert "object at 0x" not in body["message"]  # no Python object reprs in messages
    assert client.get(URL).json()["data"] == []
    folder = server.settings.data_dir / "references"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_a_recording_is_refused_where_the_disk_would_fill(tmp_path: Path) -> None:
    """A reference was written without a look at the disk (takes refused it: 507); now the same 507,
    before a byte is written."""
    from tests.conftest import run_server

    for live in run_server(tmp_path, min_free_disk_mb=1e12):  # more than any disk has
        with httpx.Client(base_url=live.url, timeout=60) as client:
            body = error(upload(client), 507)
            assert body["code"] == "insufficient_storage" and body["field"] == "audio"
            assert "min_free_disk_mb" in body["message"]
            assert client.get(URL).json()["data"] == []
    folder = tmp_path / "references"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_a_write_the_full_disk_cuts_short_leaves_no_file(tmp_path: Path) -> None:
    """A disk that filled between the check and the write (ENOSPC): the same 507, and no partial file."""
    from gateway.errors import ApiError

    store = references.ReferenceStore(None, tmp_path / "references")  # type: ignore[arg-type]  # (no rows)
    (tmp_path / "references").mkdir()
    (tmp_path / "references" / "ref-full.wav.part").symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.raises(ApiError) as refused:
        store._write("ref-full.wav", b"\1\0" * 24000)
    assert refused.value.status == 507 and refused.value.code == "insufficient_storage"
    assert list((tmp_path / "references").iterdir()) == []


def test_audio_that_is_not_a_file_part_or_not_multipart(client: httpx.Client) -> None:
    no_file = client.post(URL, data={"name": "a", "transcript": "Hi there."},  # a plain field, no filename
                          files={"audio": (None, b"not a file")})
    assert error(no_file, 400)["field"] == "audio"
    assert error(client.post(URL, json={"name": "a"}), 415)["code"] == "unsupported_media_type"
    broken = client.post(URL, content=b"--xyz\r\nnonsense",
                         headers={"content-type": "multipart/form-data; boundary=xyz"})
    assert error(broken, 400)["field"] == "name"  # no part parses: the first required field is missing


def test_an_upload_over_the_size_limit_is_413(client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(references, "MAX_UPLOAD_BYTES", 10_000)
    body = error(upload(client, audio=recording(2.0)), 413)
    assert body["field"] == "audio" and "over 10000 bytes" in body["message"]
    assert client.get(URL).json()["data"] == []


def _constant_flac(seconds: int, rate: int = 48000, unknown_length: bool = False) -> bytes:
    """A FLAC of a constant level: a few bytes a block, so a small file holds minutes of audio.
    `unknown_length`: STREAMINFO's total samples 0 (a streamed encoder's "not known")."""
    buffer = io.BytesIO()
    with sf.SoundFile(buffer, "w", samplerate=rate, channels=1, format="FLAC", subtype="PCM_16") as out:
        for _ in range(seconds // 60):
            out.write(np.full(rate * 60, 0.25, dtype=np.float32))
    data = bytearray(buffer.getvalue())
    if unknown_length:  # its 36 bits end STREAMINFO's bytes 13-17 (the file's 21-25)
        data[21] &= 0xF0
        data[22:26] = bytes(4)
    return bytes(data)


@pytest.mark.parametrize("unknown_length", [False, True])
def test_a_long_compressed_recording_is_refused_without_decoding_it_all(unknown_length: bool) -> None:
    """A trial sent an 89 KB FLAC holding 10 minutes of audio (1.2 MB 20 minutes of stereo) as a
    clone's `ref_audio` with a speech key: it was decoded whole (float32) before the 30 s check, 171 MB
    at the peak, and a 16 MiB upload holds hours. It is now read a block at a time, up to the limit."""
    import tracemalloc

    from gateway.errors import ApiError

    bomb = _constant_flac(600, unknown_length=unknown_length)
    assert len(bomb) < 200_000  # 600 s x 48 kHz x 4 bytes decoded: 115 MB
    tracemalloc.start()
    try:
        with pytest.raises(ApiError) as refused:
            references.to_pcm16(bomb, "ref_audio")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.status == 422 and refused.value.field == "ref_audio"
    assert ("600.00 s long" if not unknown_length else "longer than 30 s") in refused.value.message
    assert peak < 30_000_000, peak  # about the limit's 30 s at 48 kHz (5.8 MB), not the file's 600 s


def test_a_recording_at_a_rate_no_voice_needs_is_refused_undecoded() -> None:
    """A 165 KB FLAC of 29 s at 655,350 Hz (FLAC's highest) in 8 channels passed the 30 s bound and took
    152 MB and 2.2 s to decode and resample, per request. Rates over 192 kHz are refused before decoding."""
    from engine.types import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        references.to_pcm16(_constant_flac(60, rate=384000), "ref_audio")
    assert refused.value.field == "ref_audio" and "384000 Hz" in refused.value.message
    assert "192000" in refused.value.message
    assert len(references.to_pcm16(recording(1.5, rate=192000, channels=1, fmt="FLAC"))) == 2 * 36000


def test_a_stored_recording_is_read_and_hashed_once_per_upload(tmp_path: Any) -> None:
    """gateway/clone_voices.py `_recording`: keyed by the file and its row's `created_at`, so a
    request reuses it and a new upload under the same name (a new row) is read afresh."""
    from gateway.clone_voices import _recording
    from models.qwen3_tts_references import ReferenceAudio

    path = tmp_path / "anna.wav"
    first, second = b"\x01\x00" * 2400, b"\x02\x00" * 2400
    path.write_bytes(references.wav_header(references.SAMPLE_RATE, 2400) + first)
    assert _recording(path, 1.0) == (first, ReferenceAudio.from_pcm16(first, None).sha256)
    path.write_bytes(references.wav_header(references.SAMPLE_RATE, 2400) + second)
    assert _recording(path, 1.0)[0] == first  # the same upload: not read again
    assert _recording(path, 2.0) == (second, ReferenceAudio.from_pcm16(second, None).sha256)
    path.unlink()
    with pytest.raises(OSError):
        _recording(path, 3.0)


def test_clone_without_a_base_model_checks_the_fields_then_says_where_to_get_one(client: httpx.Client) -> None:
    wav = {"ref_audio": ("r.wav", recording(2.0), "audio/wav")}
    missing = client.post("/v1/audio/clone", data={"text": "Hi."}, files=wav)
    assert error(missing, 400)["field"] == "ref_text"  # the request's own fields first
    none = error(client.post("/v1/audio/clone", data={"text": "Hi.", "ref_text": "Hello."}, files=wav), 400)
    assert none["field"] == "model" and "no Qwen3-TTS Base model is installed" in none["message"]
    assert "voxgate models add" in none["message"] and "docs/qwen3_tts.md" in none["message"]


def test_a_reference_name_that_another_voice_would_hide_is_refused(client: httpx.Client) -> None:
    for name in ("default", "Alloy"):
        assert error(upload(client, name=name), 400)["field"] == "name"
    assert client.post("/v1/presets", json={"name": "hidden", "speed": 1.0}).status_code == 201
    assert error(upload(client, name="hidden"), 409)["code"] == "name_taken"
    assert upload(client, name="My Voice").status_code == 201
    listed = {r["name"]: r for r in client.get(URL).json()["data"]}
    assert listed["My Voice"]["audio_url"] == "/v1/voices/references/My%20Voice/audio"
    assert client.get(listed["My Voice"]["audio_url"]).status_code == 200
    taken = client.post("/v1/presets", json={"name": "My Voice", "speed": 1.0})
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "name_taken"
    missing = client.post(URL, data={"name": "x1"}, files={"audio": ("a.wav", recording(2.0), "audio/wav")})
    assert "transcript is required" in error(missing, 400)["message"]
    assert client.delete(f"{URL}/My Voice").status_code == 204 and client.delete("/v1/presets/hidden").status_code == 204


def test_a_name_taken_in_another_case_is_refused_both_ways(client: httpx.Client) -> None:
    """The trial: a preset "TODD" was created beside reference voice "Todd" (and reference "Warm"
    beside preset "warm"); presets are found in any case, so `voice: "Todd"` on a Base model then
    meant the preset (a 400: another model's), while /v1/audio/voices still listed the reference."""
    assert upload(client, name="Todd").status_code == 201
    assert client.post("/v1/presets", json={"name": "warm", "speed": 1.0}).status_code == 201
    upper = client.post("/v1/presets", json={"name": "TODD", "speed": 1.0})
    assert upper.status_code == 409 and upper.json()["error"]["code"] == "name_taken", upper.text
    assert "'Todd'" in upper.json()["error"]["message"] and upper.json()["error"]["field"] == "name"
    body = error(upload(client, name="Warm"), 409)
    assert body["code"] == "name_taken" and body["field"] == "name" and "'warm'" in body["message"]
    assert [r["name"] for r in client.get(URL).json()["data"]] == ["Todd"]
    assert [p["name"] for p in client.get("/v1/presets").json()["data"]] == ["warm"]
    assert client.delete(f"{URL}/Todd").status_code == 204 and client.delete("/v1/presets/warm").status_code == 204


def test_a_chunked_upload_stops_being_read_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a Content-Length only the bytes read bound an upload: Starlette's request.form() spooled
    a file part of any size to a temporary file (a trial sent 1 GB to /v1/audio/clone, all on disk,
    before the 16 MiB check); the parser now gets the body through a counter that stops it."""
    from starlette.requests import Request

    from gateway.errors import ApiError

    monkeypatch.setattr(references, "MAX_UPLOAD_BYTES", 10_000)
    head = (b'--xyz\r\nContent-Disposition: form-data; name="audio"; filename="a.wav"\r\n'
            b"Content-Type: audio/wav\r\n\r\n")
    pulled = 0

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": head if pulled == 1 else b"\0" * 65536, "more_body": pulled < 1000}

    scope = {"type": "http", "method": "POST", "path": URL, "query_string": b"",
             "headers": [(b"content-type", b"multipart/form-data; boundary=xyz")]}
    with pytest.raises(ApiError) as refused:
        asyncio.run(references.read_upload_form(Request(scope, receive), {"audio"}, "audio", "audio"))
    assert refused.value.status == 413 and refused.value.field == "audio"
    assert pulled <= 4  # 10 000 + 64 KiB: the second 64 KiB chunk past the head is over it


async def _older_version(data: Path) -> None:
    """Rows and files as an older server left them in `data`: reference voices "Ann" and "Todd", and a preset
    "TODD" saved before the 409 `name_taken`, which takes Todd's name."""
    from gateway.library import Library

    library = await Library.open(data / "voxgate.db")
    store = references.ReferenceStore(library, data / "references")
    for name in ("Ann", "Todd"):
        await store.add(name, f"Hello, this is {name}.", references.to_pcm16(recording(2.0)), f"{name}.wav")
    await library.put_preset("TODD", "piper-joe", "default", 1.0, {}, create=True)
    await library.close()


def test_a_reference_voice_that_an_older_versions_preset_hides_is_listed_unusable(tmp_path: Any) -> None:
    """Before the 409 `name_taken`, a preset could be saved under a reference voice's name (in any case:
    presets are found in any case), and a request's `voice` then got the preset. The list says so."""
    from tests.conftest import run_server

    asyncio.run(_older_version(tmp_path))
    for server in run_server(tmp_path):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            listed = {r["name"]: r for r in client.get(URL).json()["data"]}
            assert listed["Ann"]["usable"] is True and listed["Ann"]["problem"] is None
            assert listed["Todd"]["usable"] is False
            assert listed["Todd"]["problem"] == (
                "preset 'TODD' (saved by an older Voxgate) has this name, which requests get instead of this "
                "reference voice; delete that preset, or upload this recording again under another name")
            assert client.get(f"{URL}/Todd").json() == listed["Todd"]
            assert client.get("/v1/presets/TODD").json()["usable"] is True  # the preset is what requests get
            assert client.delete("/v1/presets/TODD").status_code == 204
            assert client.get(f"{URL}/Todd").json()["usable"] is True
            assert all(r["usable"] for r in client.get(URL).json()["data"])


def test_a_base_models_voice_list_says_a_hidden_reference_voice_is_not_usable(
        tmp_path: Any, qwen3_tts_tiny_base: Any) -> None:
    """GET /v1/audio/voices?model=<a Base model> listed reference voice "Todd" as one of its voices,
    with nothing said, while an older Voxgate's preset "TODD" took the name (a request's `voice: "Todd"`
    got that preset) and /v1/voices/references and the Voices page said it was not usable. Its entries
    of kind `reference` now carry the same `usable` and `problem`."""
    from gateway.cli import main
    from tests.conftest import run_server

    data = tmp_path / "data"
    assert main(["models", "add", "--family", "qwen3_tts", "--path", str(qwen3_tts_tiny_base), "--id", "tiny-base",
                 "--data-dir", str(data)]) == 0

    asyncio.run(_older_version(data))
    for server in run_server(data):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            page = {r["name"]: r for r in client.get(URL).json()["data"]}
            for query in ({"model": "tiny-base"}, {}):
                voices = {v["name"]: v for v in client.get("/v1/audio/voices", params=query).json()["data"]
                          if v["kind"] == "reference"}
                assert set(voices) == {"Ann", "Todd"}, voices
                for name, voice in voices.items():
                    assert (voice["usable"], voice["problem"]) == (page[name]["usable"], page[name]["problem"])
                assert voices["Todd"]["usable"] is False and "preset 'TODD'" in voices["Todd"]["problem"]
                assert voices["Ann"]["usable"] is True and voices["Ann"]["problem"] is None
            assert client.delete("/v1/presets/TODD").status_code == 204
            voices = client.get("/v1/audio/voices", params={"model": "tiny-base"}).json()["data"]
            assert all(v["usable"] for v in voices if v["kind"] == "reference")

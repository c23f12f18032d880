"""Studio takes (/v1/takes) and live stats (/v1/stats) through a real uvicorn server."""

from __future__ import annotations

import base64
import io
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from gateway import takes
from tests.conftest import LiveServer

RATE = 24000


def tone(seconds: float = 0.5, rate: int = RATE) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2").tobytes()


def take_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"text": "Hello there.", "model": "piper-joe", "voice": "default", "speed": 1.25,
                            "sample_rate": RATE, "ttfa_ms": 123.4, "stalls": 1,
                            "audio": base64.b64encode(tone()).decode("ascii")}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not ...}


def test_a_take_is_kept_listed_downloaded_and_deleted(server: LiveServer, client: httpx.Client) -> None:
    created = client.post("/v1/takes", json=take_body())
    assert created.status_code == 201, created.text
    take = created.json()
    assert take["text"] == "Hello there." and take["model"] == "piper-joe" and take["voice"] == "default"
    assert take["speed"] == 1.25 and take["ttfa_ms"] == 123.4 and take["stalls"] == 1
    assert take["audio_ms"] == 500.0 and take["sample_rate"] == RATE
    assert (server.settings.data_dir / "takes" / f"{take['id']}.wav").is_file()

    listed = client.get("/v1/takes").json()["data"]
    assert listed[0]["id"] == take["id"]
    assert client.get(f"/v1/takes/{take['id']}").json() == take

    wav = client.get(take["audio_url"])
    assert wav.status_code == 200 and wav.headers["content-type"] == "audio/wav"
    assert wav.content[44:] == tone()  # exactly what was uploaded
    ranged = client.get(take["audio_url"], headers={"Range": "bytes=44-99"})
    assert ranged.status_code == 206 and ranged.content == tone()[:56]
    for fmt in ("mp3", "flac"):
        response = client.get(take["audio_url"], params={"format": fmt})
        assert response.status_code == 200, response.text
        audio, rate = sf.read(io.BytesIO(response.content), dtype="float32")
        assert rate == RATE and abs(len(audio) / rate - 0.5) < 0.1
        assert np.sqrt(np.mean(audio ** 2)) > 0.1

    assert client.delete(f"/v1/takes/{take['id']}").status_code == 204
    assert not (server.settings.data_dir / "takes" / f"{take['id']}.wav").exists()
    assert all(t["id"] != take["id"] for t in client.get("/v1/takes").json()["data"])
    assert client.delete(f"/v1/takes/{take['id']}").status_code == 404


@pytest.mark.parametrize("overrides, status, code, field", [
    ({"text": ...}, 400, "invalid_input", "text"),
    ({"text": "   "}, 400, "invalid_input", "text"),
    ({"text": "x" * 5000}, 422, "input_too_long", "text"),
    ({"model": "no-such-model"}, 404, "unknown_model", "model"),
    ({"model": ...}, 400, "invalid_input", "model"),
    ({"voice": ""}, 400, "invalid_input", "voice"),
    ({"voice": 7}, 400, "invalid_input", "voice"),
    ({"speed": 9}, 400, "invalid_input", "speed"),
    ({"speed": "fast"}, 400, "invalid_input", "speed"),
    ({"sample_rate": 12345}, 400, "invalid_input", "sample_rate"),
    ({"sample_rate": True}, 400, "invalid_input", "sample_rate"),
    ({"sample_rate": ...}, 400, "invalid_input", "sample_rate"),
    ({"ttfa_ms": -1}, 400, "invalid_input", "ttfa_ms"),
    ({"stalls": 1.5}, 400, "invalid_input", "stalls"),
    ({"audio": ...}, 400, "invalid_input", "audio"),
    ({"audio": "not base64!"}, 400, "invalid_input", "audio"),
    ({"audio": base64.b64encode(b"\x01\x02\x03").decode()}, 400, "invalid_input", "audio"),
    ({"colour": "blue"}, 400, "invalid_input", "colour"),
])
def test_bad_take_is_a_4xx_naming_the_field(client: httpx.Client, overrides: dict[str, Any], status: int,
                                            code: str, field: str) -> None:
    response = client.post("/v1/takes", json=take_body(**overrides))
    assert response.status_code == status, response.text
    assert response.json() == {"error": {"code": code, "message": response.json()["error"]["message"],
                                         "field": field, "type": "invalid_request_error", "param": field}}


def test_a_take_without_its_sample_rate_is_told_it_is_required(client: httpx.Client) -> None:
    response = client.post("/v1/takes", json=take_body(sample_rate=...))
    assert response.status_code == 400 and response.json()["error"]["message"] == \
        "sample_rate is required: one of 8000, 16000, 22050, 24000, 44100, 48000"
    wrong = client.post("/v1/takes", json=take_body(sample_rate=12345))
    assert wrong.json()["error"]["message"] == "sample_rate must be one of 8000, 16000, 22050, 24000, 44100, 48000"


def test_a_takes_stalls_may_be_unknown(client: httpx.Client) -> None:
    """A take that ended early (no utterance.done) has no stalls to say: it was kept with 0, and listed
    as "0 stalls". Null or left out, they are unknown (null), as ttfa_ms is."""
    for body in (take_body(stalls=None), take_body(stalls=..., ttfa_ms=...)):
        created = client.post("/v1/takes", json=body)
        assert created.status_code == 201, created.text
        assert created.json()["stalls"] is None and client.get(f"/v1/takes/{created.json()['id']}").json()["stalls"] is None
    query = {"text": "Hello there.", "model": "piper-joe", "voice": "default", "sample_rate": RATE, "ttfa_ms": 80}
    streamed = client.post("/v1/takes", params=query, content=tone(), headers={"Content-Type": "audio/pcm"})
    assert streamed.status_code == 201 and streamed.json()["stalls"] is None, streamed.text
    assert client.post("/v1/takes", json=take_body(stalls=0)).json()["stalls"] == 0  # (known: none)


def test_take_audio_over_the_limit_is_413(client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(takes, "MAX_TAKE_AUDIO_BYTES", 1000)
    response = client.post("/v1/takes", json=take_body())
    assert response.status_code == 413 and response.json()["error"]["code"] == "audio_too_large"


def test_take_body_errors(client: httpx.Client) -> None:
    response = client.post("/v1/takes", content=b"{", headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    response = client.post("/v1/takes", content=tone(), headers={"Content-Type": "audio/wav"})
    assert response.status_code == 415 and response.json()["error"]["code"] == "unsupported_media_type"


def test_missing_takes_and_bad_queries(client: httpx.Client) -> None:
    for path in ("/v1/takes/take-000000000000", "/v1/takes/take-000000000000/audio", "/v1/takes/../etc"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] in ("take_not_found", "not_found")
    assert client.delete("/v1/takes/nonsense").json()["error"] == {
        "code": "take_not_found", "message": "no take 'nonsense'", "field": "id", "type": "invalid_request_error",
        "param": "id"}
    take = client.post("/v1/takes", json=take_body()).json()
    response = client.get(take["audio_url"], params={"format": "ogg"})
    assert response.status_code == 400 and response.json()["error"]["field"] == "format"
    for limit in ("0", "abc", "5000"):
        response = client.get("/v1/takes", params={"limit": limit})
        assert response.status_code == 400 and response.json()["error"]["field"] == "limit"
    assert len(client.get("/v1/takes", params={"limit": "1"}).json()["data"]) == 1


def test_the_list_says_how_many_takes_there_are(client: httpx.Client) -> None:
    """A list cut at its limit did not say there were more (the studio showed the newest 100 as all)."""
    for _ in range(3):
        client.post("/v1/takes", json=take_body()).raise_for_status()
    everything = client.get("/v1/takes", params={"limit": "1000"}).json()
    cut = client.get("/v1/takes", params={"limit": "2"}).json()
    assert len(cut["data"]) == 2 and cut["total"] == everything["total"] == len(everything["data"]) >= 3


def test_stats_has_engine_state_and_recent_utterances(client: httpx.Client) -> None:
    before = client.get("/v1/stats").json()
    response = client.post("/v1/audio/speech", json={"input": "Counting the milliseconds.", "response_format": "pcm"})
    assert response.status_code == 200
    stats = client.get("/v1/stats", params={"since": before["time"]}).json()
    assert stats["sessions"] == 0 and stats["requests"] == 0
    assert stats["models"]["piper-joe"]["waiting"] == 0
    assert set(stats["models"]["piper-joe"]["last_batch"]) == {"prefill", "decode", "urgent", "background"}
    phases = stats["models"]["piper-joe"]["ttfa_phases_ms"]  # the engine's part of the first audio (piper: no prefill)
    assert set(phases) == {"prepare", "inbox", "queue", "prefill", "first_chunk"} and phases["prefill"] == [0.0, 0.0]
    assert phases["first_chunk"][0] > 0 and all(p50 <= p90 for p50, p90 in phases.values())
    assert "first_chunks" not in stats["models"]["piper-joe"]  # raw rows stay inside
    [recent] = stats["recent"]
    assert recent["source"] == "speech" and recent["model"] == "piper-joe"
    assert recent["ttfa_ms"] > 0 and recent["late_ms"] >= 0 and recent["audio_ms"] > 500
    assert client.get("/v1/stats", params={"since": stats["time"]}).json()["recent"] == []
    response = client.get("/v1/stats", params={"since": "soon"})
    assert response.status_code == 400 and response.json()["error"]["field"] == "since"


def test_openai_model_names_mean_the_default_model_here_too(client: httpx.Client) -> None:
    """A take, a preset and a project with `model: tts-1` were a 404 though speech, load and
    unload read it as default_model (a new user's trial)."""
    take = client.post("/v1/takes", json=take_body(model="tts-1"))
    assert take.status_code == 201 and take.json()["model"] == "piper-joe", take.text
    assert client.delete(f"/v1/takes/{take.json()['id']}").status_code == 204
    preset = client.post("/v1/presets", json={"name": "Openai named", "model": "gpt-4o-mini-tts-2025-12-15"})
    assert preset.status_code == 201 and preset.json()["model"] == "piper-joe", preset.text
    assert client.delete("/v1/presets/Openai named").status_code == 204
    project = client.post("/v1/projects", json={"name": "Openai named", "model": "tts-1-hd"})
    assert project.status_code == 201 and project.json()["model"] == "piper-joe", project.text
    assert client.delete(f"/v1/projects/{project.json()['id']}").status_code == 204
    missing = client.post("/v1/presets", json={"name": "Nope", "model": "tts-2"})
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "unknown model 'tts-2'"


@pytest.mark.parametrize("text, voice, expected", [
    ("Hello there.", "default", "hello-there_default_take-1.wav"),
    ("Émile's café: 3.5 km <break time='1s'/> away", "Slow Joe", "emile-s-cafe-3-5-km-away_slow-joe_take-1.wav"),
    ("One two three four five six seven eight nine ten eleven", "x", "one-two-three-four-five-six-seven-eight_x_take-1.wav"),
    ("Supercalifragilisticexpialidocious" * 2, "x", "supercalifragilisticexpialidocioussuperc_x_take-1.wav"),
    ("Straße, Ærø, Łódź", "Bjørn", "strasse-aero-lodz_bjorn_take-1.wav"),
    ("日本語のテキスト", "../..", "ri-ben-yu-notekisuto_take-1.wav"),  # transliterated; nothing of the voice left
])
def test_a_take_downloads_under_its_words_voice_and_id(text: str, voice: str, expected: str) -> None:
    assert takes.download_name({"text": text, "voice": voice, "id": "take-1"}, "wav") == expected


def test_a_take_is_refused_where_the_disk_would_fill(tmp_path: Any) -> None:
    """A take is up to 64 MiB, streamed to disk, and nothing looked at the disk: takes could fill it, and with
    it the library's database beside them. A take that would leave less than `min_free_disk_mb` free (as a
    download would) is refused before a byte is written: 507 `insufficient_storage`."""
    from tests.conftest import run_server

    for live in run_server(tmp_path, min_free_disk_mb=1e12):  # more than any disk has
        with httpx.Client(base_url=live.url, timeout=60) as client:
            as_json = client.post("/v1/takes", json=take_body())
            query = {k: v for k, v in take_body().items() if k != "audio"}
            streamed = client.post("/v1/takes", params=query, content=tone(),
                                   headers={"Content-Type": "audio/pcm"})
            for response in (as_json, streamed):
                assert response.status_code == 507, response.text
                error = response.json()["error"]
                assert error["code"] == "insufficient_storage" and "min_free_disk_mb" in error["message"]
            assert client.get("/v1/takes").json()["data"] == []
        folder = tmp_path / "takes"
        assert not folder.exists() or list(folder.iterdir()) == []


def test_a_streamed_take_that_says_it_is_over_the_limit_is_refused_unread(server: LiveServer) -> None:
    """`Content-Length: 100000000000` on an audio/pcm take was taken at its word: the server waited for the body
    and wrote 64 MiB of it to disk before its 413. A length over the limit is now a 413 at once (as an upload
    of a reference voice is), without a byte read."""
    import socket

    port = int(server.url.rsplit(":", 1)[1])
    query = "text=hi&model=piper-joe&voice=default&sample_rate=24000"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(f"POST /v1/takes?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: audio/pcm\r\n"
                     f"Content-Length: {takes.MAX_TAKE_AUDIO_BYTES + 1}\r\n\r\n".encode())
        sock.settimeout(10)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b'"audio_too_large"' in answer


def test_a_take_the_full_disk_cuts_short_is_a_507_and_leaves_no_file(tmp_path: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that filled between the check and the write (ENOSPC, here /dev/full under the partial file's
    name) answered 500, and a take sent whole left its `.part` behind: now the 507 of a full disk, no file."""
    import asyncio
    import uuid

    from gateway.errors import ApiError

    store = takes.TakeStore(None, tmp_path / "takes")  # type: ignore[arg-type]  # (no row is written)
    (tmp_path / "takes").mkdir()
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=1))
    partial = tmp_path / "takes" / f"take-{uuid.UUID(int=1).hex[:12]}.wav.part"

    async def pieces() -> Any:
        yield tone()

    for write in (lambda: store.add({"sample_rate": RATE}, tone()),
                  lambda: store.add_stream({"sample_rate": RATE}, pieces())):
        partial.symlink_to("/dev/full")  # every write: ENOSPC
        with pytest.raises(ApiError) as refused:
            asyncio.run(write())
        assert refused.value.status == 507 and refused.value.code == "insufficient_storage"
        assert refused.value.field == "audio" and "disk is full" in str(refused.value)
        assert list((tmp_path / "takes").iterdir()) == []

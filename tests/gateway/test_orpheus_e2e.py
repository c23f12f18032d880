"""The orpheus family through the gateway: CLI checkpoint + models add, REST, WebSocket.

Random tiny weights make noise, so a preset forces the output length (`force_tokens`,
which also restricts sampling to each frame position's audio tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from gateway.cli import main
from tests.conftest import run_server

pytest.importorskip("torch")
pytest.importorskip("snac")

FRAMES = 12
SAMPLES_PER_FRAME = 2048  # SNAC 24 kHz: one frame = 2048 samples (~85 ms)


def test_checkpoint_add_and_serve_over_rest_and_websocket(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    model_dir = tmp_path / "orpheus-tiny"
    assert main(["checkpoint", "random", "--family", "orpheus", "--size", "tiny", str(model_dir)]) == 0
    data = tmp_path / "data"
    assert main(["models", "add", "--family", "orpheus", "--path", str(model_dir), "--id", "orpheus-tiny",
                 "--data-dir", str(data)]) == 0
    assert "tara" in capsys.readouterr().out
    for server in run_server(data):
        with httpx.Client(base_url=server.url, timeout=120) as client:
            model = next(m for m in client.get("/v1/models").json()["data"] if m["id"] == "orpheus-tiny")
            assert model["family"] == "orpheus" and "tara" in model["voices"]
            preset = {"name": "noise", "model": "orpheus-tiny", "voice": "tara",
                      "settings": {"force_tokens": 7 * FRAMES, "seed": 1}}
            assert client.post("/v1/presets", json=preset).status_code == 201
            response = client.post("/v1/audio/speech", json={"input": "Hello there.", "voice": "noise",
                                                              "response_format": "pcm"})
            assert response.status_code == 200, response.text
            assert response.headers["x-voxgate-model"] == "orpheus-tiny"
            pcm = np.frombuffer(response.content, "<i2")
            assert len(pcm) == FRAMES * SAMPLES_PER_FRAME  # every frame, nothing dropped (24 kHz in and out)
            assert np.abs(pcm).max() > 0
            lm = {(m.name, m.labels.get("lane", "")): m.value
                  for family in text_string_to_metric_families(client.get("/metrics").text)
                  for m in family.samples if m.labels.get("model") == "orpheus-tiny"}
            assert {lane for name, lane in lm if name == "voxgate_batch_size"} == {"prefill", "decode", "urgent",
                                                                                 "background"}
            assert 0 < lm[("voxgate_decode_step_estimate_seconds", "")] < 10
            assert 0 < lm[("voxgate_step_host_median_seconds", "")] < 1
            assert lm[("voxgate_cuda_graph_hits_total", "")] == lm[("voxgate_cuda_graph_misses_total", "")] == 0  # CPU
            assert lm[("voxgate_chunk_lateness_seconds_count", "")] >= 1  # the ramp's 1/2/4/... frame chunks
            bad = client.post("/v1/audio/speech", json={"input": "Hi.", "model": "orpheus-tiny", "voice": "nobody"})
            assert bad.status_code == 404 and bad.json()["error"]["field"] == "voice"

        with connect(f"{server.ws_url}/v1/realtime") as ws:
            assert json.loads(ws.recv())["type"] == "session.created"
            ws.send(json.dumps({"type": "session.update", "session": {"voice": "noise", "timings": True}}))
            assert json.loads(ws.recv())["session"]["model"] == "orpheus-tiny"
            ws.send(json.dumps({"type": "text.append", "text": "Hello there."}))
            ws.send(json.dumps({"type": "text.flush"}))
            audio, events = 0, []
            while not events or events[-1]["type"] not in ("utterance.done", "error"):
                message = ws.recv(timeout=120)
                if isinstance(message, bytes):
                    audio += len(message) // 2
                else:
                    events.append(json.loads(message))
            assert events[0]["type"] == "audio.start" and events[-1]["type"] == "utterance.done", events
            assert audio == FRAMES * SAMPLES_PER_FRAME and events[-1]["ttfa_ms"] > 0
            # Orpheus has no durations of its own: words are estimated, within the audio.
            words = [w for e in events if e["type"] == "audio.words" for w in e["words"]]
            assert [w["word"] for w in words] == ["Hello", "there."]
            assert all(e["estimated"] for e in events if e["type"] == "audio.words")
            assert words[-1]["end_ms"] <= events[-1]["audio_ms"] + 0.1
        assert server.wait_idle() == 0


def test_a_model_too_big_for_the_memory_is_a_clear_503(tmp_path: Path) -> None:
    """Found by a new-user trial: a 0.6B Qwen3-TTS on a CPU asked for 30 GB of KV cache (64 slots x 2048
    positions in float32) and the answer was torch's raw "can't allocate" as a retryable
    model_load_failed. Now: 503 insufficient_memory naming what sizes the cache, and the next model
    loads (nothing of the failed one is left holding memory)."""
    model_dir = tmp_path / "orpheus-tiny"
    assert main(["checkpoint", "random", "--family", "orpheus", "--size", "tiny", str(model_dir)]) == 0
    data = tmp_path / "data"
    assert main(["models", "add", "--family", "orpheus", "--path", str(model_dir), "--id", "huge",
                 "--option", "max_seq_len=100000000", "--data-dir", str(data)]) == 0
    for server in run_server(data):
        with httpx.Client(base_url=server.url, timeout=120) as client:
            refused = client.post("/v1/audio/speech", json={"input": "Hello.", "model": "huge", "voice": "tara"})
            error = refused.json()["error"]
            assert refused.status_code == 503 and error["code"] == "insufficient_memory", refused.text
            assert error["field"] == "model" and "max_running 64 slots x max_seq_len 100000000" in error["message"]
            assert "KV cache" in error["message"]  # the memory guard counts it now, before any load
            assert client.post("/v1/audio/speech", json={"input": "Hello.", "response_format": "pcm"}).status_code == 200
    # A load that cannot allocate all the same (the guard's figures are estimates) says the same in its words.
    from gateway.model_spec import ModelSpec, load_runner
    from gateway.resident import InsufficientMemory

    with pytest.raises(InsufficientMemory) as too_big:
        load_runner(ModelSpec("huge", "orpheus", model_dir, options={"max_seq_len": 100_000_000}), "cpu")
    assert "can't allocate" in too_big.value.message and "max_running (64 requests" in too_big.value.message

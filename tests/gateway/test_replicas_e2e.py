"""`devices = ["cpu:0", "cpu:1"]` through the real server (issue 17): a tiny Orpheus gets a
replica (runner and worker) on each CPU "device", requests over REST are spread over both
and each gets all its audio; /v1/stats and /v1/models say where the model is."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import httpx
import numpy as np
import pytest

from gateway.cli import main
from tests.conftest import run_server

pytest.importorskip("torch")
pytest.importorskip("snac")

FRAMES = 8
SAMPLES_PER_FRAME = 2048  # SNAC 24 kHz


def test_a_speech_lm_on_two_devices_serves_from_both(tmp_path: Path) -> None:
    model_dir = tmp_path / "orpheus-tiny"
    assert main(["checkpoint", "random", "--family", "orpheus", "--size", "tiny", str(model_dir)]) == 0
    data = tmp_path / "data"
    assert main(["models", "add", "--family", "orpheus", "--path", str(model_dir), "--id", "tiny",
                 "--data-dir", str(data), "--option", "max_running=2"]) == 0
    for server in run_server(data, devices=("cpu:0", "cpu:1"), preload_models=("tiny",), max_waiting=8,
                             min_free_memory_mb=0):
        with httpx.Client(base_url=server.url, timeout=120) as client:
            model = client.get("/v1/models/tiny").json()
            assert model["loaded"] and model["devices"] == ["cpu:0", "cpu:1"], model
            preset = {"name": "noise", "model": "tiny", "voice": "tara", "settings": {"force_tokens": 7 * FRAMES}}
            assert client.post("/v1/presets", json=preset).status_code == 201

            def speak(i: int) -> np.ndarray:  # (one text for all: gateway/text shares a pysbd segmenter)
                response = client.post("/v1/audio/speech", json={"input": "Hello there.", "voice": "noise",
                                                                  "response_format": "pcm"})
                assert response.status_code == 200, response.text
                return np.frombuffer(response.content, "<i2")

            with concurrent.futures.ThreadPoolExecutor(6) as pool:  # more at once than one replica's 2 slots
                pcms = list(pool.map(speak, range(6)))
            assert all(len(pcm) == FRAMES * SAMPLES_PER_FRAME for pcm in pcms)
            stats = client.get("/v1/stats").json()
            assert stats["devices"] == ["cpu:0", "cpu:1"]
            entry = stats["models"]["tiny"]
            assert entry["worker"] == "cpu:0,cpu:1" and entry["refused"] == 0
            stepped = [replica["host_ms_p50"] for replica in entry["replicas"]]  # None until a replica steps
            assert [r["worker"] for r in entry["replicas"]] == ["cpu:0", "cpu:1"] and None not in stepped, entry
            assert entry["ttfa_phases_ms"]["prefill"][0] > 0  # pooled over both replicas' first chunks
            assert all(r["ttfa_phases_ms"] is not None for r in entry["replicas"])

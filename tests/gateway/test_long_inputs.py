"""Inputs longer than a family's own limit: Orpheus refuses over 2,000 characters per
request, so the gateway speaks them as several requests (REST and realtime alike)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.sync.client import connect

from tests.conftest import run_server

pytest.importorskip("torch")
pytest.importorskip("snac")

FRAMES = 4
SAMPLES_PER_FRAME = 2048  # SNAC 24 kHz


def test_an_orpheus_input_past_its_limit_is_spoken_whole(orpheus_tiny: Path, tmp_path: Path) -> None:
    models = ({"id": "orpheus-tiny", "family": "orpheus", "path": str(orpheus_tiny)},)
    text = " ".join(f"This is sentence number {i} of a long answer." for i in range(60))  # ~2,700 characters
    assert len(text) > 2000
    for server in run_server(tmp_path, models=models):
        engine = server.app_state.engine
        submitted: list[int] = []
        submit = engine.submit

        def recording(spec: Any) -> Any:
            submitted.append(len(spec.text))
            return submit(spec)

        engine.submit = recording  # type: ignore[method-assign]
        with httpx.Client(base_url=server.url, timeout=300) as client:
            # Random weights make noise: force a few frames per request to keep it short.
            preset = {"name": "short", "model": "orpheus-tiny", "voice": "tara",
                      "settings": {"force_tokens": 7 * FRAMES, "seed": 1}}
            assert client.post("/v1/presets", json=preset).status_code == 201
            response = client.post("/v1/audio/speech", json={"input": text, "voice": "short",
                                                              "response_format": "pcm"})
            assert response.status_code == 200, response.text
            rest_requests = len(submitted)
            assert rest_requests >= 9 and max(submitted) <= 300, submitted
            pcm = np.frombuffer(response.content, "<i2")
            assert len(pcm) == rest_requests * FRAMES * SAMPLES_PER_FRAME  # one stream, every request in it

        submitted.clear()
        with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
            assert json.loads(ws.recv())["type"] == "session.created"
            ws.send(json.dumps({"type": "session.update", "session": {"voice": "short"}}))
            assert json.loads(ws.recv())["type"] == "session.updated"
            ws.send(json.dumps({"type": "text.append", "text": text}))
            ws.send(json.dumps({"type": "text.flush"}))
            samples, events = 0, []
            while not events or events[-1]["type"] not in ("utterance.done", "error"):
                message = ws.recv(timeout=300)
                if isinstance(message, bytes):
                    samples += len(message) // 2
                else:
                    events.append(json.loads(message))
        assert events[-1]["type"] == "utterance.done", events
        assert max(submitted) <= 300 and samples == len(submitted) * FRAMES * SAMPLES_PER_FRAME
        engine.submit = submit  # type: ignore[method-assign]
        assert server.wait_idle() == 0

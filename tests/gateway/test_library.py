"""SQLite library: migrations, transactions, presets across restarts."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest

from gateway.cli import main
from gateway.library import Library, LibraryUnavailable, ModelExists, migration_files
from tests.conftest import free_port, run_server


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


def _open_at_once(path: str, barrier: multiprocessing.synchronize.Barrier, results: multiprocessing.Queue) -> None:
    """One process of the test below: open (and so migrate) the library once all are ready."""
    async def go() -> int:
        library = await Library.open(Path(path))
        try:
            return await library.schema_version()
        finally:
            await library.close()

    barrier.wait()
    try:
        results.put(("ok", asyncio.run(go())))
    except Exception as error:  # (the parent names it)
        results.put(("error", repr(error)))


def test_processes_starting_at_once_on_a_new_database_migrate_it_once(tmp_path: Path) -> None:
    """Servers sharing a data dir, or a `voxgate keys` command beside a starting server: each
    opens the new database and migrates it at the same moment. Each migration takes the write
    lock first and checks schema_version again, so none fails ("table models already exists",
    "database is locked") and each is applied once."""
    spawn = multiprocessing.get_context("spawn")
    for attempt in range(3):  # (a race: several tries)
        path = tmp_path / f"db{attempt}.sqlite"
        barrier, results = spawn.Barrier(4), spawn.Queue()
        workers = [spawn.Process(target=_open_at_once, args=(str(path), barrier, results)) for _ in range(4)]
        for worker in workers:
            worker.start()
        outcomes = [results.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(timeout=10)
        latest = migration_files()[-1][0]
        assert outcomes == [("ok", latest)] * 4
        rows = sqlite3.connect(path).execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        assert [r[0] for r in rows] == [v for v, _, _ in migration_files()]


def test_a_migration_waits_for_another_connections_write_lock(tmp_path: Path) -> None:
    """Another process holding the write lock (a migration, a `voxgate models add`) for a while
    makes a start wait for it (the busy timeout), not fail with "database is locked"."""
    path = tmp_path / "db.sqlite"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("PRAGMA journal_mode = WAL")
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE unrelated (x)")
    threading.Timer(1.0, other.execute, ("COMMIT",)).start()

    async def go() -> int:
        started = time.monotonic()
        library = await Library.open(path)
        waited = time.monotonic() - started
        version = await library.schema_version()
        await library.close()
        assert waited >= 0.5  # it waited for the lock, then migrated
        return version

    assert asyncio.run(go()) == migration_files()[-1][0]
    other.close()


def test_a_start_waits_to_switch_a_new_database_to_wal_while_another_connection_writes_it(tmp_path: Path) -> None:
    """The switch to WAL reads the database, then needs it to itself; while another connection holds the
    write lock of a rollback-journal database (as another process switching it does), SQLite answers
    "database is locked" at once instead of calling its busy handler, which could deadlock (seen: one of
    four processes opening a new database together failed within 3 ms). The start tries again for up
    to the busy timeout."""
    path = tmp_path / "db.sqlite"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE unrelated (x)")  # a rollback-journal database, as a new one is
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO unrelated VALUES (1)")
    threading.Timer(0.5, other.execute, ("COMMIT",)).start()

    async def go() -> float:
        started = time.monotonic()
        library = await Library.open(path)
        await library.close()
        return time.monotonic() - started

    assert asyncio.run(go()) >= 0.3  # it waited for the commit, then switched and migrated
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()


def test_a_lock_held_past_the_busy_timeout_is_a_clear_error_naming_the_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "voxgate.db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA journal_mode = WAL")
    other.execute("BEGIN IMMEDIATE")  # and never commits while the test runs
    other.execute("CREATE TABLE unrelated (x)")
    monkeypatch.setattr("gateway.library.BUSY_TIMEOUT_S", 0.2)
    with pytest.raises(LibraryUnavailable, match=f"the library database {path} is locked: another process held "
                                                 "it for more than 0.2 s"):
        asyncio.run(Library.open(path))
    # The commands say it in one line and exit with 2, `voxgate serve` before it starts.
    assert main(["keys", "list", "--data-dir", str(tmp_path)]) == 2
    assert main(["serve", "--data-dir", str(tmp_path), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count(f"error: the library database {path} is locked") == 2 and "Traceback" not in err
    other.execute("ROLLBACK")
    other.close()


def test_a_file_that_is_not_a_database_stops_the_start_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "voxgate.db").write_bytes(b"not a database, but something a user put here\n" * 100)
    assert main(["serve", "--data-dir", str(tmp_path), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'voxgate.db'} is not a SQLite database") and "Traceback" not in err
    assert err.count("\n") == 1
    assert (tmp_path / "voxgate.db").read_bytes().startswith(b"not a database")  # left as it was


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
        with pytest.raises(LibraryUnavailable, match="migration 9999_broken.sql failed .* rolled back"):
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
            # every answer is the preset as GET shows it (POST and PATCH left out usable and problem)
            assert created.json() == client.get("/v1/presets/Calm Joe").json()
            assert created.json()["usable"] is True and created.json()["problem"] is None
            assert client.post("/v1/presets", json=preset).status_code == 409
            patched = client.patch("/v1/presets/Calm Joe", json={"speed": 1.1})
            assert patched.status_code == 200 and patched.json()["settings"] == {"noise_scale": 0.5}
            assert patched.json() == client.get("/v1/presets/Calm Joe").json()
            put = client.put("/v1/presets/Calm Joe", json={**preset, "speed": 1.1})
            assert put.status_code == 200 and put.json() == client.get("/v1/presets/Calm Joe").json()
            for name in ("Zoë", "abc\n", " lead", "trail "):  # the message says what a name may hold
                refused = client.post("/v1/presets", json={**preset, "name": name})
                assert refused.status_code == 400 and refused.json()["error"]["message"] == (
                    "name must be 1-64 characters of ASCII letters (A-Z, a-z), digits, space, '_', '.' and '-', "
                    "starting with a letter or digit and not ending with a space"), name
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
            assert speech.headers["x-voxgate-preset"] == "Calm Joe"  # which preset applied
            plain = client.post("/v1/audio/speech", json={"input": "Hi there.", "voice": "default",
                                                           "response_format": "pcm"})
            assert plain.status_code == 200 and "x-voxgate-preset" not in plain.headers
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

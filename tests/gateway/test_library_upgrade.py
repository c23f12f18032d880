"""Upgrading an existing library database (gateway/library.py `Library.migrate`): old schemas are
built by applying the packaged migration files an older Voxgate shipped (the first N, or the
1, 2, 5 of the builds that had reference voices before projects), with this code's runner."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.library import Library, LibraryUnavailable, migration_files
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]


def _old_database(path: Path, versions: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A database as a Voxgate that shipped only `versions` left it, with a preset and a take."""
    shipped = [m for m in migration_files() if m[0] in versions]
    with monkeypatch.context() as patch:
        patch.setattr("gateway.library.migration_files", lambda: shipped)

        async def go() -> None:
            library = await Library.open(path)
            await library.put_preset("Narrator", "piper-joe", "default", 1.1, {"noise_scale": 0.5}, create=True)
            async with library.transaction() as db:
                await db.execute("INSERT INTO takes VALUES ('take-000000000001', 'Hello.', 'piper-joe', 'Narrator', "
                                 "1.1, 24000, 120.5, 0, 1500.0, 'take-000000000001.wav', ?)", (time.time(),))
            await library.close()

        asyncio.run(go())


NEXT = migration_files()[-1][0] + 1  # a test's own migration, after the shipped ones


def _versions(path: Path) -> list[int]:
    return [r[0] for r in sqlite3.connect(path).execute("SELECT version FROM schema_version ORDER BY version")]


@pytest.mark.parametrize("old", [[1, 2], [1, 2, 5]], ids=["takes-era", "voices-before-projects"])
def test_an_old_database_is_upgraded_once_keeping_its_data_and_a_copy_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, old: list[int]) -> None:
    path = tmp_path / "voxgate.db"
    _old_database(path, old, monkeypatch)
    latest = migration_files()[-1][0]

    async def go() -> tuple[list[int], list[int]]:
        library = await Library.open(path)  # migrates
        preset = await library.get_preset("Narrator")
        assert preset is not None and preset["settings"] == {"noise_scale": 0.5}
        async with library.db.execute("SELECT voice, audio_ms FROM takes") as cur:
            assert [tuple(r) for r in await cur.fetchall()] == [("Narrator", 1500.0)]
        assert await library.schema_version() == latest
        await library.close()
        again = await Library.open(path)
        second = await again.migrate()
        await again.close()
        return sorted(set(range(1, latest + 1)) - set(old)), second

    with caplog.at_level(logging.INFO, logger="gateway.library"):
        expected, second = asyncio.run(go())
    assert second == []  # nothing twice
    assert _versions(path) == list(range(1, latest + 1))
    backup = tmp_path / f"voxgate.db.schema-{max(old)}.bak"
    assert _versions(backup) == old  # the database as the old version left it, usable by it
    assert sqlite3.connect(backup).execute("SELECT speed FROM presets").fetchall() == [(1.1,)]
    upgraded = [r.getMessage() for r in caplog.records if "upgraded the library database" in r.getMessage()]
    assert len(upgraded) == 1 and str(backup) in upgraded[0]
    assert all(name in upgraded[0] for v, name, _ in migration_files() if v in expected)
    assert sorted(p.name for p in tmp_path.iterdir() if ".bak" in p.name) == [backup.name]


def test_a_new_database_is_made_without_a_copy(tmp_path: Path) -> None:
    async def go() -> None:
        await (await Library.open(tmp_path / "voxgate.db")).close()

    asyncio.run(go())
    assert not [p for p in tmp_path.iterdir() if ".bak" in p.name]


def test_a_database_from_a_newer_version_is_refused_in_one_line_and_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    newer = migration_files() + [(99, "0099_future.sql", "ALTER TABLE takes ADD COLUMN rating INTEGER;\n")]
    with monkeypatch.context() as patch:
        patch.setattr("gateway.library.migration_files", lambda: newer)
        asyncio.run(_open_close(tmp_path / "voxgate.db"))
    with pytest.raises(LibraryUnavailable, match="upgraded by a newer Voxgate.*0099_future.sql"):
        asyncio.run(_open_close(tmp_path / "voxgate.db"))
    assert main(["serve", "--data-dir", str(tmp_path), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: the library database {tmp_path / 'voxgate.db'} was upgraded by a newer Voxgate")
    assert err.count("\n") == 1 and "Traceback" not in err and "schema-<N>.bak" in err
    assert _versions(tmp_path / "voxgate.db")[-1] == 99


def test_a_failed_migration_rolls_back_and_stops_the_start_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _old_database(tmp_path / "voxgate.db", [1, 2, 3, 4, 5], monkeypatch)
    bad = (NEXT, f"{NEXT:04d}_bad.sql", "ALTER TABLE takes ADD COLUMN rating INTEGER;\nCREATE TABLE takes (id TEXT);\n")
    monkeypatch.setattr("gateway.library.migration_files", lambda: migration_files() + [bad])
    assert main(["serve", "--data-dir", str(tmp_path), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: the library database {tmp_path / 'voxgate.db'} could not be upgraded: "
                          f"migration {NEXT:04d}_bad.sql failed (table takes already exists); it was rolled back")
    assert err.count("\n") == 1 and "Traceback" not in err
    db = sqlite3.connect(tmp_path / "voxgate.db")
    assert _versions(tmp_path / "voxgate.db") == list(range(1, NEXT))  # the shipped ones after 5 are in
    assert "rating" not in [r[1] for r in db.execute("PRAGMA table_info(takes)")]
    assert (tmp_path / "voxgate.db.schema-5.bak").exists()


# SQLite's way to change a table: make the new one, copy, drop the old one, rename (sqlite.org/lang_altertable.html).
REBUILD_PASSAGES = """
CREATE TABLE passages_new (
    id TEXT PRIMARY KEY, project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    position INTEGER NOT NULL, text TEXT NOT NULL, speaker TEXT, pause_ms REAL, chosen_take TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, notes TEXT NOT NULL DEFAULT '');
INSERT INTO passages_new (id, project_id, position, text, speaker, pause_ms, chosen_take, created_at, updated_at)
    SELECT id, project_id, position, text, speaker, pause_ms, chosen_take, created_at, updated_at FROM passages;
DROP TABLE passages;
ALTER TABLE passages_new RENAME TO passages;
"""


def _project(path: Path) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("INSERT INTO projects VALUES ('prj-1', 'Book', 'piper-joe', 'Narrator', 500, 0, 0)")
    db.execute("INSERT INTO passages VALUES ('psg-1', 'prj-1', 0, 'It was dark.', NULL, NULL, 'ptk-1', 0, 0)")
    db.execute("INSERT INTO project_takes VALUES ('ptk-1', 'prj-1', 'psg-1', 'It was dark.', 'Narrator', 'piper-joe',"
               " 'default', 24000, 900, 'ptk-1.wav', '[]', 0)")
    db.close()


def test_a_migration_that_rebuilds_a_table_keeps_the_rows_that_refer_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With foreign keys on, DROP TABLE passages would delete every project take (ON DELETE CASCADE)."""
    path = tmp_path / "voxgate.db"
    _old_database(path, [1, 2, 3, 4, 5], monkeypatch)
    _project(path)
    rebuild = (NEXT, f"{NEXT:04d}_passage_notes.sql", REBUILD_PASSAGES)
    monkeypatch.setattr("gateway.library.migration_files", lambda: migration_files() + [rebuild])

    async def go() -> None:
        library = await Library.open(path)
        async with library.db.execute("PRAGMA foreign_keys") as cur:
            assert (await cur.fetchone())[0] == 1  # on again for the server's writes
        await library.close()

    asyncio.run(go())
    db = sqlite3.connect(path)
    assert db.execute("SELECT id, chosen_take FROM passages").fetchall() == [("psg-1", "ptk-1")]
    assert db.execute("SELECT id, passage_id FROM project_takes").fetchall() == [("ptk-1", "psg-1")]


def test_a_migration_that_breaks_a_reference_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "voxgate.db"
    _old_database(path, [1, 2, 3, 4, 5], monkeypatch)
    _project(path)
    dangling = (NEXT, f"{NEXT:04d}_dangling.sql",
                "DROP TABLE passages;\nCREATE TABLE passages (id TEXT PRIMARY KEY);\n")
    monkeypatch.setattr("gateway.library.migration_files", lambda: migration_files() + [dangling])
    with pytest.raises(LibraryUnavailable, match=f"{NEXT:04d}_dangling.sql failed .*refer.* rolled back"):
        asyncio.run(_open_close(path))
    assert sqlite3.connect(path).execute("SELECT id FROM passages").fetchall() == [("psg-1",)]


def test_a_start_killed_mid_migration_leaves_the_database_at_a_whole_migration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 (os._exit) right before 0004's CREATE TABLE: 0003 is in, 0004 is not, the next start finishes."""
    path = tmp_path / "voxgate.db"
    _old_database(path, [1, 2], monkeypatch)
    crash = ("import asyncio, os, sys, aiosqlite\n"
             "from pathlib import Path\n"
             "from gateway.library import Library\n"
             "execute = aiosqlite.Connection.execute\n"
             "def dying(self, sql, *a, **k):\n"
             "    if 'CREATE TABLE api_keys' in sql: os._exit(9)\n"
             "    return execute(self, sql, *a, **k)\n"
             "aiosqlite.Connection.execute = dying\n"
             "asyncio.run(Library.open(Path(sys.argv[1])))\n")
    assert subprocess.run([sys.executable, "-c", crash, str(path)], cwd=REPO, timeout=60).returncode == 9
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert _versions(path) == [1, 2, 3]
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'api_keys'").fetchone() is None
    db.close()
    asyncio.run(_open_close(path))
    assert _versions(path) == list(range(1, migration_files()[-1][0] + 1))
    assert _versions(tmp_path / "voxgate.db.schema-2.bak") == [1, 2]  # the first attempt's copy, kept


async def _open_close(path: Path) -> None:
    await (await Library.open(path)).close()

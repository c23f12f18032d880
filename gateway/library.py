"""The model library in SQLite (aiosqlite): installed models, voices, speaker presets.

Schema changes are numbered SQL files in migrations/ (`NNNN_name.sql`), applied in
order at start-up, each in its own transaction, and recorded in `schema_version`.
Every write here is one transaction: a failed request leaves the database unchanged.

Several processes may open one database at once (servers sharing a data dir, a `voxgate
keys`/`models` command beside a starting server): each connection waits up to
`BUSY_TIMEOUT_S` for another's write lock (also to switch a new database to WAL, which SQLite
refuses at once, not through its busy handler, while another connection switches it), and each
migration runs in `BEGIN IMMEDIATE` (the
write lock first) and checks `schema_version` again inside it, so a migration another process
applied meanwhile is skipped, not applied twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import time
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator

import aiosqlite

_MIGRATION = re.compile(r"^(\d{4})_[\w-]+\.sql$")
# A model's id, one rule wherever a model is registered (POST /v1/library/install, `voxgate models
# add`, config [[models]]): it names the model in paths (/v1/models/{id}, /v1/library/models/{id}),
# which hold no `/`, and on the command line. Catalog ids follow it too.
MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# How long a connection waits for another connection's (or process's) lock before "database is
# locked": longer than any write or migration here takes, short enough not to look like a hang.
BUSY_TIMEOUT_S = 15.0


def model_id_problem(model_id: object) -> str | None:
    """Why `model_id` cannot be a model's id (`MODEL_ID`, matched whole), or None when it can."""
    if isinstance(model_id, str) and MODEL_ID.fullmatch(model_id):
        return None
    shown = repr(model_id) if len(repr(model_id)) <= 80 else repr(model_id)[:80] + "…"
    return (f"id must match {MODEL_ID.pattern} (letters, digits, '_', '.' and '-', a letter or digit first, "
            f"at most 128 characters), got {shown}")


def default_model_id(folder: Path) -> str:
    """The id a folder registered without one gets: its name, other characters as `-`; it may
    still break `MODEL_ID` (a name starting with `.`), which `model_id_problem` says."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", folder.name)[:128]


class ModelExists(Exception):
    """`add_model` of an id the library already holds (another request or process won the race)."""

    def __init__(self, model_id: str) -> None:
        super().__init__(f"a model {model_id!r} is installed")
        self.model_id = model_id


class LibraryUnavailable(RuntimeError):
    """The library database cannot be opened: another process holds its lock past
    `BUSY_TIMEOUT_S`, or the file is not a SQLite database. The message names the file."""


def migration_files() -> list[tuple[int, str, str]]:
    """(version, filename, sql) for every packaged migration, in order."""
    found = []
    for entry in resources.files("migrations").iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [v for v, _, _ in found]
    assert len(set(versions)) == len(versions), f"duplicate migration numbers: {versions}"
    return found


async def _journal_mode_wal(db: aiosqlite.Connection) -> None:
    """`PRAGMA journal_mode = WAL`, tried again for up to `BUSY_TIMEOUT_S` while it answers "database is
    locked": the switch needs the database to itself, and SQLite does not wait for it (processes opening a
    new database at once got the error within 3 ms, tests/gateway/test_library.py)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            await db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)


class Library:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db
        self._lock = asyncio.Lock()  # one connection: transactions must not interleave

    @contextlib.asynccontextmanager
    async def transaction(self, immediate: bool = False) -> AsyncIterator[aiosqlite.Connection]:
        """BEGIN ... COMMIT, or ROLLBACK if the block raises (then re-raise). `immediate`: take
        the write lock at BEGIN (waiting up to `BUSY_TIMEOUT_S`), for a block that reads, then
        writes what it read (in WAL mode a deferred one would fail at its first write if
        another process wrote meanwhile)."""
        async with self._lock:
            await self.db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield self.db
            except BaseException:
                await self.db.execute("ROLLBACK")
                raise
            await self.db.execute("COMMIT")

    @classmethod
    async def open(cls, path: Path) -> Library:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Explicit BEGIN/COMMIT; sqlite3's busy handler waits `timeout` for another's lock.
        db = await aiosqlite.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        try:
            db.row_factory = aiosqlite.Row
            await db.execute("PRAGMA foreign_keys = ON")
            await _journal_mode_wal(db)
            library = cls(db)
            await library.migrate()
        except BaseException as error:
            await db.close()
            if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
                raise LibraryUnavailable(
                    f"the library database {path} is locked: another process held it for more than "
                    f"{BUSY_TIMEOUT_S:g} s ({error})") from None
            if isinstance(error, sqlite3.DatabaseError) and "not a database" in str(error):
                raise LibraryUnavailable(f"{path} is not a SQLite database ({error}): move it away, and the "
                                         "next start makes a new library") from None
            raise
        return library

    async def close(self) -> None:
        await self.db.close()

    # -- migrations -------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Apply pending migrations; returns the versions applied now (by this connection: one
        another process applied meanwhile is not among them)."""
        pending = [m for m in migration_files() if m[0] not in await self._versions()]
        applied = []
        for version, name, sql in pending:
            # The write lock first, then the check again: another process may have applied it.
            async with self.transaction(immediate=True) as db:
                await db.execute(
                    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                    "name TEXT NOT NULL, applied_at REAL NOT NULL)")
                if version in await self._versions():
                    continue
                # executescript would COMMIT on its own; run statements inside our transaction.
                for statement in _statements(sql):
                    await db.execute(statement)
                await db.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (version, name, time.time()))
            applied.append(version)
        return applied

    async def _versions(self) -> set[int]:
        """The migrations `schema_version` records (none before the first)."""
        async with self.db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'") as cur:
            if await cur.fetchone() is None:
                return set()
        async with self.db.execute("SELECT version FROM schema_version") as cur:
            return {row[0] for row in await cur.fetchall()}

    async def schema_version(self) -> int:
        async with self.db.execute("SELECT MAX(version) FROM schema_version") as cur:
            row = await cur.fetchone()
        return int(row[0] or 0) if row else 0

    # -- models -----------------------------------------------------------------------

    async def add_model(self, model_id: str, family: str, name: str, path: str | None,
                        voices: list[str], options: dict[str, Any] | None = None,
                        size_bytes: int = 0, source: str = "local", replace: bool = False) -> None:
        """Register a model and its voices in one transaction; ModelExists (nothing written) if
        the id is taken, also when another writer took it after the caller's own check."""
        async with self.transaction() as db:
            if replace:
                await db.execute("DELETE FROM models WHERE id = ?", (model_id,))
            cur = await db.execute(
                "INSERT INTO models (id, family, name, path, options, size_bytes, source, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (model_id, family, name, path, json.dumps(options or {}), size_bytes, source, time.time()))
            if cur.rowcount == 0:
                raise ModelExists(model_id)  # (the transaction rolls back)
            await db.executemany(
                "INSERT INTO voices (model_id, name, position) VALUES (?, ?, ?)",
                [(model_id, voice, i) for i, voice in enumerate(voices)])

    async def remove_model(self, model_id: str) -> bool:
        async with self.transaction() as db:
            cur = await db.execute("DELETE FROM models WHERE id = ?", (model_id,))
        return cur.rowcount > 0

    async def get_model(self, model_id: str) -> dict[str, Any] | None:
        async with self.db.execute("SELECT * FROM models WHERE id = ?", (model_id,)) as cur:
            row = await cur.fetchone()
        return _model(row) if row else None

    async def list_models(self) -> list[dict[str, Any]]:
        async with self.db.execute("SELECT * FROM models ORDER BY created_at, id") as cur:
            return [_model(row) for row in await cur.fetchall()]

    async def voices(self, model_id: str) -> list[str]:
        async with self.db.execute(
                "SELECT name FROM voices WHERE model_id = ? ORDER BY position, name", (model_id,)) as cur:
            return [row[0] for row in await cur.fetchall()]

    async def touch_model(self, model_id: str) -> None:
        async with self.transaction() as db:
            await db.execute("UPDATE models SET last_used = ? WHERE id = ?", (time.time(), model_id))

    # -- presets ----------------------------------------------------------------------

    async def list_presets(self) -> list[dict[str, Any]]:
        async with self.db.execute("SELECT * FROM presets ORDER BY name") as cur:
            return [_preset(row) for row in await cur.fetchall()]

    async def get_preset(self, name: str) -> dict[str, Any] | None:
        async with self.db.execute("SELECT * FROM presets WHERE name = ?", (name,)) as cur:
            row = await cur.fetchone()
        return _preset(row) if row else None

    async def find_preset(self, name: str) -> dict[str, Any] | None:
        """The preset `name` names, in any case (names are unique regardless of case: gateway/presets.py),
        the exact spelling first."""
        async with self.db.execute("SELECT * FROM presets WHERE name = ? COLLATE NOCASE ORDER BY name = ? DESC, name"
                                   " LIMIT 1", (name, name)) as cur:
            row = await cur.fetchone()
        return _preset(row) if row else None

    async def put_preset(self, name: str, model_id: str, voice: str, speed: float,
                         settings: dict[str, Any], create: bool) -> bool:
        """Create (create=True; False if the name is taken) or update (False if missing)."""
        now = time.time()
        async with self.transaction() as db:
            if create:
                cur = await db.execute(
                    "INSERT OR IGNORE INTO presets (name, model_id, voice, speed, settings, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (name, model_id, voice, speed, json.dumps(settings), now, now))
            else:
                cur = await db.execute(
                    "UPDATE presets SET model_id = ?, voice = ?, speed = ?, settings = ?, updated_at = ?"
                    " WHERE name = ?", (model_id, voice, speed, json.dumps(settings), now, name))
        return cur.rowcount > 0

    async def delete_preset(self, name: str) -> bool:
        async with self.transaction() as db:
            cur = await db.execute("DELETE FROM presets WHERE name = ?", (name,))
        return cur.rowcount > 0


def _statements(sql: str) -> list[str]:
    """Split a migration into statements (sqlite3.complete_statement knows quoting)."""
    statements, current = [], ""
    for line in sql.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                statements.append(current.strip())
            current = ""
    if current.strip() and not all(l.strip().startswith("--") or not l.strip() for l in current.splitlines()):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {current[:80]!r}")
    return statements


def _model(row: aiosqlite.Row) -> dict[str, Any]:
    data = dict(row)
    data["options"] = json.loads(data["options"] or "{}")
    return data


def _preset(row: aiosqlite.Row) -> dict[str, Any]:
    data = dict(row)
    data["settings"] = json.loads(data["settings"] or "{}")
    return data

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

Upgrades (`Library.migrate`): a database that records a migration this version does not have (a
newer Voxgate upgraded it) is refused, naming the file, not used half-understood. Before the first
pending migration of an existing database, a copy of it is kept as `voxgate.db.schema-N.bak` (N:
its schema then), for going back to the version that wrote it; the upgrade is logged. Migrations
run with foreign keys off (SQLite's way to rebuild a table: a DROP TABLE with them on would
cascade-delete the rows that refer to it) and `PRAGMA foreign_key_check` before each COMMIT. A
failed migration rolls back and stops the start in one line (`LibraryUnavailable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sqlite3
import time
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator

import aiosqlite

log = logging.getLogger(__name__)
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
    def __init__(self, db: aiosqlite.Connection, path: Path | None = None) -> None:
        self.db = db
        self.path = path  # the database file, for messages and the pre-upgrade copy
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
            library = cls(db, path)
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
        another process applied meanwhile is not among them). LibraryUnavailable when the
        database is newer than this version, or a migration fails (rolled back)."""
        known = migration_files()
        recorded = await self._recorded()
        _check_known(recorded, known, self.path)
        pending = [m for m in known if m[0] not in recorded]
        if not pending:
            return []
        applied: list[tuple[int, str]] = []
        copy: Path | None = None
        # Off outside a transaction (SQLite ignores it inside one); checked before each COMMIT.
        await self.db.execute("PRAGMA foreign_keys = OFF")
        try:
            for version, name, sql in pending:
                done, kept = await self._apply(version, name, sql, keep_copy=bool(recorded) and not applied)
                copy = copy or kept
                if done:
                    applied.append((version, name))
        finally:
            await self.db.execute("PRAGMA foreign_keys = ON")
        if applied and recorded:
            log.warning("upgraded the library database %s from schema %d: applied %s; the database as it was is "
                        "kept in %s", self.path, max(recorded), ", ".join(n for _, n in applied), copy)
        elif applied:
            log.info("created the library database %s (schema %d)", self.path, applied[-1][0])
        return [version for version, _ in applied]

    async def _apply(self, version: int, name: str, sql: str, keep_copy: bool) -> tuple[bool, Path | None]:
        """One migration in its own transaction: (False, None) if another process applied it
        meanwhile; with `keep_copy`, first a copy of the database as it is (`_keep_copy`)."""
        copy = None
        try:
            # The write lock first, then the check again: another process may have applied it.
            async with self.transaction(immediate=True) as db:
                await db.execute(
                    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                    "name TEXT NOT NULL, applied_at REAL NOT NULL)")
                recorded = await self._versions()
                if version in recorded:
                    return False, None
                if keep_copy and recorded and self.path is not None:
                    copy = await asyncio.to_thread(_keep_copy, self.path, max(recorded))
                # executescript would COMMIT on its own; run statements inside our transaction.
                for statement in _statements(sql):
                    await db.execute(statement)
                async with db.execute("PRAGMA foreign_key_check") as cur:
                    broken = list(await cur.fetchall())
                if broken:
                    raise sqlite3.IntegrityError(
                        f"it leaves {len(broken)} row(s) referring to missing rows (first: table {broken[0][0]}, "
                        f"row {broken[0][1]}, referring to {broken[0][2]})")
                await db.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (version, name, time.time()))
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
                raise  # (Library.open names the lock)
            at = max(await self._versions(), default=0)
            raise LibraryUnavailable(
                f"the library database {self.path} could not be upgraded: migration {name} failed ({error}); it was "
                f"rolled back, so the database is as it was at schema {at}, with its data; this Voxgate cannot use it "
                "until the migration passes (report it with this message)") from error
        return True, copy

    async def _versions(self) -> set[int]:
        """The migrations `schema_version` records (none before the first)."""
        return set(await self._recorded())

    async def _recorded(self) -> dict[int, str]:
        """{version: migration file name} as `schema_version` records them (empty before the first)."""
        async with self.db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'") as cur:
            if await cur.fetchone() is None:
                return {}
        async with self.db.execute("SELECT version, name FROM schema_version") as cur:
            return {int(row[0]): str(row[1]) for row in await cur.fetchall()}

    async def schema_version(self) -> int:
        async with self.db.execute("SELECT MAX(version) FROM schema_version") as cur:
            row = await cur.fetchone()
        return int(row[0] or 0) if row else 0

    # -- models -----------------------------------------------------------------------

    async def add_model(self, model_id: str, family: str, name: str, path: str | None,
                        voices: list[str], options: dict[str, Any] | None = None,
                        size_bytes: int = 0, source: str = "local", replace: bool = False,
                        model_type: str | None = None) -> None:
        """Register a model and its voices in one transaction; ModelExists (nothing written) if
        the id is taken, also when another writer took it after the caller's own check.
        `model_type`: a Qwen3-TTS model's `tts_model_type` (its family's `validate` says it)."""
        async with self.transaction() as db:
            if replace:
                await db.execute("DELETE FROM models WHERE id = ?", (model_id,))
            cur = await db.execute(
                "INSERT INTO models (id, family, name, path, options, size_bytes, source, created_at, model_type)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (model_id, family, name, path, json.dumps(options or {}), size_bytes, source, time.time(),
                 model_type))
            if cur.rowcount == 0:
                raise ModelExists(model_id)  # (the transaction rolls back)
            await db.executemany(
                "INSERT INTO voices (model_id, name, position) VALUES (?, ?, ?)",
                [(model_id, voice, i) for i, voice in enumerate(voices)])

    async def set_model_type(self, model_id: str, model_type: str) -> None:
        """Record the type read from a model's folder (one registered before it was kept)."""
        async with self.transaction() as db:
            await db.execute("UPDATE models SET model_type = ? WHERE id = ?", (model_type, model_id))

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


def _keep_copy(path: Path, schema: int) -> Path:
    """`<db>.schema-<N>.bak` beside the database: a consistent copy (`VACUUM INTO`, by a connection of its
    own, which WAL lets read while the caller holds the write lock, so no other process changes it
    meanwhile). An existing copy of that name is kept (a failed upgrade's first attempt made it)."""
    target = path.with_name(f"{path.name}.schema-{schema}.bak")
    if target.exists():
        return target
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    source = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    try:
        source.execute("VACUUM INTO ?", (str(partial),))
    finally:
        source.close()
    partial.replace(target)  # whole or not at all: a crash mid-copy leaves only the .partial
    return target


def _check_known(recorded: dict[int, str], known: list[tuple[int, str, str]], path: Path | None) -> None:
    """LibraryUnavailable if the database records a migration this version does not ship (a newer
    Voxgate, or another build, upgraded it): using it anyway would read and write tables whose
    meaning this code does not know, and nothing would tell the user."""
    names = {version: name for version, name, _ in known}
    foreign = sorted(name for version, name in recorded.items() if names.get(version) != name)
    if foreign:
        raise LibraryUnavailable(
            f"the library database {path} was upgraded by a newer Voxgate (or another build): it records migration(s) "
            f"{', '.join(foreign)}, which this version does not have (its latest is {known[-1][1]}); run that "
            "newer version, or go back to the copy an upgrade keeps beside the database "
            f"({path.name if path else 'voxgate.db'}.schema-<N>.bak, the database as schema N had it)")


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

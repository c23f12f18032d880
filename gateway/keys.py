"""API keys in SQLite (`migrations/0004_api_keys.sql`): create, list, revoke, look up.

A key is `vxg_<8 hex of its id>_<43 characters>`: 32 random bytes from `secrets`
(base64url), after a readable prefix that names the key in lists and logs. Only the
SHA-256 of the whole key is stored. A slow password hash (scrypt, bcrypt) protects
guessable human passwords from offline guessing; a 256-bit random key cannot be
guessed, so a plain SHA-256 is as safe and lets every request find its key with one
indexed lookup.

Scopes: `speech` (speech, realtime and vendor-compatible routes) and `admin` (library,
presets and takes writes, load/unload; an admin key may also speak). Any valid key may
read (GET routes). Each key may carry its own rate limit and concurrency, else the
server's settings apply (gateway/limits.py). A revoked key's open WebSocket sessions are closed
within seconds (gateway/revocation.py).
"""

from __future__ import annotations

import hashlib
import secrets
import time
import unicodedata
import uuid
from dataclasses import dataclass
from typing import Any

from gateway.library import Library

SCOPES = ("speech", "admin")
KEY_PREFIX = "vxg_"
MAX_NAME_CHARS = 100
MAX_CONCURRENT = 1_000_000  # a key's own max_concurrent at most (requests and sessions at once)
TOUCH_INTERVAL_S = 60.0  # last_used_at is written at most this often per key
ID_BATCH = 500  # key ids a query looks up at once (`active_ids`)


@dataclass(frozen=True, slots=True)
class ApiKey:
    key_id: str
    name: str
    prefix: str
    scopes: frozenset[str]
    rate_limit: str | None  # None: the key_rate_limit setting
    max_concurrent: int | None  # None: the key_max_concurrent setting
    created_at: float
    last_used_at: float | None
    revoked_at: float | None

    def allows(self, scope: str) -> bool:
        """Whether this key may call a route needing `scope` (`read`: any valid key)."""
        return scope == "read" or scope in self.scopes or "admin" in self.scopes

    def as_json(self) -> dict[str, Any]:
        return {"id": self.key_id, "name": self.name, "prefix": self.prefix, "scopes": sorted(self.scopes),
                "rate_limit": self.rate_limit, "max_concurrent": self.max_concurrent,
                "created_at": self.created_at, "last_used_at": self.last_used_at, "revoked_at": self.revoked_at}


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _row(row: Any) -> ApiKey:
    return ApiKey(row["id"], row["name"], row["prefix"], frozenset(row["scopes"].split()), row["rate_limit"],
                  row["max_concurrent"], row["created_at"], row["last_used_at"], row["revoked_at"])


class KeyStore:
    """The `api_keys` table, on the library's connection."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self._touched: dict[str, float] = {}  # key_id -> when last_used_at was last written

    async def create(self, name: str, scopes: tuple[str, ...] = ("speech",), rate_limit: str | None = None,
                     max_concurrent: int | None = None) -> tuple[ApiKey, str]:
        """A new key and its secret text (shown once). ValueError for an unknown scope, an empty
        name, one longer than `MAX_NAME_CHARS` or with control characters (`keys list` prints a
        line a key, its fields between tabs), or the name of an active key (a name must pick one
        key out, as `revoke` takes it), or a `max_concurrent` outside 1..`MAX_CONCURRENT`."""
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown or not scopes:
            raise ValueError(f"scopes must be some of {', '.join(SCOPES)}; got {', '.join(scopes) or 'none'}")
        if not name.strip():
            raise ValueError("a key needs a name (who or what uses it)")
        if len(name.strip()) > MAX_NAME_CHARS:
            raise ValueError(f"a key's name has at most {MAX_NAME_CHARS} characters, got {len(name.strip())}")
        if any(unicodedata.category(c) == "Cc" for c in name):
            raise ValueError(f"a key's name may not contain control characters (tabs, line breaks), got {name!r}")
        if max_concurrent is not None and not 1 <= max_concurrent <= MAX_CONCURRENT:  # (past SQLite's integers:
            raise ValueError(f"max_concurrent must be 1 to {MAX_CONCURRENT}, got {max_concurrent}")  # a traceback)
        hex_id = uuid.uuid4().hex[:8]
        secret = f"{KEY_PREFIX}{hex_id}_{secrets.token_urlsafe(32)}"
        key = ApiKey(f"key-{hex_id}", name.strip(), secret[:len(KEY_PREFIX) + 8], frozenset(scopes), rate_limit,
                     max_concurrent, time.time(), None, None)
        async with self.library.transaction(immediate=True) as db:  # the name check and the insert as one
            async with db.execute("SELECT id FROM api_keys WHERE revoked_at IS NULL AND name = ?", (key.name,)) as cur:
                taken = await cur.fetchone()
            if taken is not None:
                raise ValueError(f"an active key is named {key.name!r} ({taken['id']}); pick another name, or revoke "
                                 f"that one first: voxgate keys revoke {taken['id']}")
            await db.execute(
                "INSERT INTO api_keys (id, name, prefix, secret_sha256, scopes, rate_limit, max_concurrent,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key.key_id, key.name, key.prefix, digest(secret), " ".join(sorted(key.scopes)), rate_limit,
                 max_concurrent, key.created_at))
        return key, secret

    async def list_keys(self, include_revoked: bool = True) -> list[ApiKey]:
        query = "SELECT * FROM api_keys" + ("" if include_revoked else " WHERE revoked_at IS NULL")
        async with self.library.db.execute(query + " ORDER BY created_at, id") as cur:
            return [_row(row) for row in await cur.fetchall()]

    async def count_active(self) -> int:
        async with self.library.db.execute("SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def active_ids(self, key_ids: set[str]) -> set[str]:
        """Which of `key_ids` are keys not revoked (a revoked or removed key is left out)."""
        ids, active = sorted(key_ids), set[str]()
        for start in range(0, len(ids), ID_BATCH):  # (SQLite bounds the number of parameters)
            batch = ids[start:start + ID_BATCH]
            query = f"SELECT id FROM api_keys WHERE revoked_at IS NULL AND id IN ({', '.join('?' * len(batch))})"
            async with self.library.db.execute(query, batch) as cur:
                active.update(str(row[0]) for row in await cur.fetchall())
        return active

    async def revoke(self, id_or_name: str) -> list[ApiKey]:
        """Revoke the active key with this id, prefix or name; returns the keys that matched.
        Several (a name two keys share, from before names were unique among active keys) are
        all returned and none is revoked: the caller names one by id."""
        async with self.library.transaction(immediate=True) as db:
            async with db.execute("SELECT * FROM api_keys WHERE revoked_at IS NULL AND (id = ? OR prefix = ?"
                                  " OR name = ?) ORDER BY created_at, id", (id_or_name, id_or_name, id_or_name)) as cur:
                found = [_row(row) for row in await cur.fetchall()]
            if len(found) == 1:
                await db.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ?", (time.time(), found[0].key_id))
        return found

    async def is_revoked(self, secret: str) -> bool:
        """Whether `secret` is a key of this store that was revoked (and none active has that text)."""
        if not secret.startswith(KEY_PREFIX) or len(secret) > 128:
            return False
        async with self.library.db.execute("SELECT 1 FROM api_keys WHERE secret_sha256 = ? AND revoked_at IS NOT NULL",
                                           (digest(secret),)) as cur:
            return await cur.fetchone() is not None

    async def lookup(self, secret: str) -> ApiKey | None:
        """The active key whose text is `secret`, or None (unknown or revoked)."""
        if not secret.startswith(KEY_PREFIX) or len(secret) > 128:
            return None
        async with self.library.db.execute(
                "SELECT * FROM api_keys WHERE secret_sha256 = ? AND revoked_at IS NULL", (digest(secret),)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        key = _row(row)
        now = time.time()
        if now - self._touched.get(key.key_id, 0.0) >= TOUCH_INTERVAL_S:
            self._touched[key.key_id] = now
            async with self.library.transaction() as db:
                await db.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (now, key.key_id))
        return key


def no_key_message(settings: Any) -> str:
    """Why a server that needs keys (gateway/settings.py `keys_required`) will not start without one."""
    if settings.auth == "required":
        why = "auth is \"required\" and no API key exists"
    else:
        why = (f"Voxgate would listen on {settings.host}, beyond this machine, and no API key exists, so anyone "
               f"who reaches port {settings.port} could use and change this server")
    return (f"{why}. Create a key first (`voxgate keys create NAME --scope speech --scope admin --data-dir "
            f"{settings.data_dir}`) and send it as `Authorization: Bearer <key>`; or, to serve without keys on "
            "purpose, set auth = \"off\" (VOXGATE_AUTH=off).")

"""Sessions outlive no revoked key: a WebSocket session opened with an API key that is revoked
(`voxgate keys revoke`, from any process: the key table is SQLite) is closed within
`REVOCATION_CHECK_S`.

KeyCheck (gateway/auth.py) leaves the key a connection was admitted with in its ASGI scope
(`admitted_key`); `watch_revocations` runs for the server's life and, every
`REVOCATION_CHECK_S` while keyed sessions are open, asks the key table which of their keys are
still active (one query), and ends each session whose key is not: its protocol's error event
(`api_key_revoked`, 401, naming the key by its prefix and id, `field` where the key was sent),
then a close 1008 with that message; its utterances and engine requests are cancelled, and its
concurrency slot is freed as it ends (gateway/connection.py `end_with`). HTTP requests need no
watching: each is checked when it comes, and a speech stream ends with its text.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from starlette.types import Scope

from gateway.errors import ApiError
from gateway.keys import ApiKey

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.state import AppState

log = logging.getLogger(__name__)

REVOCATION_CHECK_S = 2.0  # how often open sessions' keys are looked up again
ADMITTED_KEY = "voxgate.api_key"  # the ASGI scope's entry: (the key, where it was sent)


def admit(scope: Scope, key: ApiKey, field: str) -> None:
    """Note on the connection's scope the key it was admitted with and where it came (an error's field)."""
    scope[ADMITTED_KEY] = (key, field)


def admitted_key(scope: Scope) -> tuple[ApiKey, str] | None:
    """The key a connection was admitted with and where it came, or None (no key)."""
    value = scope.get(ADMITTED_KEY)
    return value if isinstance(value, tuple) else None


def revoked_error(key: ApiKey, field: str) -> ApiError:
    """The error a session whose key was revoked is ended with (its message is the close reason too)."""
    return ApiError(401, "api_key_revoked", f"API key {key.prefix} ({key.key_id}) was revoked: this session is "
                    "closed; reconnect with a valid key", field=field)


async def close_revoked(state: AppState) -> int:
    """End every open session whose key is no longer active; returns how many."""
    if state.keys is None:
        return 0
    keyed: list[tuple[Connection, ApiKey, str]] = []
    for connection in list(state.sessions):
        admitted = admitted_key(connection.ws.scope)
        if admitted is not None:
            keyed.append((connection, *admitted))
    if not keyed:
        return 0
    active = await state.keys.active_ids({key.key_id for _, key, _ in keyed})
    ending = [connection.end_with(revoked_error(key, field)) for connection, key, field in keyed
              if key.key_id not in active]
    for connection, key, _ in keyed:
        if key.key_id not in active:
            log.info("closing a %s session: its API key %s (%s) was revoked", connection.name, key.prefix, key.key_id)
    await asyncio.gather(*ending)  # (each write bounded by send_timeout_s: a slow client holds no other up)
    return len(ending)


async def watch_revocations(state: AppState, interval_s: float = REVOCATION_CHECK_S) -> None:
    """`close_revoked` every `interval_s`, for the server's life (cancel it to stop)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await close_revoked(state)
        except Exception:  # (a locked or closing database: the next round tries again)
            log.exception("checking open sessions' API keys failed")

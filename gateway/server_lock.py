"""Whether a Voxgate server runs on a data dir, for the commands that must not work beside one.

A server holds a shared `flock` on `<data_dir>/server.lock` from the start of its lifespan to
its end (gateway/app.py; several servers on one data dir share it). `voxgate models remove`
and `voxgate models install` take the lock exclusively, without waiting, for the whole
removal or download (`alone`): they refuse when a server holds it, since only that server
knows whether a model is serving requests, and an install beside it would run a second
download manager on the same folders (the server resumes what it finds there). `alone` also
tells a server from another such command (`COMMAND`), and says which. A server starting
meanwhile waits up to `SERVE_WAIT_S` (a removal takes milliseconds), then refuses to start
(`DataDirBusy`) rather than wait out a download. The kernel drops a lock when its process
ends, however it ends (`kill -9` too), so the file left behind means nothing by itself.
Where `fcntl` is missing (Windows) nothing is locked and `alone` always says no one holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import IO, AsyncIterator, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = "server.lock"
SERVE_WAIT_S = 5.0  # a server starting waits this long for a `models` command to end
SERVER = "server"  # who holds the lock: one or more servers (shared)
COMMAND = "command"  # a `voxgate models install` or `remove` (exclusive)


class DataDirBusy(RuntimeError):
    """A server cannot start: a `voxgate models` command holds the data dir."""


def busy_message(data_dir: Path) -> str:
    return (f"a `voxgate models install` or `voxgate models remove` is running on {data_dir}; start the server "
            "once it has ended (Ctrl-C on an install keeps what it downloaded, and the server resumes it)")


@contextlib.asynccontextmanager
async def serving(data_dir: Path) -> AsyncIterator[None]:
    """Hold the shared lock of a server running on `data_dir` meanwhile; DataDirBusy when a
    `models` command holds it for longer than `SERVE_WAIT_S`."""
    if fcntl is None:
        yield
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / LOCK_FILE, "a+b") as handle:
        deadline = time.monotonic() + SERVE_WAIT_S
        while not _try(handle, fcntl.LOCK_SH):
            if time.monotonic() > deadline:
                raise DataDirBusy(busy_message(data_dir))
            await asyncio.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def alone(data_dir: Path) -> Iterator[str | None]:
    """None while no server runs on `data_dir` and no other `models` command holds it, and
    none starts until the block ends; else who holds it, `SERVER` or `COMMAND` (and nothing
    is held)."""
    if fcntl is None:
        yield None
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / LOCK_FILE, "a+b") as handle:
        holder = _take_alone(handle)
        if holder is not None:
            yield holder
            return
        try:
            yield None
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def holder(data_dir: Path) -> str | None:
    """Who holds `data_dir` now (`SERVER`, `COMMAND`), or None; a moment's look, nothing kept."""
    with alone(data_dir) as who:
        return who


def _try(handle: IO[bytes], operation: int) -> bool:
    try:
        fcntl.flock(handle, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _take_alone(handle: IO[bytes]) -> str | None:
    """Take the lock exclusively, or say who has it: servers share it (a shared lock can
    still be had beside them), a command has it alone (not even a shared one can)."""
    if _try(handle, fcntl.LOCK_EX):
        return None
    if not _try(handle, fcntl.LOCK_SH):
        return COMMAND
    if _try(handle, fcntl.LOCK_EX):  # the holder left between the two tries
        return None
    fcntl.flock(handle, fcntl.LOCK_UN)
    return SERVER

"""Who has a data dir: one Voxgate server, or one `voxgate models install`/`remove`, never both.

A server holds an exclusive `flock` on `<data_dir>/server.lock` from the start of its lifespan
to its end (gateway/app.py), so a second server on the same data dir refuses to start
(`DataDirBusy`, "another voxgate server is using DATA_DIR (pid N)"): two servers would each
sweep the other's in-progress uploads at start-up (gateway/takes.py `TakeStore.sweep`) and run
two download managers on the same folders. `voxgate models remove` and `voxgate models install`
take the same lock exclusively, without waiting, for the whole removal or download (`alone`):
they refuse when a server holds it, since only that server knows whether a model is serving
requests, and an install beside it would run a second download manager on the same folders
(the server resumes what it finds there). The commands meant to run beside a live server
(`voxgate models list`, `add`, `catalog`, `voxgate keys ...`) do not take the lock at all.

Whoever holds the lock writes `<role> <pid>` into the file (`SERVER` or `COMMAND`), and empties
it before letting go, so a refusal can say who has the data dir. A server starting while a
command holds it waits up to `SERVE_WAIT_S` (a removal takes milliseconds), then refuses
(`DataDirBusy`) rather than wait out a download; beside another server it refuses at once. The
kernel drops a lock when its process ends, however it ends (`kill -9` too), so the file left
behind means nothing by itself. Where `fcntl` is missing (Windows) nothing is locked and
`alone` always says no one holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import IO, AsyncIterator, Iterator, NamedTuple

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = "server.lock"
SERVE_WAIT_S = 5.0  # a server starting waits this long for a `models` command to end
SERVER = "server"  # who holds the lock: a server
COMMAND = "command"  # a `voxgate models install` or `remove`
_READ_TRIES = 20  # the holder writes who it is just after it takes the lock: look again meanwhile


class Holder(NamedTuple):
    """Who holds a data dir's lock: `role` (`SERVER` or `COMMAND`) and its process id (None
    when the file does not say: a holder that has not written it yet, or an older Voxgate)."""

    role: str
    pid: int | None


class DataDirBusy(RuntimeError):
    """A server cannot start: another server or a `voxgate models` command holds the data dir."""


def busy_message(data_dir: Path) -> str:
    return (f"a `voxgate models install` or `voxgate models remove` is running on {data_dir}; start the server "
            "once it has ended (Ctrl-C on an install keeps what it downloaded, and the server resumes it)")


def server_running_message(data_dir: Path, pid: int | None) -> str:
    """One line: another server holds `data_dir` (its pid when known)."""
    which = f" (pid {pid})" if pid is not None else ""
    return (f"another voxgate server is using {data_dir}{which}; stop it first, or start this one with "
            "another --data-dir")


def serve_problem(data_dir: Path) -> str | None:
    """Why a server cannot start on `data_dir` now (another server, or a `models` command, holds
    it), in one line; None when it can. A moment's look, nothing kept."""
    with alone(data_dir, record=False) as who:
        if who is None:
            return None
        return server_running_message(data_dir, who.pid) if who.role == SERVER else busy_message(data_dir)


@contextlib.asynccontextmanager
async def serving(data_dir: Path) -> AsyncIterator[None]:
    """Hold `data_dir`'s lock exclusively while a server runs on it. DataDirBusy at once when
    another server holds it, or when a `models` command holds it for longer than `SERVE_WAIT_S`
    (seconds)."""
    if fcntl is None:
        yield
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / LOCK_FILE, "a+b") as handle:
        deadline = time.monotonic() + SERVE_WAIT_S
        while not _try(handle, fcntl.LOCK_EX):
            who = _read_holder(handle)
            if who is None:
                continue  # the holder left between the two looks
            if who.role == SERVER:
                raise DataDirBusy(server_running_message(data_dir, who.pid))
            if time.monotonic() > deadline:
                raise DataDirBusy(busy_message(data_dir))
            await asyncio.sleep(0.05)
        _record(handle, SERVER)
        try:
            yield
        finally:
            _release(handle)


@contextlib.contextmanager
def alone(data_dir: Path, *, record: bool = True) -> Iterator[Holder | None]:
    """None while no server and no other `models` command holds `data_dir`, and none takes it
    until the block ends; else who holds it (a `Holder`: compare its `role` with `SERVER` or
    `COMMAND`), and nothing is held. `record=False` takes it without saying so in the file (a
    look that lets go at once)."""
    if fcntl is None:
        yield None
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / LOCK_FILE, "a+b") as handle:
        while not _try(handle, fcntl.LOCK_EX):
            who = _read_holder(handle)
            if who is not None:
                yield who
                return
        if record:
            _record(handle, COMMAND)
        try:
            yield None
        finally:
            _release(handle)


def holder(data_dir: Path) -> Holder | None:
    """Who holds `data_dir` now, or None; a moment's look, nothing kept."""
    with alone(data_dir, record=False) as who:
        return who


def _try(handle: IO[bytes], operation: int) -> bool:
    try:
        fcntl.flock(handle, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _record(handle: IO[bytes], role: str) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(f"{role} {os.getpid()}\n".encode())
    handle.flush()


def _release(handle: IO[bytes]) -> None:
    handle.truncate(0)  # (before the unlock: whoever reads it next finds its holder's line or none)
    handle.flush()
    fcntl.flock(handle, fcntl.LOCK_UN)


def _read_holder(handle: IO[bytes]) -> Holder | None:
    """Who holds the lock this handle could not take, from the file; None once it is free (the
    caller tries again). A line from a process that is gone (left by a kill, the new holder not
    having written its own yet) is looked at again for a moment, then taken to be a server's
    without a pid; so is an empty file (an older Voxgate's server, which wrote none)."""
    for _ in range(_READ_TRIES):
        handle.seek(0)
        role, _, pid_text = handle.read(64).decode("ascii", "replace").strip().partition(" ")
        if role in (SERVER, COMMAND) and pid_text.isdigit() and _alive(int(pid_text)):
            return Holder(role, int(pid_text))
        if _try(handle, fcntl.LOCK_SH):  # free now (or only shared: an older server)
            fcntl.flock(handle, fcntl.LOCK_UN)
            if _try(handle, fcntl.LOCK_EX):
                fcntl.flock(handle, fcntl.LOCK_UN)
                return None
            return Holder(SERVER, None)
        time.sleep(0.01)
    return Holder(SERVER, None)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True

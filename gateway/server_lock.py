"""Whether a Voxgate server runs on a data dir, for the commands that must not work beside one.

A server holds a shared `flock` on `<data_dir>/server.lock` from the start of its lifespan to
its end (gateway/app.py; several servers on one data dir share it). `voxgate models remove`
takes the lock exclusively, without waiting, for the whole removal (`alone`): it refuses
when a server holds it, since only that server knows whether the model is serving requests
and can unload it, and a server starting meanwhile waits the few milliseconds until the
removal is done. The kernel drops a lock when its process ends, however it ends (`kill -9`
too), so the file left behind means nothing by itself. Where `fcntl` is missing (Windows)
nothing is locked and `alone` always says yes.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = "server.lock"


@contextlib.contextmanager
def serving(data_dir: Path) -> Iterator[None]:
    """Hold the shared lock of a server running on `data_dir` meanwhile."""
    if fcntl is None:
        yield
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / LOCK_FILE, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)  # waits only while a `models remove` holds it
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def alone(data_dir: Path) -> Iterator[bool]:
    """True while no server runs on `data_dir`, and none starts until the block ends; False
    (and nothing held) when one runs."""
    if fcntl is None:
        yield True
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / LOCK_FILE, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

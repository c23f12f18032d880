"""One model's download: its state, progress, error and the task running it.

`gateway/downloads.py` (`DownloadManager`) creates, runs and publishes them; `as_json()`
is what `/v1/downloads` and the progress events carry.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.catalog import CatalogModel


class DownloadState(enum.StrEnum):
    QUEUED = "queued"
    DOWNLOADING = "downloading"
    VERIFYING = "verifying"
    INSTALLING = "installing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_STATES = (DownloadState.DONE, DownloadState.FAILED, DownloadState.CANCELLED)


class DownloadError(Exception):
    """Why a download failed. `status` is the HTTP status the API answers with."""

    def __init__(self, code: str, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


@dataclass(eq=False)
class Download:
    download_id: str
    model: CatalogModel
    state: DownloadState = DownloadState.QUEUED
    error: DownloadError | None = None
    path: Path | None = None  # the installed folder, once done
    current_file: str | None = None
    rate_bps: float = 0.0
    started_s: float = field(default_factory=time.time)
    finished_s: float | None = None
    num_attempts: int = 0
    task: asyncio.Task[None] | None = None
    _done: dict[str, int] = field(default_factory=dict)  # dest -> bytes on disk
    _total: dict[str, int] = field(default_factory=dict)  # dest -> expected bytes
    _approximate: set[str] = field(default_factory=set)  # dests whose total is still the catalog's approximate size
    _found: dict[str, int] = field(default_factory=dict)  # dest -> bytes on disk when this download started
    _resumed: dict[str, int] = field(default_factory=dict)  # dest -> of those, the bytes a transfer went on from
    _last_emit_s: float = 0.0
    _window_s: float = field(default_factory=time.monotonic)
    _window_bytes: int = 0
    _cancel_keeps_partials: bool = False
    _disk_reserved: bool = False  # passed its disk check: the bytes it still fetches count against the next one's

    @property
    def model_id(self) -> str:
        return self.model.id

    @property
    def bytes_done(self) -> int:
        return sum(self._done.values())

    @property
    def bytes_total(self) -> int:
        return sum(self._total.values())

    @property
    def total_is_approximate(self) -> bool:
        """Whether `bytes_total` still counts a catalog size marked approximate that the source has
        not confirmed yet (it may grow or shrink, and `percent` with it, once that file starts)."""
        return bool(self._approximate)

    def set_total(self, dest: str, num_bytes: int) -> None:
        """The size of `dest` as its source reports it (bytes)."""
        self._total[dest] = num_bytes
        self._approximate.discard(dest)

    @property
    def resumed_bytes(self) -> int:
        """Bytes found on disk when this download started that it did not fetch again: the
        source answered their `Range` with 206 (or a local copy went on from them)."""
        return sum(self._resumed.values())

    def continues_from(self, dest: str, offset: int) -> None:
        """The transfer of `dest` goes on from byte `offset` (0: it started over, e.g. a
        200 to a `Range`): of the bytes found at the start, only those below it were resumed."""
        self._resumed[dest] = min(self._resumed.get(dest, self._found.get(dest, 0)), offset)

    @property
    def percent(self) -> float:
        """Rounded down to 0.1, so 100.0 means every byte is there."""
        total = self.bytes_total
        return min(1000, 1000 * self.bytes_done // total) / 10 if total else 0.0

    @property
    def eta_s(self) -> float | None:
        if self.state in FINAL_STATES or self.rate_bps <= 0:
            return None
        return max(0.0, (self.bytes_total - self.bytes_done) / self.rate_bps)

    def as_json(self) -> dict[str, Any]:
        total = self.bytes_total
        return {
            "id": self.download_id, "model_id": self.model_id, "state": str(self.state),
            "bytes_done": self.bytes_done, "bytes_total": total, "total_is_approximate": self.total_is_approximate,
            "percent": self.percent,
            "rate_bps": round(self.rate_bps, 1),
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
            "current_file": self.current_file, "resumed_bytes": self.resumed_bytes,
            "attempts": self.num_attempts, "path": str(self.path) if self.path else None,
            "error": self.error.as_json() if self.error else None,
            "started_at": self.started_s, "finished_at": self.finished_s,
        }

    def event(self, event_type: str = "download") -> dict[str, Any]:
        """The download as a progress event: `as_json()` plus `type` (SSE sends it as `event:`)."""
        return {"type": event_type, **self.as_json()}

    async def wait(self) -> Download:
        """Wait for the end; raises DownloadError if it failed or was cancelled.

        Shielded: a waiter that goes away (client disconnect) does not stop the download.
        """
        assert self.task is not None
        await asyncio.shield(self.task)
        if self.state is DownloadState.CANCELLED:
            raise DownloadError("cancelled", f"download of {self.model_id!r} was cancelled", 409)
        if self.error is not None:
            raise self.error
        return self

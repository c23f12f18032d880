"""Partial download files: `<dest>.part` plus a `<dest>.part.meta` sidecar (source, ETag, size).

The bytes of a `.part` file are trusted up to its length (each write is flushed), so a
resume after a crash or kill continues from there; the sidecar lets a changed source
(another URL, a new ETag or mtime) start over instead of splicing two files.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any


class Hasher:
    """SHA-256 of a file's first `num_bytes`, fed as bytes arrive; catches up from disk on resume."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._sha = hashlib.sha256()
        self.num_bytes = 0

    def update(self, data: bytes) -> None:
        self._sha.update(data)
        self.num_bytes += len(data)

    async def catch_up(self, path: Path, size: int) -> None:
        if self.num_bytes == size:
            return
        if self.num_bytes > size:
            self.reset()
        await asyncio.to_thread(self._read, path, size)

    def _read(self, path: Path, size: int) -> None:
        with open(path, "rb") as fh:
            fh.seek(self.num_bytes)
            while self.num_bytes < size:
                data = fh.read(min(1 << 20, size - self.num_bytes))
                if not data:
                    raise OSError(f"{path} is shorter than {size} bytes")
                self.update(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def part_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def meta_path(part: Path) -> Path:
    return part.with_name(part.name + ".meta")


def read_meta(part: Path, source: str) -> dict[str, Any]:
    """The sidecar of `part`, or {} (and no partial) when it belongs to another source."""
    try:
        meta = json.loads(meta_path(part).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    if not isinstance(meta, dict) or meta.get("source") != source:
        truncate(part)
        return {}
    return meta


def write_meta(part: Path, meta: dict[str, Any]) -> None:
    tmp = meta_path(part).with_suffix(".tmp")
    tmp.write_text(json.dumps(meta), encoding="utf-8")
    os.replace(tmp, meta_path(part))


def truncate(part: Path) -> None:
    if part.exists():
        with open(part, "r+b") as fh:
            fh.truncate(0)


def discard(part: Path) -> None:
    part.unlink(missing_ok=True)
    meta_path(part).unlink(missing_ok=True)


def fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

"""One model file brought to its complete, verified content in `<dest>.part`, resumably.

From an HTTP(S) base: `Range` from the bytes on disk, with `If-Range` (the ETag or
Last-Modified kept in `<dest>.part.meta`) so a changed file starts over; 429, 5xx and cut
connections are retried, and an attempt that brought the file further does not count:
`max_retries` bounds the attempts in a row that made no progress (a source that drops the
connection every few MB still finishes), with a backoff of `retry_backoff_s` x that count
(at least once); 401/403/404 are errors at once. From a local folder: a copy resumed while
the source's mtime is unchanged. Then the size against the catalog and the SHA-256 where it
has one; a mismatch discards the file. Writes and hashing run off the event loop. Used by
gateway/downloads.py `DownloadManager`, which owns the download's life and its progress.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import AsyncIterator, BinaryIO, Callable

import httpx

from gateway.catalog import CatalogFile, resolve
from gateway.download import Download, DownloadError, DownloadState
from gateway.partials import Hasher, discard, fsync, part_size, read_meta, truncate, write_meta

log = logging.getLogger(__name__)


class _Retry(Exception):
    """A transient failure: try again from what is on disk."""


class FileFetcher:
    """Fetches one file of a download at a time (`fetch`); progress goes to `count(download,
    bytes)` and state changes to `set_state(download, state)`."""

    def __init__(self, base_url: str, token: str | None, http: Callable[[], httpx.AsyncClient], *,
                 count: Callable[[Download, int], None], set_state: Callable[[Download, DownloadState], None],
                 max_retries: int, retry_backoff_s: float, chunk_bytes: int) -> None:
        self.base_url, self._token, self._http = base_url, token, http
        self._count, self._set_state = count, set_state
        self.max_retries, self.retry_backoff_s, self.chunk_bytes = max_retries, retry_backoff_s, chunk_bytes

    async def fetch(self, download: Download, f: CatalogFile, work: Path) -> None:
        """Bring `work/<f.dest>.part` to the complete, verified content of `f`; raises
        DownloadError when it cannot (after more than `max_retries` transient failures in a
        row that left the file no longer than before; resumable)."""
        part = work / (f.dest + ".part")
        download.current_file = f.dest
        self._set_state(download, DownloadState.DOWNLOADING)
        part.parent.mkdir(parents=True, exist_ok=True)
        source = resolve(self.base_url, f)
        hasher = Hasher()
        stalled = 0  # failed attempts in a row that made no progress
        while True:
            download.num_attempts += 1
            before = part_size(part)
            try:
                if isinstance(source, Path):
                    total = await self._copy(download, f, source, part, hasher)
                else:
                    total = await self._get(download, f, source, part, hasher)
                break
            except _Retry as reason:
                # Progress: more bytes kept than before the attempt (not a start over that got as far).
                stalled = 0 if part_size(part) > before else stalled + 1
                if stalled > self.max_retries:
                    kept = sum(part_size(work / (g.dest + ".part")) for g in download.model.files)
                    resume = (f"; the {kept} bytes received so far are kept: install it again to resume"
                              if kept else "")
                    hint = ("" if kept or isinstance(source, Path) else
                            f"; if this machine cannot reach {self.base_url}, set "
                            "download_base_url (VOXGATE_DOWNLOAD_BASE_URL) to a mirror or a local folder")
                    attempts = f"{stalled} attempt{'s' if stalled > 1 else ''} in a row without progress"
                    raise DownloadError("download_failed", f"{f.dest}: {reason} (gave up after {attempts}"
                                        f"{resume}{hint})")
                backoff_s = self.retry_backoff_s * max(1, stalled)
                log.info("download of %s/%s interrupted (%s), resuming in %.1fs",
                         download.model_id, f.dest, reason, backoff_s)
                await asyncio.sleep(backoff_s)
        await self._verify(download, f, part, hasher, total)

    async def _get(self, download: Download, f: CatalogFile, url: str, part: Path, hasher: Hasher) -> int:
        meta = read_meta(part, url)
        offset = part_size(part)
        known_total = meta.get("total")
        if isinstance(known_total, int) and offset > known_total:  # cannot be right: start over
            truncate(part)
            hasher.reset()
            offset = 0
        if offset and offset == known_total:
            await hasher.catch_up(part, offset)
            download.continues_from(f.dest, offset)
            return offset  # complete before the interruption
        headers = {"Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
            validator = meta.get("etag") or meta.get("last_modified")
            if validator:
                headers["If-Range"] = validator
        if download.model.gated and self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        client = self._http()
        try:
            async with client.stream("GET", url, headers=headers) as response:
                status = response.status_code
                if status == 416 and offset:  # asked past the end: our partial is suspicious
                    truncate(part)
                    raise _Retry("the server refused the range; starting this file over")
                if status in (401, 403):
                    raise DownloadError(
                        "auth_required", f"{url} answered {status}: this model is gated or needs an access "
                        "token (set `download_token` or VOXGATE_DOWNLOAD_TOKEN, and accept the licence on the "
                        "model's page)", 502)
                if status == 404:
                    raise DownloadError("not_found", f"{url} was not found (404); check the base URL", 502)
                if status == 429 or status >= 500:
                    raise _Retry(f"{url} answered {status}")
                if status not in (200, 206):
                    raise DownloadError("download_failed", f"{url} answered {status}", 502)
                start, total = _content_range(response, status)
                if start != offset:  # 200 to a Range request, or If-Range saw a changed file
                    if start != 0:
                        raise DownloadError("download_failed", f"{url} sent bytes from {start}, asked {offset}")
                    log.info("%s: server sent the whole file, starting over", f.dest)
                    offset = 0
                    hasher.reset()
                    truncate(part)
                write_meta(part, {"source": url, "etag": response.headers.get("etag"),
                                   "last_modified": response.headers.get("last-modified"), "total": total})
                if total is not None:
                    download.set_total(f.dest, total)
                await hasher.catch_up(part, offset)
                # No chunk_size: httpx would hold back a partial chunk and lose it on a cut.
                written = await self._receive(download, f, response.aiter_raw(), part, offset, hasher)
        except (httpx.TransportError, httpx.StreamError) as error:
            raise _Retry(f"{type(error).__name__}: {error}") from error
        if total is not None and written != total:
            raise _Retry(f"connection closed at {written} of {total} bytes")
        return written

    async def _copy(self, download: Download, f: CatalogFile, source: Path, part: Path, hasher: Hasher) -> int:
        try:
            stat = source.stat()
        except FileNotFoundError:
            raise DownloadError("not_found", f"{source} does not exist; check the base folder", 502) from None
        meta = read_meta(part, str(source))
        offset = part_size(part)
        if meta.get("mtime_ns") != stat.st_mtime_ns or offset > stat.st_size:
            offset = 0
            hasher.reset()
            truncate(part)
        write_meta(part, {"source": str(source), "mtime_ns": stat.st_mtime_ns, "total": stat.st_size})
        download.set_total(f.dest, stat.st_size)
        await hasher.catch_up(part, offset)
        with open(source, "rb") as src:
            src.seek(offset)

            async def chunks() -> AsyncIterator[bytes]:
                while data := await asyncio.to_thread(src.read, self.chunk_bytes):
                    yield data

            return await self._receive(download, f, chunks(), part, offset, hasher)

    async def _receive(self, download: Download, f: CatalogFile, chunks: AsyncIterator[bytes], part: Path,
                       offset: int, hasher: Hasher) -> int:
        """Append `chunks` to `part` from `offset`; returns the file's size after."""
        download.continues_from(f.dest, offset)
        download._done[f.dest] = offset
        with open(part, "r+b" if part.exists() else "wb") as out:
            out.seek(offset)
            out.truncate()
            try:
                async for data in chunks:
                    # Off the event loop: a long download fills the page cache and writes
                    # then block for a while, which would stall every stream being served.
                    await asyncio.to_thread(_write_and_hash, out, hasher, data)
                    offset += len(data)
                    download._done[f.dest] = offset
                    self._count(download, len(data))
            finally:
                out.flush()  # what was received survives a kill of this process
        return offset

    async def _verify(self, download: Download, f: CatalogFile, part: Path, hasher: Hasher, size: int) -> None:
        self._set_state(download, DownloadState.VERIFYING)
        if not f.size_is_approximate and size != f.size_bytes:
            discard(part)
            download._done[f.dest] = 0
            raise DownloadError("size_mismatch", f"{f.dest} has {size} bytes, the catalog says {f.size_bytes}; "
                                "the file was discarded")
        await hasher.catch_up(part, size)
        digest = hasher.hexdigest()
        if f.sha256 is not None and digest != f.sha256:
            discard(part)
            download._done[f.dest] = 0
            raise DownloadError("hash_mismatch", f"{f.dest} is corrupt: SHA-256 {digest} differs from the "
                                f"catalog's {f.sha256}; the file was discarded")
        if f.sha256 is None:
            log.info("%s/%s has no published SHA-256; accepted by size (%d bytes, sha256 %s)",
                     download.model_id, f.dest, size, digest)
        await asyncio.to_thread(fsync, part)


def _content_range(response: httpx.Response, status: int) -> tuple[int, int | None]:
    """(first byte, total size or None) of a 200 or 206 response."""
    if status == 206:
        value = response.headers.get("content-range", "")
        try:
            unit, rest = value.split(" ", 1)
            span, total = rest.split("/", 1)
            start = int(span.split("-", 1)[0])
            return start, None if total == "*" else int(total)
        except ValueError:
            raise DownloadError("download_failed", f"bad Content-Range {value!r}") from None
    length = response.headers.get("content-length")
    return 0, int(length) if length and length.isdigit() else None


def _write_and_hash(out: BinaryIO, hasher: Hasher, data: bytes) -> None:
    out.write(data)
    hasher.update(data)

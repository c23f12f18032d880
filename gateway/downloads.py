"""Model downloads: resumable, verified, installed atomically, progress pushed to subscribers.

Layout under `data_dir`:
- `downloads/<model_id>/<dest>.part` holds the bytes fetched so far, and `<dest>.part.meta`
  the source URL, ETag and total size. Both survive a crash or a kill; the next install of
  the same model resumes with `Range` (+ `If-Range`, so a changed file starts over).
- `downloads/<model_id>/.in-progress` marks a download that was running: it stays when the
  process stops or is killed (so the next start resumes it) and goes when the download
  fails, so a failed download is resumed only when someone installs the model again.
- when every file is complete and verified (SHA-256 where the catalog has one, else size),
  the files move into `models/.tmp-<id>-<hex>/` with a marker saying a download made it
  (gateway/model_folder.py), which `os.replace` renames to `models/<id>/`; then
  `register(model, path)` records it (the library does that in one transaction), and only
  then does `.in-progress` go. A kill between the rename and the registration leaves the
  download pending; the next start finds the folder complete in place and registers it. A
  failed registration removes the folder, so nothing broken is registered. A `models/<id>/`
  without the marker (made by hand) is never replaced, registered or removed: the install is
  refused (409 `folder_in_the_way`).

One `Download` per model at a time: a second request for the same model gets the running
one. Progress events go to every `subscribe()`r and `downloads()` returns the same data
for polling. Cancelling removes the partial files; stopping the server keeps them.
`remove()` forgets an ended download (and deletes what a failed one kept). Each file's
transfer (resume, retries, verification) is gateway/transfer.py's `FileFetcher`.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx

from gateway.catalog import DEFAULT_BASE_URL, CatalogError, CatalogModel, local_base
from gateway.download import FINAL_STATES, Download, DownloadError, DownloadState
from gateway.model_folder import in_the_way, is_complete, move_into_place
from gateway.model_spec import ModelSpec, without_paths
from gateway.partials import part_size
from gateway.pubsub import Broker, Subscription
from gateway.settings import MB, format_mb
from gateway.transfer import FileFetcher
from models import InvalidModel

log = logging.getLogger(__name__)

Register = Callable[[CatalogModel, Path], Awaitable[None]]
IsRegistered = Callable[[str], Awaitable[bool]]

CHUNK_BYTES = 1 << 16
IN_PROGRESS = ".in-progress"  # in downloads/<model_id>/: this download was running
MAX_FINISHED = 50  # finished downloads kept for polling


class DownloadManager:
    def __init__(
        self,
        data_dir: str | Path,
        register: Register,
        *,
        is_registered: IsRegistered | None = None,
        base_url: str = DEFAULT_BASE_URL,
        token: str | None = None,
        max_retries: int = 3,
        retry_backoff_s: float = 0.5,
        min_free_disk_bytes: int = 256 << 20,
        progress_interval_s: float = 0.1,
        http_timeout_s: float = 30.0,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.downloads_dir = self.data_dir / "downloads"
        self.models_dir = self.data_dir / "models"
        self.base_url = base_url
        self._register = register
        self._is_registered = is_registered
        self._token = token
        self.min_free_disk_bytes = min_free_disk_bytes
        self.progress_interval_s = progress_interval_s
        self._timeout = httpx.Timeout(http_timeout_s, connect=min(10.0, http_timeout_s))
        self._client: httpx.AsyncClient | None = None
        self._active: dict[str, Download] = {}  # model_id -> running download
        self._disk_lock = asyncio.Lock()  # disk checks in turn (`_check_disk`)
        self._all: dict[str, Download] = {}  # download_id -> download, newest last
        self.events = Broker()
        self._fetcher = FileFetcher(base_url, token, self._http, count=self._count, set_state=self._set_state,
                                    max_retries=max_retries, retry_backoff_s=retry_backoff_s, chunk_bytes=chunk_bytes)
        self.downloads_dir.mkdir(parents=True, exist_ok=True)
        self.models_dir.mkdir(parents=True, exist_ok=True)
        self._sweep()

    # -- public -----------------------------------------------------------------------

    async def install(self, model: CatalogModel) -> Download:
        """Start (or join) the download of `model`; await `.wait()` on the result for the end.

        Raises DownloadError `already_installed` (409) when the library has it,
        `auth_required` (400) for a gated model without a token (see `check_access`), and
        `folder_in_the_way` (409) when `models/<id>/` exists and no download made it
        (gateway/model_folder.py).
        """
        running = self._active.get(model.id)
        if running is not None:
            return running
        if self._is_registered is not None and await self._is_registered(model.id):
            raise DownloadError("already_installed", f"model {model.id!r} is already installed", 409)
        self.check_access(model)
        refusal = await asyncio.to_thread(in_the_way, self.models_dir / model.id, model.id)
        if refusal is not None:  # a folder no download made: never replaced (nor registered) by one
            raise refusal
        running = self._active.get(model.id)  # another caller may have started it meanwhile
        if running is not None:
            return running
        download = Download(f"dl_{uuid.uuid4().hex[:12]}", model)
        for f in model.files:
            download._total[f.dest] = f.size_bytes
            download._done[f.dest] = 0
        download._approximate = {f.dest for f in model.files if f.size_is_approximate}
        self._active[model.id] = download
        self._all[download.download_id] = download
        self._trim_finished()
        download.task = asyncio.create_task(self._run(download), name=f"download-{model.id}")
        download.task.add_done_callback(lambda _: self._on_done(download))
        self._emit(download, force=True)
        return download

    def needs_token(self, model: CatalogModel) -> bool:
        """True when `model` is gated, no token is configured and the files come over HTTP."""
        if not model.gated or self._token:
            return False
        try:
            return local_base(self.base_url) is None
        except CatalogError:  # a bad base URL fails the download with its own message
            return True

    def check_access(self, model: CatalogModel) -> None:
        """Refuse a gated model up front when the download could only end in a 401."""
        if self.needs_token(model):
            page = f" ({model.homepage})" if model.homepage else ""
            raise DownloadError(
                "auth_required", f"{model.id!r} is gated: it needs an access token, and none is configured. "
                "Set the `download_token` setting or the VOXGATE_DOWNLOAD_TOKEN environment variable (read at "
                f"start), and accept the licence on the model's page{page}", 400)

    def _on_done(self, download: Download) -> None:
        # A task cancelled before its first step never runs _run's cleanup.
        if self._active.get(download.model_id) is download:
            del self._active[download.model_id]
        if download.state not in FINAL_STATES:
            download.finished_s = time.time()
            self._set_state(download, DownloadState.CANCELLED)

    def get(self, download_id: str) -> Download | None:
        return self._all.get(download_id)

    def active(self, model_id: str) -> Download | None:
        return self._active.get(model_id)

    def downloads(self) -> list[dict[str, Any]]:
        return [d.as_json() for d in self._all.values()]

    def subscribe(self) -> Subscription:
        return self.events.subscribe()

    async def cancel(self, download_id: str) -> bool:
        """Stop a running download and delete its partial files; False if not running."""
        download = self._all.get(download_id)
        if download is None or download.task is None or download.task.done():
            return False
        download.task.cancel()
        await asyncio.gather(download.task, return_exceptions=True)
        return True

    async def remove(self, download_id: str) -> bool | None:
        """Forget an ended download; None if unknown or still running.

        For a failed download that is the model's latest, the partial files it kept are
        deleted too; returns whether files were deleted. Subscribers get a
        `download_removed` event.
        """
        download = self._all.get(download_id)
        if download is None or download.state not in FINAL_STATES:
            return None
        if download.task is not None and not download.task.done():
            return None
        later = list(self._all.values())[list(self._all).index(download_id) + 1:]
        latest = not any(d.model_id == download.model_id for d in later)
        del self._all[download_id]
        files_removed = False
        if download.state is DownloadState.FAILED and latest and download.model_id not in self._active:
            work = self.downloads_dir / download.model_id
            if work.exists():
                await asyncio.to_thread(shutil.rmtree, work, True)
                files_removed = True
        self.events.publish(download.event("download_removed"))
        return files_removed

    def pending_model_ids(self) -> list[str]:
        """Models whose download was running when the process stopped or was killed.

        The next start resumes these; a download that failed (HTTP error, hash mismatch,
        retries used up) is not listed: its partial files wait for an explicit install.
        """
        return sorted(p.name for p in self.downloads_dir.iterdir()
                      if p.is_dir() and p.name not in self._active and (p / IN_PROGRESS).exists())

    async def aclose(self) -> None:
        """Stop everything, keeping partial files so the next start can resume."""
        for download in list(self._active.values()):
            download._cancel_keeps_partials = True
            assert download.task is not None
            download.task.cancel()
        await asyncio.gather(*(d.task for d in list(self._active.values()) if d.task), return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- the download task ------------------------------------------------------------

    async def _run(self, download: Download) -> None:
        model = download.model
        work = self.downloads_dir / model.id
        try:
            work.mkdir(parents=True, exist_ok=True)
            (work / IN_PROGRESS).touch()
            final = self.models_dir / model.id
            if await asyncio.to_thread(is_complete, model, final):
                # Moved into place by a run that was stopped or killed before registering it.
                log.info("model %s: found in place from an earlier run; registering it", model.id)
                for f in model.files:
                    download.set_total(f.dest, (final / f.dest).stat().st_size)
                    download._done[f.dest] = download._total[f.dest]
            else:
                async with self._disk_lock:  # one check at a time, each counting the downloads before it
                    await asyncio.to_thread(self._check_disk, download, work)
                    download._disk_reserved = True
                for f in model.files:
                    await self._fetcher.fetch(download, f, work)
                self._set_state(download, DownloadState.INSTALLING)
                download.current_file = None
                await self._install(download, work)
            self._set_state(download, DownloadState.INSTALLING)
            download.path = await self._register_folder(download, final)
            await asyncio.to_thread(shutil.rmtree, work, True)  # with it the marker: nothing to resume
            download.rate_bps = 0.0
            self._set_state(download, DownloadState.DONE)
            log.info("model %s installed in %s (%d bytes)", model.id, download.path, download.bytes_done)
        except asyncio.CancelledError:
            download.error = None
            if not download._cancel_keeps_partials:
                await asyncio.to_thread(shutil.rmtree, work, True)
            for f in model.files:  # what is on disk now (kept, or none; kept and moved into place: as it was)
                part = work / (f.dest + ".part")
                if part.exists() or not download._cancel_keeps_partials:
                    download._done[f.dest] = part_size(part)
            log.info("download of %s cancelled (partials %s)", model.id,
                     "kept" if download._cancel_keeps_partials else "removed")
            self._set_state(download, DownloadState.CANCELLED)
        except DownloadError as error:
            download.error = error
            log.warning("download of %s failed: %s", model.id, error.message)
            await asyncio.to_thread(self._forget_failed, work)
            self._set_state(download, DownloadState.FAILED)
        except Exception as error:  # a bug or an OS error: report it, keep the loop alive
            log.exception("download of %s failed", model.id)
            download.error = DownloadError("download_failed", f"{type(error).__name__}: {error}", 500)
            await asyncio.to_thread(self._forget_failed, work)
            self._set_state(download, DownloadState.FAILED)
        finally:
            download.finished_s = download.finished_s or time.time()
            self._active.pop(model.id, None)

    @staticmethod
    def _forget_failed(work: Path) -> None:
        """A failed download is not resumed at the next start; with no bytes kept, nothing stays."""
        (work / IN_PROGRESS).unlink(missing_ok=True)
        if work.is_dir() and not any(p.is_file() and p.name.endswith(".part") and p.stat().st_size
                                     for p in work.rglob("*.part")):
            shutil.rmtree(work, ignore_errors=True)

    def _check_disk(self, download: Download, work: Path) -> None:
        on_disk = {f.dest: part_size(work / (f.dest + ".part")) for f in download.model.files}
        download._found.update(on_disk)  # resumed once the source agrees (`continues_from`)
        download._done.update(on_disk)
        needed = sum(max(0, download._total[d] - n) for d, n in on_disk.items())
        others = sum(max(0, d.bytes_total - d.bytes_done) for d in list(self._active.values())
                     if d is not download and d._disk_reserved)  # still to come for the downloads running
        free = shutil.disk_usage(work).free
        if free - needed - others < self.min_free_disk_bytes:
            running = f", of which the downloads running still need {others / MB:.1f} MB" if others else ""
            raise DownloadError(
                "insufficient_disk",
                f"installing {download.model_id!r} needs {needed / MB:.1f} MB more and must leave "
                f"{format_mb(self.min_free_disk_bytes)} free (min_free_disk_mb); {free / MB:.1f} MB are free in {work}"
                f"{running}", 507)

    async def _install(self, download: Download, work: Path) -> Path:
        """Move the verified files into `models/<id>/` in one rename (gateway/model_folder.py).

        The work folder and its IN_PROGRESS marker stay until the model is registered: a
        kill in between leaves the download pending, and the next start registers the
        folder it finds in place (`_run`) instead of losing the install. A folder there that
        no download made is left alone: DownloadError 409 `folder_in_the_way`.
        """
        model = download.model
        try:
            return await asyncio.to_thread(move_into_place, model, work, self.models_dir)
        except OSError as error:
            raise DownloadError("install_failed", f"cannot move {model.id!r} into place: {error}", 500) from error

    async def _register_folder(self, download: Download, final: Path) -> Path:
        """Record the installed folder in the library; a failure removes it (nothing broken stays):
        DownloadError `registration_failed`, 502 where the family's checks refused the files the source
        served (InvalidModel: a file cut short, a config without what the family needs), else 500."""
        model = download.model
        try:
            await self._register(model, final)
        except BaseException as error:
            if isinstance(error, asyncio.CancelledError) and download._cancel_keeps_partials:
                raise  # a stop, not a failure: the next start registers what is in place
            await asyncio.to_thread(shutil.rmtree, final, True)
            if isinstance(error, Exception):
                message = getattr(error, "message", None) or str(error)
                log.warning("model %s was downloaded but could not be registered: %s", model.id, message)
                shown = without_paths(message, ModelSpec(model.id, model.family, final))  # (the log has them)
                status = 502 if isinstance(error, InvalidModel) else 500
                raise DownloadError("registration_failed", f"{model.id!r} was downloaded but could not be "
                                    f"registered, so it was removed: {shown}", status) from error
            raise
        return final

    # -- helpers ----------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # Hugging Face redirects to a CDN; httpx drops Authorization on cross-origin redirects.
            self._client = httpx.AsyncClient(timeout=self._timeout, follow_redirects=True)
        return self._client

    def _count(self, download: Download, num_bytes: int) -> None:
        now = time.monotonic()
        download._window_bytes += num_bytes
        elapsed = now - download._window_s
        if elapsed >= 0.25:
            rate = download._window_bytes / elapsed
            download.rate_bps = rate if download.rate_bps == 0 else 0.7 * download.rate_bps + 0.3 * rate
            download._window_s, download._window_bytes = now, 0
        self._emit(download)

    def _set_state(self, download: Download, state: DownloadState) -> None:
        if download.state is not state:
            download.state = state
            if state in FINAL_STATES:  # (its event is the last: it carries the end)
                download.finished_s, download.rate_bps = time.time(), 0.0
            self._emit(download, force=True)

    def _emit(self, download: Download, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - download._last_emit_s < self.progress_interval_s:
            return
        download._last_emit_s = now
        self.events.publish(download.event())

    def _trim_finished(self) -> None:
        finished = [k for k, d in self._all.items() if d.state in FINAL_STATES]
        for key in finished[:max(0, len(finished) - MAX_FINISHED)]:
            del self._all[key]

    def _sweep(self) -> None:
        """Remove staging and trash folders a crash left behind (partials stay)."""
        for path in self.models_dir.glob(".tmp-*"):
            shutil.rmtree(path, ignore_errors=True)
        for path in self.models_dir.glob(".trash-*"):
            shutil.rmtree(path, ignore_errors=True)


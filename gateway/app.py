"""The Starlette application: routes as one list, errors mapped once, a lifespan that
applies migrations, registers the embedded voice and config models, and runs the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.concurrency import run_in_threadpool
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from engine.config import EngineConfig
from engine.engine import Engine
from gateway import library_api, models_api, openapi, pages, presets, realtime, speech, stats, takes
from gateway.auth import KeyCheck
from gateway.catalog import load_catalog
from gateway.downloads import DownloadError, DownloadManager
from gateway.errors import exception_handlers
from gateway.keys import KeyStore, no_key_message
from gateway.library import Library
from gateway.limits import KeyLimits
from gateway.metrics import Metrics
from gateway.residency import MB, Residency
from gateway.routing import resource
from gateway.security import browser_middleware
from gateway.settings import Settings
from gateway.state import AppState
from gateway.takes import TakeStore
from gateway.writes import WriteGuard, WriteTimeout
from models import family

log = logging.getLogger(__name__)

EMBEDDED_MODEL = {"id": "piper-joe", "family": "piper", "name": "Joe (en_US, Piper medium, embedded)"}


async def register_models(library: Library, settings: Settings) -> None:
    """The embedded voice on first start; `[[models]]` from the config file every start."""
    if await library.get_model(EMBEDDED_MODEL["id"]) is None:
        info = await run_in_threadpool(lambda: family("piper").validate(family("piper").embedded_model_path()))
        await library.add_model(EMBEDDED_MODEL["id"], "piper", EMBEDDED_MODEL["name"], None,
                                info["voices"], size_bytes=info["size_bytes"], source="embedded")
    for entry in settings.models:
        options = {k: v for k, v in entry.items() if k not in ("id", "family", "path", "name")}
        path = Path(str(entry["path"])).expanduser()
        info = await run_in_threadpool(family(str(entry["family"])).validate, path, options)
        await library.add_model(str(entry["id"]), str(entry["family"]), str(entry.get("name", entry["id"])),
                                str(path), info["voices"], options, info.get("size_bytes", 0),
                                source="config", replace=True)


def create_app(settings: Settings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        catalog = load_catalog(settings.catalog_path or None)  # a bad catalog stops the start here
        library = await Library.open(settings.db_path)
        keys = KeyStore(library)
        if settings.keys_required and not await keys.count_active():
            await library.close()
            raise RuntimeError(no_key_message(settings))
        await TakeStore(library, settings.data_dir / "takes").sweep()  # what a kill left behind
        engine = Engine(EngineConfig(ttfa_target_ms=settings.ttfa_target_ms,
                                     urgent_slack_ms=settings.urgent_slack_ms,
                                     max_running=settings.max_running, max_waiting=settings.max_waiting,
                                     policy=settings.policy))
        engine.start()
        residency = Residency(
            engine, library, settings.device, max_loaded_models=settings.max_loaded_models,
            idle_unload_s=settings.idle_unload_s, busy_timeout_ms=settings.busy_timeout_ms,
            min_free_memory_mb=settings.min_free_memory_mb, memory_factor=settings.memory_factor)

        async def is_registered(model_id: str) -> bool:
            return await library.get_model(model_id) is not None

        downloads = DownloadManager(
            settings.data_dir, library_api.catalog_registrar(library), is_registered=is_registered,
            base_url=settings.download_base_url, token=settings.download_token or None,
            min_free_disk_bytes=int(settings.min_free_disk_mb * MB))
        metrics = Metrics()
        metrics.watch(residency)
        state = AppState(settings, engine, library, residency, metrics, catalog=catalog, downloads=downloads,
                         keys=keys, limits=KeyLimits(settings.key_rate_limit, settings.key_max_concurrent),
                         writes=WriteGuard(settings.send_timeout_s))
        app.state.voxgate = state
        try:
            await register_models(library, settings)
            await residency.start(settings.preload_models)
            for model_id in downloads.pending_model_ids():  # interrupted by the last stop or kill
                model = catalog.get(model_id)
                if model is None or await is_registered(model_id):
                    continue
                if downloads.needs_token(model):
                    log.warning("not resuming the download of %s: it is gated and no download_token is set",
                                model_id)
                    continue
                log.info("resuming the download of %s", model_id)
                try:
                    await downloads.install(model)
                except DownloadError as error:
                    log.warning("not resuming the download of %s: %s", model_id, error.message)
            yield
        finally:
            await downloads.aclose()  # keeps partial files for the next start
            # Like uvicorn: stop admitting, let running requests drain, then cancel (the
            # server's drain, gateway/server.py, has usually done this before we get here).
            state.draining = True
            deadline = state.drain_deadline_s or time.monotonic() + settings.graceful_shutdown_s
            while engine.num_requests() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await residency.close()
            await run_in_threadpool(engine.stop)
            await library.close()

    routes = [
        Route("/", pages.index, include_in_schema=False),
        Route("/library", pages.library, include_in_schema=False),
        Route("/voices", pages.voices, include_in_schema=False),
        Route("/live", pages.live, include_in_schema=False),
        Route("/docs", openapi.docs, include_in_schema=False),
        Route("/openapi.json", openapi.schema, include_in_schema=False),
        resource("/health", GET=models_api.health),
        resource("/metrics", GET=models_api.metrics),
        resource("/v1/models", GET=models_api.list_models),
        resource("/v1/models/{model_id}", GET=models_api.get_model),
        resource("/v1/audio/voices", GET=models_api.list_voices),
        resource("/v1/audio/speech", POST=speech.speech),
        resource("/v1/models/{model_id}/load", POST=library_api.load_model),
        resource("/v1/models/{model_id}/unload", POST=library_api.unload_model),
        resource("/v1/library/catalog", GET=library_api.catalog),
        resource("/v1/library/install", POST=library_api.install),
        resource("/v1/library/downloads", GET=library_api.list_downloads),
        resource("/v1/library/downloads/events", GET=library_api.download_events),
        resource("/v1/library/downloads/{download_id}", DELETE=library_api.cancel_download),
        resource("/v1/library/models/{model_id}", DELETE=library_api.delete_model),
        resource("/v1/presets", GET=presets.list_presets, POST=presets.create_preset),
        resource("/v1/presets/{name}", GET=presets.get_preset, PUT=presets.update_preset,
                 PATCH=presets.update_preset, DELETE=presets.delete_preset),
        resource("/v1/takes", GET=takes.list_takes, POST=takes.create_take),
        resource("/v1/takes/{take_id}", GET=takes.get_take, DELETE=takes.delete_take),
        resource("/v1/takes/{take_id}/audio", GET=takes.take_audio),
        resource("/v1/stats", GET=stats.stats),
        WebSocketRoute("/v1/realtime", realtime.realtime),
        Mount("/static", StaticFiles(directory=str(pages.STATIC_DIR)), name="static"),
    ]
    # Outermost first: Host and Origin, CORS (if configured), keys, then write time bounds.
    middleware = [*browser_middleware(settings), Middleware(KeyCheck), Middleware(WriteTimeout)]
    return Starlette(routes=routes, middleware=middleware, exception_handlers=exception_handlers, lifespan=lifespan)

"""The Starlette application: routes as one list (gateway/routes.py), middleware, errors
mapped once, a lifespan that holds the data dir's server lock (gateway/server_lock.py), applies
migrations, registers the embedded voice and config models, and runs the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware

from engine.config import EngineConfig
from engine.engine import Engine
from gateway import library_api
from gateway.auth import KeyCheck, RedactQuerySecrets
from gateway.catalog import Catalog, config_entry_problem, load_catalog
from gateway.download import DownloadError
from gateway.downloads import DownloadManager
from gateway.errors import exception_handlers, not_found
from gateway.keys import KeyStore, no_key_message
from gateway.library import Library
from gateway.limits import KeyLimits
from gateway.memory import IdleTrim
from gateway.access_log import AccessLog
from gateway.metrics import Metrics
from gateway.projects_jobs import Generator
from gateway.projects_store import ProjectStore
from gateway.projects_sweep import sweep_projects
from gateway.request_id import RequestIdMiddleware
from gateway.residency import MB, Residency
from gateway.revocation import watch_revocations
from gateway.routes import app_routes
from gateway.security import browser_middleware
from gateway.server_lock import serving
from gateway.settings import Settings
from gateway.state import AppState
from gateway.takes import TakeStore
from gateway.writes import WriteGuard, WriteTimeout
from models import FAMILIES, family

log = logging.getLogger(__name__)

EMBEDDED_MODEL = {"id": "piper-joe", "family": "piper", "name": "Joe (en_US, Piper medium, embedded)"}


def embedded_model_info() -> dict[str, Any]:
    """The embedded voice's `validate()` info (voices, size_bytes); ImportError where its package is
    not installed (a server then serves without it)."""
    piper = family("piper")
    return dict(piper.validate(piper.embedded_model_path()))


def config_clash(entries: Sequence[Mapping[str, Any]], installed: list[dict[str, Any]]) -> str | None:
    """Why a `[[models]]` entry cannot be registered over the library's model of its id: one not
    from the config file (`voxgate models add`, the HTTP install), which the entry replaced in
    silence, its family, folder and options with it; None when none clashes."""
    held = {str(record["id"]): record for record in installed if record["source"] != "config"}
    for entry in entries:
        if (record := held.get(str(entry["id"]))) is not None:
            return (f"[[models]] {entry['id']!r} in the config file: a model of that id is installed, not from the "
                    f"config file ({record['family']}, {record['path'] or 'embedded'}); give the entry another id, "
                    f"or remove that model first: voxgate models remove {entry['id']}")
    return None


async def register_models(library: Library, settings: Settings, catalog: Catalog) -> None:
    """The embedded voice on first start; `[[models]]` from the config file every start
    (ValueError naming the entry that cannot be: a catalog model's id, an unknown family)."""
    for entry in settings.models:  # before anything is written
        problem = config_entry_problem(catalog, str(entry["id"]))
        if problem:
            raise ValueError(problem)
    if problem := config_clash(settings.models, await library.list_models()):
        raise ValueError(problem)
    if await library.get_model(EMBEDDED_MODEL["id"]) is None:
        try:
            info = await run_in_threadpool(embedded_model_info)
        except ImportError as error:  # e.g. a GPU box installed without the voice package: serve the rest
            log.warning("the embedded voice is not installed (%s); serving the other models", error)
        else:
            await library.add_model(EMBEDDED_MODEL["id"], "piper", EMBEDDED_MODEL["name"], None,
                                    info["voices"], size_bytes=info["size_bytes"], source="embedded")
    for entry in settings.models:
        options = {k: v for k, v in entry.items() if k not in ("id", "family", "path", "name")}
        path = Path(str(entry["path"])).expanduser()
        if str(entry["family"]) not in FAMILIES:
            raise ValueError(f"[[models]] {entry['id']!r}: unknown family {entry['family']!r}; "
                             f"known families: {', '.join(FAMILIES)}")
        info = await run_in_threadpool(family(str(entry["family"])).validate, path, options)
        await library.add_model(str(entry["id"]), str(entry["family"]), str(entry.get("name", entry["id"])),
                                str(path), info["voices"], options, info.get("size_bytes", 0),
                                source="config", replace=True, model_type=info.get("model_type"))
    await record_model_types(library)


async def record_model_types(library: Library) -> None:
    """Record the type of each Qwen3-TTS model registered before types were kept (migration
    0006), read from its folder while that is readable (one small config.json each)."""
    from gateway.models_api import model_type  # (it reads the folder first)

    for record in await library.list_models():
        if record["family"] == "qwen3_tts" and record.get("model_type") is None \
                and (kind := await model_type(record)) is not None:
            await library.set_model_type(str(record["id"]), kind)


def create_app(settings: Settings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Exclusive: a second server on this data dir, and `voxgate models remove`/`install`, refuse meanwhile, and
        # such a command running stops this start (gateway/server_lock.py); so start-up's sweeps touch no live file
        async with serving(settings.data_dir):
            async with run(app):
                yield

    @contextlib.asynccontextmanager
    async def run(app: Starlette) -> AsyncIterator[None]:
        catalog = load_catalog(settings.catalog_path or None)  # a bad catalog stops the start here
        library = await Library.open(settings.db_path)
        keys = KeyStore(library)
        if settings.keys_required and not await keys.count_active():
            await library.close()
            raise RuntimeError(no_key_message(settings))
        await TakeStore(library, settings.data_dir / "takes").sweep()  # what a kill left behind
        projects = ProjectStore(library, settings.data_dir / "projects", settings.min_free_disk_mb)
        await sweep_projects(projects)
        engine = Engine(EngineConfig(urgent_slack_ms=settings.urgent_slack_ms, max_waiting=settings.max_waiting,
                                     max_predicted_ttfa_ms=settings.max_predicted_ttfa_ms, policy=settings.policy))
        engine.start()
        residency = Residency(
            engine, library, devices=settings.devices, max_running=settings.max_running,
            cpu_workers=settings.cpu_workers,  # its loader's and its memory estimate's (a Piper pool's size)
            max_loaded_models=settings.max_loaded_models,
            idle_unload_s=settings.idle_unload_s, busy_timeout_ms=settings.busy_timeout_ms,
            min_free_memory_mb=settings.min_free_memory_mb, memory_factor=settings.memory_factor)

        async def is_registered(model_id: str) -> bool:
            return await library.get_model(model_id) is not None

        downloads = DownloadManager(
            settings.data_dir, library_api.catalog_registrar(library), is_registered=is_registered,
            base_url=settings.download_base_url, token=settings.download_token or None,
            min_free_disk_bytes=int(settings.min_free_disk_mb * MB))
        metrics = Metrics()
        metrics.watch(residency, engine)
        state = AppState(settings, engine, library, residency, metrics, catalog=catalog, downloads=downloads,
                         keys=keys, limits=KeyLimits(settings.key_rate_limit, settings.key_max_concurrent),
                         writes=WriteGuard(settings.send_timeout_s))
        generator = Generator(state, projects)
        state.projects = generator
        app.state.voxgate = state
        revocations = asyncio.create_task(watch_revocations(state))  # sessions of a revoked key: closed
        trimmer: asyncio.Task[None] | None = None
        if settings.memory_trim_idle_s:
            state.memory = IdleTrim(engine.num_requests, settings.memory_trim_idle_s)
            metrics.watch_memory(state.memory)
            trimmer = asyncio.create_task(state.memory.run())
        try:
            await register_models(library, settings, catalog)
            await residency.start(settings.preload_models)
            for model_id in downloads.pending_model_ids():  # interrupted by the last stop or kill
                model = catalog.get(model_id)
                if model is None:  # its files stay: a catalog that has it again resumes it
                    log.warning("not resuming the download of %s: the catalog (catalog_path) has no such model; "
                                "its partial files stay in %s", model_id, downloads.downloads_dir / model_id)
                    continue
                if await is_registered(model_id):
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
            revocations.cancel()
            if trimmer is not None:
                trimmer.cancel()
            await downloads.aclose()  # keeps partial files for the next start
            # Like uvicorn: stop admitting, let running requests drain, then cancel (the
            # server's drain, gateway/server.py, has usually done this before we get here).
            state.draining = True
            await generator.close()  # background generation stops; its partial audio is dropped
            deadline = state.drain_deadline_s or time.monotonic() + settings.graceful_shutdown_s
            while engine.num_requests() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await residency.close()
            await run_in_threadpool(engine.stop)
            await library.close()

    # Outermost first: query secrets redacted (before anything may log the URL), the access line (when a
    # request ends: gateway/access_log.py), the request id (so refusals carry one too), Host and Origin,
    # CORS (if configured), keys, then write time bounds.
    middleware = [Middleware(RedactQuerySecrets), Middleware(AccessLog), Middleware(RequestIdMiddleware),
                  *browser_middleware(settings), Middleware(KeyCheck), Middleware(WriteTimeout)]
    app = Starlette(routes=app_routes(), middleware=middleware, exception_handlers=exception_handlers,
                    lifespan=lifespan)
    app.router.redirect_slashes = False  # a trailing slash is a JSON 404 naming the path meant (gateway/errors.py)
    app.router.default = not_found(app.router.default)  # and a WebSocket to no route too
    return app

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
from starlette.concurrency import run_in_threadpool
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from engine.config import EngineConfig
from engine.engine import Engine
from gateway import (
    library_api, models_api, pages, presets, projects_api, projects_takes, realtime, references, speech, stats, takes,
    text_api,
)
from gateway.catalog import load_catalog
from gateway.downloads import DownloadError, DownloadManager
from gateway.errors import exception_handlers
from gateway.library import Library
from gateway.metrics import Metrics
from gateway.projects_jobs import Generator
from gateway.projects_store import ProjectStore
from gateway.residency import MB, Residency
from gateway.settings import Settings
from gateway.state import AppState
from models import FAMILIES, family

log = logging.getLogger(__name__)

EMBEDDED_MODEL = {"id": "piper-joe", "family": "piper", "name": "Joe (en_US, Piper medium, embedded)"}
SHUTDOWN_GRACE_S = 5.0


async def register_models(library: Library, settings: Settings) -> None:
    """The embedded voice on first start; `[[models]]` from the config file every start."""
    if await library.get_model(EMBEDDED_MODEL["id"]) is None:
        try:
            info = await run_in_threadpool(lambda: family("piper").validate(family("piper").embedded_model_path()))
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
                                source="config", replace=True)


def create_app(settings: Settings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        catalog = load_catalog(settings.catalog_path or None)  # a bad catalog stops the start here
        library = await Library.open(settings.db_path)
        engine = Engine(EngineConfig(urgent_slack_ms=settings.urgent_slack_ms, max_waiting=settings.max_waiting,
                                     max_predicted_ttfa_ms=settings.max_predicted_ttfa_ms, policy=settings.policy))
        engine.start()
        residency = Residency(
            engine, library, settings.device, max_running=settings.max_running,
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
        state = AppState(settings, engine, library, residency, metrics, catalog=catalog, downloads=downloads)
        generator = Generator(state, ProjectStore(library, settings.data_dir / "projects"))
        state.projects = generator
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
            # Like uvicorn: stop admitting, let running requests drain, then cancel.
            state.draining = True
            await generator.close()  # background generation stops; its partial audio is dropped
            deadline = time.monotonic() + SHUTDOWN_GRACE_S
            while engine.num_requests() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await residency.close()
            await run_in_threadpool(engine.stop)
            await library.close()

    routes = [
        Route("/", pages.index),
        Route("/library", pages.library),
        Route("/voices", pages.voices),
        Route("/live", pages.live),
        Route("/projects", pages.projects),
        Route("/projects/{project_id}", pages.project),
        Route("/health", models_api.health),
        Route("/metrics", models_api.metrics),
        Route("/v1/models", models_api.list_models),
        Route("/v1/models/{model_id}", models_api.get_model, methods=["GET"]),
        Route("/v1/audio/voices", models_api.list_voices),
        Route("/v1/audio/speech", speech.speech, methods=["POST"]),
        Route("/v1/text/normalize", text_api.normalize, methods=["POST"]),
        Route("/v1/models/{model_id}/load", library_api.load_model, methods=["POST"]),
        Route("/v1/models/{model_id}/unload", library_api.unload_model, methods=["POST"]),
        Route("/v1/library/catalog", library_api.catalog),
        Route("/v1/library/install", library_api.install, methods=["POST"]),
        Route("/v1/library/downloads", library_api.list_downloads),
        Route("/v1/library/downloads/events", library_api.download_events),
        Route("/v1/library/downloads/{download_id}", library_api.cancel_download, methods=["DELETE"]),
        Route("/v1/library/models/{model_id}", library_api.delete_model, methods=["DELETE"]),
        Route("/v1/presets", presets.list_presets, methods=["GET"]),
        Route("/v1/presets", presets.create_preset, methods=["POST"]),
        Route("/v1/presets/{name}", presets.get_preset, methods=["GET"]),
        Route("/v1/presets/{name}", presets.update_preset, methods=["PUT", "PATCH"]),
        Route("/v1/presets/{name}", presets.delete_preset, methods=["DELETE"]),
        Route("/v1/takes", takes.list_takes, methods=["GET"]),
        Route("/v1/takes", takes.create_take, methods=["POST"]),
        Route("/v1/takes/{take_id}", takes.get_take, methods=["GET"]),
        Route("/v1/takes/{take_id}", takes.delete_take, methods=["DELETE"]),
        Route("/v1/takes/{take_id}/audio", takes.take_audio, methods=["GET"]),
        Route("/v1/voices/references", references.list_references, methods=["GET"]),
        Route("/v1/voices/references", references.create_reference, methods=["POST"]),
        Route("/v1/voices/references/{name}", references.get_reference, methods=["GET"]),
        Route("/v1/voices/references/{name}", references.delete_reference, methods=["DELETE"]),
        Route("/v1/voices/references/{name}/audio", references.reference_audio, methods=["GET"]),
        Route("/v1/projects", projects_api.list_projects, methods=["GET"]),
        Route("/v1/projects", projects_api.create_project, methods=["POST"]),
        Route("/v1/projects/{project_id}", projects_api.get_project, methods=["GET"]),
        Route("/v1/projects/{project_id}", projects_api.update_project, methods=["PATCH"]),
        Route("/v1/projects/{project_id}", projects_api.delete_project, methods=["DELETE"]),
        Route("/v1/projects/{project_id}/import", projects_api.import_text, methods=["POST"]),
        Route("/v1/projects/{project_id}/passages", projects_api.add_passage, methods=["POST"]),
        Route("/v1/projects/{project_id}/passages/{passage_id}", projects_api.update_passage, methods=["PATCH"]),
        Route("/v1/projects/{project_id}/passages/{passage_id}", projects_api.delete_passage, methods=["DELETE"]),
        Route("/v1/projects/{project_id}/passages/{passage_id}/split", projects_api.split_passage, methods=["POST"]),
        Route("/v1/projects/{project_id}/passages/{passage_id}/merge", projects_api.merge_passage, methods=["POST"]),
        Route("/v1/projects/{project_id}/passages/{passage_id}/join", projects_takes.join_audio, methods=["GET"]),
        Route("/v1/projects/{project_id}/generate", projects_api.generate, methods=["POST"]),
        Route("/v1/projects/{project_id}/job", projects_api.get_job, methods=["GET"]),
        Route("/v1/projects/{project_id}/job", projects_api.cancel_job, methods=["DELETE"]),
        Route("/v1/projects/{project_id}/takes/{take_id}/audio", projects_takes.take_audio, methods=["GET"]),
        Route("/v1/projects/{project_id}/takes/{take_id}/edit", projects_takes.edit_take, methods=["POST"]),
        Route("/v1/projects/{project_id}/takes/{take_id}", projects_takes.delete_take, methods=["DELETE"]),
        Route("/v1/projects/{project_id}/export", projects_takes.export, methods=["GET"]),
        Route("/v1/stats", stats.stats),
        WebSocketRoute("/v1/realtime", realtime.realtime),
        Mount("/static", StaticFiles(directory=str(pages.STATIC_DIR)), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers=exception_handlers, lifespan=lifespan)

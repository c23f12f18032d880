"""The model library over HTTP: catalog, installs, downloads (+ SSE), delete, load/unload.

  GET    /v1/library/catalog               installable models, with installed / download state
  POST   /v1/library/install               {"id": catalog id, "wait"?: bool}  -> 202 (201 when waited);
                                           400 auth_required for a gated model without a token
                                           {"path", "family", "id"?, "name"?, "options"?} -> 201: a
                                           folder under `local_model_roots` (403 when unset; 422
                                           invalid_model_folder for any folder that does not qualify;
                                           400 for an id off gateway/library.py's MODEL_ID, 409
                                           catalog_id for a catalog model's id, model_exists for a taken one)
  GET    /v1/library/downloads             running and recent downloads (poll)
  GET    /v1/library/downloads/events      the same as Server-Sent Events (`?until=idle` ends
                                           the stream once nothing is downloading)
  DELETE /v1/library/downloads/{id}        cancel a running one (partial files are removed), or remove
                                           an ended one from the list (a failed one's partial files too)
  DELETE /v1/library/models/{id}           409 while the model serves requests (`voxgate models remove`
                                           does the same with no server running)
  POST   /v1/models/{id}/load              {"timeout_ms"?} (JSON; may be empty); 503 server_busy /
                                           insufficient_memory; OpenAI names (`tts-1`) mean the
                                           default model, as in `GET /v1/models/{id}`
  POST   /v1/models/{id}/unload            (JSON; may be empty) 409 while busy; OpenAI names too
"""

from __future__ import annotations

import asyncio
import json
import logging
import unicodedata
from pathlib import Path
from typing import Any, AsyncIterator

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from engine.types import InvalidInput, UnknownModel
from gateway.catalog import CatalogModel
from gateway.download import DownloadError
from gateway.downloads import DownloadManager, Register
from gateway.errors import ApiError, read_json
from gateway.json_input import check_fields, finite_number
from gateway.library import Library, ModelExists, default_model_id, model_id_problem
from gateway.library_removal import delete_downloaded_folder, folder_users, presets_using, protected_message
from gateway.resident import unload_removed
from gateway.state import AppState
from gateway.voices import model_alias
from models import FAMILIES, InvalidModel, family
from models.folder_family import other_family
from models.model_options import check_options, is_path

log = logging.getLogger(__name__)

SSE_HEARTBEAT_S = 15.0
SSE_MAX_S = 900.0  # EventSource reconnects by itself; a bounded stream never blocks a shutdown for long
_CATALOG_FIELDS: frozenset[str] = frozenset({"id", "wait"})  # POST /v1/library/install, the two forms
_FOLDER_FIELDS: frozenset[str] = frozenset({"path", "family", "id", "name", "options"})
MAX_MODEL_NAME_CHARS = 200  # a folder install's display name


def model_name_ok(name: object) -> bool:
    """Whether `name` can be a model's display name (a folder install's `name`, `voxgate models add
    --name`): 1-200 characters once the spaces around it are dropped, none a control character."""
    return (isinstance(name, str) and bool(name.strip()) and len(name) <= MAX_MODEL_NAME_CHARS
            and not any(unicodedata.category(c) == "Cc" for c in name))


def catalog_registrar(library: Library) -> Register:
    """Validate a downloaded folder with its family (its files read to their end: a truncated one
    the catalog has no hash for is caught here), then add model + voices in one transaction."""

    async def register(model: CatalogModel, path: Path) -> None:
        options = dict(model.options)
        info = await run_in_threadpool(family(model.family).validate, path, options)
        voices = list(info.get("voices") or model.voices)
        await library.add_model(model.id, model.family, model.name, str(path), voices, options,
                                int(info.get("size_bytes") or 0), source="catalog",
                                model_type=info.get("model_type"))

    return register


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.voxgate
    return state


def _downloads(state: AppState) -> DownloadManager:
    if state.downloads is None:
        raise ApiError(503, "downloads_unavailable", "the download manager is not running")
    return state.downloads


def _download_error(error: DownloadError) -> ApiError:
    return ApiError(error.status, error.code, error.message, field="id")


async def catalog(request: Request) -> JSONResponse:
    state = _state(request)
    assert state.catalog is not None
    installed = {m["id"] for m in await state.library.list_models()}
    data = []
    for model in state.catalog.models:
        active = state.downloads.active(model.id) if state.downloads else None
        data.append({**model.as_json(), "installed": model.id in installed,
                     "download": active.as_json() if active else None})
    return JSONResponse({"object": "list", "version": state.catalog.version, "data": data})


async def install(request: Request) -> JSONResponse:
    state = _state(request)
    data = await read_json(request, state.settings.max_body_bytes)
    if "path" in data:
        check_fields(data, _FOLDER_FIELDS, "/v1/library/install with a path")
        return await _install_folder(state, data)
    unknown = sorted(set(data) - _CATALOG_FIELDS)
    if unknown:
        field = unknown[0]
        if field in _FOLDER_FIELDS:
            raise InvalidInput(f"{field} is a field of a folder install, which needs a path (and a family)",
                               field=field)
        raise InvalidInput(f"unknown field {field[:80]!r}; /v1/library/install takes id and wait (a catalog "
                           "model), or path, family, id, name and options (a model folder on the server)",
                           field=field)
    model_id = data.get("id")
    if "id" in data and not isinstance(model_id, str):
        raise InvalidInput("id must be a string: a catalog model's id", field="id")
    if not isinstance(model_id, str) or not model_id:
        raise InvalidInput("give a catalog `id`, or a local folder `path` and its `family`", field="id")
    assert state.catalog is not None
    model = state.catalog.get(model_id)
    if model is None:
        raise ApiError(404, "not_in_catalog", f"{model_id!r} is not in the catalog; see GET /v1/library/catalog",
                       field="id")
    if model.kind != "model":
        raise ApiError(422, "not_installable", f"{model_id!r} is a {model.kind}, installed with the models "
                       "that use it", field="id")
    wait = data.get("wait", False)
    if not isinstance(wait, bool):
        raise InvalidInput("wait must be true or false", field="wait")
    try:
        download = await _downloads(state).install(model)
        if wait:
            await download.wait()
            return JSONResponse(download.as_json(), status_code=201)
    except DownloadError as error:
        raise _download_error(error) from error
    return JSONResponse(download.as_json(), status_code=202)


def _under_roots(path: Path, roots: tuple[str, ...]) -> bool:
    for root in roots:
        resolved = Path(root).expanduser().resolve()
        if path == resolved or resolved in path.parents:
            return True
    return False


def _rooted_path_options(options: dict[str, Any], known: dict[str, Any], roots: tuple[str, ...]) -> dict[str, Any]:
    """`options` with its folder options (`backbone_path`, `codec_path`, `speech_tokenizer_path`)
    resolved, as `path` is; InvalidModel for one outside the roots: they name files the model loads,
    so they are held to the roots too (a trial registered a backbone from outside them)."""
    out = dict(options)
    for key, value in options.items():
        if is_path(known, key):
            resolved = Path(value).expanduser().resolve()
            if not _under_roots(resolved, roots):
                raise InvalidModel(f"options.{key} {resolved} is outside the local_model_roots")
            out[key] = str(resolved)
    return out


async def _install_folder(state: AppState, data: dict[str, Any]) -> JSONResponse:
    """Register a folder on the server; only under `local_model_roots`, and with one error for
    every way a folder can fail (missing, outside the roots, not the family's layout), so the
    endpoint never tells whether a path exists. The reason goes to the server log."""
    raw_path, family_name = data.get("path"), data.get("family")
    if not isinstance(raw_path, str) or not raw_path or "\0" in raw_path:
        raise InvalidInput("path must name a model folder on the server", field="path")
    if not isinstance(family_name, str):
        raise InvalidInput("family is required with a path (e.g. \"piper\")", field="family")
    if family_name not in FAMILIES:
        raise ApiError(422, "unknown_family", f"unknown family {family_name!r}; known families: "
                       f"{', '.join(FAMILIES)}", field="family")
    roots = state.settings.local_model_roots
    if not roots:  # (before the family's import: a server that installs nothing says so first)
        raise ApiError(403, "local_install_disabled", "installing from a server folder is off: list the folders "
                       "it may use in the local_model_roots setting (or use `voxgate models add` on the server)",
                       field="path")
    module = family(family_name)  # FamilyUnavailable (501) where its packages are missing
    options = data.get("options")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise InvalidInput("options must be an object of the family's options (or null: none)", field="options")
    name = data.get("name")
    if name is not None and not model_name_ok(name):
        raise InvalidInput(f"name must be a string of 1-{MAX_MODEL_NAME_CHARS} characters, none a control character "
                           "(or null: the id)", field="name")
    try:  # the family's option names, types and ranges (before the folder: it tells nothing about it)
        check_options(options, getattr(module, "OPTIONS", {}), family_name)
    except InvalidModel as error:
        raise InvalidInput(error.message, field=error.field) from None
    given_id = data.get("id")
    problem = model_id_problem(given_id) if given_id is not None else None
    if problem:  # before the folder too: it tells nothing about it
        raise InvalidInput(problem, field="id")
    path = Path(raw_path).expanduser()
    invalid = ApiError(422, "invalid_model_folder", f"{raw_path!r} is not a valid {family_name} model folder "
                       "under the local_model_roots", field="path")
    under_roots = False
    try:
        path = await run_in_threadpool(path.resolve)  # symlinks out of a root do not count as in it
        if not path.is_absolute() or not _under_roots(path, roots):
            raise InvalidModel(f"{path} is outside the local_model_roots")
        under_roots = True
        options = await run_in_threadpool(_rooted_path_options, options, getattr(module, "OPTIONS", {}), roots)
        info = await run_in_threadpool(module.validate, path, options)
    except (InvalidModel, OSError, ValueError) as error:
        log.info("local install of %r refused: %s", raw_path, getattr(error, "message", None) or error)
        # A folder under the roots of another family's layout: say which (anyone who may install may
        # install it, so this tells nothing the install would not); the rest stays one error
        other = await run_in_threadpool(other_family, path, family_name) if under_roots else None
        if other is not None:
            raise ApiError(422, "invalid_model_folder", f"{raw_path!r} is not a {family_name} model folder: "
                           f"{other[1]}; install it with family {other[0]!r}", field="family") from None
        raise invalid from None
    model_id = given_id if given_id is not None else default_model_id(path)
    problem = model_id_problem(model_id)
    if problem:  # only a folder's name gets here: a given id was checked above
        raise InvalidInput(f"the folder's name is no model id ({problem}); give an id", field="id")
    assert state.catalog is not None
    if state.catalog.get(model_id) is not None:  # the catalog would show its model as installed
        raise ApiError(409, "catalog_id", f"{model_id!r} is the id of a catalog model (GET /v1/library/catalog); "
                       "pick another id for this folder", field="id")
    taken = ApiError(409, "model_exists", f"a model {model_id!r} is installed; delete it or pick another id",
                     field="id")
    if await state.library.get_model(model_id) is not None:
        raise taken
    name = model_id if name is None else name.strip()
    try:  # a request (or `voxgate models add`) for the same id may have got there since the check
        await state.library.add_model(model_id, family_name, name, str(path), list(info["voices"]), options,
                                      int(info.get("size_bytes") or 0), source="local",
                                      model_type=info.get("model_type"))
    except ModelExists:
        raise taken from None
    log.info("model %s registered from %s (%s)", model_id, path, family_name)
    from gateway.clone_voices import model_voices  # (it imports gateway.models_api, which routes import)

    record = {"id": model_id, "family": family_name, "path": str(path), "model_type": info.get("model_type")}
    return JSONResponse({"id": model_id, "family": family_name, "name": name, "path": str(path),
                         # as GET /v1/models lists them: a Base model's are the reference voices
                         "voices": (await model_voices(state, record))[0], "source": "local"}, status_code=201)


async def list_downloads(request: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": _downloads(_state(request)).downloads()})


async def download_events(request: Request) -> StreamingResponse:
    state = _state(request)
    manager = _downloads(state)
    until = request.query_params.get("until")
    if until not in (None, "idle"):
        raise InvalidInput("until must be idle (or left out: the stream stays open)", field="until")
    until_idle = until == "idle"
    subscription = manager.subscribe()  # before the snapshot: no event falls in between

    async def events() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        ends_at = loop.time() + SSE_MAX_S
        try:
            yield "retry: 2000\n\n"
            for item in manager.downloads():  # the same shape as the events that follow
                event = {"type": "download", **item}
                yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
            while loop.time() < ends_at:
                if until_idle and not any(manager.active(d["model_id"]) for d in manager.downloads()) \
                        and subscription.queue.empty():
                    return
                try:
                    event = await asyncio.wait_for(subscription.__anext__(), SSE_HEARTBEAT_S if not until_idle else 0.2)
                except asyncio.TimeoutError:
                    if not until_idle:
                        yield ": ping\n\n"
                    continue
                yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
        finally:
            subscription.close()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def cancel_download(request: Request) -> JSONResponse:
    """Cancel a running download (it stays listed as cancelled), or remove an ended one."""
    manager = _downloads(_state(request))
    download_id = request.path_params["download_id"]
    download = manager.get(download_id)
    if download is None:
        raise ApiError(404, "download_not_found", f"no download {download_id!r}", field="id")
    if await manager.cancel(download_id):
        return JSONResponse({**download.as_json(), "removed": False, "files_removed": True})
    files_removed = await manager.remove(download_id)
    if files_removed is None:  # a guard: cancel() said the task has ended, so remove() should not refuse
        raise ApiError(409, "download_busy", f"download {download_id!r} is {download.state}; try again",
                       field="id")
    return JSONResponse({**download.as_json(), "removed": True, "files_removed": files_removed})


async def delete_model(request: Request) -> JSONResponse:
    """DELETE /v1/library/models/{id}; `voxgate models remove` (gateway/cli_models.py) does the
    same, with no server running."""
    state = _state(request)
    model_id = request.path_params["model_id"]
    record = await state.library.get_model(model_id)
    if record is None:
        raise UnknownModel(f"model {model_id!r} is not installed", field="model")
    protected = protected_message(model_id, record["source"], state.settings.default_model,
                                  [str(entry["id"]) for entry in state.settings.models])
    if protected is not None:
        raise ApiError(409, "model_protected", protected, field="model")
    await state.residency.unload(model_id, reason="deleted")  # ModelBusy (409) while it serves requests
    presets = await presets_using(state.library, model_id)
    users = await folder_users(state.library, record)
    await state.library.remove_model(model_id)
    await unload_removed(state.residency, model_id)  # a request that looked it up just before may load it
    removed = await delete_downloaded_folder(state.settings.data_dir, record, users)
    state.residency.load_errors.forget(model_id)  # a model added later under this id starts afresh
    if state.downloads is not None:  # its finished download would otherwise still say "done" to the pages
        for download in state.downloads.downloads():
            if download["model_id"] == model_id:
                await state.downloads.remove(download["id"])
    if presets:
        log.info("model %s deleted; presets now unusable: %s", model_id, ", ".join(presets))
    return JSONResponse({"id": model_id, "deleted": True, "files_removed": removed,
                         "presets_unusable": presets, "folder_used_by": users})


def _timeout_ms(data: dict[str, Any]) -> float | None:
    value = data.get("timeout_ms")
    if value is None:
        return None
    number = finite_number(value)
    if number is None or number < 0:
        raise InvalidInput("timeout_ms must be a number >= 0", field="timeout_ms")
    return number


async def load_model(request: Request) -> JSONResponse:
    state = _state(request)
    model_id = model_alias(request.path_params["model_id"], state.settings.default_model)  # tts-1: the default
    data = await read_json(request, state.settings.max_body_bytes, allow_empty=True)
    check_fields(data, frozenset({"timeout_ms"}), "/v1/models/{id}/load")
    status = await state.residency.load(model_id, _timeout_ms(data))
    return JSONResponse({"id": model_id, **status})


async def unload_model(request: Request) -> JSONResponse:
    state = _state(request)
    model_id = model_alias(request.path_params["model_id"], state.settings.default_model)
    data = await read_json(request, state.settings.max_body_bytes, allow_empty=True)  # bounded: gateway/auth.py
    check_fields(data, frozenset(), "/v1/models/{id}/unload")
    if await state.library.get_model(model_id) is None and not state.residency.is_loaded(model_id):
        raise UnknownModel(f"model {model_id!r} is not installed", field="model")
    unloaded = await state.residency.unload(model_id)
    return JSONResponse({"id": model_id, "unloaded": unloaded, **state.residency.status(model_id)})

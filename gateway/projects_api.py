"""Studio projects over HTTP (`/v1/projects`): projects, passages, import, generation.

  GET    /v1/projects                          newest first (summaries)
  POST   /v1/projects                          {"name", "model"?, "speaker"?, "pause_ms"?} -> 201
  GET    /v1/projects/{id}                     the project with its passages and their takes
  PATCH  /v1/projects/{id}                     any of name, model, speaker, pause_ms
  DELETE /v1/projects/{id}                     204; its audio files go too
  POST   /v1/projects/{id}/import              {"text", "format": "markdown"|"text", "apply"?: false,
                                               "replace"?: false} -> the split passages (a preview),
                                               or with apply the project (201)
  POST   /v1/projects/{id}/passages            {"text", "speaker"?, "position"?} -> 201 the project
  PATCH  /v1/projects/{id}/passages/{pid}      any of text, speaker (null: the project's),
                                               pause_ms (after it; null: the project's), chosen_take
  DELETE /v1/projects/{id}/passages/{pid}      204, with its takes
  POST   /v1/projects/{id}/passages/{pid}/split  {"at": character offset} -> the project
  POST   /v1/projects/{id}/passages/{pid}/merge  joins it with the passage after it -> the project
  POST   /v1/projects/{id}/generate            {"passages"?: [pid, ...] | "out_of_date"} -> 202 the job;
                                               507 where the disk has less than min_free_disk_mb free
  GET    /v1/projects/{id}/job                 the latest generation job (progress)
  DELETE /v1/projects/{id}/job                 cancel it

Passages' routes are in gateway/projects_passages.py; takes, edits, joins and the export in
gateway/projects_takes.py. Shapes: docs/projects.md.
"""

from __future__ import annotations

import asyncio
import math
import re
import unicodedata
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.types import EngineError, InvalidInput, UnknownModel
from gateway.errors import ApiError, read_json
from gateway.projects_jobs import Generator, resolve_speaker
from gateway.projects_store import ProjectStore, is_current
from gateway.projects_text import IMPORT_FORMATS, MAX_PASSAGE_CHARS, split_passages
from gateway.state import AppState
from gateway.stitch import SERVER_EMOJI, model_options, spoken_items
from gateway.text import check_input, says_something
from gateway.voices import model_alias

MAX_IMPORT_BYTES = 4 * 1024 * 1024  # a book chapter as JSON
MAX_PAUSE_MS = 10_000.0
MAX_NAME_CHARS = 100
_ID = {"prj": re.compile(r"^prj-[0-9a-f]{12}$"), "psg": re.compile(r"^psg-[0-9a-f]{12}$"),
       "ptk": re.compile(r"^ptk-[0-9a-f]{12}$")}


# -- helpers shared with projects_takes.py -------------------------------------------------

def context(request: Request) -> tuple[AppState, ProjectStore, Generator]:
    state: AppState = request.app.state.voxgate
    assert state.projects is not None, "the lifespan creates the project generator"
    generator: Generator = state.projects
    return state, generator.store, generator


def path_id(request: Request, key: str, prefix: str, what: str) -> str:
    value = str(request.path_params[key])
    if not _ID[prefix].match(value):
        raise ApiError(404, f"{what}_not_found", f"no {what} {value!r}", field=what)
    return value


async def existing_project(request: Request, store: ProjectStore) -> dict[str, Any]:
    project_id = path_id(request, "project_id", "prj", "project")
    project = await store.get_project(project_id)
    if project is None:
        raise ApiError(404, "project_not_found", f"no project {project_id!r}", field="project")
    return project


async def fresh(store: ProjectStore, project: dict[str, Any]) -> dict[str, Any]:
    """`project` as stored now (after a change: its `updated_at`), or as it was if it is gone."""
    return await store.get_project(project["id"]) or project


async def existing_passage(request: Request, store: ProjectStore, project: dict[str, Any]) -> dict[str, Any]:
    passage_id = path_id(request, "passage_id", "psg", "passage")
    passage = await store.get_passage(project["id"], passage_id)
    if passage is None:
        raise ApiError(404, "passage_not_found", f"project {project['id']!r} has no passage {passage_id!r}",
                       field="passage")
    return passage


def take_json(project: dict[str, Any], passage: dict[str, Any] | None, take: dict[str, Any]) -> dict[str, Any]:
    speaker = (passage["speaker"] or project["speaker"]) if passage else None
    current = passage is not None and speaker is not None and is_current(take, passage["text"], speaker)
    return {"id": take["id"], "object": "project.take", "passage_id": take["passage_id"], "text": take["text"],
            "speaker": take["speaker"], "model": take["model_id"], "voice": take["voice"],
            "sample_rate": take["sample_rate"], "audio_ms": round(take["audio_ms"], 1),
            "out_of_date": not current, "chosen": passage is not None and passage["chosen_take"] == take["id"],
            "num_edits": len(take["history"]), "created_at": take["created_at"],
            "audio_url": f"/v1/projects/{project['id']}/takes/{take['id']}/audio"}


async def project_json(state: AppState, store: ProjectStore, project: dict[str, Any]) -> dict[str, Any]:
    passages = await store.passages(project["id"])
    by_passage: dict[str, list[dict[str, Any]]] = {p["id"]: [] for p in passages}
    for take in await store.takes(project["id"]):
        by_passage.setdefault(take["passage_id"], []).append(take)
    out, duration_ms, num_out_of_date = [], 0.0, 0
    has_chosen = [passage["chosen_take"] is not None for passage in passages] + [False]
    for i, passage in enumerate(passages):
        takes = [take_json(project, passage, t) for t in by_passage[passage["id"]]]
        chosen = next((t for t in takes if t["chosen"]), None)
        is_last = i == len(passages) - 1
        pause = None if is_last else (passage["pause_ms"] if passage["pause_ms"] is not None else project["pause_ms"])
        # what the export speaks is the chosen take: a current take not chosen does not make the passage
        # current (it did: text edited A -> B -> A showed up to date while B's take was chosen; a new-user
        # trial). A change of text or speaker re-chooses a current take (ProjectStore._rechoose).
        out_of_date = chosen is None or chosen["out_of_date"]
        num_out_of_date += out_of_date
        # the chosen takes and the pauses between two of them (not those of passages not yet generated)
        joined = chosen is not None and has_chosen[i + 1]
        duration_ms += (chosen["audio_ms"] if chosen else 0.0) + ((pause or 0.0) if joined else 0.0)
        out.append({"id": passage["id"], "position": passage["position"], "text": passage["text"],
                    "speaker": passage["speaker"], "effective_speaker": passage["speaker"] or project["speaker"],
                    "pause_ms": passage["pause_ms"], "pause_after_ms": pause, "chosen_take": passage["chosen_take"],
                    "out_of_date": out_of_date, "takes": takes})
    job = state.projects.job(project["id"]) if state.projects else None
    return {**summary_json(project), "passages": out, "num_out_of_date": num_out_of_date,
            "duration_ms": round(duration_ms, 1), "job": job.as_json() if job else None}


def summary_json(project: dict[str, Any]) -> dict[str, Any]:
    data = {"id": project["id"], "object": "project", "name": project["name"], "model": project["model_id"],
            "speaker": project["speaker"], "pause_ms": project["pause_ms"],
            "created_at": project["created_at"], "updated_at": project["updated_at"]}
    if "num_passages" in project:
        data["num_passages"] = project["num_passages"]
    return data


# -- validation ----------------------------------------------------------------------------

def unknown_fields(data: dict[str, Any], allowed: set[str], what: str) -> None:
    unknown = set(data) - allowed
    if unknown:
        field = min(unknown)
        has = f"have {', '.join(sorted(allowed))}" if allowed else "take no fields (send {} or no body)"
        raise InvalidInput(f"unknown field {field!r}; {what} {has}", field=field)


BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _name(value: object) -> str:
    """A project's name: 1-MAX_NAME_CHARS characters once its spaces around go, none a control
    character or a bidirectional override (a NUL, a tab, a right-to-left override went into export
    file names: found by a new-user trial; an emoji's zero-width joiner is fine)."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS \
            or any(unicodedata.category(ch) == "Cc" or ch in BIDI_CONTROLS for ch in value):
        raise InvalidInput(f"name must be a string of 1-{MAX_NAME_CHARS} characters, none a control character",
                           field="name")
    return value.strip()


def pause(value: object, field: str = "pause_ms", nullable: bool = False) -> float | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= MAX_PAUSE_MS:
        raise InvalidInput(f"{field} must be a number of milliseconds from 0 to {MAX_PAUSE_MS:g}"
                           f"{' or null' if nullable else ''}", field=field)
    return float(value)


async def passage_speaker(state: AppState, project: dict[str, Any], speaker: object) -> str:
    """A speaker that resolves now (a voice of the project's model, or a preset); field `speaker`."""
    if not isinstance(speaker, str) or not speaker.strip():
        raise InvalidInput("speaker must be a voice of the project's model or a preset name", field="speaker")
    try:
        await resolve_speaker(state, project, speaker)
    except EngineError as error:
        error.field = "speaker"
        raise
    return speaker


async def passage_text(state: AppState, project: dict[str, Any], value: object) -> str:
    """A passage's text, refused as `/v1/audio/speech` refuses its `input` (read with the
    server's text options and the project model's language), so what is kept can be generated."""
    text = check_input(value, state.settings.max_input_chars, field="text", speakable=False)
    await spoken_items(text, await model_options(state, project["model_id"]), "text", SERVER_EMOJI)
    return text


# -- projects ------------------------------------------------------------------------------

async def list_projects(request: Request) -> JSONResponse:
    _, store, _ = context(request)
    return JSONResponse({"object": "list", "data": [summary_json(p) for p in await store.list_projects()]})


async def _installed_model(state: AppState, model_id: object) -> str:
    """`model_id` if it names an installed model; InvalidInput or UnknownModel naming `model`."""
    if not isinstance(model_id, str):
        raise InvalidInput("model must be a string (a model id)", field="model")
    model_id = model_alias(model_id, state.settings.default_model)  # tts-1: the default model, as in speech
    if await state.library.get_model(model_id) is None:
        raise UnknownModel(f"unknown model {model_id!r}", field="model")
    return model_id


async def create_project(request: Request) -> JSONResponse:
    state, store, _ = context(request)
    data = await read_json(request, state.settings.max_body_bytes)
    unknown_fields(data, {"name", "model", "speaker", "pause_ms"}, "projects")
    name = _name(data.get("name"))
    model_id = await _installed_model(state, data.get("model", state.settings.default_model))
    voices = await state.library.voices(model_id)
    draft = {"model_id": model_id, "speaker": ""}
    speaker = await passage_speaker(state, draft, data.get("speaker", voices[0] if voices else None))
    project_id = await store.create_project(name, model_id, speaker, pause(data.get("pause_ms", 500.0)) or 0.0)
    project = await store.get_project(project_id)
    assert project is not None
    return JSONResponse(await project_json(state, store, project), status_code=201)


async def get_project(request: Request) -> JSONResponse:
    state, store, _ = context(request)
    return JSONResponse(await project_json(state, store, await existing_project(request, store)))


async def update_project(request: Request) -> JSONResponse:
    state, store, _ = context(request)
    project = await existing_project(request, store)
    data = await read_json(request, state.settings.max_body_bytes)
    unknown_fields(data, {"name", "model", "speaker", "pause_ms"}, "projects")
    changes: dict[str, Any] = {}
    if "name" in data:
        changes["name"] = _name(data["name"])
    if "model" in data:
        changes["model_id"] = await _installed_model(state, data["model"])
    if "speaker" in data or "model_id" in changes:
        draft = {**project, **changes}
        changes["speaker"] = await passage_speaker(state, draft, data.get("speaker", project["speaker"]))
    if "pause_ms" in data:
        changes["pause_ms"] = pause(data["pause_ms"])
    await store.update_project(project["id"], changes)
    updated = await store.get_project(project["id"])
    assert updated is not None
    return JSONResponse(await project_json(state, store, updated))


async def delete_project(request: Request) -> Response:
    _, store, generator = context(request)
    project = await existing_project(request, store)
    await generator.cancel(project["id"])
    await store.delete_project(project["id"])
    generator.jobs.pop(project["id"], None)
    return Response(status_code=204)


async def import_text(request: Request) -> JSONResponse:
    """A preview of the passages `text` splits into; with `"apply": true` they are added."""
    state, store, _ = context(request)
    project = await existing_project(request, store)
    data = await read_json(request, MAX_IMPORT_BYTES)
    unknown_fields(data, {"text", "format", "apply", "replace"}, "imports")
    text = data.get("text")
    if not isinstance(text, str):
        raise InvalidInput("text must be a string (the file's contents)", field="text")
    fmt = data.get("format", "markdown")
    if fmt not in IMPORT_FORMATS:  # (before the text is read: `format: 5` said "got ''")
        raise InvalidInput(f"format must be one of {', '.join(IMPORT_FORMATS)}; got {fmt!r}", field="format")
    options = await model_options(state, project["model_id"])  # a block is kept if speech would say something
    passages = await asyncio.to_thread(split_passages, text, fmt,
                                       min(MAX_PASSAGE_CHARS, state.settings.max_input_chars),
                                       lambda block: says_something(block, options, "text"))
    if not passages:
        raise InvalidInput("the text has nothing that can be spoken", field="text")
    for key in ("apply", "replace"):
        if not isinstance(data.get(key, False), bool):
            raise InvalidInput(f"{key} must be true or false", field=key)
    if not data.get("apply", False):
        return JSONResponse({"object": "project.import_preview", "project_id": project["id"],
                             "num_passages": len(passages), "passages": passages})
    await store.insert_passages(project["id"], [p["text"] for p in passages], replace=bool(data.get("replace")))
    return JSONResponse(await project_json(state, store, await fresh(store, project)), status_code=201)


# -- passages ------------------------------------------------------------------------------

# -- generation ----------------------------------------------------------------------------

async def generate(request: Request) -> JSONResponse:
    state, store, generator = context(request)
    project = await existing_project(request, store)
    data = await read_json(request, state.settings.max_body_bytes, allow_empty=True)
    unknown_fields(data, {"passages"}, "generate requests")
    wanted = data.get("passages", "out_of_date")
    described = await project_json(state, store, project)
    ids = [p["id"] for p in described["passages"]]
    if wanted == "out_of_date":
        chosen = [p["id"] for p in described["passages"] if p["out_of_date"]]
    elif isinstance(wanted, list) and wanted and all(isinstance(p, str) for p in wanted):
        missing = [p for p in wanted if p not in ids]
        if missing:
            raise InvalidInput(f"project {project['id']!r} has no passage {missing[0]!r}", field="passages")
        chosen = list(dict.fromkeys(wanted))
    else:
        raise InvalidInput('passages must be a non-empty list of passage ids or "out_of_date"', field="passages")
    if not chosen:
        raise ApiError(409, "nothing_to_generate", "every passage's chosen take is of its current text and speaker",
                       field="passages")
    if state.draining:
        raise ApiError(503, "shutting_down", "server is shutting down", headers={"Retry-After": "5"})
    await run_in_threadpool(store.check_disk, 0, "passages")  # 507 where no take could be stored
    job = generator.enqueue(project["id"], chosen)
    return JSONResponse(job.as_json(), status_code=202)


async def get_job(request: Request) -> JSONResponse:
    _, store, generator = context(request)
    project = await existing_project(request, store)
    job = generator.job(project["id"])
    if job is None:
        raise ApiError(404, "job_not_found", f"project {project['id']!r} has no generation job since the server "
                       "started (a restart forgets jobs; its takes stay)", field="project")
    return JSONResponse(job.as_json())


async def cancel_job(request: Request) -> JSONResponse:
    _, store, generator = context(request)
    project = await existing_project(request, store)
    job = await generator.cancel(project["id"])
    if job is None:
        raise ApiError(404, "job_not_found", f"project {project['id']!r} has no job", field="project")
    return JSONResponse(job.as_json())

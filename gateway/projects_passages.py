"""Studio projects' passages over HTTP (`/v1/projects/{id}/passages`): add, change, delete, split,
merge; each answers the whole project (gateway/projects_api.py `project_json`). The routes are listed
in gateway/projects_api.py's docstring; shapes: docs/projects.md."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.types import InvalidInput
from gateway.errors import ApiError, read_json
from gateway.projects_api import (
    context, existing_passage, existing_project, fresh, passage_speaker, passage_text, pause, project_json,
    unknown_fields,
)


async def add_passage(request: Request) -> JSONResponse:
    state, store, _ = context(request)
    project = await existing_project(request, store)
    data = await read_json(request, state.settings.max_body_bytes)
    unknown_fields(data, {"text", "speaker", "position"}, "passages")
    text = await passage_text(state, project, data.get("text"))
    position = data.get("position")
    if position is not None and (isinstance(position, bool) or not isinstance(position, int) or position < 0):
        raise InvalidInput("position must be an integer >= 0", field="position")
    speaker = None if data.get("speaker") is None else await passage_speaker(state, project, data["speaker"])
    [passage_id] = await store.insert_passages(project["id"], [text], position)
    if speaker is not None:
        passage = await store.get_passage(project["id"], passage_id)
        assert passage is not None
        await store.update_passage(passage, {"speaker": speaker})
    return JSONResponse(await project_json(state, store, await fresh(store, project)), status_code=201)


async def update_passage(request: Request) -> JSONResponse:
    state, store, _ = context(request)
    project = await existing_project(request, store)
    passage = await existing_passage(request, store, project)
    data = await read_json(request, state.settings.max_body_bytes)
    unknown_fields(data, {"text", "speaker", "pause_ms", "chosen_take"}, "passages")
    changes: dict[str, Any] = {}
    if "text" in data:
        changes["text"] = await passage_text(state, project, data["text"])
    if "speaker" in data:
        changes["speaker"] = None if data["speaker"] is None else await passage_speaker(state, project, data["speaker"])
    if "pause_ms" in data:
        changes["pause_ms"] = pause(data["pause_ms"], nullable=True)
    if "chosen_take" in data:
        take_id = data["chosen_take"]
        if not isinstance(take_id, str):
            raise InvalidInput(f"chosen_take must be the id of one of the passage's takes, got {json.dumps(take_id)}",
                               field="chosen_take")
        take = await store.get_take(project["id"], take_id)
        if take is None or take["passage_id"] != passage["id"]:
            raise InvalidInput(f"passage {passage['id']!r} has no take {take_id!r}", field="chosen_take")
        changes["chosen_take"] = take_id
    await store.update_passage(passage, changes)
    return JSONResponse(await project_json(state, store, await fresh(store, project)))


async def delete_passage(request: Request) -> Response:
    _, store, _ = context(request)
    project = await existing_project(request, store)
    await store.delete_passage(await existing_passage(request, store, project))
    return Response(status_code=204)


async def split_passage(request: Request) -> JSONResponse:
    state, store, _ = context(request)
    project = await existing_project(request, store)
    passage = await existing_passage(request, store, project)
    data = await read_json(request, state.settings.max_body_bytes)
    unknown_fields(data, {"at"}, "splits")
    at = data.get("at")
    if isinstance(at, bool) or not isinstance(at, int) or not 0 < at < len(passage["text"]):
        raise InvalidInput(f"at must be a character offset inside the text (1-{len(passage['text']) - 1})",
                           field="at")
    head, tail = passage["text"][:at].strip(), passage["text"][at:].strip()
    if not head or not tail:
        raise InvalidInput("both parts of a split need some text", field="at")
    await passage_text(state, project, head), await passage_text(state, project, tail)
    await store.split_passage(passage, head, tail)
    return JSONResponse(await project_json(state, store, await fresh(store, project)))


async def merge_passage(request: Request) -> JSONResponse:
    state, store, _ = context(request)
    project = await existing_project(request, store)
    passage = await existing_passage(request, store, project)
    data = await read_json(request, state.settings.max_body_bytes, allow_empty=True)  # (its body: none, or {})
    unknown_fields(data, set(), "merges")  # found by a new-user trial: {"at": 3} merged, silently
    passages = await store.passages(project["id"])
    after = [p for p in passages if p["position"] == passage["position"] + 1]
    if not after:
        raise ApiError(409, "no_next_passage", "the last passage has nothing after it to merge with",
                       field="passage")
    await passage_text(state, project, f"{passage['text']} {after[0]['text']}")
    await store.merge_passages(passage, after[0])
    return JSONResponse(await project_json(state, store, await fresh(store, project)))

"""Project takes, their edits, joins and the export over HTTP.

  GET    /v1/projects/{id}/takes/{tid}/audio        the take's WAV (Range for seeking)
  POST   /v1/projects/{id}/takes/{tid}/edit         {"op": "trim_silence"} | {"op": "delete_range",
                                                    "start_ms", "end_ms"} | {"op": "undo"} -> the take;
                                                    507 where its file would leave less than
                                                    min_free_disk_mb free (nothing changes)
  DELETE /v1/projects/{id}/takes/{tid}              204; 409 take_chosen for the chosen take
  GET    /v1/projects/{id}/passages/{pid}/join      WAV: the end of this passage's chosen take, the
                                                    pause, the start of the next one's (`?context_ms=`,
                                                    default 2000); header X-Voxgate-Pause-At-Ms
  GET    /v1/projects/{id}/export                   `?format=wav|flac|mp3|opus` (default wav),
                                                    `&loudness=LUFS` (optional, -70..0): the chosen
                                                    takes joined with their pauses, as a download
                                                    (written to a temporary file piece by piece, not
                                                    held in memory: gateway/projects_export.py; 507
                                                    where it would leave less than min_free_disk_mb)

Rendering, encoding and file edits run in the thread pool (gateway/projects_audio.py).
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any, Callable, TypeVar
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response

from engine.types import InvalidInput
from gateway.audio import MEDIA_TYPES, OUTPUT_RATE, wav_header, to_pcm16
from gateway.disk_space import full_disk_error
from gateway.errors import ApiError, read_json
from gateway.projects_api import context, existing_passage, existing_project, path_id, take_json
from gateway.projects_audio import (
    EXPORT_FORMATS, FRAME_MS, Piece, delete_range, ms_to_samples, read_pcm16, render, silence_bounds,
)
from gateway.projects_export import TemporaryFileResponse, export_file, head_headers
from gateway.projects_store import ProjectStore

DEFAULT_CONTEXT_MS = 2000.0
MAX_CONTEXT_MS = 10_000.0
MIN_LUFS, MAX_LUFS = -70.0, 0.0
T = TypeVar("T")


async def _existing_take(request: Request, store: ProjectStore, project: dict[str, Any]) -> dict[str, Any]:
    take_id = path_id(request, "take_id", "ptk", "take")
    take = await store.get_take(project["id"], take_id)
    if take is None:
        raise ApiError(404, "take_not_found", f"project {project['id']!r} has no take {take_id!r}", field="take")
    return take


def _number_param(request: Request, name: str, default: float | None, lo: float, hi: float) -> float | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidInput(f"{name} must be a number from {lo:g} to {hi:g}", field=name)
    return value


async def take_audio(request: Request) -> Response:
    _, store, _ = context(request)
    project = await existing_project(request, store)
    take = await _existing_take(request, store, project)
    path = store.take_path(take)
    if not path.is_file():
        raise ApiError(404, "take_audio_missing", f"the audio file of {take['id']} is gone", field="take")
    return FileResponse(path, media_type=MEDIA_TYPES["wav"], filename=f"{take['id']}.wav",
                        content_disposition_type="inline", headers={"Cache-Control": "no-cache"})


async def edit_take(request: Request) -> JSONResponse:
    """Trim silence at both ends, delete a range, or undo the last edit; each edit is undoable."""
    state, store, _ = context(request)
    project = await existing_project(request, store)
    take = await _existing_take(request, store, project)
    data = await read_json(request, state.settings.max_body_bytes)
    op = data.get("op")
    allowed = {"trim_silence": {"op"}, "delete_range": {"op", "start_ms", "end_ms"}, "undo": {"op"}}
    if op not in allowed:
        raise InvalidInput(f"op must be one of {', '.join(allowed)}", field="op")
    unknown = set(data) - allowed[op]
    if unknown:
        raise InvalidInput(f"unknown field {min(unknown)!r} for {op}", field=min(unknown))
    async with store.editing(take["id"]):  # edits of one take one after another, each on the one before
        take = await _existing_take(request, store, project)
        await _edit(store, take, op, data)
    updated = await store.get_take(project["id"], take["id"])
    passage = await store.get_passage(project["id"], take["passage_id"])
    if updated is None:  # deleted (with its passage or project) after the edit
        raise _gone(take)
    return JSONResponse(take_json(project, passage, updated))


def _gone(take: dict[str, Any]) -> ApiError:
    return ApiError(404, "take_not_found", f"take {take['id']!r} was deleted (with its passage or project) "
                    "while it was edited", field="take")


async def _read(store: ProjectStore, take: dict[str, Any], name: str | None = None) -> tuple[Any, int]:
    path = store.take_path(take, name)
    try:
        return await run_in_threadpool(read_pcm16, path)
    except Exception:
        if path.is_file():
            raise
        raise _gone(take) from None


async def _edit(store: ProjectStore, take: dict[str, Any], op: str, data: dict[str, Any]) -> None:
    """`op` (trim_silence, delete_range, undo) on `take`'s audio; ApiError 409 where it changes nothing."""
    if op == "undo":
        if not take["history"]:
            raise ApiError(409, "nothing_to_undo", f"take {take['id']!r} has no edit to undo", field="op")
        pcm16, rate = await _read(store, take, take["history"][-1])
        if not await store.undo(take, 1000.0 * len(pcm16) / rate):
            raise _gone(take)
    else:
        pcm16, rate = await _read(store, take)
        if op == "trim_silence":
            start, end = silence_bounds(pcm16, rate)
            if end <= start:
                raise ApiError(409, "all_silence", "the take is silent throughout; delete it instead", field="op")
            if len(pcm16) - (end - start) < ms_to_samples(FRAME_MS, rate):  # less than the silence frame: a
                start, end = 0, len(pcm16)  # second trim cut a sample or so each time (found by a new-user trial)
            edited = pcm16[start:end]
        else:
            for key in ("start_ms", "end_ms"):
                value = data.get(key)
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise InvalidInput(f"{key} must be a number of milliseconds", field=key)
            edited = delete_range(pcm16, rate, float(data["start_ms"]), float(data["end_ms"]))
        if len(edited) == len(pcm16):
            raise ApiError(409, "no_change", "that edit would not change the take", field="op")
        if not await store.replace_audio(take, rate, edited.astype("<i2").tobytes()):
            raise _gone(take)


async def delete_take(request: Request) -> Response:
    _, store, _ = context(request)
    project = await existing_project(request, store)
    take = await _existing_take(request, store, project)
    async with store.editing(take["id"]):  # not under an edit
        take = await _existing_take(request, store, project)
        deleted = await store.delete_take(take)
    if not deleted:
        raise ApiError(409, "take_chosen", f"take {take['id']!r} is its passage's chosen take; choose another "
                       "one first", field="take")
    return Response(status_code=204)


async def _chosen(store: ProjectStore, project: dict[str, Any], passage: dict[str, Any]) -> dict[str, Any]:
    take = await store.get_take(project["id"], passage["chosen_take"]) if passage["chosen_take"] else None
    if take is None:
        raise ApiError(409, "take_missing", f"passage {passage['position'] + 1} ({passage['id']}) has no chosen "
                       "take; generate it first", field="passages")
    return take


def _audio_gone(store: ProjectStore, chosen: list[tuple[dict[str, Any], dict[str, Any]]]) -> ApiError | None:
    """404 `take_audio_missing` naming the first passage whose chosen take's file is gone (deleted by
    hand, a lost disk), which rendering read as a 500 with a traceback; None when every file is there.
    `chosen`: (passage, its chosen take) pairs. Blocking (stats): call it in a thread."""
    for passage, take in chosen:
        if not store.take_path(take).is_file():
            return ApiError(404, "take_audio_missing", f"passage {passage['position'] + 1} ({passage['id']}): the "
                            f"audio file of its chosen take {take['id']} is gone; generate the passage again or "
                            "choose another take", field="passages")
    return None


async def _rendered(store: ProjectStore, chosen: list[tuple[dict[str, Any], dict[str, Any]]],
                    work: Callable[[], T]) -> T:
    """`work()` (a rendering of the `chosen` takes) in a thread; `_audio_gone`'s 404 before it, or after it
    failed because a file went meanwhile."""
    gone = await run_in_threadpool(_audio_gone, store, chosen)
    if gone is not None:
        raise gone
    try:
        return await run_in_threadpool(work)
    except Exception:
        gone = await run_in_threadpool(_audio_gone, store, chosen)
        if gone is not None:
            raise gone from None
        raise


def _pause_after(project: dict[str, Any], passage: dict[str, Any]) -> float:
    return float(passage["pause_ms"] if passage["pause_ms"] is not None else project["pause_ms"])


async def join_audio(request: Request) -> Response:
    """The join after a passage, to listen across it: tail, pause, head, as one WAV at 24 kHz."""
    _, store, _ = context(request)
    project = await existing_project(request, store)
    passage = await existing_passage(request, store, project)
    context_ms = _number_param(request, "context_ms", DEFAULT_CONTEXT_MS, 100.0, MAX_CONTEXT_MS)
    assert context_ms is not None
    after = [p for p in await store.passages(project["id"]) if p["position"] == passage["position"] + 1]
    if not after:
        raise ApiError(409, "no_join", "the last passage has no join after it", field="passage")
    first, second = await _chosen(store, project, passage), await _chosen(store, project, after[0])
    pause_ms = _pause_after(project, passage)
    tail_from = max(0.0, first["audio_ms"] - context_ms)
    pieces = [Piece(store.take_path(first), start_ms=tail_from), Piece(pause_ms=pause_ms),
              Piece(store.take_path(second), end_ms=context_ms)]
    pcm = await _rendered(store, [(passage, first), (after[0], second)], lambda: render(pieces))
    body = wav_header(OUTPUT_RATE, len(pcm)) + to_pcm16(pcm)
    return Response(body, media_type=MEDIA_TYPES["wav"], headers={
        "X-Voxgate-Pause-At-Ms": f"{first['audio_ms'] - tail_from:.1f}", "X-Voxgate-Pause-Ms": f"{pause_ms:g}",
        "Cache-Control": "no-cache"})


async def export(request: Request) -> Response:
    _, store, _ = context(request)
    project = await existing_project(request, store)
    fmt = request.query_params.get("format", "wav")
    if fmt not in EXPORT_FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(EXPORT_FORMATS)}; got {fmt!r}", field="format")
    target = _number_param(request, "loudness", None, MIN_LUFS, MAX_LUFS)
    passages = await store.passages(project["id"])
    if not passages:
        raise ApiError(409, "project_empty", "the project has no passages; import a text first", field="passages")
    pieces: list[Piece] = []
    chosen = []
    duration_ms = 0.0
    for i, passage in enumerate(passages):
        take = await _chosen(store, project, passage)
        chosen.append((passage, take))
        pieces.append(Piece(store.take_path(take)))
        duration_ms += take["audio_ms"]
        if i < len(passages) - 1:
            pieces.append(Piece(pause_ms=_pause_after(project, passage)))
            duration_ms += _pause_after(project, passage)
    if request.method == "HEAD":  # (Starlette runs GET's handler for HEAD: it rendered the whole programme)
        return await _export_head(request, store, project, chosen, pieces, fmt, target)
    # Written to a temporary file piece by piece (as PCM16 at most: the compressed formats are smaller).
    await run_in_threadpool(store.check_disk, ms_to_samples(duration_ms, OUTPUT_RATE) * 2 + 44, "format")
    try:
        path, headers = await _rendered(store, chosen, lambda: export_file(pieces, fmt, target, store.folder))
    except OSError as error:  # (a take's file gone is the 500 it was; a disk full meanwhile: the 507)
        raise full_disk_error(error, "format") or error
    headers["Content-Disposition"] = _disposition(project, fmt)
    return TemporaryFileResponse(path, media_type=MEDIA_TYPES[fmt], headers=headers)


async def _export_head(request: Request, store: ProjectStore, project: dict[str, Any],
                       chosen: list[tuple[dict[str, Any], dict[str, Any]]], pieces: list[Piece], fmt: str,
                       target: float | None) -> Response:
    """HEAD of the export, nothing rendered: GET's refusals (its 404 for a take's file gone, the 400
    for audio too short to measure), its Content-Type, Content-Disposition and X-Voxgate-Duration-Ms
    from the takes' file headers, and a WAV's Content-Length; no loudness headers, no size for a
    compressed format (they need the rendering)."""
    # (as GET: the 404 for a take's file gone before the headers are read, or while they are)
    headers = await _rendered(store, chosen, lambda: head_headers(pieces, fmt, target))
    headers.update({"Content-Disposition": _disposition(project, fmt), "Accept-Ranges": "bytes"})
    response = Response(None, media_type=MEDIA_TYPES[fmt], headers=headers)
    if "Content-Length" not in headers:  # (Response sets 0 for its empty body: GET's size is unknown)
        del response.headers["content-length"]
    return response


def _disposition(project: dict[str, Any], fmt: str) -> str:
    """The export's Content-Disposition: an attachment named after the project."""
    filename = ascii_filename(project["name"]) or project["id"]
    disposition = f'attachment; filename="{filename}.{fmt}"'  # (ASCII: every client reads it)
    if filename != project["name"]:  # the name itself too, for clients that read RFC 6266's filename*
        disposition += f"; filename*=utf-8''{quote(project['name'] + '.' + fmt, safe='')}"
    return disposition


def ascii_filename(name: str) -> str:
    """`name` as an ASCII file name for `filename=`: accents dropped from their letters (`Émile` is
    `Emile`, not `mile`), any other run of characters outside letters, digits, `_`, `.` and `-` one `-`;
    empty when nothing is left (the caller falls back to the id)."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", plain).strip("-")

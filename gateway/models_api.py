"""`GET /v1/models[/{id}]`, `GET /v1/audio/voices`, `GET /health`, `GET /metrics`."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.types import UnknownModel
from gateway.references import hidden_problem
from gateway.state import AppState
from gateway.stats import summarized
from gateway.voices import is_openai_model, model_alias, unknown_default_model
from models import InvalidModel, family


async def model_type(record: dict[str, Any]) -> str | None:
    """A Qwen3-TTS model's `tts_model_type` from its folder's config.json: `custom_voice`
    (named speakers), `voice_design` (a voice from a description: `/v1/audio/design`) or
    `base` (cloning); None for a family without model types. A folder that went missing or bad
    says the type recorded when the model was registered (the library's `model_type`), so a
    Base model still lists its reference voices, not `default` (its load fails, naming the file:
    `load_error`); None if none was recorded (a model registered before it was kept)."""
    if record["family"] != "qwen3_tts" or not record.get("path"):
        return None
    read = await asyncio.to_thread(_model_type_at, Path(record["path"]))
    return read if read is not None else record.get("model_type")


def _model_type_at(path: Path) -> str | None:
    try:
        changed = (path / "config.json").stat().st_mtime_ns
    except OSError:
        return None
    return _read_model_type(path, changed)


@functools.lru_cache(maxsize=64)  # asked on every speech request: config.json is read once per change
def _read_model_type(path: Path, changed_ns: int) -> str | None:
    try:
        kind: str = family("qwen3_tts").read_args(path).tts_model_type
    except InvalidModel:
        return None
    return kind


async def _describe(state: AppState, record: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's model object plus what Voxgate knows (family, model_type, voices, residency, load_error)."""
    from gateway.clone_voices import model_voices  # (it imports this module)

    return {
        "id": record["id"], "object": "model", "created": int(record["created_at"]),
        "owned_by": "voxgate", "family": record["family"], "model_type": await model_type(record),
        "name": record["name"],
        "source": record["source"], "installed": True,
        "voices": (await model_voices(state, record))[0],  # a Base model's: the reference voices
        "default": record["id"] == state.settings.default_model,
        **state.residency.status(record["id"]),
        # Its last failed load, until one succeeds: {message, retryable, device, at} (gateway/model_spec.py)
        "load_error": state.residency.load_errors.get(record["id"]),
    }


async def list_models(request: Request) -> JSONResponse:
    state: AppState = request.app.state.voxgate
    return JSONResponse({"object": "list",
                         "data": [await _describe(state, r) for r in await state.library.list_models()]})


async def get_model(request: Request) -> JSONResponse:
    state: AppState = request.app.state.voxgate
    model_id = request.path_params["model_id"]
    record = await state.library.get_model(model_alias(model_id, state.settings.default_model))
    if record is None:
        if is_openai_model(model_id):
            raise unknown_default_model(state.settings.default_model, await _installed(state), model_id)
        raise UnknownModel(f"unknown model {model_id!r}", field="model")
    return JSONResponse(await _describe(state, record))


async def _installed(state: AppState) -> str:
    return ", ".join(str(m["id"]) for m in await state.library.list_models())


async def list_voices(request: Request) -> JSONResponse:
    state: AppState = request.app.state.voxgate
    asked = model_id = request.query_params.get("model")
    if is_openai_model(model_id):
        model_id = state.settings.default_model
    models = await state.library.list_models()
    if model_id is not None:
        models = [m for m in models if m["id"] == model_id]
        if not models and is_openai_model(asked):
            raise unknown_default_model(state.settings.default_model, await _installed(state), asked)
        if not models:
            raise UnknownModel(f"unknown model {model_id!r}", field="model")
    from gateway.clone_voices import model_voices, store  # (it imports this module)

    data: list[dict[str, Any]] = []
    hidden: dict[str, str] | None = None  # reference voice -> the preset that takes its name, asked once
    for record in models:
        names, kind = await model_voices(state, record)
        # What a request without a voice gets (gateway/voices.py); a Base model has no default (a
        # request to it must name a reference voice: gateway/clone_voices.py)
        default = None if kind == "reference" else \
            state.settings.default_voice if state.settings.default_voice in names else names[0] if names else None
        if kind == "reference" and hidden is None:
            hidden = await store(state).hidden()
        for name in names:
            voice: dict[str, Any] = {"id": name, "name": name, "model": record["id"], "kind": kind,
                                     "default": name == default}
            if kind == "reference":  # as /v1/voices/references and the Voices page say it (a preset may hide it)
                problem = hidden_problem((hidden or {}).get(name))
                voice.update(usable=problem is None, problem=problem)
            data.append(voice)
    from gateway.presets import described  # (it imports gateway.clone_voices, which imports this module)

    # usable and problem as GET /v1/presets and the Voices page say them (a preset had neither here, so
    # one hidden by a voice of its model, which requests get instead, looked usable)
    presets = [p for p in await state.library.list_presets() if model_id is None or p["model_id"] == model_id]
    for preset in await described(state, presets):
        data.append({"id": preset["name"], "name": preset["name"], "model": preset["model"], "kind": "preset",
                     "voice": preset["voice"], "speed": preset["speed"], "usable": preset["usable"],
                     "problem": preset["problem"]})
    return JSONResponse({"object": "list", "data": data})


async def health(request: Request) -> JSONResponse:
    """`{"status": "ok" | "draining"}` (503 while draining) for anyone: load balancers probe it without a
    key. The engine's state and the schema version beside it only where keys are not required, or for
    a valid key (found by a new-user trial: with keys required, /health showed the models, queues and
    lanes that /v1/stats and /metrics refuse)."""
    state: AppState = request.app.state.voxgate
    status = "draining" if state.draining else "ok"
    body: dict[str, Any] = {"status": status}
    if not state.settings.keys_required or await _valid_key(request):
        body.update(engine=summarized(state.engine.stats()), schema_version=await state.library.schema_version())
    return JSONResponse(body, status_code=503 if state.draining else 200)


async def _valid_key(request: Request) -> bool:
    from gateway.auth import RULES, presented_key

    state: AppState = request.app.state.voxgate
    presented = presented_key(request.scope, RULES[-1])  # (Bearer or the studio's cookie: /health is public)
    return presented is not None and state.keys is not None and await state.keys.lookup(presented[0]) is not None


async def metrics(request: Request) -> Response:
    state: AppState = request.app.state.voxgate
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

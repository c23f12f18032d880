"""`GET /openapi.json` (OpenAPI 3.1) built from the app's routes, and `GET /docs` rendering it.

Paths and methods come from the Route list (gateway/app.py), security from the key
rules (gateway/auth.py), limits from the settings; what a route takes and answers is
`OPERATIONS`, keyed by (method, path). A route without an entry there is a bug that
tests/gateway/test_openapi.py catches. `/docs` is a server-rendered page (no script),
so it works offline like the rest of the studio.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway import auth
from gateway.audio import FORMATS
from gateway.pages import templates
from gateway.settings import Settings
from gateway.state import AppState

Schema = dict[str, Any]
SAMPLE_RATES = [8000, 16000, 22050, 24000, 44100, 48000]  # gateway/realtime.py SAMPLE_RATES
JSON_OBJECT: Schema = {"type": "object"}


def _string(**extra: Any) -> Schema:
    return {"type": "string", **extra}


def _number(minimum: float | None = None, maximum: float | None = None, kind: str = "number") -> Schema:
    schema: Schema = {"type": kind}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _object(required: tuple[str, ...] = (), **properties: Schema) -> Schema:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _query(name: str, schema: Schema, description: str = "") -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _body(schema: Schema, required: bool = True) -> Schema:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _operations(settings: Settings) -> dict[tuple[str, str], Schema]:
    text = _string(minLength=1, maxLength=settings.max_input_chars)
    speed = _number(0.25, 4.0)
    name = _string(pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63}$")
    preset = _object(("name",), name=name, model=_string(), voice=_string(), speed=speed, settings=JSON_OBJECT)
    take_fields: dict[str, Schema] = {
        "text": text, "model": _string(), "voice": _string(minLength=1, maxLength=128), "speed": speed,
        "sample_rate": {"type": "integer", "enum": SAMPLE_RATES}, "ttfa_ms": {"type": ["number", "null"], "minimum": 0},
        "stalls": _number(0, kind="integer")}
    take_query = [_query(k, v if k != "ttfa_ms" else _number(0)) for k, v in take_fields.items()]
    speech = _object(
        ("input",), model=_string(), input=text, voice=_string(), speed=speed, instructions=_string(),
        response_format={"enum": list(FORMATS)}, stream_format={"enum": ["audio", "sse"]},
        busy_timeout_ms=_number(0))
    install = {"oneOf": [
        _object(("id",), id=_string(minLength=1), wait={"type": "boolean"}),
        _object(("path", "family"), path=_string(minLength=1), family=_string(), id=_string(), name=_string(),
                options=JSON_OBJECT)]}
    audio: Schema = {"content": {f"audio/{f}": {} for f in ("mpeg", "wav", "pcm", "flac", "ogg")}}
    return {
        ("GET", "/health"): {"summary": "Liveness and engine state (503 while draining)"},
        ("GET", "/metrics"): {"summary": "Prometheus metrics", "responses": {"200": {"content": {"text/plain": {}}}}},
        ("GET", "/v1/models"): {"summary": "Installed models (OpenAI's model object + family, voices, residency)"},
        ("GET", "/v1/models/{model_id}"): {"summary": "One model"},
        ("GET", "/v1/audio/voices"): {"summary": "Voices and presets",
                                      "parameters": [_query("model", _string(), "only this model's")]},
        ("POST", "/v1/audio/speech"): {"summary": "Speech from text, OpenAI-compatible, streamed",
                                       "requestBody": _body(speech), "responses": {"200": audio}},
        ("POST", "/v1/models/{model_id}/load"): {"summary": "Load a model",
                                                 "requestBody": _body(_object(timeout_ms=_number(0)), False)},
        ("POST", "/v1/models/{model_id}/unload"): {"summary": "Unload a model (409 while busy)",
                                                   "requestBody": _body(_object(), False)},
        ("GET", "/v1/library/catalog"): {"summary": "Installable models"},
        ("POST", "/v1/library/install"): {"summary": "Install from the catalog, or register a server folder "
                                          "under local_model_roots", "requestBody": _body(install)},
        ("GET", "/v1/library/downloads"): {"summary": "Running and recent downloads"},
        ("GET", "/v1/library/downloads/events"): {
            "summary": "Download progress as Server-Sent Events (a long-lived stream)",
            "parameters": [_query("until", {"enum": ["idle"]}, "end once nothing downloads")],
            "responses": {"200": {"content": {"text/event-stream": {}}}}},
        ("DELETE", "/v1/library/downloads/{download_id}"): {"summary": "Cancel a download, or remove an ended one"},
        ("DELETE", "/v1/library/models/{model_id}"): {"summary": "Delete a model (409 while busy)"},
        ("GET", "/v1/presets"): {"summary": "Speaker presets"},
        ("POST", "/v1/presets"): {"summary": "Create a preset (409 if the name exists)", "requestBody": _body(preset)},
        ("GET", "/v1/presets/{name}"): {"summary": "One preset"},
        ("PUT", "/v1/presets/{name}"): {"summary": "Replace a preset", "requestBody": _body(preset)},
        ("PATCH", "/v1/presets/{name}"): {"summary": "Change some fields of a preset",
                                          "requestBody": _body({**preset, "required": []})},
        ("DELETE", "/v1/presets/{name}"): {"summary": "Delete a preset", "responses": {"204": {}}},
        ("GET", "/v1/takes"): {"summary": "Studio takes, newest first",
                               "parameters": [_query("limit", _number(1, 1000, "integer"))]},
        ("POST", "/v1/takes"): {
            "summary": "Keep a take: raw PCM16 streamed to disk (fields in the query), or JSON with base64 audio",
            "parameters": take_query,
            "requestBody": {"required": True, "content": {
                "audio/pcm": {"schema": _string(contentMediaType="application/octet-stream")},
                "application/json": {"schema": _object(("text", "model", "voice", "sample_rate", "audio"),
                                                       **take_fields, audio=_string(contentEncoding="base64"))}}}},
        ("GET", "/v1/takes/{take_id}"): {"summary": "One take"},
        ("DELETE", "/v1/takes/{take_id}"): {"summary": "Delete a take", "responses": {"204": {}}},
        ("GET", "/v1/takes/{take_id}/audio"): {
            "summary": "A take's audio", "parameters": [_query("format", {"enum": ["wav", "mp3", "flac"]})],
            "responses": {"200": {"content": {"audio/wav": {}, "audio/mpeg": {}, "audio/flac": {}}}}},
        ("GET", "/v1/stats"): {"summary": "Engine queues and recent utterances",
                               "parameters": [_query("since", _number(), "seconds since the epoch")]},
    }


ERROR: Schema = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message"],
    "properties": {"code": _string(), "message": _string(), "field": {"type": ["string", "null"]}}}}}


def build(routes: list[Any], settings: Settings) -> Schema:
    """The OpenAPI document of `routes`; KeyError names a route missing from OPERATIONS."""
    table = _operations(settings)
    paths: dict[str, Schema] = {}
    for route in routes:
        if not isinstance(route, Route) or not route.include_in_schema:
            continue
        for method in sorted((route.methods or set()) - {"HEAD"}):
            spec = dict(table[(method, route.path)])
            responses = {"200": {"content": {"application/json": {}}}, **spec.pop("responses", {}),
                         "4XX": {"description": "bad input", "content": {"application/json": {"schema": ERROR}}},
                         "503": {"description": "overloaded or shutting down (Retry-After)",
                                 "content": {"application/json": {"schema": ERROR}}}}
            for response in responses.values():
                response.setdefault("description", "")
            parameters = [{"name": p, "in": "path", "required": True, "schema": _string()}
                          for p in route.param_convertors] + spec.pop("parameters", [])
            rule = auth.match(route.path.replace("{", "").replace("}", ""), method)
            security: list[Schema] = [] if rule.scope == auth.PUBLIC else [{"bearer": []}]
            if rule.scope != auth.PUBLIC and not settings.keys_required:
                security.append({})  # optional on loopback
            paths.setdefault(route.path, {})[method.lower()] = {
                **spec, "operationId": f"{method.lower()}_{route.path.strip('/').replace('/', '_')}",
                "parameters": parameters, "responses": responses, "security": security,
                "x-scope": rule.scope}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Voxgate", "version": "0.1.0", "description":
                 "Realtime text-to-speech gateway. Errors are `{\"error\": {\"code\", \"message\", \"field\"}}`. "
                 "`WS /v1/realtime` is documented in docs/realtime.md (OpenAPI cannot describe it)."},
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
                       "schemas": {"Error": ERROR}},
    }


async def schema(request: Request) -> JSONResponse:
    state: AppState = request.app.state.voxgate
    return JSONResponse(build(request.app.routes, state.settings))


async def docs(request: Request) -> Response:
    state: AppState = request.app.state.voxgate
    document = build(request.app.routes, state.settings)
    return templates.TemplateResponse(request, "docs.html", {"page": "docs", "doc": document})

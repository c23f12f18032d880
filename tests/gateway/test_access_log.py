"""gateway/access_log.py on a running server: one line per request when it ends, naming the
request id the client saw, its error code, its time and (speech) its audio; a stream cut off says
so; a WebSocket session's line sums its utterances; /metrics counts them by route template."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.conftest import LiveServer, server_log
from tests.gateway.test_keys import bearer, keyed_server
from tests.gateway.test_realtime import recv_event

SPEECH = {"input": "Hello there, this is a test of the access log.", "response_format": "pcm"}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    yield from keyed_server(tmp_path_factory, "ops", "--scope", "admin")


def access_line(records: list[logging.LogRecord], needle: str, timeout_s: float = 10) -> str:
    """The access line containing `needle`, once written (a session's comes after its close)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for record in list(records):
            if record.name == "gateway.access" and needle in record.getMessage():
                return record.getMessage()
        time.sleep(0.02)
    raise AssertionError(f"no access line with {needle!r}: {[r.getMessage() for r in records]}")


def test_a_speech_request_is_one_line_with_its_id_time_and_audio(keyed: tuple[LiveServer, str]) -> None:
    live, key = keyed
    with server_log("gateway.access", "gateway.speech", "uvicorn.error") as records:
        response = httpx.post(f"{live.url}/v1/audio/speech", json=SPEECH, headers=bearer(key), timeout=60)
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        line = access_line(records, request_id)
    assert line.startswith(f"POST /v1/audio/speech 200 {request_id} "), line
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    assert fields["model"] == "piper-joe" and fields["format"] == "pcm" and fields["stalls"].isdigit(), line
    assert float(fields["audio_ms"]) > 0 and float(fields["ttfa_ms"]) > 0, line
    assert fields["key"].startswith("key-") and key not in line and "cut" not in fields, line
    assert len([r for r in records if request_id in r.getMessage()]) == 1  # one line a request, at info


def test_a_client_error_names_its_code_and_the_id_the_client_got(keyed: tuple[LiveServer, str]) -> None:
    live, key = keyed
    with server_log("gateway.access", "gateway.errors", "uvicorn.error") as records:
        response = httpx.post(f"{live.url}/v1/audio/speech", json={**SPEECH, "speeed": 2}, headers=bearer(key))
        assert response.status_code == 400
        line = access_line(records, response.headers["x-request-id"])
        wrong = httpx.post(f"{live.url}/v1/audio/speech", json=SPEECH, headers=bearer("vxg_00000000_nope"))
        refused = access_line(records, wrong.headers["x-request-id"])
    assert " 400 " in line and " invalid_input " in line, line
    assert " 401 " in refused and " invalid_api_key " in refused and "vxg_00000000_nope" not in refused, refused
    assert all(r.exc_info is None and r.levelno == logging.INFO for r in records), records  # no traceback


def test_a_query_key_is_logged_redacted_and_as_its_id(keyed: tuple[LiveServer, str]) -> None:
    live, key = keyed
    with server_log("gateway.access", "uvicorn.error") as records:
        with connect(f"{live.ws_url}/v1/realtime?api_key={key}") as ws:
            assert recv_event(ws)["type"] == "session.created"
            request_id = ws.response.headers["x-request-id"]
        line = access_line(records, request_id)
    assert line.startswith(f"WS /v1/realtime?api_key=redacted 101 {request_id} "), line
    assert " close=1000 " in line and " key=key-" in line, line
    assert key not in "\n".join(r.getMessage() for r in records)
    assert not [r for r in records if r.name == "uvicorn.error"], records  # its lines are the access line's


def test_a_stream_the_client_leaves_says_it_was_cut(keyed: tuple[LiveServer, str]) -> None:
    live, key = keyed
    text = " ".join(f"This is sentence number {i} of a story that nobody hears to its end." for i in range(30))
    with server_log("gateway.access") as records:
        with httpx.stream("POST", f"{live.url}/v1/audio/speech", json={**SPEECH, "input": text},
                          headers=bearer(key), timeout=60) as response:
            request_id = response.headers["x-request-id"]
            next(response.iter_raw())
        line = access_line(records, request_id)
    assert " 200 " in line and " cut=client_disconnected " in line, line
    assert live.wait_idle() == 0


def until_done(ws: Any) -> None:
    """Read the socket until an `utterance.done` event (audio frames in between)."""
    while not isinstance(message := ws.recv(timeout=30), str) or json.loads(message)["type"] != "utterance.done":
        pass


def test_a_session_line_sums_its_utterances(keyed: tuple[LiveServer, str]) -> None:
    live, key = keyed
    with server_log("gateway.access") as records:
        with connect(f"{live.ws_url}/v1/realtime", additional_headers=bearer(key)) as ws:
            request_id = ws.response.headers["x-request-id"]
            assert recv_event(ws)["type"] == "session.created"
            ws.send(json.dumps({"type": "text.append", "text": "A first short turn."}))
            ws.send(json.dumps({"type": "text.flush"}))
            until_done(ws)
            ws.send(json.dumps({"type": "text.append", "text": " ".join(["A second turn, cut short."] * 20)}))
            ws.send(json.dumps({"type": "text.flush"}))
            while not isinstance(ws.recv(timeout=30), bytes):
                pass
            ws.send(json.dumps({"type": "response.cancel"}))
            until_done(ws)
        line = access_line(records, request_id)
    assert " model=piper-joe " in line and " utterances=2 cancelled=1 " in line and " stalls=" in line, line
    assert " ttfa_max_ms=" in line, line


def test_metrics_count_requests_by_route_template_and_code(keyed: tuple[LiveServer, str]) -> None:
    live, key = keyed
    with httpx.Client(base_url=live.url, headers=bearer(key)) as client:
        assert client.get("/v1/models/piper-joe").status_code == 200
        assert client.get("/v1/models/no-such-model").status_code == 404
        assert client.get("/no/such/path").status_code == 404
        assert client.get("/v1/models/piper-joe", headers=bearer("vxg_00000000_nope")).status_code == 401
        exposition = client.get("/metrics").text
    lines = [line for line in exposition.splitlines() if line.startswith("voxgate_http_requests_total{")]
    assert any('route="/v1/models/{model_id}"' in line and 'status="404"' in line and 'code="unknown_model"' in line
               for line in lines), lines
    assert any('route="/v1/models/{model_id}"' in line and 'code="invalid_api_key"' in line for line in lines), lines
    assert any('route="unmatched"' in line and 'code="not_found"' in line for line in lines), lines
    assert not any("no-such-model" in line or "req_" in line or "speech-" in line for line in lines), lines


@pytest.mark.parametrize(("path", "headers", "body"), [
    ("/v1/text-to-speech/joe/stream?output_format=pcm_16000", "xi-api-key",
     {"text": "Hello from the ElevenLabs route.", "model_id": "eleven_flash_v2_5"}),
    ("/tts/bytes", "x-api-key", {"model_id": "sonic-3", "transcript": "Hello from the Cartesia route.",
                                 "voice": {"id": "v"},
                                 "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}}),
])
def test_a_vendor_speech_line_names_its_model_voice_and_audio(keyed: tuple[LiveServer, str], path: str, headers: str,
                                                              body: dict[str, Any]) -> None:
    """The vendor HTTP routes' lines had the status and time only (found in a review): now the
    model, voice, format, TTFA, audio and stalls, as /v1/audio/speech's."""
    live, key = keyed
    with server_log("gateway.access", "uvicorn.error") as records:
        response = httpx.post(f"{live.url}{path}", json=body, timeout=60,
                              headers={headers: key, "Cartesia-Version": "2026-03-01"})
        assert response.status_code == 200, response.text
        line = access_line(records, response.headers["x-request-id"])
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    assert fields["model"] == "piper-joe" and fields["format"] == "pcm_16000" and fields["stalls"].isdigit(), line
    assert fields["voice"] and float(fields["audio_ms"]) > 500 and float(fields["ttfa_ms"]) > 0, line


def test_a_path_cannot_forge_log_lines(keyed: tuple[LiveServer, str]) -> None:
    """The path is logged decoded: a trial's `GET /x%0a2026-12-06 INFO gateway.access: FAKE`, with no key,
    wrote a second line of its choosing into the log (and `%1b` a terminal escape). Characters that are not
    printable are now written percent-encoded, in the access line and in the lines naming a request's path."""
    from gateway import access_log

    live, _ = keyed
    forged = "/x%0a2026-12-06 21:23:44,329 INFO gateway.access: FAKE%1b[31m%e2%80%a8%0d"
    with server_log("gateway.access", "uvicorn.error") as records:
        response = httpx.get(f"{live.url}{forged}")
        assert response.status_code == 401
        line = access_line(records, response.headers["x-request-id"])
    assert line.startswith("GET /x%0A2026-12-06 21:23:44,329 INFO gateway.access: FAKE%1B[31m%E2%80%A8%0D 401 "), line
    assert all(c.isprintable() for c in line), line
    assert access_log.printable("voice\x1b[2J") == "voice%1B[2J"
    assert all(c.isprintable() or c == "\\" for c in access_log._value("a\x1bb\u2028"))


MULTIPART = (b'--b\r\nContent-Disposition: form-data; name="audio"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n'
             b"RIFF" + b"\0" * 500_000)
UPLOADS = {  # a route that reads a body, its Content-Type, its Content-Length, and the part sent before leaving
    "/v1/takes?text=hello&model=piper-joe&voice=default&sample_rate=24000": ("audio/pcm", 2_000_000, b"\0" * 500_000),
    "/v1/voices/references": ("multipart/form-data; boundary=b", 2_000_000, MULTIPART),
    "/v1/audio/clone": ("multipart/form-data; boundary=b", 2_000_000, MULTIPART),
    "/v1/audio/speech": ("application/json", 60_000, b'{"input": "Hello'),
    "/v1/projects/{project}/import": ("application/json", 60_000, b'{"text": "Hello'),
}


def test_a_client_that_leaves_mid_upload_is_status_0(keyed: tuple[LiveServer, str]) -> None:
    """Found by a new-user trial: a client that closed its socket part way through a take's upload was
    logged as status 400 with no error code (the answer Starlette's ClientDisconnect handler made for
    no one), where status 0 means the client left before an answer. So on every route reading a body."""
    import socket

    live, key = keyed
    project = httpx.post(f"{live.url}/v1/projects", json={"name": "Upload"}, headers=bearer(key))
    assert project.status_code == 201, project.text
    port = int(live.url.rsplit(":", 1)[1])
    for template, (content_type, length, sent) in UPLOADS.items():
        path = template.format(project=project.json()["id"])
        with server_log("gateway.access") as records:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                             f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n".encode() + sent)
                time.sleep(0.3)  # (the route is reading the body)
            line = access_line(records, f"POST {path} ")
        status, request_id, _, size, *rest = line.split(" ", 2)[2].split()
        assert (status, size) == ("0", "0B") and request_id.startswith("req_"), line
        assert not rest or "=" in rest[0], line  # no error code: nothing was wrong but the client's leaving

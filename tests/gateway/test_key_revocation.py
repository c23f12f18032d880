"""A revoked API key ends the WebSocket sessions opened with it (gateway/revocation.py): each gets
its protocol's `api_key_revoked` error naming the key, then a close 1008, within a few seconds;
sessions of other keys go on. Real server, real sockets, the key revoked by the CLI."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from gateway.cli import main
from tests.conftest import LiveServer, run_server
from tests.gateway.test_crash import _events_until_closed
from tests.gateway.test_keys import create_key
from tests.gateway.test_realtime import collect_utterance, recv_event

LONG = " ".join(f"This is sentence number {i} of a long answer." for i in range(30))


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[LiveServer, Path, str, str]]:
    """A server needing keys, its data dir, the key to revoke and another one."""
    doomed, other = create_key(tmp_path, "doomed"), create_key(tmp_path, "other")
    for live in run_server(tmp_path, auth="required"):
        yield live, tmp_path, doomed, other


@contextlib.contextmanager
def realtime(server: LiveServer, key: str) -> Iterator[ClientConnection]:
    with connect(f"{server.ws_url}/v1/realtime?api_key={key}", open_timeout=10) as ws:
        assert recv_event(ws)["type"] == "session.created"
        yield ws


def elevenlabs(server: LiveServer, key: str) -> ClientConnection:
    return connect(f"{server.ws_url}/v1/text-to-speech/None/multi-stream-input?model_id=eleven_flash_v2_5"
                   "&output_format=pcm_16000&inactivity_timeout=180", additional_headers={"xi-api-key": key},
                   open_timeout=10)


def cartesia(server: LiveServer, key: str) -> ClientConnection:
    return connect(f"{server.ws_url}/tts/websocket?cartesia_version=2025-04-16", additional_headers={"X-API-Key": key},
                   open_timeout=10)


def closed(ws: ClientConnection) -> tuple[list[dict[str, Any]], int, str]:
    """The JSON messages until the close (audio skipped), the close's code and reason."""
    messages, frame = _events_until_closed(ws)
    assert frame is not None
    return messages, frame.code, frame.reason


def revoke(data_dir: Path, name: str) -> None:
    assert main(["keys", "revoke", name, "--data-dir", str(data_dir)]) == 0


def test_sessions_of_a_revoked_key_are_closed_on_every_protocol(keyed: tuple[LiveServer, Path, str, str]) -> None:
    server, data_dir, doomed, other = keyed
    prefix = doomed[:12]
    with realtime(server, doomed) as rt, elevenlabs(server, doomed) as el, cartesia(server, doomed) as ca, \
            realtime(server, other) as kept:
        rt.send(json.dumps({"type": "text.append", "text": LONG}))  # speaking when the key goes
        rt.send(json.dumps({"type": "text.flush"}))
        assert recv_event(rt)["type"] == "audio.start"
        revoke(data_dir, "doomed")

        messages, code, reason = closed(rt)
        errors = [m["error"] for m in messages if m["type"] == "error"]
        assert [(e["code"], e["field"]) for e in errors] == [("api_key_revoked", "api_key")], messages
        assert prefix in errors[0]["message"] and code == 1008 and prefix in reason
        assert not any(m["type"] == "utterance.done" and not m["cancelled"] for m in messages)

        messages, code, reason = closed(el)
        assert [(m["code"], m["field"]) for m in messages] == [("api_key_revoked", "xi-api-key")]
        assert code == 1008 and prefix in reason

        messages, code, reason = closed(ca)
        assert [(m["type"], m["error_code"], m["done"]) for m in messages] == [("error", "api_key_revoked", True)]
        assert code == 1008 and prefix in reason

        # Another key's session goes on.
        kept.send(json.dumps({"type": "text.append", "text": "Still served."}))
        kept.send(json.dumps({"type": "text.flush"}))
        events, audio = collect_utterance(kept)
        assert events[-1]["type"] == "utterance.done" and events[-1]["cancelled"] is False and audio
    assert server.wait_idle() == 0  # the revoked session's engine request was freed
    assert server.app_state.limits is not None and not server.app_state.limits.in_flight  # and its slots



def test_the_last_key_revoked_on_loopback_is_still_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a new-user trial: on loopback (keys optional) revoking the only active key made the
    server ignore keys, so a request presenting the revoked key was served (200), though the CLI
    said a running server refuses it at once. A key the server knows to be revoked is refused
    (401 invalid_api_key) over HTTP and WebSocket; a key never issued is still ignored while no
    key is active (agent clients always send some key), and no key is needed."""
    doomed = create_key(tmp_path, "third")
    for server in run_server(tmp_path):
        with realtime(server, doomed) as open_session:
            capsys.readouterr()
            revoke(tmp_path, "third")
            said = capsys.readouterr().out
            assert "refuses it at once" in said and "no active key remains" in said, said
            messages, code, _ = closed(open_session)
            assert code == 1008 and [m["error"]["code"] for m in messages if m["type"] == "error"] == \
                ["api_key_revoked"], messages
        with httpx.Client(base_url=server.url, timeout=60) as client:
            refused = client.get("/v1/models", headers={"Authorization": f"Bearer {doomed}"})
            assert refused.status_code == 401, refused.text
            assert refused.json()["error"]["code"] == "invalid_api_key", refused.text
            assert client.get("/v1/models", headers={"Authorization": "Bearer vxg_never_issued"}).status_code == 200
            assert client.get("/v1/models").status_code == 200
            # The studio's sign-in cookie with it: the page is served as to anyone (no key asked).
            assert client.get("/v1/models", headers={"Cookie": f"voxgate_key={doomed}"}).status_code == 200
        with pytest.raises(InvalidStatus) as denied:
            connect(f"{server.ws_url}/v1/realtime?api_key={doomed}", open_timeout=10)
        assert denied.value.response.status_code == 401
        assert json.loads(denied.value.response.body or b"{}")["error"]["code"] == "invalid_api_key"
        with realtime(server, "vxg_never_issued"):
            pass

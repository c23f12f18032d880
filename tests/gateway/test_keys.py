"""API keys: the CLI, the refusal to start without one, and keyed requests through a real
server with real clients (httpx, websockets)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gateway import studio_key
from gateway.app import create_app
from gateway.cli import main
from gateway.keys import KeyStore
from gateway.library import Library
from gateway.settings import load_settings
from tests.conftest import LiveServer, free_port, local_client, run_server, server_log
from tests.gateway.test_realtime import recv_event
from tests.gateway.test_security import refused_quietly

SPEECH = {"input": "Hello.", "response_format": "pcm"}


def create_key(data_dir: Path, *args: str) -> str:
    """`voxgate keys create` as a user runs it; returns the printed key."""
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "keys", "create", *args, "--data-dir", str(data_dir)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def keyed_server(tmp_path_factory: pytest.TempPathFactory, *key_args: str,
                 **overrides: object) -> Iterator[tuple[LiveServer, str]]:
    """A server in a new data folder with `auth = "required"` (and `overrides`), and a key made
    there by `create_key(key_args)`: the body of a module's keyed-server fixture."""
    data = tmp_path_factory.mktemp("data")
    key = create_key(data, *key_args)
    for live in run_server(data, auth="required", **overrides):
        yield live, key


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    data = tmp_path_factory.mktemp("data")
    keys = {"speech": create_key(data, "agent"), "admin": create_key(data, "ops", "--scope", "admin"),
            "slow": create_key(data, "metered", "--rate-limit", "3/minute"),
            "narrow": create_key(data, "single", "--max-concurrent", "1")}
    for live in run_server(data, auth="required"):
        yield live, keys


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_cli_creates_lists_and_revokes_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "list", "--data-dir", str(tmp_path)]) == 0  # none yet: said on stderr, stdout stays rows
    empty = capsys.readouterr()
    assert empty.out == "" and empty.err.startswith("no API keys yet: create one with `voxgate keys create NAME")
    key = create_key(tmp_path, "laptop", "--scope", "speech", "--scope", "admin")
    assert key.startswith("vxg_") and len(key) > 40
    assert main(["keys", "list", "--data-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "laptop" in listed and "admin,speech" in listed and "active" in listed and key not in listed
    with sqlite3.connect(tmp_path / "voxgate.db") as db:  # only a hash is stored
        stored = db.execute("SELECT secret_sha256, prefix FROM api_keys").fetchall()
    assert key not in str(stored) and stored[0][1] == key[:12]
    assert main(["keys", "revoke", "laptop", "--data-dir", str(tmp_path)]) == 0
    assert main(["keys", "revoke", "laptop", "--data-dir", str(tmp_path)]) == 1  # nothing active by that name
    assert main(["keys", "list", "--data-dir", str(tmp_path)]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["keys", "create", "x", "--rate-limit", "lots", "--data-dir", str(tmp_path)]) == 2


@pytest.mark.parametrize(("args", "message"), [
    (["--rate-limit", "0/minute"], "error: a rate limit allows at least one request a period, got '0/minute'"),
    # (the limits package read a period of 0 as 1, in silence: listed as `5/0 seconds`, limited at 5 a second)
    (["--rate-limit", "5/0 seconds"], "error: a rate limit's period is at least 1 (e.g. '10/second' or "
                                      "'5/2 seconds'), got '5/0 seconds'"),
    (["--rate-limit", "5/99999 years"], "error: a rate limit's period is at most a year (e.g. '1000/year'), "
                                        "got '5/99999 years'"),
    (["--rate-limit", "1/second;2/minute"], "error: a rate limit is one rate, e.g. '600/minute' (only the first of "
                                            "several is kept), got '1/second;2/minute'"),
    (["--name", "tab\tname"], "error: a key's name may not contain control characters (tabs, line breaks), "
                               "got 'tab\\tname'"),
    (["--name", "x" * 101], "error: a key's name has at most 100 characters, got 101"),
    # (an OverflowError traceback from SQLite: "Python int too large to convert to SQLite INTEGER")
    (["--max-concurrent", str(10 ** 20)], f"error: max_concurrent must be 1 to 1000000, got {10 ** 20}")])
def test_a_key_that_could_never_be_used_or_listed_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              args: list[str], message: str) -> None:
    """Found by a new-user trial: a rate of 0 made a key that every request was refused with
    (429, forever), and a tab in a name broke `keys list`'s tab-separated lines. A security trial: `1/second;2/minute`
    was listed as such while the `limits` package's parse kept only `1/second` (four requests a second apart all
    passed)."""
    name = args[1] if args[0] == "--name" else "k"
    options = [] if args[0] == "--name" else args
    assert main(["keys", "create", name, *options, "--data-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == message
    assert main(["keys", "list", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_a_name_picks_out_one_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert main(["keys", "create", "agent", *data]) == 0
    capsys.readouterr()
    assert main(["keys", "create", "agent", *data]) == 2  # a second active key of that name is refused
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "an active key is named 'agent'" in error and "voxgate keys revoke key-" in error

    async def duplicate() -> list[str]:  # a data dir from before names were unique among active keys
        library = await Library.open(tmp_path / "voxgate.db")
        try:
            async with library.transaction() as db:
                await db.execute("INSERT INTO api_keys (id, name, prefix, secret_sha256, scopes, created_at)"
                                 " VALUES ('key-00000000', 'agent', 'vxg_00000000', 'x', 'speech', 0)")
            return [key.key_id for key in await KeyStore(library).list_keys()]
        finally:
            await library.close()

    ids = asyncio.run(duplicate())
    assert main(["keys", "revoke", "agent", *data]) == 2  # ambiguous: nothing revoked, the ids named
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and all(key_id in error for key_id in ids) and "none was revoked" in error
    assert main(["keys", "list", *data]) == 0
    assert capsys.readouterr().out.count("\tactive\t") == 2
    assert main(["keys", "revoke", ids[1], *data]) == 0
    assert capsys.readouterr().out == (f"revoked {ids[1]} (agent); a running server refuses it at once and closes "
                                       "the WebSocket sessions opened with it within 2 s\n")
    assert main(["keys", "revoke", "agent", *data]) == 0  # one left: the name picks it
    assert main(["keys", "create", "agent", *data]) == 0  # a revoked key's name can be used again


def test_a_server_beyond_loopback_refuses_to_start_without_a_key(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--host", "0.0.0.0", "--port", str(free_port()),
                             "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "voxgate keys create" in result.stderr and 'auth = "off"' in result.stderr
    assert result.stderr.count("\n") == 1  # one line, as every refusal to start
    settings = load_settings(env={}, data_dir=tmp_path, auth="required")
    with pytest.raises(RuntimeError, match="voxgate keys create"):
        with local_client(create_app(settings)):
            pass


def test_requests_need_a_valid_key_with_the_scope(keyed: tuple[LiveServer, dict[str, str]]) -> None:
    live, keys = keyed
    with httpx.Client(base_url=live.url, timeout=60) as client:
        missing = client.post("/v1/audio/speech", json=SPEECH)
        assert missing.status_code == 401 and missing.json()["error"]["code"] == "api_key_required"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = client.post("/v1/audio/speech", json=SPEECH, headers=bearer(keys["speech"] + "x"))
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        assert client.post("/v1/audio/speech", json=SPEECH, headers=bearer(keys["speech"])).status_code == 200
        assert client.get("/v1/takes", headers=bearer(keys["speech"])).status_code == 200  # reads: any key
        assert client.get("/v1/takes").status_code == 401
        for public in ("/health", "/", "/openapi.json", "/docs", "/static/style.css"):
            assert client.get(public).status_code == 200, public
        # /health tells anyone it is up, and only a key holder what it serves (found by a new-user trial)
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/health", headers=bearer(keys["speech"] + "x")).json() == {"status": "ok"}
        assert "piper-joe" in str(client.get("/health", headers=bearer(keys["speech"])).json()["engine"])
        write = client.post("/v1/presets", json={"name": "k"}, headers=bearer(keys["speech"]))
        assert write.status_code == 403 and write.json()["error"]["code"] == "insufficient_scope"
        unload = client.post("/v1/models/piper-joe/unload", headers=bearer(keys["speech"]))
        assert unload.status_code == 403
        assert client.post("/v1/presets", json={"name": "k"}, headers=bearer(keys["admin"])).status_code == 201
        assert client.post("/v1/audio/speech", json=SPEECH, headers=bearer(keys["admin"])).status_code == 200
        # With a key, a body-less POST is fine: a web page cannot send the Authorization header cross-site.
        assert client.post("/v1/models/piper-joe/unload", headers=bearer(keys["admin"])).status_code == 200


def test_a_revoked_key_stops_working_at_once(keyed: tuple[LiveServer, dict[str, str]], tmp_path: Path) -> None:
    live, _ = keyed
    key = create_key(live.settings.data_dir, "temporary")
    with httpx.Client(base_url=live.url) as client:
        assert client.get("/v1/models", headers=bearer(key)).status_code == 200
        assert main(["keys", "revoke", key[:12], "--data-dir", str(live.settings.data_dir)]) == 0
        assert client.get("/v1/models", headers=bearer(key)).status_code == 401


def test_rate_limit_answers_429_with_retry_after(keyed: tuple[LiveServer, dict[str, str]]) -> None:
    live, keys = keyed
    with httpx.Client(base_url=live.url) as client:
        statuses = [client.get("/v1/models", headers=bearer(keys["slow"])) for _ in range(4)]
    assert [r.status_code for r in statuses] == [200, 200, 200, 429]
    assert statuses[-1].json()["error"]["code"] == "rate_limited"
    assert 1 <= int(statuses[-1].headers["retry-after"]) <= 60


def test_concurrency_is_bounded_per_key(keyed: tuple[LiveServer, dict[str, str]]) -> None:
    live, keys = keyed
    long_text = " ".join(f"Sentence number {i} goes on for a while." for i in range(40))
    with httpx.Client(base_url=live.url, timeout=60) as client:
        with client.stream("POST", "/v1/audio/speech", json={"input": long_text, "response_format": "pcm"},
                           headers=bearer(keys["narrow"])) as stream:
            assert stream.status_code == 200
            pieces = stream.iter_bytes()  # kept: a dropped iterator closes the connection
            next(pieces)
            second = client.post("/v1/audio/speech", json=SPEECH, headers=bearer(keys["narrow"]))
            assert second.status_code == 429 and second.json()["error"]["code"] == "too_many_concurrent"
            assert second.headers["retry-after"] == "1"
            with pytest.raises(InvalidStatus) as refused:  # a session counts too
                connect(f"{live.ws_url}/v1/realtime", additional_headers=bearer(keys["narrow"]))
            assert refused.value.response.status_code == 429
        assert live.wait_idle() == 0
        deadline = time.monotonic() + 5
        while live.app_state.limits and live.app_state.limits.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.post("/v1/audio/speech", json=SPEECH, headers=bearer(keys["narrow"])).status_code == 200


def test_websocket_keys_by_header_or_query(keyed: tuple[LiveServer, dict[str, str]]) -> None:
    live, keys = keyed
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{live.ws_url}/v1/realtime")
    assert refused.value.response.status_code == 401
    with connect(f"{live.ws_url}/v1/realtime", additional_headers=bearer(keys["speech"])) as ws:
        assert recv_event(ws)["type"] == "session.created"
    with server_log("uvicorn.error", "gateway.access") as records:
        with connect(f"{live.ws_url}/v1/realtime?api_key={keys['speech']}") as ws:  # browsers cannot set headers
            assert recv_event(ws)["type"] == "session.created"
        deadline = time.monotonic() + 10  # (a session's access line is written when it has closed)
        while not any(r.name == "gateway.access" for r in records) and time.monotonic() < deadline:
            time.sleep(0.02)
    logged = "\n".join(record.getMessage() for record in records)
    assert "WS /v1/realtime?api_key=redacted 101 " in logged, logged  # the access log line
    assert keys["speech"] not in logged


def test_a_key_in_the_query_is_never_logged_even_when_refused(keyed: tuple[LiveServer, dict[str, str]]) -> None:
    """Found by a new-user trial: a foreign Origin or a bad Host is refused before the key check, and a
    route that takes no query key never read it; the access log showed the key whole in both."""
    live, keys = keyed
    secret = keys["admin"]
    with server_log("uvicorn.error", "gateway.access") as records:
        with pytest.raises(InvalidStatus):
            connect(f"{live.ws_url}/v1/realtime?api_key={secret}", origin="http://evil.example")
        with pytest.raises(InvalidStatus):
            connect(f"{live.ws_url}/tts/websocket?api_key={secret}&cartesia_version=2024-06-10", origin="null")
        with httpx.Client(base_url=live.url, timeout=30) as client:
            assert client.post(f"/tts/bytes?api_key={secret}", json={},
                               headers={"Origin": "http://evil.example"}).status_code == 403
            assert client.get(f"/metrics?api_key={secret}&token={secret}").status_code == 401  # takes no query key
            assert client.get(f"/health?xi_api_key={secret}", headers={"Host": "evil.example"}).status_code == 400
            assert client.get(f"/v1/stats?api_key={secret}", headers=bearer(secret)).status_code == 200
        time.sleep(0.3)  # (uvicorn logs an unfinished handshake just after the app returns)
    logged = "\n".join(record.getMessage() for record in records)
    assert secret not in logged and secret.split("_")[1] in "".join(keys.values())
    assert "/v1/realtime?api_key=redacted" in logged and "/metrics?api_key=redacted&token=redacted" in logged, logged
    assert "/tts/websocket?api_key=redacted&cartesia_version=2024-06-10" in logged, logged


def test_a_session_without_a_key_is_a_json_401(keyed: tuple[LiveServer, dict[str, str]]) -> None:
    live, keys = keyed
    error, headers = refused_quietly(f"{live.ws_url}/v1/realtime", 401)
    assert error["code"] == "api_key_required" and error["field"] == "Authorization"
    assert headers["WWW-Authenticate"] == "Bearer"
    error, _ = refused_quietly(f"{live.ws_url}/tts/websocket?api_key=vxg_nope", 401)
    assert error["code"] == "invalid_api_key"
    error, _ = refused_quietly(f"{live.ws_url}/v1/realtime", 403, additional_headers=bearer(keys["narrow"]),
                               origin="null")
    assert error["code"] == "origin_not_allowed"


@pytest.mark.parametrize("path, headers", [
    ("/v1/text-to-speech/joe/stream", {"xi-api-key": "{key}"}),  # ElevenLabs SDKs
    ("/tts/bytes", {"X-API-Key": "{key}"}),  # Cartesia SDKs
    ("/tts/bytes?api_key={key}", {}),
])
def test_vendor_routes_take_their_clients_key(keyed: tuple[LiveServer, dict[str, str]], path: str,
                                              headers: dict[str, str]) -> None:
    live, keys = keyed
    with httpx.Client(base_url=live.url) as client:
        unkeyed = client.post(path.split("?")[0], json={})
        assert unkeyed.status_code == 401
        keyed_headers = {k: v.format(key=keys["speech"]) for k, v in headers.items()}
        response = client.post(path.format(key=keys["speech"]), json={}, headers=keyed_headers)
        assert response.status_code != 401, response.text  # past the key check (the route is another branch's)
        bad = {k: v.format(key="vxg_nope") for k, v in headers.items()}
        assert client.post(path.format(key="vxg_nope"), json={}, headers=bad).status_code == 401


def test_keys_are_optional_on_loopback_but_must_be_valid(tmp_path: Path) -> None:
    key = create_key(tmp_path, "mine")
    for live in run_server(tmp_path):
        with httpx.Client(base_url=live.url, timeout=60) as client:
            assert client.post("/v1/audio/speech", json=SPEECH).status_code == 200
            assert client.post("/v1/audio/speech", json=SPEECH, headers=bearer(key)).status_code == 200
            assert client.post("/v1/audio/speech", json=SPEECH, headers=bearer("vxg_bad")).status_code == 401


def test_lookup_touches_last_used(tmp_path: Path) -> None:
    async def body() -> None:
        library = await Library.open(tmp_path / "db.sqlite")
        try:
            store = KeyStore(library)
            key, secret = await store.create("a", ("speech",))
            assert key.last_used_at is None
            found = await store.lookup(secret)
            assert found is not None and found.key_id == key.key_id
            [listed] = await store.list_keys()
            assert listed.last_used_at is not None
            assert await store.lookup(secret[:-1]) is None and await store.lookup("not a key") is None
            with pytest.raises(ValueError):
                await store.create("b", ("root",))
        finally:
            await library.close()

    asyncio.run(body())


def test_the_studio_signs_in_with_a_key_kept_as_a_cookie(keyed: tuple[LiveServer, dict[str, str]]) -> None:
    """`/v1/studio/key` (gateway/studio_key.py): a valid key becomes an HttpOnly, SameSite=Strict cookie
    that every route reads as the key, scopes and Origin checks included; bad bodies name their field."""
    live, keys = keyed
    with httpx.Client(base_url=live.url, timeout=30) as client:
        for body, status, field in [({"key": "vxg_00000000_nope"}, 401, "key"), ({}, 400, "key"),
                                    ({"key": 5}, 400, "key"), ({"key": keys["admin"], "user": "x"}, 400, "user")]:
            refused = client.post("/v1/studio/key", json=body)
            assert (refused.status_code, refused.json()["error"]["field"]) == (status, field), refused.text
            assert "set-cookie" not in refused.headers
        signed = client.post("/v1/studio/key", json={"key": keys["speech"]})
        assert signed.status_code == 200 and signed.json() == {"name": "agent", "prefix": keys["speech"][:12],
                                                               "scopes": ["speech"]}
        assert f"{studio_key.SIGNED_IN}=speech" in signed.headers.get_list("set-cookie")[1]
        cookie = next(c for c in signed.headers.get_list("set-cookie") if c.startswith("voxgate_key="))
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=2592000" in cookie
        assert client.get("/v1/models").status_code == 200  # the cookie alone is the key
        scoped = client.post("/v1/presets", json={"name": "p", "model": "piper-joe", "voice": "default"})
        assert scoped.status_code == 403 and scoped.json()["error"]["field"] == "Cookie"  # a speech key's scope
        foreign = client.post("/v1/audio/speech", json=SPEECH, headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403  # the Origin check stands before the cookie
        with connect(f"{live.ws_url}/v1/realtime",
                     additional_headers={"Cookie": f"voxgate_key={keys['speech']}"}) as ws:
            assert recv_event(ws)["type"] == "session.created"
        out = client.delete("/v1/studio/key")
        assert out.status_code == 204 and all("Max-Age=0" in c for c in out.headers.get_list("set-cookie"))
        client.cookies.clear()
        assert client.get("/v1/models").status_code == 401
        stale = client.get("/v1/models", headers={"Cookie": "voxgate_key=vxg_00000000_gone"})
        assert stale.status_code == 401 and stale.json()["error"] == {**stale.json()["error"],
                                                                      "code": "invalid_api_key", "field": "Cookie"}


@pytest.mark.parametrize(("path", "hint"), [
    ("/v1/text-to-speech/joe/stream", "`xi-api-key: <key>`"),  # found by a new-user trial: told only of Bearer
    ("/tts/bytes", "`?api_key=<key>`"),
    ("/v1/audio/speech?api_key=vxg_x", "`?api_key=` is not read here"),
])
def test_a_missing_key_says_where_this_route_reads_one(keyed: tuple[LiveServer, dict[str, str]], path: str,
                                                       hint: str) -> None:
    live, _ = keyed
    refused = httpx.post(f"{live.url}{path}", json={"text": "Hi."}, timeout=30)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "api_key_required"
    assert hint in refused.json()["error"]["message"], refused.json()


def test_a_percent_encoded_secret_name_is_redacted_too() -> None:
    """Found by a security trial: `?api%5Fkey=<key>` parses as `api_key`, but the raw bytes held no
    `api_key`, so the access log showed the key whole (and it was not read as a key)."""

    from gateway.auth import SECRETS, RedactQuerySecrets

    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)

    for query in (b"api%5Fkey=vxg_secret&x=1", b"api%5fkey=vxg_secret&x=1", b"%61pi_key=vxg_secret&x=1"):
        seen.clear()
        asyncio.run(RedactQuerySecrets(app)({"type": "http", "query_string": query}, None, None))
        assert seen["query_string"] == b"api_key=redacted&x=1" and seen[SECRETS] == {"api_key": "vxg_secret"}
    seen.clear()
    asyncio.run(RedactQuerySecrets(app)({"type": "http", "query_string": b"text=a%20b"}, None, None))
    assert seen["query_string"] == b"text=a%20b" and SECRETS not in seen  # untouched without a secret

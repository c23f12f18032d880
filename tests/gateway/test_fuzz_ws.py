"""Hypothesis over the WebSocket protocols: a session gets any sequence of messages, valid
and malformed (wrong types, deep nesting, huge numbers, lone surrogates, binary frames);
each malformed one is answered with an `error` event, the session never dies, the server
never answers 1011, and the engine is idle afterwards.

`PROTOCOLS` is a table: the ElevenLabs and Cartesia routes join as entries (their path,
a strategy for their messages, how their error events look)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from tests.conftest import LiveServer, run_server

MAX_EXAMPLES = 25

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)
HOSTILE = [
    "[" * 20_000, '{"type": ' * 50 + "1" + "}" * 50, "9" * 500, '{"type": "text.append", "text": "\\ud800"}',
    '{"type": "playback.position", "played_ms": ' + "9" * 400 + "}", "NaN", "", "{", "\x00", '"text.flush"']
hostile = st.sampled_from(HOSTILE)


def realtime_messages() -> st.SearchStrategy[str | bytes]:
    """Messages for /v1/realtime: its own types with fuzzed fields, any JSON, hostile text, binary."""
    kinds = st.sampled_from(["session.update", "text.append", "text.flush", "response.cancel", "playback.position",
                             "nonsense", None])
    fields = st.dictionaries(st.sampled_from(["session", "text", "played_ms", "playing", "model", "voice",
                                              "sample_rate", "speed", "format"]), json_values, max_size=3)
    typed = st.builds(lambda kind, extra: json.dumps({"type": kind, **extra} if kind else extra), kinds, fields)
    short_text = st.builds(lambda t: json.dumps({"type": "text.append", "text": t}), st.text(max_size=30))
    return st.one_of(typed, short_text, json_values.map(json.dumps), hostile, st.binary(max_size=64))


@dataclass(frozen=True)
class Protocol:
    path: str
    messages: Callable[[], st.SearchStrategy[str | bytes]]
    first_event: str  # the type of what the server sends on connect
    is_error: Callable[[dict[str, Any]], bool]


PROTOCOLS = [
    Protocol("/v1/realtime", realtime_messages, "session.created", lambda e: e.get("type") == "error"),
]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"), max_input_chars=200, text_buffer_ms=50)


def _events_until_quiet(ws: ClientConnection, quiet_s: float = 0.3) -> list[dict[str, Any]]:
    events = []
    while True:
        try:
            message = ws.recv(timeout=quiet_s)
        except TimeoutError:
            return events
        if isinstance(message, str):
            events.append(json.loads(message))


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.path)
def test_sessions_survive_any_messages(fuzz_server: LiveServer, protocol: Protocol) -> None:
    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(protocol.messages(), min_size=1, max_size=6))
    def run(messages: list[str | bytes]) -> None:
        with connect(f"{fuzz_server.ws_url}{protocol.path}", open_timeout=10, max_size=None) as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == protocol.first_event
            for message in messages:
                ws.send(message)
            _events_until_quiet(ws)
            # Still alive and answering: a message that is always wrong gets its error event.
            ws.send('{"type": "no.such.message"}')
            deadline = time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, "the session stopped answering"
                message = ws.recv(timeout=30)
                if isinstance(message, str) and protocol.is_error(event := json.loads(message)) \
                        and event["error"]["field"] == "type":
                    break
        assert ws.close_code in (1000, None), (ws.close_code, ws.close_reason)

    run()
    assert fuzz_server.wait_idle(30) == 0


def test_each_hostile_message_gets_an_error(fuzz_server: LiveServer) -> None:
    for message in [*HOSTILE, b"\x00\x01"]:
        with connect(f"{fuzz_server.ws_url}/v1/realtime", max_size=None) as ws:
            ws.recv(timeout=10)
            ws.send(message)
            event = json.loads(ws.recv(timeout=10))
            assert event["type"] == "error", (message[:40], event)

"""Hypothesis over the WebSocket protocols: a session gets any sequence of messages, valid
and malformed (wrong types, deep nesting, huge numbers, lone surrogates, binary frames);
each malformed one is answered with an `error` event, the session never dies, the server
never answers 1011, and the engine is idle afterwards.

`PROTOCOLS` is a table: `/v1/realtime`, ElevenLabs' multi-stream-input and Cartesia's
/tts/websocket, each with its path, a strategy for its messages, what it sends on connect,
how its error events look and a probe message that is always wrong."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from tests.conftest import LiveServer, run_server
from tests.gateway.test_realtime import events_until_quiet

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
    fields = st.dictionaries(st.sampled_from(["session", "text", "played_ms", "playing", "underrun", "model", "voice",
                                              "sample_rate", "speed", "format"]), json_values, max_size=3)
    typed = st.builds(lambda kind, extra: json.dumps({"type": kind, **extra} if kind else extra), kinds, fields)
    short_text = st.builds(lambda t: json.dumps({"type": "text.append", "text": t}), st.text(max_size=30))
    return st.one_of(typed, short_text, json_values.map(json.dumps), hostile, st.binary(max_size=64))


def elevenlabs_messages() -> st.SearchStrategy[str | bytes]:
    """Messages for ElevenLabs' multi-stream-input (all but `close_socket`, which ends the socket by design)."""
    contexts = st.sampled_from(["a", "b", "", None])
    fields = st.fixed_dictionaries({}, optional={
        "text": st.one_of(st.text(max_size=30), json_values), "context_id": contexts,
        "flush": st.booleans(), "close_context": st.booleans(), "voice_settings": json_values,
        "try_trigger_generation": json_values, "generation_config": json_values})
    return st.one_of(fields.map(json.dumps), json_values.map(json.dumps), hostile, st.binary(max_size=64))


def cartesia_messages() -> st.SearchStrategy[str | bytes]:
    """Messages for Cartesia's /tts/websocket: generations (valid or not), cancels, anything."""
    good_format = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}
    fields = st.fixed_dictionaries({"context_id": st.sampled_from(["a", "b", "", 7])}, optional={
        "transcript": st.one_of(st.text(max_size=30), json_values), "continue": st.booleans(),
        "flush": st.booleans(), "cancel": st.booleans(), "add_timestamps": json_values,
        "output_format": st.one_of(st.just(good_format), json_values), "voice": json_values,
        "model_id": st.one_of(st.just("sonic-3"), json_values), "generation_config": json_values,
        "max_buffer_delay_ms": json_values})
    return st.one_of(fields.map(json.dumps), json_values.map(json.dumps), hostile, st.binary(max_size=64))


@dataclass(frozen=True)
class Protocol:
    path: str
    messages: Callable[[], st.SearchStrategy[str | bytes]]
    first_event: str | None  # the type of what the server sends on connect (None: nothing)
    is_error: Callable[[dict[str, Any]], bool]
    probe: str  # a message that is always wrong, in one known field
    probe_field: str
    field: Callable[[dict[str, Any]], Any]  # the field an error event names


PROTOCOLS = [
    Protocol("/v1/realtime", realtime_messages, "session.created", lambda e: e.get("type") == "error",
             '{"type": "no.such.message"}', "type", lambda e: e["error"]["field"]),
    Protocol("/v1/text-to-speech/v/multi-stream-input?output_format=pcm_16000", elevenlabs_messages, None,
             lambda e: "error" in e and "code" in e, '{"text": 5, "context_id": "probe"}', "text",
             lambda e: e["field"]),
    Protocol("/tts/websocket", cartesia_messages, None, lambda e: e.get("type") == "error",
             '{"context_id": "probe", "transcript": 3}', "transcript", lambda e: e["field"]),
]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"), max_input_chars=200, max_pending_chars=200, text_buffer_ms=50)


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.path.split("?")[0])
def test_sessions_survive_any_messages(fuzz_server: LiveServer, protocol: Protocol) -> None:
    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(protocol.messages(), min_size=1, max_size=6))
    def run(messages: list[str | bytes]) -> None:
        with connect(f"{fuzz_server.ws_url}{protocol.path}", open_timeout=10, max_size=None) as ws:
            if protocol.first_event is not None:
                assert json.loads(ws.recv(timeout=10))["type"] == protocol.first_event
            for message in messages:
                ws.send(message)
            events_until_quiet(ws, quiet_s=0.3)
            # Still alive and answering: a message that is always wrong gets its error event.
            ws.send(protocol.probe)
            deadline = time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, "the session stopped answering"
                message = ws.recv(timeout=30)
                if isinstance(message, str) and protocol.is_error(event := json.loads(message)) \
                        and protocol.field(event) == protocol.probe_field:
                    break
        assert ws.close_code in (1000, None), (ws.close_code, ws.close_reason)

    run()
    assert fuzz_server.wait_idle(30) == 0


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.path.split("?")[0])
def test_each_hostile_message_gets_an_error(fuzz_server: LiveServer, protocol: Protocol) -> None:
    for message in [*HOSTILE, b"\x00\x01"]:
        with connect(f"{fuzz_server.ws_url}{protocol.path}", max_size=None) as ws:
            if protocol.first_event is not None:
                ws.recv(timeout=10)
            ws.send(message)
            event = json.loads(ws.recv(timeout=10))
            assert protocol.is_error(event), (message[:40], event)

"""/v1/realtime `playback.position` reports and the server's stall count: an underrun the
client reports is a stall, a pause is not; the wait for the client's own late text is not
a stall, the server's wait past a TTFA target after that text is (docs/realtime.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.sync.client import ClientConnection

from engine.types import SpeechRequest
from tests.conftest import LiveServer, run_server
from tests.gateway.test_realtime import collect_utterance, open_session, recv_event

FIRST = "Here is the first sentence of this turn."
SECOND = "And here is the second one, after a gap."
GAP_S = 0.4  # how long the client sits with a dry buffer before the next audio (or text) comes
TTFA_TARGET_MS = 1000.0  # (`late_text`): what the server has for the audio of text that came late
HOLD_S = 1.6  # how long a slow server keeps that audio back, from the text


@pytest.fixture(scope="module")
def late_text(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A TTFA target that a busy machine's synthesis of one sentence does not miss by itself."""
    yield from run_server(tmp_path_factory.mktemp("data"), ttfa_target_ms=TTFA_TARGET_MS)


class Held:
    """An engine stream whose audio waits until `gate` is set: a slow server."""

    def __init__(self, stream: Any, gate: threading.Event) -> None:
        self.stream, self.request_id, self.gate = stream, stream.request_id, gate

    @property
    def done(self) -> bool:
        return bool(self.stream.done)

    def __aiter__(self) -> Held:
        return self

    async def __anext__(self) -> Any:
        if not self.gate.is_set():
            await asyncio.to_thread(self.gate.wait, 30)
        return await self.stream.__anext__()


@contextlib.contextmanager
def holding(server: LiveServer, words: str) -> Iterator[threading.Event]:
    """The engine request whose text has `words` keeps its audio back until the event is set."""
    engine = server.app_state.engine
    submit = engine.submit
    gate = threading.Event()

    def hold(spec: SpeechRequest) -> Any:
        stream = submit(spec)
        return Held(stream, gate) if any(words in segment for segment in spec.segments) else stream

    engine.submit = hold  # type: ignore[method-assign]
    try:
        yield gate
    finally:
        gate.set()
        del engine.submit


def play_out(ws: ClientConnection, quiet_s: float) -> tuple[float, float]:
    """Receive the first sentence's audio (until none comes for `quiet_s`), playing it at 1x
    from its first frame; returns (ms received, time.monotonic() its playback ends)."""
    received_ms, first_s = 0.0, None
    while True:
        try:
            message = ws.recv(timeout=quiet_s if first_s is not None else 10)
        except TimeoutError:
            break
        if isinstance(message, bytes):
            first_s = first_s if first_s is not None else time.monotonic()
            received_ms += 1000.0 * len(message) / 2 / 24000
    assert first_s is not None and received_ms > 1000.0
    return received_ms, first_s + received_ms / 1000.0


def warm_up(ws: ClientConnection) -> None:
    ws.send(json.dumps({"type": "text.append", "text": "Ready."}))  # the model loads on first use
    ws.send(json.dumps({"type": "text.flush"}))
    assert collect_utterance(ws)[0][-1]["type"] == "utterance.done"


def finish(ws: ClientConnection) -> dict[str, Any]:
    events, _ = collect_utterance(ws)
    done = events[-1]
    assert done["type"] == "utterance.done" and done["text"] == f"{FIRST} {SECOND}", done
    return done


def dry_buffer_then_more(server: LiveServer, report: dict[str, Any]) -> dict[str, Any]:
    """The second sentence comes in time, but the server keeps its audio back: the first
    sentence plays out, the client sends `report` once its buffer is dry and again GAP_S / 2
    later, then (GAP_S after the first) the second sentence's audio comes; returns the
    utterance's `utterance.done`."""
    quiet_s = server.settings.text_buffer_ms / 1000.0 + 0.3
    with open_session(server) as ws:
        warm_up(ws)
        with holding(server, "second one") as gate:
            ws.send(json.dumps({"type": "text.append", "text": FIRST}))  # no flush: the utterance goes on
            assert recv_event(ws)["type"] == "audio.start"
            ws.send(json.dumps({"type": "text.append", "text": " " + SECOND}))  # long before it is needed
            ws.send(json.dumps({"type": "text.flush"}))
            received_ms, dry_s = play_out(ws, quiet_s)
            time.sleep(max(0.0, dry_s - time.monotonic()) + 0.02)
            for _ in range(2):  # a player goes on reporting while its buffer is dry
                ws.send(json.dumps({"type": "playback.position", "played_ms": received_ms, **report}))
                time.sleep(GAP_S / 2)
            gate.set()
            return finish(ws)


def test_an_underrun_the_client_reports_is_a_stall(server: LiveServer) -> None:
    """It once read `playing: false` as a pause whatever the reason, and missed the stall."""
    done = dry_buffer_then_more(server, {"playing": False, "underrun": True})
    assert done["stalls"] == 1, done
    assert done["stall_ms"] >= 1000.0 * GAP_S - 50.0, done  # from the first report until the audio came


def test_a_pause_the_client_reports_is_no_stall(server: LiveServer) -> None:
    done = dry_buffer_then_more(server, {"playing": False})
    assert done["stalls"] == 0 and done["stall_ms"] == 0, done


def test_a_dry_buffer_reported_as_playing_is_a_stall(server: LiveServer) -> None:
    done = dry_buffer_then_more(server, {"playing": True})
    assert done["stalls"] == 1 and done["stall_ms"] >= 1000.0 * GAP_S - 50.0, done


def text_after_a_dry_buffer(server: LiveServer, hold: bool) -> dict[str, Any]:
    """The first sentence plays out (1x, no reports) and GAP_S later the client's second one
    comes, late; with `hold`, the server keeps its audio back until HOLD_S after that text."""
    quiet_s = server.settings.text_buffer_ms / 1000.0 + 0.3
    with open_session(server) as ws:
        warm_up(ws)
        ws.send(json.dumps({"type": "text.append", "text": FIRST}))
        _, dry_s = play_out(ws, quiet_s)
        time.sleep(max(0.0, dry_s - time.monotonic()) + GAP_S)  # (less than utterance_end_ms)
        with holding(server, "second one" if hold else "(nothing)") as gate:
            came_s = time.monotonic()
            ws.send(json.dumps({"type": "text.append", "text": " " + SECOND}))
            ws.send(json.dumps({"type": "text.flush"}))
            if hold:
                time.sleep(max(0.0, came_s + HOLD_S - time.monotonic()))
                gate.set()
            return finish(ws)


def test_the_wait_for_late_text_is_no_stall(late_text: LiveServer) -> None:
    """The listener's buffer ran dry GAP_S before the text came: the client's wait, not a
    stall (it once counted one of GAP_S and more)."""
    done = text_after_a_dry_buffer(late_text, hold=False)
    assert done["stalls"] == 0 and done["stall_ms"] == 0, done


def test_audio_later_than_a_ttfa_target_after_late_text_is_a_stall(late_text: LiveServer) -> None:
    """The server's own lateness still counts, from a TTFA target after the text: about
    HOLD_S - TTFA_TARGET_MS, not the GAP_S before the text."""
    done = text_after_a_dry_buffer(late_text, hold=True)
    assert done["stalls"] == 1, done
    late_ms = 1000.0 * HOLD_S - TTFA_TARGET_MS
    assert late_ms - 50.0 <= done["stall_ms"] < late_ms + 1000.0 * GAP_S + 350.0, done

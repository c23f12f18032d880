"""/v1/realtime `playback.position` reports and the server's stall count: an underrun the
client reports is a stall, a pause is not (docs/realtime.md)."""

from __future__ import annotations

import json
import time
from typing import Any

from websockets.sync.client import ClientConnection

from tests.conftest import LiveServer
from tests.gateway.test_realtime import collect_utterance, open_session

FIRST = "Here is the first sentence of this turn."
SECOND = "And here is the second one, after a gap."
GAP_S = 0.4  # how long the client sits with a dry buffer before the next text is sent


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


def dry_buffer_then_more(server: LiveServer, report: dict[str, Any]) -> dict[str, Any]:
    """The first sentence plays out, the client sends `report` once its buffer is dry and again
    GAP_S / 2 later, then (GAP_S after the first) the second sentence comes; returns its
    `utterance.done`."""
    with open_session(server) as ws:
        return _dry_buffer_then_more(ws, report, server.settings.text_buffer_ms / 1000.0 + 0.3)


def _dry_buffer_then_more(ws: ClientConnection, report: dict[str, Any], quiet_s: float) -> dict[str, Any]:
    ws.send(json.dumps({"type": "text.append", "text": "Ready."}))  # the model loads on first use
    ws.send(json.dumps({"type": "text.flush"}))
    assert collect_utterance(ws)[0][-1]["type"] == "utterance.done"
    ws.send(json.dumps({"type": "text.append", "text": FIRST}))  # no flush: the utterance goes on
    received_ms, dry_s = play_out(ws, quiet_s)  # (its end waits for text_buffer_ms)
    time.sleep(max(0.0, dry_s - time.monotonic()) + 0.02)
    for _ in range(2):  # a player goes on reporting while its buffer is dry
        ws.send(json.dumps({"type": "playback.position", "played_ms": received_ms, **report}))
        time.sleep(GAP_S / 2)
    ws.send(json.dumps({"type": "text.append", "text": " " + SECOND}))
    ws.send(json.dumps({"type": "text.flush"}))
    events, _ = collect_utterance(ws)
    done = events[-1]
    assert done["type"] == "utterance.done" and done["text"] == f"{FIRST} {SECOND}", done
    return done


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

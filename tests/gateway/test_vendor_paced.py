"""LLM-paced text on the ElevenLabs and Cartesia WebSockets: a context's sentence is spoken
before its end when the listener would otherwise run dry, as on /v1/realtime
(test_realtime_paced.py), by the clock the server keeps for the context (no playback reports:
its audio plays at 1x from its first audio); with `realtime_pace_ms = 0` it waits for its end.
The vendors' own ends of text (ElevenLabs `flush` and `close_context`, Cartesia `flush` and
`continue: false`) still speak everything buffered at once; nothing is dropped or said twice."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
from websockets.sync.client import ClientConnection

from bench.workload import Listener
from engine.types import SpeechRequest
from tests.conftest import LiveServer
from tests.gateway.test_cartesia import BASE, socket, until_done
from tests.gateway.test_elevenlabs import multi, until_final
from tests.gateway.test_realtime_paced import WORD_S, unpaced
from tests.gateway.test_realtime_playback import GAP_S, late_text

__all__ = ["late_text", "unpaced"]  # the module's fixtures: a server with realtime_pace_ms = 0, and one with a
# TTFA target of 1 s

# 44 words, no sentence end for over two seconds at a word every 50 ms: its first clause
# ("Then Margaret,") plays out long before the sentence's last word comes.
LONG_SENTENCE = ("Then Margaret, who was tired of waiting for the others to come back from the market with the "
                 "bread and the apples and the long list of things that nobody else had remembered to buy, walked "
                 "slowly down the long road to her home.")
FIRST_CLAUSE = ["Then", "Margaret,"]
RATE = 24000
CARTESIA = {**BASE, "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": RATE},
            "context_id": "c", "continue": True}


@dataclass
class Heard:
    """What a client heard of one context: its audio at 1x from the first frame, its words (as
    the alignment or the timestamps give them), and those that came before its last word was sent."""

    listener: Listener = field(default_factory=lambda: Listener(time.monotonic()))
    words: list[str] = field(default_factory=list)
    words_before_end: list[str] | None = None
    words_at_flush_done: list[str] | None = None  # Cartesia: those heard when `flush_done` came
    requests: list[tuple[str, ...]] = field(default_factory=list)  # each engine request's segments


def elevenlabs_read(heard: Heard, message: dict[str, Any]) -> bool:
    """Take in one ElevenLabs message; True once it is the context's `isFinal`."""
    assert "error" not in message, message
    if message.get("audio"):
        heard.listener.receive(time.monotonic(), 1000.0 * len(base64.b64decode(message["audio"])) / 2 / RATE)
    if message.get("alignment"):
        heard.words += "".join(message["alignment"]["chars"]).split()
    return message.get("isFinal") is True


def cartesia_read(heard: Heard, message: dict[str, Any]) -> bool:
    assert message["type"] != "error", message
    if message["type"] == "chunk":
        heard.listener.receive(time.monotonic(), 1000.0 * len(base64.b64decode(message["data"])) / 2 / RATE)
    elif message["type"] == "timestamps":
        heard.words += message["word_timestamps"]["words"]
    elif message["type"] == "flush_done":
        assert heard.words_at_flush_done is None and message["flush_id"] == 1, message
        heard.words_at_flush_done = list(heard.words)
    return message["type"] == "done"


Piece = Callable[[str, bool, bool], dict[str, Any]]


def speak_paced(server: LiveServer, ws: ClientConnection, piece: Piece, read: Callable[[Heard, dict[str, Any]], bool],
                flush_at: int | None = None, text: str = LONG_SENTENCE) -> Heard:
    """`text` a word per message every WORD_S (`piece(word, last, flush)`: the message; the
    last one ends the context's input; word `flush_at`'s asks for a flush), reading its audio
    meanwhile, then until the context's end."""
    engine = server.app_state.engine
    heard = Heard()
    submit = engine.submit

    def spy(spec: SpeechRequest):  # type: ignore[no-untyped-def]
        heard.requests.append(spec.segments)
        return submit(spec)

    engine.submit = spy  # type: ignore[method-assign]
    try:
        words = text.split()
        next_s = time.monotonic()
        for i, word in enumerate(words):
            last = i == len(words) - 1
            if last:
                heard.words_before_end = list(heard.words)
            ws.send(json.dumps(piece(word + ("" if last else " "), last, i == flush_at)))
            next_s += WORD_S
            while not last and (wait_s := next_s - time.monotonic()) > 0:  # read audio as it comes meanwhile
                try:
                    message = ws.recv(timeout=wait_s)
                except TimeoutError:
                    break
                assert not read(heard, json.loads(message)), message
        while not read(heard, json.loads(ws.recv(timeout=30))):
            pass
    finally:
        del engine.submit
    return heard


def elevenlabs_paced(server: LiveServer, flush_at: int | None = None) -> Heard:
    with multi(server, f"model_id=eleven_flash_v2_5&output_format=pcm_{RATE}") as ws:
        ws.send(json.dumps({"text": "Ready.", "context_id": "ready", "flush": True}))  # the model loads on first use
        ws.send(json.dumps({"context_id": "ready", "close_context": True}))
        until_final(ws, "ready")

        def piece(text: str, last: bool, flush: bool) -> dict[str, Any]:
            # The end of a turn as pipecat sends it: the last text, then close_context.
            if last:
                ws.send(json.dumps({"text": text, "context_id": "c"}))
                return {"context_id": "c", "close_context": True}
            return {"text": text, "context_id": "c", **({"flush": True} if flush else {})}

        ws.send(json.dumps({"text": " ", "context_id": "c"}))  # opens it
        return speak_paced(server, ws, piece, elevenlabs_read, flush_at)


def cartesia_paced(server: LiveServer, flush_at: int | None = None) -> Heard:
    with socket(server) as ws:
        ws.send(json.dumps({**CARTESIA, "context_id": "ready", "transcript": "Ready.", "continue": False}))
        until_done(ws, "ready")
        return speak_paced(server, ws, lambda text, last, flush: {
            **CARTESIA, "transcript": text, "continue": not last, **({"flush": True} if flush else {})},
            cartesia_read, flush_at)


def check_paced(heard: Heard) -> None:
    assert heard.words == LONG_SENTENCE.split(), heard.words  # nothing dropped, nothing twice
    before = heard.words_before_end or []
    # Audio past the first clause came while the sentence was still arriving...
    assert before[:2] == FIRST_CLAUSE and len(before) > len(FIRST_CLAUSE), (before, heard.requests)
    assert len(heard.requests) >= 3, heard.requests  # (the rest went out in parts, before its end)
    assert heard.listener.stalls == 0, (heard.listener.stall_ms, heard.requests)  # ...in time


def check_unpaced(heard: Heard) -> None:
    """Without pacing the rest of the sentence waits for its end, and the listener runs dry."""
    assert heard.words == LONG_SENTENCE.split(), heard.words
    assert heard.words_before_end == FIRST_CLAUSE, heard.words_before_end
    assert heard.requests == [("Then Margaret,",), (LONG_SENTENCE.removeprefix("Then Margaret, "),)]
    assert heard.listener.stalls >= 1 and heard.listener.stall_ms > 200.0


def test_elevenlabs_llm_paced_text_is_spoken_before_its_sentence_ends(server: LiveServer) -> None:
    check_paced(elevenlabs_paced(server))
    assert server.wait_idle() == 0


def test_elevenlabs_without_pacing_the_sentence_waits_for_its_end(unpaced: LiveServer) -> None:
    check_unpaced(elevenlabs_paced(unpaced))


def test_cartesia_llm_paced_text_is_spoken_before_its_sentence_ends(server: LiveServer) -> None:
    check_paced(cartesia_paced(server))
    assert server.wait_idle() == 0


def test_cartesia_without_pacing_the_sentence_waits_for_its_end(unpaced: LiveServer) -> None:
    check_unpaced(cartesia_paced(unpaced))


@pytest.mark.parametrize("vendor", ["elevenlabs", "cartesia"])
def test_a_flush_mid_sentence_speaks_its_text_at_once(server: LiveServer, vendor: str) -> None:
    """A flush is the client's, paced or not: what was sent before it is spoken then, cut
    there (Cartesia's `flush_done` once it is heard, before any word sent after it), and every
    word once."""
    words = LONG_SENTENCE.split()
    flush_at = words.index("apples")
    heard = (elevenlabs_paced if vendor == "elevenlabs" else cartesia_paced)(server, flush_at)
    assert heard.words == words, heard.words
    segments = [segment for request in heard.requests for segment in request]
    assert " ".join(segments) == LONG_SENTENCE
    assert any(segment.endswith(" apples") for segment in segments), segments  # cut where the client flushed
    if vendor == "cartesia":
        assert heard.words_at_flush_done == words[:flush_at + 1], (heard.words_at_flush_done, heard.requests)
    assert server.wait_idle() == 0


def test_elevenlabs_text_that_comes_after_the_audio_ran_out_is_no_stall(late_text: LiveServer) -> None:
    """A context's next sentence comes GAP_S after its first one's audio has played out (1x
    from its first audio, no reports on this protocol): the wait for the client's text is no
    stall on the server's clock (docs/realtime.md, Late text: the vendor sockets share it)."""
    with multi(late_text, "model_id=eleven_flash_v2_5&output_format=pcm_24000") as ws:
        ws.send(json.dumps({"text": " ", "context_id": "c1"}))
        ws.send(json.dumps({"text": "Hello there, my friend.", "context_id": "c1", "flush": True}))
        first_s, audio_ms = None, 0.0
        while True:
            try:
                message = json.loads(ws.recv(timeout=2.0 if first_s is not None else 30))
            except TimeoutError:
                break
            if message.get("audio"):
                first_s = first_s if first_s is not None else time.monotonic()
                audio_ms += 1000.0 * len(base64.b64decode(message["audio"])) / 2 / RATE
        assert first_s is not None and audio_ms > 500.0
        time.sleep(max(0.0, first_s + audio_ms / 1000.0 + GAP_S - time.monotonic()))
        ws.send(json.dumps({"text": "And this one came late.", "context_id": "c1", "flush": True}))
        ws.send(json.dumps({"context_id": "c1", "close_context": True}))
        assert until_final(ws, "c1")[-1] == {"isFinal": True, "contextId": "c1"}
    deadline = time.monotonic() + 10
    while not any(r["source"] == "elevenlabs" for r in late_text.app_state.metrics.recent):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    done = [r for r in late_text.app_state.metrics.recent if r["source"] == "elevenlabs"][-1]
    assert done["stalls"] == 0 and done["late_ms"] == 0, done

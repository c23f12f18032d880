"""The vendor protocols read text through the same text frontend as /v1/realtime and
/v1/audio/speech: markdown, numbers and SSML breaks on every route, the first clause
early, TTFA from the first append, pauses as silence."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from websockets.sync.client import connect

from tests.conftest import LiveServer
from tests.gateway.test_cartesia import BASE, socket, until_done
from tests.gateway.test_elevenlabs import audio_of, multi, until_final
from tests.gateway.test_realtime import collect_utterance, open_session

LLM_TEXT = "**Important:** you have 3 new messages. Read them."
SPOKEN = "Important: you have three new messages. Read them."


def elevenlabs_chars(messages: list[dict[str, Any]]) -> str:
    return "".join("".join(m["alignment"]["chars"]) for m in messages if m.get("alignment"))


def test_every_route_reads_markdown_and_numbers_the_same(server: LiveServer, client: httpx.Client) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": LLM_TEXT}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, _ = collect_utterance(ws)
    assert events[-1]["text"] == SPOKEN
    with multi(server) as ws:
        ws.send(json.dumps({"text": LLM_TEXT, "context_id": "c", "flush": True}))
        ws.send(json.dumps({"context_id": "c", "close_context": True}))
        assert elevenlabs_chars(until_final(ws, "c")).split() == SPOKEN.split()
    with socket(server) as ws:
        ws.send(json.dumps({**BASE, "context_id": "c", "transcript": LLM_TEXT, "continue": False}))
        stamps = [m["word_timestamps"] for m in until_done(ws, "c") if m["type"] == "timestamps"]
        assert [w for s in stamps for w in s["words"]] == SPOKEN.split()
    stamped = client.post("/v1/text-to-speech/x/with-timestamps?output_format=pcm_16000",
                          json={"text": LLM_TEXT}).json()
    assert "".join(stamped["alignment"]["characters"]).split() == SPOKEN.split()
    events = client.post("/tts/sse", json={**BASE, "transcript": LLM_TEXT}).text.splitlines()
    words = [w for line in events if line.startswith("data: ")
             for w in json.loads(line[6:]).get("word_timestamps", {}).get("words", [])]
    assert words == SPOKEN.split()


def test_elevenlabs_text_normalization_off_reads_as_written(client: httpx.Client) -> None:
    body = {"text": "Call 3 times.", "apply_text_normalization": "off"}
    stamped = client.post("/v1/text-to-speech/x/with-timestamps?output_format=pcm_16000", json=body).json()
    assert "".join(stamped["alignment"]["characters"]).split() == ["Call", "3", "times."]


def test_an_ssml_break_is_silence_between_words_on_the_vendor_routes(server: LiveServer,
                                                                      client: httpx.Client) -> None:
    text = 'Wait for it. <break time="1500ms"/> Now go.'
    stamped = client.post("/v1/text-to-speech/x/with-timestamps?output_format=pcm_16000",
                          json={"text": text}).json()
    chars, starts = stamped["alignment"]["characters"], stamped["alignment"]["character_start_times_seconds"]
    assert "".join(chars).split() == ["Wait", "for", "it.", "Now", "go."]
    ends = stamped["alignment"]["character_end_times_seconds"]
    now = "".join(chars).index("Now")
    gap = starts[now] - ends[now - 2]  # from the end of "it." to "Now" (two requests, a pause between)
    assert gap >= 1.5
    with socket(server) as ws:
        ws.send(json.dumps({**BASE, "context_id": "p", "transcript": text, "continue": False}))
        stamps = [m["word_timestamps"] for m in until_done(ws, "p") if m["type"] == "timestamps"]
    words = [(w, s, e) for batch in stamps for w, s, e in zip(batch["words"], batch["start"], batch["end"])]
    assert [w for w, _, _ in words] == ["Wait", "for", "it.", "Now", "go."]
    assert words[3][1] - words[2][2] >= 1.5


def test_a_vendor_context_speaks_its_first_clause_before_the_sentence_ends(server: LiveServer) -> None:
    words = "Sure thing, my friend, here is the plan for the whole day that we talked about".split()
    with multi(server) as ws:
        sent = time.monotonic()
        for word in words[:5]:
            ws.send(json.dumps({"text": word + " ", "context_id": "c"}))
        first = json.loads(ws.recv(timeout=10))  # no sentence end, no flush: the clause is enough
        assert first["audio"] and first["contextId"] == "c"
        assert time.monotonic() - sent < 5
        ws.send(json.dumps({"text": " ".join(words[5:]), "context_id": "c"}))
        ws.send(json.dumps({"context_id": "c", "close_context": True}))
        messages = [first, *until_final(ws, "c")]
    assert elevenlabs_chars(messages).split() == words
    assert len(audio_of(messages)) > 2 * 16000


def test_vendor_ttfa_counts_from_the_first_append(server: LiveServer) -> None:
    with connect(f"{server.ws_url}/tts/websocket", open_timeout=10) as ws:
        ws.send(json.dumps({**BASE, "context_id": "t", "transcript": "This sentence ", "continue": True}))
        time.sleep(0.3)  # not speakable yet (under text_buffer_ms): part of the utterance's TTFA
        ws.send(json.dumps({**BASE, "context_id": "t", "transcript": "ends here.", "continue": False}))
        assert until_done(ws, "t")[-1]["type"] == "done"
    recent = [u for u in server.app_state.metrics.recent if u["source"] == "cartesia"]
    assert recent and recent[-1]["ttfa_ms"] >= 300


def test_vendor_http_audio_has_the_break_as_silence(client: httpx.Client) -> None:
    plain = client.post("/tts/bytes", json={**BASE, "transcript": "Wait for it. Now go."}).content
    paused = client.post("/tts/bytes", json={**BASE, "transcript": 'Wait for it. <break time="2s"/> Now go.'}).content
    assert (len(paused) - len(plain)) / 2 / 16000 > 1.8

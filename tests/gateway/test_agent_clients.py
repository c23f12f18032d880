"""The clients voice agents run, unchanged, pointed at a live Voxgate (no network):
pipecat's ElevenLabs and Cartesia WebSocket services, LiveKit's elevenlabs and cartesia
plugins, and the vendors' own SDKs (elevenlabs, cartesia)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from cartesia import BadRequestError, Cartesia
from elevenlabs.client import ElevenLabs
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.plugins import cartesia as lk_cartesia
from livekit.plugins import elevenlabs as lk_elevenlabs
from pipecat.frames.frames import ErrorFrame, InterruptionFrame, TTSAudioRawFrame, TTSSpeakFrame, TTSTextFrame
from pipecat.services.cartesia.tts import CartesiaTTSService
from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
from pipecat.services.tts_service import TTSService
from pipecat.tests.utils import SleepFrame, run_test

from tests.conftest import LiveServer, run_server

TEXT = "Hello there, this is a test of the system. And a second sentence."
LONG = " ".join(f"This is sentence number {i} of a long answer." for i in range(20))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # The model loaded before the first client connects, so client timeouts measure synthesis.
    yield from run_server(tmp_path_factory.mktemp("data"), preload_models="piper-joe")


def pipecat_services(server: LiveServer, api_key: str = "k") -> list[TTSService]:
    return [ElevenLabsTTSService(api_key=api_key, url=server.ws_url, sample_rate=16000,
                                 settings=ElevenLabsTTSService.Settings(voice="21m00Tcm4TlvDq8ikWAM")),
            CartesiaTTSService(api_key=api_key, url=f"{server.ws_url}/tts/websocket", sample_rate=16000,
                               settings=CartesiaTTSService.Settings(voice="a0e99841-438c-4a64-b679-ae501e7d6091"))]


async def max_requests(server: LiveServer, seen: list[int]) -> None:
    while True:
        seen.append(server.app_state.engine.num_requests())
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("index", [0, 1], ids=["elevenlabs", "cartesia"])
def test_pipecat_speaks_with_word_timestamps(server: LiveServer, index: int) -> None:
    tts = pipecat_services(server)[index]
    down, up = asyncio.run(run_test(tts, frames_to_send=[TTSSpeakFrame(TEXT), SleepFrame(10)], start_timeout=10))
    seconds = sum(len(f.audio) for f in down if isinstance(f, TTSAudioRawFrame)) / 2 / 16000
    assert seconds > 3.0
    words = [f for f in down if isinstance(f, TTSTextFrame)]
    assert [f.text for f in words] == TEXT.split()
    assert [f.pts for f in words] == sorted(f.pts for f in words)  # times from our alignment
    assert not [f for f in [*down, *up] if isinstance(f, ErrorFrame)]
    assert server.wait_idle() == 0


# The engine synthesises Piper as fast as the CPU goes (~10x real time here), so an answer
# still being made when the agent interrupts must be long: this one is ~3.5 minutes of audio.
ANSWER = " ".join(f"This is sentence number {i} of a very long answer." for i in range(75))


@pytest.mark.parametrize("index", [0, 1], ids=["elevenlabs", "cartesia"])
def test_pipecat_interruption_stops_the_engine_request(server: LiveServer, index: int) -> None:
    tts = pipecat_services(server)[index]
    seen: list[int] = []

    async def scenario() -> tuple[Any, Any]:
        watch = asyncio.create_task(max_requests(server, seen))
        try:
            # The engine stops at its next step: Piper's is one sentence.
            return await run_test(tts, frames_to_send=[TTSSpeakFrame(ANSWER), SleepFrame(2), InterruptionFrame(),
                                                       SleepFrame(4)], start_timeout=10)
        finally:
            watch.cancel()

    down, _ = asyncio.run(scenario())
    assert max(seen) == 1 and seen[-1] == 0  # freed after the interruption, the socket still open
    seconds = sum(len(f.audio) for f in down if isinstance(f, TTSAudioRawFrame)) / 2 / 16000
    assert 0 < seconds < 100  # less than half the answer: its synthesis stopped


async def livekit_speak(tts: Any, text: str) -> tuple[float, list[tuple[str, float]]]:
    stream = tts.stream()
    stream.push_text(text)
    stream.end_input()
    samples, rate, words = 0, 1, []
    async for event in stream:
        samples, rate = samples + event.frame.samples_per_channel, event.frame.sample_rate
        words += [(w.strip(), w.start_time) for w in event.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
    await stream.aclose()
    return samples / rate, words


def livekit_tts(server: LiveServer, vendor: str, session: aiohttp.ClientSession, api_key: str = "k") -> Any:
    if vendor == "elevenlabs":
        return lk_elevenlabs.TTS(api_key=api_key, base_url=f"{server.url}/v1", voice_id="EXAVITQu4vr4xnSDxMaL",
                                 http_session=session)
    return lk_cartesia.TTS(api_key=api_key, base_url=server.url, voice="v", http_session=session)


@pytest.mark.parametrize("vendor", ["elevenlabs", "cartesia"])
def test_livekit_streams_audio_and_words(server: LiveServer, vendor: str) -> None:
    async def scenario() -> tuple[float, list[tuple[str, float]]]:
        async with aiohttp.ClientSession() as session:
            tts = livekit_tts(server, vendor, session)
            try:
                return await livekit_speak(tts, TEXT)
            finally:
                await tts.aclose()

    seconds, words = asyncio.run(scenario())
    assert seconds > 3.0
    assert [w for w, _ in words] == TEXT.split()
    assert server.wait_idle() == 0


@pytest.mark.parametrize("vendor", ["elevenlabs"])  # LiveKit's cartesia pools a socket per concurrent stream
def test_livekit_concurrent_streams_share_one_socket(server: LiveServer, vendor: str) -> None:
    sessions: list[int] = []

    async def scenario() -> list[tuple[float, list[tuple[str, float]]]]:
        async with aiohttp.ClientSession() as session:
            tts = livekit_tts(server, vendor, session)
            watch = asyncio.create_task(count_sockets())
            try:
                return list(await asyncio.gather(livekit_speak(tts, "The first stream says this sentence."),
                                                 livekit_speak(tts, "The second stream says another one.")))
            finally:
                watch.cancel()
                await tts.aclose()

    async def count_sockets() -> None:
        while True:
            sessions.append(server.app_state.metrics.open_sessions())
            await asyncio.sleep(0.02)

    results = asyncio.run(scenario())
    assert max(sessions) == 1  # both streams went over one pooled socket
    assert [[w for w, _ in words] for _, words in results] == [
        "The first stream says this sentence.".split(), "The second stream says another one.".split()]
    assert all(seconds > 1.5 for seconds, _ in results)
    assert server.wait_idle() == 0


def test_elevenlabs_sdk_convert_and_timestamps(server: LiveServer) -> None:
    with httpx.Client(timeout=60) as http:
        sdk_calls_elevenlabs(ElevenLabs(api_key="k", base_url=server.url, httpx_client=http))


def sdk_calls_elevenlabs(client: ElevenLabs) -> None:
    audio = b"".join(client.text_to_speech.convert("JBFqnCBsd6RMkjVDRZzb", text=TEXT, model_id="eleven_flash_v2_5",
                                                   output_format="pcm_16000"))
    assert len(audio) / 2 / 16000 > 3.0
    stamped = client.text_to_speech.convert_with_timestamps("JBFqnCBsd6RMkjVDRZzb", text="Timed words here.",
                                                            output_format="pcm_24000")
    assert stamped.alignment is not None
    assert "".join(stamped.alignment.characters).split() == "Timed words here.".split()
    assert len(base64.b64decode(stamped.audio_base_64)) > 24000
    chunks = list(client.text_to_speech.stream_with_timestamps("x", text="One. Two words.", output_format="pcm_16000"))
    assert "".join(c for chunk in chunks if chunk.alignment for c in chunk.alignment.characters).split() == [
        "One.", "Two", "words."]


def test_cartesia_sdk_bytes_and_sse(server: LiveServer, tmp_path: Path) -> None:
    with Cartesia(api_key="k", base_url=server.url) as client:
        sdk_calls_cartesia(client, tmp_path)


def sdk_calls_cartesia(client: Cartesia, tmp_path: Path) -> None:
    response = client.tts.generate(model_id="sonic-3", transcript=TEXT, voice={"mode": "id", "id": "v"},
                                   output_format={"container": "wav", "encoding": "pcm_s16le", "sample_rate": 24000})
    path = tmp_path / "out.wav"
    response.write_to_file(path)
    assert path.stat().st_size > 24000 * 2 * 3
    events = list(client.tts.generate_sse(model_id="sonic-3", transcript="Timed words here.", add_timestamps=True,
                                          voice={"mode": "id", "id": "v"},
                                          output_format={"container": "raw", "encoding": "pcm_f32le",
                                                         "sample_rate": 16000}))
    assert events[-1].type == "done"
    words = [w for e in events if e.type == "timestamps" for w in e.word_timestamps.words]
    assert words == "Timed words here.".split()


def test_livekit_elevenlabs_with_a_bad_model_fails_instead_of_waiting(server: LiveServer,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A socket refused for its URL's parameters used to send its error and close at once, before
    # LiveKit's plugin had registered its stream on it (it does so after connecting): the error,
    # without a context id, and the close failed nothing, and the stream waited forever. An
    # agent's busy event loop widens that window; the sleep after connecting stands for it.
    from livekit.agents import APIConnectOptions, APIStatusError
    from livekit.plugins.elevenlabs import tts as lk_tts

    connect = lk_tts._Connection.connect

    async def busy_connect(self: Any) -> None:
        await connect(self)
        await asyncio.sleep(0.3)

    monkeypatch.setattr(lk_tts._Connection, "connect", busy_connect)

    async def scenario() -> None:
        async with aiohttp.ClientSession() as session:
            tts = lk_elevenlabs.TTS(api_key="k", base_url=f"{server.url}/v1", voice_id="v", model="no-such-model",
                                    http_session=session)
            try:
                stream = tts.stream(conn_options=APIConnectOptions(max_retry=0, timeout=10))
                stream.push_text("Hello there.")
                stream.end_input()
                with pytest.raises(APIStatusError):
                    async for _ in stream:
                        pass
                await stream.aclose()
            finally:
                await tts.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 20))
    assert server.wait_idle() == 0


@pytest.mark.parametrize("context_id", ["", "x" * 257, 5])
def test_cartesia_sdk_sse_with_a_bad_context_id_is_a_400_naming_it(server: LiveServer, context_id: Any) -> None:
    """/tts/sse echoes context_id in every event: it is checked as on the WebSocket (it was echoed as
    sent, or dropped when not a string; found by a vendor-SDK trial)."""
    with Cartesia(api_key="k", base_url=server.url) as client:
        with pytest.raises(BadRequestError) as caught:
            list(client.tts.generate_sse(model_id="sonic-3", transcript="Hi there.", voice="v", context_id=context_id,
                                         output_format={"container": "raw", "encoding": "pcm_s16le",
                                                        "sample_rate": 8000}))
    assert caught.value.body["error"]["field"] == "context_id"

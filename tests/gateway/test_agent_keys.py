"""API keys on the vendor routes, through the clients agents run: each sends its key where
its vendor expects it (pipecat, LiveKit and the ElevenLabs SDK `xi-api-key`; pipecat and
LiveKit's Cartesia `X-API-Key` with `?cartesia_version=`; the Cartesia and OpenAI SDKs
`Authorization: Bearer`), and gateway/auth.py RULES checks it like any other key."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import cartesia
import elevenlabs.core
import httpx
import openai
import pytest
from cartesia import Cartesia
from elevenlabs.client import ElevenLabs
from pipecat.frames.frames import ErrorFrame, TTSAudioRawFrame, TTSSpeakFrame
from pipecat.tests.utils import SleepFrame, run_test

from tests.conftest import LiveServer, run_server
from tests.gateway.test_agent_clients import (
    livekit_speak, livekit_tts, pipecat_services, sdk_calls_cartesia, sdk_calls_elevenlabs,
)
from tests.gateway.test_keys import create_key, keyed_server

TEXT = "Keyed speech works through every client."


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    yield from keyed_server(tmp_path_factory, "agent", preload_models="piper-joe")  # scope speech


@pytest.mark.parametrize("index", [0, 1], ids=["elevenlabs", "cartesia"])
def test_pipecat_sends_its_key(keyed: tuple[LiveServer, str], index: int) -> None:
    live, key = keyed
    down, up = asyncio.run(run_test(pipecat_services(live, key)[index],
                                    frames_to_send=[TTSSpeakFrame(TEXT), SleepFrame(4)], start_timeout=10))
    assert sum(len(f.audio) for f in down if isinstance(f, TTSAudioRawFrame)) / 2 / 16000 > 1.0
    assert not [f for f in [*down, *up] if isinstance(f, ErrorFrame)]
    assert live.wait_idle() == 0


@pytest.mark.parametrize("index", [0, 1], ids=["elevenlabs", "cartesia"])
def test_pipecat_with_a_wrong_key_gets_no_audio(keyed: tuple[LiveServer, str], index: int) -> None:
    live, _ = keyed
    down, up = asyncio.run(run_test(pipecat_services(live, "vxg_wrong")[index],
                                    frames_to_send=[TTSSpeakFrame(TEXT), SleepFrame(2)], start_timeout=10))
    assert not [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert [f for f in [*down, *up] if isinstance(f, ErrorFrame)]  # the service reports the refused connection
    assert live.app_state.engine.num_requests() == 0


@pytest.mark.parametrize("vendor", ["elevenlabs", "cartesia"])
def test_livekit_sends_its_key(keyed: tuple[LiveServer, str], vendor: str) -> None:
    live, key = keyed

    async def scenario() -> tuple[float, list[tuple[str, float]]]:
        async with aiohttp.ClientSession() as session:
            tts = livekit_tts(live, vendor, session, api_key=key)
            try:
                return await livekit_speak(tts, TEXT)
            finally:
                await tts.aclose()

    seconds, words = asyncio.run(scenario())
    assert seconds > 1.0 and [w for w, _ in words] == TEXT.split()


def test_the_vendor_sdks_send_their_keys(keyed: tuple[LiveServer, str], tmp_path: Path) -> None:
    live, key = keyed
    with httpx.Client(timeout=60) as http:
        sdk_calls_elevenlabs(ElevenLabs(api_key=key, base_url=live.url, httpx_client=http))
        with pytest.raises(elevenlabs.core.ApiError) as refused:
            ElevenLabs(api_key="vxg_wrong", base_url=live.url, httpx_client=http).text_to_speech.convert(
                "v", text=TEXT, output_format="pcm_16000").__next__()
        assert refused.value.status_code == 401
    with Cartesia(api_key=key, base_url=live.url) as client:
        sdk_calls_cartesia(client, tmp_path)
    with Cartesia(api_key="vxg_wrong", base_url=live.url, max_retries=0) as client, \
            pytest.raises(cartesia.AuthenticationError):
        client.tts.generate(model_id="sonic-3", transcript=TEXT, voice={"mode": "id", "id": "v"},
                            output_format={"container": "wav", "encoding": "pcm_s16le", "sample_rate": 16000})
    sdk = openai.OpenAI(api_key=key, base_url=f"{live.url}/v1", max_retries=0)
    assert len(sdk.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm").read()) > 0
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(api_key="vxg_wrong", base_url=f"{live.url}/v1", max_retries=0).audio.speech.create(
            model="tts-1", voice="alloy", input=TEXT)


def test_a_server_without_keys_ignores_the_one_a_client_sends(tmp_path: Path) -> None:
    for live in run_server(tmp_path):
        with httpx.Client(base_url=live.url, timeout=60) as client:
            body = {"text": "No keys here.", "model_id": "eleven_flash_v2_5"}
            assert client.post("/v1/text-to-speech/v?output_format=pcm_16000", json=body,
                               headers={"xi-api-key": "anything"}).status_code == 200
            key = create_key(tmp_path, "first")  # now the server has a key: one that is sent must be valid
            assert client.post("/v1/text-to-speech/v?output_format=pcm_16000", json=body,
                               headers={"xi-api-key": "anything"}).status_code == 401
            assert client.post("/v1/text-to-speech/v?output_format=pcm_16000", json=body,
                               headers={"xi-api-key": key}).status_code == 200
            assert client.post("/v1/text-to-speech/v?output_format=pcm_16000", json=body).status_code == 200


@pytest.mark.parametrize(("path", "how", "field"), [
    ("/tts/bytes", {"headers": {"X-API-Key": "vxg_wrong"}}, "x-api-key"),
    ("/tts/bytes", {"params": {"api_key": "vxg_wrong"}}, "api_key"),
    ("/tts/bytes", {"headers": {"Authorization": "Bearer vxg_wrong"}}, "Authorization"),
    ("/v1/text-to-speech/v", {"headers": {"xi-api-key": "vxg_wrong"}}, "xi-api-key"),
])
def test_a_wrong_key_is_named_where_it_was_sent(keyed: tuple[LiveServer, str], path: str, how: dict[str, dict[str, str]],
                                                field: str) -> None:
    """A refused key's error names the header or parameter it came in, not always `Authorization`."""
    live, _ = keyed
    response = httpx.post(f"{live.url}{path}", json={"text": TEXT}, timeout=30, **how)  # type: ignore[arg-type]
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key" and error["field"] == field, error

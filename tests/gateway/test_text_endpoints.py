"""The text frontend through the public endpoints: what LLM-style inputs are spoken as.

`POST /v1/text/normalize` answers with exactly the segments `/v1/audio/speech` speaks;
`/v1/realtime` reports what it spoke in `utterance.done`'s `text`. The audio checks use a
preset with `noise_w_scale = 0` (fixed phoneme durations), so lengths compare exactly.
"""

from __future__ import annotations

import io
import json
import time
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from websockets.sync.client import connect

from tests.conftest import LiveServer
from tests.gateway.test_realtime import collect_utterance, open_session, recv_event

SPOKEN = [
    # (input, request options, expected spoken text)
    ("**Important:** read this", {}, "Important: read this"),
    ("# Getting started\n\nInstall it first.", {}, "Getting started. Install it first."),
    ("1. Open the app\n2. Tap *Settings*\n3. Done", {}, "Open the app. Tap Settings. Done."),
    ("> Stay hungry, stay foolish.", {}, "Stay hungry, stay foolish."),
    ("| Plan | Price |\n|---|---|\n| Basic | $5 |\n| Pro | $12.50 |", {},
     "Plan, Price. Basic, five dollars. Pro, twelve dollars, fifty cents."),
    ("Read [the guide](https://docs.example.com/guide) first.", {}, "Read the guide first."),
    ("Go to https://www.example.com/pricing?ref=chat#top now.", {}, "Go to example dot com slash pricing now."),
    ("Email support@example.com for help.", {}, "Email support at example dot com for help."),
    ("It costs $3.50 today.", {}, "It costs three dollars, fifty cents today."),
    ("Revenue hit €2.5M, up 12%.", {}, "Revenue hit two point five million euro, up twelve percent."),
    ("Meet me on 2024-03-15 at 10:30 am.", {}, "Meet me on March fifteenth, twenty twenty-four at ten thirty AM."),
    ("She came 1st, he came 22nd in 1999.", {}, "She came first, he came twenty-second in nineteen ninety-nine."),
    ("It is 25°C and 5 km away.", {}, "It is twenty-five degrees Celsius and five kilometers away."),
    ("Call (555) 123-4567 about the '80s.", {},
     "Call five five five, one two three, four five six seven about the eighties."),
    ("For $0.99, 3/4 of 100k users and/or 2h 30m at 3:1.", {},
     "For ninety-nine cents, three quarters of one hundred thousand users and or two hours thirty minutes at "
     "three to one."),
    ("Run `pip install voxgate` first.", {}, "Run pip install voxgate first."),
    ("Try this:\n```bash\nrm -rf /tmp/x\n```\nThat was code.", {}, "Try this: That was code."),
    ("Try this:\n```bash\nls -la\n```", {"code": "speak"}, "Try this: ls -la."),
    ("Run `make` now.", {"code": "skip"}, "Run now."),
    ("Great work 🎉🚀!", {}, "Great work!"),
    ("Great work 🎉!", {"emoji": "name"}, "Great work party popper!"),
    ("Hello, 世界。Bonjour!", {}, "Hello, 世界。 Bonjour!"),
    ("Der Preis ist 3,50 € am 15.03.2024.", {"language": "de_DE"},
     "Der Preis ist drei Euro und fünfzig Cent am fünfzehnten März zweitausendvierundzwanzig."),
    ("Der 01.04.2025 ist bis 03.04.2025 frei.", {"language": "de_DE"},  # nominative, then after "bis"
     "Der erste April zweitausendfünfundzwanzig ist bis dritten April zweitausendfünfundzwanzig frei."),
    ("Il fait 20 °C, soit 5 % de plus.", {"language": "fr"}, "Il fait vingt degrés Celsius, soit cinq pour cent de plus."),
    ("Es waren -5 °C, der Kaffee kostet $3.50.", {"language": "de_DE"},
     "Es waren minus fünf Grad Celsius, der Kaffee kostet drei Dollar und fünfzig Cent."),
    ("It was -5°C; 5-10% of C# users run v2.0.1 within 45s.", {},
     "It was minus five degrees Celsius; five to ten percent of C sharp users run v two point zero point one within "
     "forty-five seconds."),
    ("**Not** touched: $5", {"normalize": False}, "**Not** touched: $5"),
]


def normalize(client: httpx.Client, text: str, **options: Any) -> dict[str, Any]:
    response = client.post("/v1/text/normalize", json={"input": text, **options})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize(("text", "options", "spoken"), SPOKEN)
def test_llm_style_input_is_spoken_as_a_person_reads_it(client: httpx.Client, text: str,
                                                        options: dict[str, Any], spoken: str) -> None:
    assert normalize(client, text, **options)["text"] == spoken


def test_ssml_breaks_are_pauses_between_segments(client: httpx.Client) -> None:
    body = normalize(client, '<speak>Hold on <break time="750ms"/> here it is. <break strength="weak"/>Done.</speak>')
    assert body["items"] == [{"text": "Hold on"}, {"pause_ms": 750.0}, {"text": "here it is."},
                             {"pause_ms": 250.0}, {"text": "Done."}]
    assert body["language"] == "en_US"  # the embedded voice's config says so


@pytest.mark.parametrize(("body", "field"), [
    ({"input": 'a <break time="forever"/> b'}, "input"),
    ({"input": 'a <break time="11s"/> b'}, "input"),
    ({"input": "hi", "normalize": "yes"}, "normalize"),
    ({"input": "hi", "code": "read"}, "code"),
    ({"input": "hi", "emoji": 3}, "emoji"),
    ({"input": "hi", "language": "not a language"}, "language"),
    ({"input": "hi", "language": "zz"}, "language"),  # well formed, but no language CLDR knows
    ({"input": "hi", "language": "xx_YY"}, "language"),
    ({"input": "hi", "lang": "en"}, "lang"),  # an unknown field is refused, not ignored
])
def test_bad_text_options_are_400_naming_the_field(client: httpx.Client, body: dict[str, Any], field: str) -> None:
    for path in ("/v1/text/normalize", "/v1/audio/speech"):
        if path == "/v1/audio/speech" and field in ("language", "lang"):
            continue
        response = client.post(path, json=body)
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["field"] == field


def test_input_with_nothing_left_to_say_is_refused(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", json={"input": "```\ncode only\n```"})
    assert response.status_code == 400 and response.json()["error"]["field"] == "input"
    assert "nothing to speak" in response.json()["error"]["message"]


def steady(client: httpx.Client) -> str:
    preset = {"name": "steady", "model": "piper-joe", "voice": "default", "settings": {"noise_w_scale": 0}}
    assert client.post("/v1/presets", json=preset).status_code in (201, 409)
    return "steady"


def seconds(client: httpx.Client, text: str, **body: Any) -> float:
    response = client.post("/v1/audio/speech", json={"input": text, "voice": steady(client),
                                                     "response_format": "wav", **body})
    assert response.status_code == 200, response.text
    with sf.SoundFile(io.BytesIO(response.content)) as f:
        return float(sum(len(b) for b in f.blocks(blocksize=4096)) / f.samplerate)


def test_normalised_markdown_is_as_long_as_its_plain_twin(client: httpx.Client) -> None:
    markdown = ("## Summary\n\n**Important:** the `build` passed. See [the report](https://ci.example.com/run/42) "
                "for *all* details.\n\n- Fast\n- Cheap")
    plain = "Summary. Important: the build passed. See the report for all details. Fast. Cheap."
    spoken, twin = seconds(client, markdown), seconds(client, plain)
    assert abs(spoken - twin) <= 0.10 * twin, (spoken, twin)
    raw = seconds(client, markdown, normalize=False)  # read as written: asterisks, hashes and the URL
    assert raw > 1.3 * twin, (raw, twin)


def test_a_break_adds_its_silence(client: httpx.Client) -> None:
    without = seconds(client, "One two three. Four five six.")
    with_break = seconds(client, 'One two three. <break time="1500ms"/> Four five six.')
    assert 1.3 < with_break - without < 1.7, (without, with_break)


def test_a_run_of_breaks_is_one_pause_of_at_most_ten_seconds(client: httpx.Client) -> None:
    """Breaks with nothing spoken between them are one pause, at most one break's longest: a run
    of them made silence without end (300 ten-second breaks, 6 KB of text, made a 227 MB frame)."""
    items = normalize(client, 'Wait <break time="2s"/><break time="1s"/> a bit <break time="10s"/> '
                              '<break time="10s"/><break strength="x-strong"/> then go.')["items"]
    assert items == [{"text": "Wait"}, {"pause_ms": 3000.0}, {"text": "a bit"}, {"pause_ms": 10000.0},
                     {"text": "then go."}]
    run = seconds(client, "One two three. " + '<break time="10s"/>' * 200 + " Four five six.")  # 2,000 s before
    assert run < seconds(client, "One two three. Four five six.") + 10.5, run


def test_a_long_input_is_several_engine_requests_played_as_one(server: LiveServer, client: httpx.Client) -> None:
    engine = server.app_state.engine
    submitted: list[int] = []
    submit = engine.submit

    def recording(spec: Any) -> Any:
        submitted.append(len(spec.text))
        return submit(spec)

    engine.submit = recording  # type: ignore[method-assign]
    try:
        text = " ".join(f"Sentence number {i} is here." for i in range(90))  # ~2,500 characters
        response = client.post("/v1/audio/speech", json={"input": text, "response_format": "pcm", "speed": 4.0})
    finally:
        engine.submit = submit  # type: ignore[method-assign]
    assert response.status_code == 200
    assert len(submitted) >= 3 and max(submitted) <= 1000, submitted
    audio = np.frombuffer(response.content, "<i2")
    assert len(audio) / 24000 > 15  # every sentence was spoken (~90 short ones at 4x speed)
    assert server.wait_idle() == 0


def test_realtime_pieces_speak_what_the_whole_text_speaks(server: LiveServer, client: httpx.Client) -> None:
    text = ("# Plan\n\n**First**, open https://example.com/start and pay $3.50.\n"
            "- Then call 555-0100 at 3 pm.\n- Finally, rest 😀. <break time=\"200ms\"/> Done!")
    whole = normalize(client, text)["text"]
    with open_session(server) as ws:
        for at in range(0, len(text), 3):
            ws.send(json.dumps({"type": "text.append", "text": text[at:at + 3]}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, _ = collect_utterance(ws)
    assert events[-1]["type"] == "utterance.done", events
    assert events[-1]["text"] == whole


def test_realtime_session_text_options(server: LiveServer) -> None:
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        created = json.loads(ws.recv())
        assert created["session"]["normalize"] is True and created["session"]["language"] == "en_US"
        ws.send(json.dumps({"type": "session.update", "session": {"emoji": "name", "code": "skip"}}))
        updated = json.loads(ws.recv())
        assert updated["session"]["emoji"] == "name" and updated["session"]["code"] == "skip"
        ws.send(json.dumps({"type": "session.update", "session": {"normalize": 1}}))
        error = json.loads(ws.recv())
        assert error["type"] == "error" and error["error"]["field"] == "session.normalize"
        ws.send(json.dumps({"type": "text.append", "text": "Nice work 🎉, run `rm` now."}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, _ = collect_utterance(ws)
    assert events[-1]["text"] == "Nice work party popper, run now."


def test_leaving_a_long_input_midway_leaves_no_engine_request(server: LiveServer, client: httpx.Client) -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(90))
    with client.stream("POST", "/v1/audio/speech", json={"input": text, "response_format": "pcm"}) as response:
        assert response.status_code == 200
        next(response.iter_bytes())
    assert server.wait_idle() == 0


def test_an_emoji_alone_is_spoken_when_emoji_are_named(client: httpx.Client) -> None:
    """The "something to say" check applies to what the options make of the input: with
    `emoji: "name"` an emoji is words (it was a 400 "no letters or digits")."""
    assert normalize(client, "😀", emoji="name")["text"] == "grinning face"
    spoken = client.post("/v1/audio/speech", json={"input": "😀", "emoji": "name", "response_format": "pcm"})
    assert spoken.status_code == 200 and len(spoken.content) > 0, spoken.text


@pytest.mark.parametrize("path", ["/v1/text/normalize", "/v1/audio/speech"])
def test_an_emoji_alone_that_is_dropped_is_a_400_that_says_why(client: httpx.Client, path: str) -> None:
    response = client.post(path, json={"input": "😀 🎉"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["field"] == "input" and error["message"] == (
        'input has nothing that can be spoken (no letters or digits; emoji are dropped unless emoji is "name")')
    code_only = client.post(path, json={"input": "```\ncode only\n```"})  # normalize refuses what speech refuses
    assert code_only.status_code == 400 and "nothing to speak" in code_only.json()["error"]["message"]


def test_realtime_speaks_an_emoji_alone_when_emoji_are_named(server: LiveServer) -> None:
    with open_session(server, emoji="name") as ws:
        ws.send(json.dumps({"type": "text.append", "text": "🎉"}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, audio = collect_utterance(ws)
    assert events[-1]["type"] == "utterance.done" and events[-1]["text"] == "party popper" and audio


def test_realtime_text_with_nothing_to_speak_is_an_error_when_it_ends(server: LiveServer) -> None:
    """What REST refuses with a 400 gets an `error` naming `text` when it ends (a flush, or
    `utterance_end_ms` without more text), not silence; an emoji within spoken text is no error."""
    message = ("text has nothing that can be spoken (no letters or digits; "
               'emoji are dropped unless session.emoji is "name")')
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": "😀"}))
        ws.send(json.dumps({"type": "text.flush"}))
        error = recv_event(ws)
        assert error["type"] == "error" and error["error"] == {
            "code": "invalid_input", "field": "text", "message": message}, error
        ws.send(json.dumps({"type": "text.append", "text": "🎉 "}))  # never flushed
        sent = time.monotonic()
        error = recv_event(ws, timeout=10)
        assert error["type"] == "error" and error["error"]["field"] == "text", error
        assert time.monotonic() - sent >= server.settings.utterance_end_ms / 1000 - 0.1
        for piece in ("Well done ", "🎉", " and goodbye."):
            ws.send(json.dumps({"type": "text.append", "text": piece}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, _ = collect_utterance(ws)
    assert [e["type"] for e in events] == ["audio.start", "utterance.done"], events
    assert events[-1]["text"] == "Well done and goodbye."

"""`WS /v1/realtime`: one session per connection, one utterance at a time.

Client → server (JSON text frames): `session.update`, `text.append`, `text.flush`,
`response.cancel`, `playback.position`. Server → client: `session.created`,
`session.updated`, `audio.start`, binary PCM16 frames, `audio.words` (with the session's
`timings`), `utterance.done`, `error`. docs/realtime.md is the protocol reference, with a
client example.

Text arriving in pieces goes through the session's TextFeed (gateway/text_feed.py, the
text frontend's TextStream): the first clause of an utterance is queued as soon as it is
complete, then each sentence, or a sentence's text so far (at its last clause mark, else
its last whole word) once the listener would run dry before its end (the playback clock's
deadline less its synthesis time, `realtime_pace_ms` to spare); an incomplete tail is
spoken after `text_buffer_ms` without new text, or on `text.flush`, which also ends the
utterance once its audio is done. An utterance that is never flushed ends `utterance_end_ms` after its audio has
played out (gateway/realtime_text.py). A failure of its synthesis (a model that cannot
load, no room for it) ends it too: one `error`, the rest of its text dropped, then its
one `utterance.done` with the error's code. The utterance itself is an UtteranceStream
(gateway/utterance.py, shared with the vendor protocols): segments queued while one
engine request runs are sent as the next request (at most the family's request size,
gateway/stitch.py), SSML pauses as silence, word timings with the audio. Each session's
messages are rate-limited (`realtime_messages_per_s`, `realtime_message_burst`; a
`response.cancel` or `text.flush` over the rate still passes, within a small allowance of its
own: gateway/rate.py) and the loop yields after each, so one flooding client cannot hold the event loop. Frames are
parsed within bounds and every write is time-bounded (gateway/connection.py): a client
that stops reading is closed (1008, with the reason) and its engine request freed.

The utterance's PlaybackClock (engine/clock.py) turns the client's `playback.position`
reports into stall counts, and each engine request gets the same reports shifted by
the audio that preceded it, so its deadlines match what the listener hears.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Sequence

import numpy as np
from starlette.websockets import WebSocket

from engine.types import EngineError, InvalidInput, WordTiming
from gateway.access_log import note, tally
from gateway.audio import to_pcm16
from gateway.connection import CLIENT_GONE, Connection
from gateway.errors import ApiError, as_api_error
from gateway.json_input import finite_number
from gateway.rate import MessageRate
from gateway.realtime_text import SessionText, Turn
from gateway.state import AppState
from gateway.stitch import speech_options
from gateway.text import TEXT_FIELDS
from gateway.text_feed import TextFeed
from gateway.timings import WordQueue, words_json
from gateway.utterance import UtteranceStream
from gateway.clone_voices import resolve_voice
from gateway.voices import Choice, check_speed

log = logging.getLogger(__name__)

SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
DEFAULT_SAMPLE_RATE = 24000
SESSION_FIELDS = ("model", "voice", "speed", "sample_rate", "format", "timings", *TEXT_FIELDS)
# What `session.created` / `session.updated` also show, which follows from the fields above:
# a session.update may send it back (the session it was given) as long as it still holds.
READ_ONLY_FIELDS = ("language",)
# Each client event's fields besides "type"; any other refuses the whole event, as an
# unknown `session` field refuses a session.update.
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "session.update": ("session",), "text.append": ("text",), "text.flush": (), "response.cancel": (),
    "playback.position": ("played_ms", "playing", "underrun"),
}
# Events that only stop or end speech (they add no text): over the message rate they still pass, within
# a small allowance of their own (gateway/rate.py).
CONTROL_TYPES = frozenset({"response.cancel", "text.flush"})


def _field(session: dict[str, Any], name: str, current: Any, default: Any) -> Any:
    """A `session.update` field: left out, the session's `current` value; null, its `default`."""
    if name not in session:
        return current
    return default if session[name] is None else session[name]


class Session(SessionText):
    def __init__(self, state: AppState, ws: WebSocket) -> None:
        self.state = state
        self.ws = ws
        self.connection = Connection(state, ws, "realtime")  # bounded writes (gateway/writes.py)
        self.settings = state.settings
        self.choice = Choice(self.settings.default_model, self.settings.default_voice, 1.0)
        self.sample_rate = DEFAULT_SAMPLE_RATE
        self.timings = False  # session field: send `audio.words` with the audio
        self.feed = TextFeed(self.settings, self.queue, self.send_error, field="text", deadline=self.release_by_s)
        self.utterance: UtteranceStream | None = None
        self.words = WordQueue()  # the current utterance's words not yet sent
        self.words_estimated = False
        self.audio_started = False  # audio.start sent for the current utterance
        self.failure: str | None = None  # the current utterance's error code, once its synthesis failed
        # Turns that came after text.flush while that utterance still plays: the next ones.
        self.backlog: list[Turn] = []
        self.end_timer: asyncio.TimerHandle | None = None
        self.rate = MessageRate(self.settings.realtime_messages_per_s, self.settings.realtime_message_burst)
        self.finishing: UtteranceStream | None | bool = False  # a shutdown's: the utterance it lets finish

    # -- sending ----------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        options = self.feed.options
        return {"model": self.choice.model_id, "voice": self.choice.preset or self.choice.voice,
                "speed": self.choice.speed, "sample_rate": self.sample_rate, "format": "pcm16",
                "timings": self.timings, "normalize": options.normalize, "code": options.code,
                "emoji": options.emoji, "language": options.language}

    async def send(self, event: dict[str, Any]) -> None:
        await self.connection.send_json(event)

    async def send_error(self, error: Exception) -> None:
        api = as_api_error(error)
        await self.send({"type": "error", "error": {"code": api.code, "message": api.message, "field": api.field}})

    # -- main loop --------------------------------------------------------------------

    async def run(self) -> None:
        try:  # the defaults as REST resolves them (a preset name, or the model's first voice)
            self.choice = await resolve_voice(self.state, model=None, voice=None, speed=None)
        except EngineError:
            pass  # the default model is not installed: the first utterance says so
        self.feed.options = await speech_options(self.state, self.choice, {})
        await self.send({"type": "session.created", "session": self.describe()})
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            await asyncio.sleep(0)  # queued messages run one at a time, not back to back
            allowed = self.rate.allow()
            try:
                event = self.connection.parse(message)
                # Over the rate, a cancel or flush still passes (within the control allowance): a client
                # that flooded text can still barge in or end its turn.
                if allowed or (event.get("type") in CONTROL_TYPES and self.rate.allow_control()):
                    await self.handle(event)
                    continue
            except (ApiError, EngineError) as error:
                if allowed:
                    await self.send_error(error)
                    continue
            refusal = self.rate.refusal()  # (at most one a second; the other messages are dropped silently)
            if refusal is not None:
                await self.send_error(refusal)

    async def handle(self, event: dict[str, Any]) -> None:
        """One client event. Raises ApiError/EngineError (sent as `error`, the session lives
        on): an unknown type, or a field the type does not have (`check_fields`)."""
        kind = event.get("type")
        if isinstance(kind, str) and kind in EVENT_FIELDS:
            check_fields(kind, event)
        if kind == "session.update":
            await self.update(event.get("session"))
        elif kind == "text.append":
            await self.append(event.get("text"))
        elif kind == "text.flush":
            await self.flush()
        elif kind == "response.cancel":
            await self.cancel()
        elif kind == "playback.position":
            await self.playback(event)
        elif kind is None:
            raise ApiError(400, "unknown_type", 'message has no "type"', field="type")
        else:
            raise ApiError(400, "unknown_type", f"unknown message type {kind!r}", field="type")

    # -- client messages --------------------------------------------------------------

    async def update(self, session: Any) -> None:
        if not isinstance(session, dict):
            raise InvalidInput("session must be an object", field="session")
        unknown = sorted(set(session) - set(SESSION_FIELDS) - set(READ_ONLY_FIELDS))
        if unknown:
            raise InvalidInput(f"unknown session field {unknown[0]!r}; fields: {', '.join(SESSION_FIELDS)}",
                               field=f"session.{unknown[0]}")
        # One rule for every field: left out, it keeps its value; null is its default (what
        # session.created has), as a REST field's null is (model, voice, speed: as resolved there).
        fmt = _field(session, "format", "pcm16", "pcm16")
        if fmt != "pcm16":
            raise InvalidInput(f"session.format must be 'pcm16', got {fmt!r}", field="session.format")
        rate = _field(session, "sample_rate", self.sample_rate, DEFAULT_SAMPLE_RATE)
        if rate not in SAMPLE_RATES or isinstance(rate, bool):
            raise InvalidInput(f"session.sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))}",
                               field="session.sample_rate")
        if session.get("speed") is not None:
            check_speed(session["speed"], "session.speed")
        timings = _field(session, "timings", self.timings, False)
        if not isinstance(timings, bool):
            raise InvalidInput("session.timings must be true or false", field="session.timings")
        model = session.get("model", self.choice.model_id)
        if "voice" in session:
            voice = session["voice"]
        elif (self.settings.default_model if model is None else model) == self.choice.model_id:  # (null: the default)
            voice = self.choice.preset or self.choice.voice
        else:
            voice = None  # a new model starts on its default voice
        speed = session.get("speed", None if "voice" in session else self.choice.speed)
        empty = isinstance(voice, str) and not voice.strip()  # (it spoke in the default voice; REST refuses it)
        try:
            choice = await resolve_voice(self.state, model=model, voice="" if empty else voice, speed=speed,
                                         preset_may_switch_model="model" not in session)  # reference voices too
        except EngineError as error:  # (an empty voice of a Base model: no default, the reference voices listed)
            error.field = f"session.{error.field}" if error.field else "session"
            raise
        if empty:
            raise InvalidInput("session.voice is empty: name a voice or preset, or null for the model's default",
                               field="session.voice")
        settable = {key: value for key, value in session.items() if key not in READ_ONLY_FIELDS}
        options = await speech_options(self.state, choice, {**self._text_fields(), **settable}, prefix="session.")
        language = session.get("language")
        if language is not None and language != options.language:
            raise InvalidInput(f"session.language follows the model and voice ({options.language!r} with these); "
                               "it cannot be set: leave it out", field="session.language")
        # Applies from the next utterance (text options: to text not yet cut into segments).
        self.choice, self.sample_rate, self.timings = choice, int(rate), timings  # (24000.0 is 24000)
        self.feed.options = options
        await self.send({"type": "session.updated", "session": self.describe()})

    def _text_fields(self) -> dict[str, Any]:
        options = self.feed.options
        return {"normalize": options.normalize, "code": options.code, "emoji": options.emoji}

    async def playback(self, event: dict[str, Any]) -> None:
        """`playback.position`: `played_ms` of this utterance played; `playing: false` is a pause,
        unless `underrun: true` says the buffer ran dry (a stall: docs/realtime.md)."""
        played, playing = finite_number(event.get("played_ms")), event.get("playing", True)
        underrun = event.get("underrun", False)
        if played is None or played < 0:
            raise InvalidInput("played_ms must be a finite number >= 0", field="played_ms")
        if not isinstance(playing, bool):
            raise InvalidInput("playing must be true or false", field="playing")
        if not isinstance(underrun, bool):
            raise InvalidInput("underrun must be true or false", field="underrun")
        if underrun and playing:
            raise InvalidInput("underrun: true says playback stopped because the buffer ran dry; "
                               "send it with playing: false", field="underrun")
        if self.utterance is not None:
            self.utterance.playback(float(played), playing, underrun)
            await self.feed.pace()  # the listener's deadline moved

    # -- utterance output (gateway/utterance.py Listener; on_idle, on_error: realtime_text.py)

    def new_utterance(self) -> UtteranceStream:
        self.words = WordQueue()
        choice = self.choice  # a session.update applies from the next utterance, not its next request
        return UtteranceStream(self.state, self, lambda: choice, self.sample_rate, prefix="rt",
                               timings=self.timings)

    async def on_audio(self, utterance: UtteranceStream, pcm: np.ndarray,
                       words: Sequence[WordTiming], estimated: bool) -> None:
        if utterance is not self.utterance:
            return
        if not self.audio_started:
            self.audio_started = True
            await self.send({"type": "audio.start", "utterance_id": utterance.utterance_id,
                             "sample_rate": utterance.sample_rate})
        if len(pcm):
            await self.connection.send_bytes(to_pcm16(pcm))
        if utterance.timings:
            self.words.add(words)
            self.words_estimated = self.words_estimated or estimated
            await self._send_words(utterance, self.words.take(utterance.clock.delivered_ms))

    async def _send_words(self, utterance: UtteranceStream, words: Sequence[WordTiming]) -> None:
        if words:
            await self.send({"type": "audio.words", "utterance_id": utterance.utterance_id,
                             "words": words_json(words), "estimated": self.words_estimated})

    async def done(self, utterance: UtteranceStream, cancelled: bool, error: str | None = None) -> None:
        """`utterance.done`; `error` is the code of a failure that ended it early."""
        if utterance.timings and not cancelled:
            await self._send_words(utterance, self.words.take())
        self.audio_started, self.words_estimated = False, False
        utterance.observe("realtime", cancelled)
        if error:
            tally(failed=1)
            note(last_error=error)
        clock = utterance.clock
        await self.send({
            "type": "utterance.done", "utterance_id": utterance.utterance_id,
            "audio_ms": round(clock.delivered_ms, 1),
            "ttfa_ms": None if clock.ttfa_ms is None else round(clock.ttfa_ms, 1),
            "stalls": clock.stalls, "stall_ms": round(clock.stall_ms, 1), "cancelled": cancelled, "error": error,
            "text": utterance.text,
        })

    def idle(self) -> bool:
        """For a shutdown (gateway/connection.py `end_if_idle`, first called when it begins): the
        utterance being spoken then is over, or has all its text spoken and was not flushed (its
        `utterance.done` would wait for its playback). A later utterance, and text not yet
        released to one, do not count: they are not spoken."""
        utterance = self.utterance
        if self.finishing is False:
            self.finishing = utterance
        return utterance is None or utterance is not self.finishing or not (utterance.busy or utterance.ending)

    async def close(self) -> None:
        self.feed.cancel_timer()
        self._cancel_end_timer()
        unstarted = self.unstarted_turns() if self.connection.ended else 0
        utterance, self.utterance = self.utterance, None
        if utterance is not None:
            utterance.cancel()
        if not self.connection.ended:
            if utterance is not None:  # the client left mid-utterance: its TTFA still counts, as REST's does
                utterance.observe("realtime", cancelled=True)
            return
        # A shutdown: every turn the client started hears why it has no more, before the 1012 (the one
        # being spoken, unflushed with its text all spoken or cut at its start; each later one, as a
        # cancel's: audio_ms 0, text "").
        turns = [utterance] if utterance is not None else []
        turns += [self.new_utterance() for _ in range(unstarted)]
        try:
            for turn in turns:
                turn.cancel()
                await self.done(turn, cancelled=False, error="shutting_down")
        except (RuntimeError, *CLIENT_GONE):
            pass


def check_fields(kind: str, event: dict[str, Any]) -> None:
    """Refuse an event with a field its type does not have (`EVENT_FIELDS`): InvalidInput
    naming the first such field, sorted by name; nothing of the event is acted on."""
    allowed = EVENT_FIELDS[kind]
    unknown = sorted(set(event) - {"type", *allowed})
    if unknown:
        known = f"its fields: {', '.join(allowed)}" if allowed else "it has no fields besides type"
        raise InvalidInput(f"unknown field {unknown[0]!r} in {kind}; {known}", field=unknown[0])


async def realtime(ws: WebSocket) -> None:
    state: AppState = ws.app.state.voxgate
    await ws.accept()
    if state.draining:
        await ws.close(code=1013, reason="server is shutting down")
        return
    session = Session(state, ws)
    await session.connection.serve(session.run, session.close, session.idle, session.send_error)

"""A context of the ElevenLabs and Cartesia WebSockets: text in pieces, one utterance out.

A context is an utterance stream (gateway/utterance.py) fed by a TextFeed
(gateway/text_feed.py), exactly as `/v1/realtime` feeds one: the text frontend reads
the text (markdown, numbers, SSML breaks), the first clause is spoken as soon as it is
complete, then each sentence, an unfinished tail after `text_buffer_ms` or on flush; with
`eager`, for clients that send whole sentences, a message ending a sentence is spoken at
once. The feed is paced as `/v1/realtime`'s (`realtime_pace_ms`): a sentence's text so far
is spoken before its end when the listener would run dry first, by the stream's playback
clock, which without playback reports (the vendors' clients send none) plays the context's
audio at 1x from its first. Its audio is encoded in the context's output format, and its
words are handed over with the audio that speaks them. A flush speaks what is buffered and
keeps the context open; a flush with an id is acknowledged (`send_flush_done`) once the text
before it is spoken and before any audio of text sent after it: it is a mark in the
utterance stream's queue, which text sent later (at once, or released by the pacing) follows
as the next engine request. `close()` ends it once its audio is out (`send_final`); `cancel()`
stops it at once, engine request included. Subclasses write the wire messages.

A failure of its synthesis (its model cannot load, no room for it, the engine refuses or
fails a request) fails the context once, as `/v1/realtime` fails an utterance
(gateway/realtime_text.py): `send_error` now, the engine request freed, and the rest of
its text dropped, not retried sentence by sentence. The failed context ends when its
input does (`close()`; at once if it was already closed): `send_failed_final`. Text sent
for it meanwhile is not spoken: the protocol answers its first such message with
`context_failed` (`refuse_dropped`), not silence.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, Sequence

import numpy as np

from engine.types import EngineError, InvalidInput, WordTiming
from gateway.audio import StreamEncoder
from gateway.errors import ApiError, as_api_error
from gateway.state import AppState
from gateway.text import Item, TextOptions
from gateway.text_feed import TextFeed
from gateway.timings import WordQueue
from gateway.utterance import UtteranceStream
from gateway.vendor_formats import OutputFormat
from gateway.voices import Choice

log = logging.getLogger(__name__)

# Text ending a sentence: the end of a message, when the client sends whole sentences.
SENTENCE_END = re.compile(r"[.!?…。！？][\"'”’)\]]*\s*$")
class TextContext:
    """One context: `append`, `flush`, `close`, `cancel`; subclasses send the messages."""

    source = "vendor"  # metrics label

    def __init__(self, state: AppState, context_id: str, choice: Choice, fmt: OutputFormat, options: TextOptions,
                 *, timings: bool, eager: bool = False, field: str = "text") -> None:
        self.state = state
        self.eager = eager  # the client sends whole sentences: speak each when its text ends
        self.context_id = context_id
        self.choice = choice
        self.format = fmt
        self.stream = UtteranceStream(state, self, lambda: self.choice, fmt.sample_rate,
                                      prefix=self.source[:2], timings=timings)
        # Paced like /v1/realtime's by the stream's clock, which, without playback reports,
        # plays its audio at 1x from the first (gateway/utterance.py release_by_s).
        self.feed = TextFeed(state.settings, self._queue, self._tail_error, options=options, field=field,
                             deadline=self.stream.release_by_s)
        self.encoder = self._encoder()
        # Audio out one piece at a time, in order: encoding may await a thread
        # (gateway/audio.py), and a stream's bytes must not interleave.
        self._out = asyncio.Lock()
        self.words = WordQueue()
        self.sent_ms = 0.0  # utterance audio already sent, ms
        self.closing = False  # no more text
        self.finished = False  # final message sent, or cancelled
        self.failed = False  # its synthesis failed: its text is dropped until it is closed
        self.failure = ""  # then: its error's code
        self.told_dropped = False  # failed: a `context_failed` error said its text is not spoken
        self.ended = asyncio.Event()  # set with `finished`

    def _encoder(self) -> StreamEncoder:
        fmt = self.format
        return StreamEncoder(fmt.codec, fmt.sample_rate, fmt.sample_rate, fmt.bitrate_kbps)

    # -- wire messages (subclasses) -----------------------------------------------------

    async def send_audio(self, data: bytes, words: Sequence[WordTiming], start_ms: float, end_ms: float) -> None:
        """Encoded `data` (may be b""), the `words` it speaks; its PCM spans
        [start_ms, end_ms) of the utterance."""
        raise NotImplementedError

    async def send_flush_done(self, flush_id: int) -> None:
        """Everything before flush `flush_id` is spoken."""

    async def send_final(self) -> None:
        """The context ended after its last audio."""
        raise NotImplementedError

    async def send_error(self, error: ApiError | EngineError) -> None:
        raise NotImplementedError

    async def send_failed_final(self) -> None:
        """A failed context's input ended (its error was sent): the context is over."""

    # -- text in ------------------------------------------------------------------------

    async def _queue(self, items: list[Item], since_s: float | None, ready_s: float) -> None:
        if self.failed:
            return  # a failed context's text: dropped
        try:
            await self.stream.queue(items, since_s, ready_s)
        except (ApiError, EngineError) as error:  # a request could not start
            await self.on_error(self.stream, error)

    async def _tail_error(self, error: ApiError | EngineError) -> None:
        await self.on_error(self.stream, error)

    async def append(self, text: str) -> None:
        """Buffer `text`; InvalidInput (field `context_id`) once the context's input has ended, unless
        the text is only whitespace: a client's end of input (LiveKit's " " with `continue: false`)
        or keep-alive after the end has nothing to speak, and the error would end the context with
        the turn it is still speaking."""
        if self.closing and not text.strip():
            return
        if self.closing:
            raise InvalidInput(f"context {self.context_id!r} is closed; open a new one", field="context_id")
        if self.failed:
            return  # dropped until the context is closed
        await self.feed.append(text, self.stream.queued_chars)
        if self.eager and SENTENCE_END.search(text):
            await self.feed.release()

    async def flush(self, flush_id: int | None = None) -> None:
        """Speak what is buffered now; `flush_id`: `send_flush_done` once it is spoken, before
        the audio of any text appended after this."""
        if self.failed:
            self.feed.flush()  # (dropped)
            return
        items, since, ready_s = self.feed.flush()
        await self._queue(items, since, ready_s)
        if flush_id is None or self.failed:
            return
        try:
            await self.stream.mark(lambda: self._flushed(flush_id))
        except (ApiError, EngineError) as error:  # (what it let start next could not)
            await self.on_error(self.stream, error)

    async def close(self) -> None:
        """No more text: speak what is buffered, then `send_final`."""
        if self.closing:
            return
        await self.flush()
        self.closing = True
        if self.failed:
            await self._end_failed()
        elif not self.finished:
            try:
                await self.stream.end()
            except (ApiError, EngineError) as error:
                await self.on_error(self.stream, error)

    def cancel(self) -> None:
        """Stop now; nothing more is sent for this context."""
        self.feed.cancel_timer()
        if not self.finished:
            self.finished = True
            self.ended.set()
            self.stream.cancel()
            if not self.failed:  # (observed when it failed)
                self.stream.observe(self.source, cancelled=True)

    # -- audio out (the utterance stream's Listener) ------------------------------------

    async def on_audio(self, utterance: UtteranceStream, pcm: np.ndarray,
                       words: Sequence[WordTiming], estimated: bool) -> None:
        end_ms = utterance.clock.delivered_ms  # (this piece included)
        async with self._out:
            if self.finished or self.failed:
                return
            data = await self.encoder.feed_async(pcm) if len(pcm) else b""  # MP3/Opus: in a thread
            if self.finished:  # cancelled meanwhile
                return
            self.words.add(words)
            await self._send(data, self.words.take(end_ms), end_ms)

    async def _send(self, data: bytes, words: Sequence[WordTiming], end_ms: float) -> None:
        start_ms, self.sent_ms = self.sent_ms, end_ms
        await self.send_audio(data, words, start_ms, end_ms)

    async def _drain(self, last: bool) -> bool:
        """(Holding `_out`.) Send what the encoder and the word queue still hold of the audio so
        far; `last`: the utterance's end. False if the context is over."""
        if self.finished or self.failed:
            return False
        tail = b""
        if (self.format.codec == "mp3" and self.encoder.num_samples) or last:
            # The encoder holds its last samples until closed; MP3 streams may follow each
            # other (a decoder reads frames), so a pause closes one and the next starts anew.
            tail = await self.encoder.close_async()
            if not last:
                self.encoder = self._encoder()
            if self.finished:  # cancelled meanwhile
                return False
        rest = self.words.take()
        if tail or rest:
            await self._send(tail, rest, self.stream.clock.delivered_ms)
        return True

    async def _flushed(self, flush_id: int) -> None:
        """The utterance stream met flush `flush_id`'s mark: its text's audio is all out."""
        async with self._out:  # (the next text's audio waits for this)
            if await self._drain(last=False):
                await self.send_flush_done(flush_id)

    async def on_idle(self, utterance: UtteranceStream) -> None:
        async with self._out:
            if not await self._drain(last=utterance.ending):
                return
        if utterance.ending:
            self.finished = True
            self.ended.set()
            utterance.observe(self.source, cancelled=False)
            await self.send_final()
        else:  # its audio drains from now on: the text waiting may be needed before its sentence ends
            await self.feed.pace()

    async def on_error(self, utterance: UtteranceStream, error: ApiError | EngineError) -> None:
        """The synthesis failed: `send_error` once, the engine request freed, the rest of
        the text dropped; the context ends when its input does (`close()`)."""
        if self.finished or self.failed:
            return
        self.failed, self.failure = True, as_api_error(error).code
        self.feed.cancel_timer()
        self.stream.cancel()
        self.stream.observe(self.source, cancelled=True)
        await self.send_error(error)
        if self.closing:
            await self._end_failed()

    def refuse_dropped(self, text: str, why: str, until: str) -> None:
        """Text for a failed context is not spoken: the first message that has some raises
        `context_failed` (409, field `context_id`) saying so, `why` (the context failed) and
        `until` when; once, as the client has usually sent the rest of its turn before it
        sees the failure."""
        if not text.strip() or self.told_dropped:
            return
        self.told_dropped = True
        raise ApiError(409, "context_failed", f"context {self.context_id!r} failed ({why}): this text is not "
                       f"spoken, {until}; send the text under a new context_id", field="context_id")

    async def _end_failed(self) -> None:
        if self.finished:
            return
        self.finished = True
        self.ended.set()
        await self.send_failed_final()

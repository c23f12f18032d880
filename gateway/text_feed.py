"""Streamed text in, speakable items out: the text buffering every streaming protocol shares.

`/v1/realtime` sessions and the ElevenLabs and Cartesia contexts each own one `TextFeed`
in front of their utterance streams (gateway/utterance.py). It reads the text through
the text frontend's `TextStream` (gateway/text/: markdown, SSML breaks, numbers, links;
sentences in the voice's language), so every route reads text the same way:

- `append(text)` checks the piece (a string; the text waiting to be spoken stays under
  `max_pending_chars`; an unreadable SSML break refuses the whole piece, naming `field`),
  then hands the items it completes to `sink(items, since_s, ready_s)`. An utterance's first
  clause is complete early (`realtime_first_chars`, at least `REALTIME_MIN_FIRST_CHARS`),
  then each sentence. A long piece is read `APPEND_SLICE_CHARS` at a time, yielding to the
  event loop between slices, so one client cannot hold the loop;
- an unfinished tail is released after `text_buffer_ms` without new text, but for a last
  word or number the pause may have cut mid-way (`TextStream.release_tail`), which waits
  `PART_WAIT_S` more for its rest, then is spoken as it is; `release()` speaks it all at once
  (protocols whose clients send whole sentences call it);
- `flush()` returns every item still buffered (the protocol decides what a flush means
  for its utterance); `restart()` drops the buffer (a cancel);
- with a `deadline`, text is not held for its sentence's end past the moment its listener
  needs it: `pace()` (after each append, and whenever the caller's deadline may have moved:
  its utterance went idle, a playback report) asks `deadline(pending_chars)` by when the
  buffered text must be released, and then releases it up to its last clause mark, else its
  last whole word (`TextStream.release_early`); before then, a timer waits for that moment
  while the text may still reach a natural boundary.

`since_s` is the time of the first non-blank append since the last `flush`/`restart`:
the utterance's TTFA counts from it. `ready_s` is when the released items' text began to
come: the append that brought the first of the text buffered since the last release (the
text left after a release is dated by the append that released it, a little late where the
text frontend needed the next piece to see a boundary). The utterance's playback clock does
not count the wait for text that had not come as a stall; the wait for text buffered here
until its sentence ended does count. `unspoken()` is the error for that text when nothing
of it could be spoken (emoji alone, markup, a `<break>`), as REST words its 400.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from engine.types import EngineError, InputTooLong, InvalidInput
from gateway.connection import CLIENT_GONE
from gateway.errors import ApiError
from gateway.settings import Settings
from gateway.text import Item, TextOptions, TextStream, is_speakable, unspoken
from gateway.text.symbols import has_emoji

APPEND_SLICE_CHARS = 256
# A clause of this many characters already plays for ~1 s, far longer than the next words
# take to arrive at LLM pace, so a streamed utterance's first segment can be that short.
REALTIME_MIN_FIRST_CHARS = 12
# After the tail timer: how much longer a last word or number that may be cut mid-way ("$4" of
# "$4.99") waits for its rest. An LLM's tokens come tens of ms apart; a pause past text_buffer_ms is
# mostly a turn's end (which a flush says) or a stall upstream.
PART_WAIT_S = 1.5

# sink(items, since_s, ready_s): see the module docstring (time.monotonic() s).
Sink = Callable[[list[Item], "float | None", float], Awaitable[None]]
ErrorSink = Callable[[ApiError | EngineError], Awaitable[None]]
# Given the characters buffered, the time.monotonic() (s) by which they must be released, or
# None: no hurry.
Deadline = Callable[[int], "float | None"]


class TextFeed:
    """One stream of text pieces; see the module docstring.

    `sink(items, since_s, ready_s)` receives completed items (segments and pauses) in order;
    `on_error(error)` an error raised by `sink` when a timer released text; `deadline`
    paces a sentence's release (module docstring).
    """

    def __init__(self, settings: Settings, sink: Sink, on_error: ErrorSink, *,
                 options: TextOptions | None = None, field: str = "text", deadline: Deadline | None = None) -> None:
        self.settings = settings
        self.sink = sink
        self.on_error = on_error
        self.field = field
        self.deadline = deadline
        self.pace_timer: asyncio.TimerHandle | None = None
        self.text = TextStream(options or TextOptions(), settings.realtime_first_chars, REALTIME_MIN_FIRST_CHARS,
                               field=field)
        self.since_s: float | None = None
        self.pending_s: float | None = None  # when the buffered text began to come (module docstring)
        self.appended_s = 0.0  # the latest append
        self.blank = False  # whitespace was appended since the last flush or restart, and nothing else
        self.letters = False  # the text since `since_s` had a letter or digit
        self.emoji = False  # it had an emoji (and no letter or digit)
        self.tail_timer: asyncio.TimerHandle | None = None

    @property
    def options(self) -> TextOptions:
        return self.text.options

    @options.setter
    def options(self, options: TextOptions) -> None:
        self.text.options = options  # applies to text not yet cut into segments

    @property
    def pending_chars(self) -> int:
        return self.text.pending_chars

    @property
    def has_pending(self) -> bool:
        """Some speakable text is buffered, not yet released."""
        return bool(self.text.pending)

    async def append(self, text: object, queued_chars: int = 0) -> None:
        """Add a piece; `queued_chars`: text already released but not yet spoken, which
        counts towards `max_pending_chars`. Raises InvalidInput / InputTooLong naming the
        field, or what `sink` raises."""
        if not isinstance(text, str):
            raise InvalidInput(f"{self.field} must be a string", field=self.field)
        limit = self.settings.max_pending_chars
        if self.text.pending_chars + queued_chars + len(text) > limit:
            raise InputTooLong(f"more than {limit} characters of text are waiting to be spoken", field=self.field)
        self.text.check(text)  # an unreadable <break> refuses the whole append
        now = self.appended_s = time.monotonic()
        if self.since_s is None and text.strip():
            self.since_s = now
        elif text and not text.strip():
            self.blank = True
            self.letters = self.emoji = False
        if not self.letters:
            self.letters = is_speakable(text)
            self.emoji = self.emoji or (not self.letters and has_emoji(text))
        self.cancel_timer()
        for at in range(0, len(text), APPEND_SLICE_CHARS):
            if at:
                await asyncio.sleep(0)  # a long append lets the server's other sessions run
            ready_s = now if self.pending_s is None else self.pending_s
            items = self.text.append(text[at:at + APPEND_SLICE_CHARS])
            self._left(now if items else ready_s)
            await self.sink(items, self.since_s, ready_s)
        if self.text.pending:
            loop = asyncio.get_running_loop()
            self.tail_timer = loop.call_later(self.settings.text_buffer_ms / 1000.0,
                                              lambda: asyncio.ensure_future(self._on_timer(self._speak_tail)))
            await self.pace()

    async def release(self) -> None:
        """Speak the buffered tail now (an open code fence still waits for its end)."""
        self.cancel_timer()
        ready_s = self._ready_s()
        items = self.text.release()
        self._left(ready_s)
        await self.sink(items, self.since_s, ready_s)

    async def pace(self) -> None:
        """Release buffered text early if `deadline` says its listener needs it now, else arm
        a timer for when it will (module docstring). Raises what `sink` raises."""
        self._cancel_pace()
        at_s = self.deadline(self.text.pending_chars) if self.deadline is not None and self.text.pending else None
        if at_s is None:
            return
        wait_s = at_s - time.monotonic()
        if wait_s > 0:
            loop = asyncio.get_running_loop()
            self.pace_timer = loop.call_later(wait_s, lambda: asyncio.ensure_future(self._on_timer(self._paced)))
            return
        ready_s = self._ready_s()
        items = self.text.release_early()
        if items:
            self._left(self.appended_s)
            await self.sink(items, self.since_s, ready_s)

    async def _speak_tail(self) -> None:
        """The tail timer: what is whole is spoken, a cut part waits `PART_WAIT_S` more (module docstring)."""
        self.tail_timer = None
        self._cancel_pace()
        ready_s = self._ready_s()
        items = self.text.release_tail()
        if items or not self.text.pending:  # (released it all, maybe nothing speakable: the sink hears so)
            self._left(self.appended_s)
            await self.sink(items, self.since_s, ready_s)
        if self.text.pending:
            loop = asyncio.get_running_loop()
            self.tail_timer = loop.call_later(PART_WAIT_S,
                                              lambda: asyncio.ensure_future(self._on_timer(self.release)))
            await self.pace()

    async def _paced(self) -> None:
        self.pace_timer = None
        await self.pace()

    async def _on_timer(self, step: Callable[[], Awaitable[None]]) -> None:
        try:
            try:
                await step()
            except (ApiError, EngineError) as error:
                await self.on_error(error)
        except CLIENT_GONE:
            pass  # (the connection's own handler ends the session)

    def unspoken(self, emoji_field: str = "emoji") -> InvalidInput:
        """The error for the text since `since_s` (or the last flush's) if none of it is spoken;
        `emoji_field`: what sets the emoji option (`gateway.text.unspoken`)."""
        return unspoken(self.field, self.options, letters=self.letters, emoji=self.emoji, emoji_field=emoji_field)

    def flush(self) -> tuple[list[Item], float | None, float]:
        """Everything buffered as items, the `since_s` they count from and their `ready_s`;
        what follows starts anew (a new first clause, a new `since_s`)."""
        self.cancel_timer()
        since, self.since_s, self.blank = self.since_s, None, False
        ready_s, self.pending_s = self._ready_s(), None
        return self.text.flush(), since, ready_s

    def _ready_s(self) -> float:
        return time.monotonic() if self.pending_s is None else self.pending_s

    def _left(self, came_s: float) -> None:
        """After a release: the text still buffered, if any, came at `came_s`."""
        self.pending_s = came_s if self.text.pending else None

    def restart(self) -> None:
        """Drop what is buffered; what follows starts anew."""
        self.cancel_timer()
        self.text.restart()
        self.since_s = self.pending_s = None
        self.blank = False

    def cancel_timer(self) -> None:
        """Cancel the tail timer and the pace timer."""
        if self.tail_timer is not None:
            self.tail_timer.cancel()
            self.tail_timer = None
        self._cancel_pace()

    def _cancel_pace(self) -> None:
        if self.pace_timer is not None:
            self.pace_timer.cancel()
            self.pace_timer = None

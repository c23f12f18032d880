"""The text side of a realtime session: when its utterances start and end.

`SessionText` is mixed into `gateway.realtime.Session`. `text.append` goes through the
session's `TextFeed` (gateway/text_feed.py, shared with the vendor protocols), whose
items are queued on the current utterance stream (gateway/utterance.py), or, once the
current one was flushed, on the backlog: a queue of `Turn`s, each flushed turn the next
utterance in order (its own `audio.start` ... `utterance.done`), the last one open until
its own flush. The feed is paced by the
utterance's playback clock (`release_by_s`): a sentence's text so far is spoken before its
end when the listener would otherwise run dry. `text.flush` ends the
utterance once its audio is out. The *end* timer ends an utterance that is never
flushed, `utterance_end_ms` after its audio has played out with no new text.

A failure of the utterance's synthesis (its model cannot load, no room for it, the engine
refuses or fails a request) ends its synthesis at once: the `error` event is sent, the
engine request is freed, and the rest of its text is dropped, not retried sentence by
sentence. The failed utterance stays current until its end as above (at once if it was
already flushed, else at `text.flush` or by the end timer, `utterance_end_ms` after its
last text), which sends its one `utterance.done`, with `error`; the text after that is
a new utterance, which tries again.

Text that starts no utterance because none of it can be spoken (emoji alone under
`emoji: "drop"`, markup, `<break>`s) gets an `error` naming `text` once it ends (a flush,
or `utterance_end_ms` without more text), the message REST's 400 gives; a client waiting
for its turn's end hears so rather than nothing.

A turn whose appends were all blank (whitespace) ends at its flush with the error REST's
400 gives for empty input, rather than nothing.

`response.cancel` ends every turn the client started: the current utterance gets its
`utterance.done` (`cancelled`), and text that no utterance speaks yet (buffered before its
first clause was complete, or later turns', appended after a flush) is dropped with an
`utterance.done` of its own for each turn, `cancelled` with nothing spoken.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncio
import time
from typing import Any, Awaitable

from engine.types import EngineError, InvalidInput
from gateway.connection import CLIENT_GONE
from gateway.errors import ApiError, as_api_error
from gateway.settings import Settings
from gateway.state import AppState
from gateway.text import Item
from gateway.text_feed import TextFeed
from gateway.utterance import UtteranceStream

# A failed request's fields as REST names them, and what a session calls them.
SESSION_BLAME = {"model": "session.model", "voice": "session.voice", "speed": "session.speed", "input": "text"}


def session_error(error: ApiError | EngineError) -> ApiError:
    """`error` of an utterance's synthesis, its field named as the session names it."""
    api = as_api_error(error)
    field = SESSION_BLAME.get(api.field or "", api.field)
    return ApiError(api.status, api.code, api.message, field, api.headers)


@dataclass
class Turn:
    """Text of a turn that waits for the current utterance to end (the backlog)."""

    since_s: float | None  # its first append (its TTFA counts from it)
    items: list[Item] = field(default_factory=list)
    flushed: bool = False  # its text.flush came: a later append is the next turn

    @property
    def has_text(self) -> bool:
        return any(isinstance(item, str) for item in self.items)


class SessionText:
    state: AppState
    settings: Settings
    feed: TextFeed
    utterance: UtteranceStream | None
    failure: str | None  # the error code of the current utterance, when its synthesis failed
    backlog: list[Turn]  # the turns after the current utterance, in order (module docstring)
    end_timer: asyncio.TimerHandle | None

    def new_utterance(self) -> UtteranceStream:
        raise NotImplementedError

    async def done(self, utterance: UtteranceStream, cancelled: bool, error: str | None = None) -> None:
        raise NotImplementedError

    async def send_error(self, error: Exception) -> None:
        raise NotImplementedError

    def release_by_s(self, chars: int) -> float | None:
        """The feed's deadline (gateway/text_feed.py): when `chars` of buffered text must be
        released for the current utterance's listener not to run dry; None: no hurry."""
        utterance = self.utterance
        if utterance is None or self.failure is not None:
            return None
        return utterance.release_by_s(chars)

    @property
    def queued_chars(self) -> int:
        """Text released but not yet spoken: the utterance's queue and the backlog."""
        return (self.utterance.queued_chars if self.utterance else 0) + sum(
            len(item) for turn in self.backlog for item in turn.items if isinstance(item, str))

    @property
    def open_turn(self) -> Turn | None:
        """The backlog's turn that is not flushed yet, if any (always its last)."""
        return self.backlog[-1] if self.backlog and not self.backlog[-1].flushed else None

    def _drop_open_turn(self) -> None:
        if self.open_turn is not None:
            self.backlog.pop()

    async def append(self, text: Any) -> None:
        self._cancel_end_timer()
        try:
            await self.feed.append(text, self.queued_chars)
        finally:
            if self.failure is not None and self.utterance is not None:
                self._arm_end_timer(self.utterance)  # a failed utterance ends once its text stops

    async def flush(self) -> None:
        self._cancel_end_timer()
        blank = self.feed.blank  # (read before the flush resets it)
        items, since, ready_s = self.feed.flush()
        if self.failure is not None:
            await self._end_failed()  # its text is dropped
            return
        if since is not None and self._says_nothing(items):
            self._drop_open_turn()  # (pauses at most)
            await self.send_error(self.feed.unspoken("session.emoji"))
            return
        if since is None and blank and self._says_nothing(items):  # only whitespace since the last flush
            self._drop_open_turn()
            await self.send_error(InvalidInput("text is empty: this turn's appends were all whitespace",
                                               field="text"))
            return
        if self.utterance is not None and self.utterance.ending:
            turn = self.open_turn
            if turn is None and items:
                turn = Turn(since)
                self.backlog.append(turn)
            if turn is not None:
                turn.items.extend(items)
                turn.flushed = True  # the next utterance but one, once this one is done
            return
        await self.queue(items, since, ready_s)
        if self.failure is not None:
            await self._end_failed()
        elif self.utterance is not None:
            await self._speak(self.utterance, self.utterance.end())

    def unstarted_turns(self) -> int:
        """The turns the client started that no utterance speaks yet: each in the backlog, and text
        in the feed that no turn holds yet (one more), once the current utterance (if any) is flushed
        (the text of an unflushed current utterance is its own; after a flush, the next turn's)."""
        utterance = self.utterance
        if utterance is not None and not utterance.ending:
            return 0
        unstarted = len(self.backlog)
        if self.feed.since_s is not None and self.open_turn is None:
            unstarted += 1
        return unstarted

    async def cancel(self) -> None:
        """`response.cancel`: the current utterance stops and gets its `utterance.done`
        (`cancelled: true`); text appended that no utterance speaks yet (buffered before its
        first clause was complete, or the next turn's, after a flush) is dropped, and that
        turn gets one too, with nothing spoken (`audio_ms` 0, `text` "", no `audio.start`)."""
        self._cancel_end_timer()
        utterance, failure = self.utterance, self.failure
        unstarted = self.unstarted_turns()
        self.feed.restart()
        self.backlog = []
        self.utterance, self.failure = None, None
        if utterance is not None:
            utterance.cancel()
            await self.done(utterance, cancelled=True, error=failure)
        for _ in range(unstarted):
            turn = self.new_utterance()  # (never queued: it speaks nothing and holds no request)
            turn.cancel()
            await self.done(turn, cancelled=True)

    async def queue(self, items: list[Item], since_s: float | None, ready_s: float) -> None:
        """The feed's sink: items on the current utterance (or the backlog, after a flush);
        starts an utterance if none; `ready_s`: when their text began to come (TextFeed). A
        synthesis failure does not raise: see `_fail`."""
        utterance = self.utterance
        if self.failure is not None:
            return  # the failed utterance's text: dropped
        if not any(isinstance(item, str) for item in items):
            if utterance is not None and utterance.ending:
                if self.open_turn is not None and self.open_turn.has_text:
                    self.open_turn.items.extend(items)  # pauses within a later utterance
            elif utterance is not None:
                await self._speak(utterance, utterance.queue(items, ready_s=ready_s))  # pauses mid-utterance count
                if self.failure is None and not utterance.busy:
                    await self._speak(utterance, utterance.advance())  # idle: maybe time to arm the end timer
            feed = self.feed
            if feed.since_s is not None and not feed.has_pending and feed.tail_timer is None \
                    and self._says_nothing(items):
                self._arm_unspoken_timer()  # this turn's text so far says nothing
            return
        if utterance is not None and utterance.ending:
            turn = self.open_turn
            if turn is None:
                turn = Turn(since_s)
                self.backlog.append(turn)
            turn.items.extend(items)
            self.feed.since_s = None  # (the turn keeps it)
            return
        if utterance is None:
            self._cancel_end_timer()  # (an unspoken timer: this text speaks)
            utterance = self.utterance = self.new_utterance()
        try:
            await self._speak(utterance, utterance.queue(items, since_s, ready_s))
        except BaseException:
            if self.utterance is utterance:
                self.utterance = None
            raise

    async def _speak(self, utterance: UtteranceStream, step: Awaitable[None]) -> None:
        """Await a step of `utterance` (queue, advance, end) that may start a request; a
        failure to start one fails the utterance (`_fail`)."""
        try:
            await step
        except (ApiError, EngineError) as error:
            await self._fail(utterance, error)

    # -- the utterance stream's idleness and failures (gateway/utterance.py Listener) ---

    async def on_idle(self, utterance: UtteranceStream) -> None:
        if utterance is not self.utterance:
            return
        if utterance.ending:
            self.utterance = None
            if utterance.started:  # (else it was flushed before anything was speakable)
                await self.done(utterance, cancelled=False)
            await self._start_backlog()
        else:
            if self.feed.has_pending:  # its audio drains from now on: the text waiting may be needed
                await self.feed.pace()  # before its sentence ends
            if not self.feed.has_pending and self.feed.tail_timer is None:
                self._arm_end_timer(utterance)

    async def on_error(self, utterance: UtteranceStream, error: ApiError | EngineError) -> None:
        await self._fail(utterance, error)

    async def _fail(self, utterance: UtteranceStream, error: ApiError | EngineError) -> None:
        """`utterance`'s synthesis failed: `error` now, its engine request freed, its queued
        text dropped; it ends (`utterance.done` with the error's code) now if it was
        flushed, else at its end (`flush`, or the end timer after its last text)."""
        if utterance is not self.utterance or self.failure is not None:
            return
        utterance.cancel()
        self.failure = error.code
        await self.send_error(session_error(error))
        if utterance.ending:
            await self._end_failed()
        else:
            self._arm_end_timer(utterance)

    async def _end_failed(self) -> None:
        """`utterance.done` for the failed utterance; then the backlog (the next one), if any."""
        utterance, failure = self.utterance, self.failure
        self.utterance, self.failure = None, None
        self._cancel_end_timer()
        if utterance is not None:
            await self.done(utterance, cancelled=False, error=failure)
        await self._start_backlog()

    # -- end timer and backlog ----------------------------------------------------------

    def _says_nothing(self, items: list[Item]) -> bool:
        """No utterance speaks the text since the last flush, and neither `items` nor the
        backlog have any to speak."""
        utterance, turn = self.utterance, self.open_turn
        return (utterance is None or utterance.ending) and not any(
            isinstance(item, str) for item in (*items, *(turn.items if turn else ())))

    def _arm_unspoken_timer(self) -> None:
        """The `error` for text that says nothing, once `utterance_end_ms` pass without more."""
        self._cancel_end_timer()
        loop = asyncio.get_running_loop()
        self.end_timer = loop.call_later(self.settings.utterance_end_ms / 1000.0,
                                         lambda: asyncio.ensure_future(self._end_unspoken()))

    async def _end_unspoken(self) -> None:
        self.end_timer = None
        if self.feed.since_s is None or self.feed.has_pending or not self._says_nothing([]):
            return
        error = self.feed.unspoken("session.emoji")
        self.feed.restart()
        self._drop_open_turn()  # (pauses at most)
        try:
            await self.send_error(error)
        except CLIENT_GONE:
            pass  # (the connection's own handler ends the session)

    def _cancel_end_timer(self) -> None:
        if self.end_timer is not None:
            self.end_timer.cancel()
            self.end_timer = None

    def _arm_end_timer(self, utterance: UtteranceStream) -> None:
        """End an unflushed utterance once its audio has played out and no text came for a while."""
        self._cancel_end_timer()
        delay_s = (utterance.clock.buffered_ms(time.monotonic()) + self.settings.utterance_end_ms) / 1000.0
        loop = asyncio.get_running_loop()
        self.end_timer = loop.call_later(delay_s, lambda: asyncio.ensure_future(self._end_idle(utterance)))

    async def _end_idle(self, utterance: UtteranceStream) -> None:
        try:
            await self._end(utterance)
        except CLIENT_GONE:
            pass  # (the connection's own handler ends the session)

    async def _end(self, utterance: UtteranceStream) -> None:
        self.end_timer = None
        if self.utterance is not utterance:
            return
        failed = self.failure is not None  # (its pending text is dropped, not waited for)
        if not failed and (utterance.busy or self.feed.has_pending):
            return
        if utterance.clock.buffered_ms(time.monotonic()) > 0:  # playback was paused: wait on
            self._arm_end_timer(utterance)
            return
        self.feed.restart()
        if failed:
            await self._end_failed()
            return
        self.utterance = None
        if utterance.started:
            await self.done(utterance, cancelled=False)

    async def _start_backlog(self) -> None:
        """The backlog's first turn becomes the current utterance (and, flushed, ends once spoken)."""
        turn = self.backlog.pop(0) if self.backlog else Turn(None)  # (none: maybe arms the unspoken timer)
        since = turn.since_s
        # (its text came from `since` on: dated by then, no wait of ours is excused)
        await self.queue(turn.items, since, time.monotonic() if since is None else since)
        if self.failure is not None:
            if turn.flushed:
                await self._end_failed()
        elif turn.flushed and self.utterance is not None:
            await self._speak(self.utterance, self.utterance.end())

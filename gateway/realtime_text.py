"""The text side of a realtime session: when its utterances start and end.

`SessionText` is mixed into `gateway.realtime.Session`. `text.append` goes through the
session's `TextFeed` (gateway/text_feed.py, shared with the vendor protocols), whose
items are queued on the current utterance stream (gateway/utterance.py), or on the
backlog (the next utterance) once the current one was flushed. `text.flush` ends the
utterance once its audio is out. The *end* timer ends an utterance that is never
flushed, `utterance_end_ms` after its audio has played out with no new text.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from engine.types import EngineError
from gateway.connection import CLIENT_GONE
from gateway.errors import ApiError
from gateway.settings import Settings
from gateway.state import AppState
from gateway.text import Item
from gateway.text_feed import TextFeed
from gateway.utterance import UtteranceStream


class SessionText:
    state: AppState
    settings: Settings
    feed: TextFeed
    utterance: UtteranceStream | None
    backlog: list[Item]
    backlog_flushed: bool
    backlog_since_s: float | None
    end_timer: asyncio.TimerHandle | None

    def new_utterance(self) -> UtteranceStream:
        raise NotImplementedError

    async def done(self, utterance: UtteranceStream, cancelled: bool, error: str | None = None) -> None:
        raise NotImplementedError

    async def send_error(self, error: Exception) -> None:
        raise NotImplementedError

    @property
    def queued_chars(self) -> int:
        """Text released but not yet spoken: the utterance's queue and the backlog."""
        return (self.utterance.queued_chars if self.utterance else 0) + sum(
            len(item) for item in self.backlog if isinstance(item, str))

    async def append(self, text: Any) -> None:
        self._cancel_end_timer()
        await self.feed.append(text, self.queued_chars)

    async def flush(self) -> None:
        self._cancel_end_timer()
        items, since = self.feed.flush()
        if self.utterance is not None and self.utterance.ending:
            if items and self.backlog_since_s is None:
                self.backlog_since_s = since
            self.backlog.extend(items)  # the next utterance, once this one is done
            self.backlog_flushed = bool(self.backlog)
            return
        await self.queue(items, since)
        if self.utterance is not None:
            await self.utterance.end()

    async def cancel(self) -> None:
        self._cancel_end_timer()
        self.feed.restart()
        self.backlog, self.backlog_flushed, self.backlog_since_s = [], False, None
        utterance, self.utterance = self.utterance, None
        if utterance is None:
            return
        utterance.cancel()
        await self.done(utterance, cancelled=True)

    async def queue(self, items: list[Item], since_s: float | None) -> None:
        """The feed's sink: items on the current utterance (or the backlog, after a flush);
        starts an utterance if none."""
        utterance = self.utterance
        if not any(isinstance(item, str) for item in items):
            if utterance is not None and utterance.ending:
                if self.backlog:
                    self.backlog.extend(items)  # pauses within the next utterance
            elif utterance is not None:
                await utterance.queue(items)  # pauses mid-utterance still count
                if not utterance.busy:
                    await utterance.advance()  # idle: maybe time to arm the end timer
            return
        if utterance is not None and utterance.ending:
            if self.backlog_since_s is None:
                self.backlog_since_s = since_s
            self.backlog.extend(items)
            self.feed.since_s = None  # (the backlog keeps it)
            return
        if utterance is None:
            utterance = self.utterance = self.new_utterance()
        try:
            await utterance.queue(items, since_s)
        except BaseException:
            if self.utterance is utterance:
                self.utterance = None
            raise

    # -- the utterance stream's idleness and failures (gateway/utterance.py Listener) ---

    async def on_idle(self, utterance: UtteranceStream) -> None:
        if utterance is not self.utterance:
            return
        if utterance.ending:
            self.utterance = None
            if utterance.started:  # (else it was flushed before anything was speakable)
                await self.done(utterance, cancelled=False)
            try:
                await self._start_backlog()
            except (ApiError, EngineError) as error:  # the next utterance's, not this one's
                await self.send_error(error)
        elif not self.feed.has_pending and self.feed.tail_timer is None:
            self._arm_end_timer(utterance)

    async def on_error(self, utterance: UtteranceStream, error: ApiError | EngineError) -> None:
        if utterance is not self.utterance:
            return
        self.utterance = None
        self.backlog, self.backlog_flushed, self.backlog_since_s = [], False, None
        await self.send_error(error)
        await self.done(utterance, cancelled=False, error=error.code)

    # -- end timer and backlog ----------------------------------------------------------

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
        if self.utterance is not utterance or utterance.busy or self.feed.has_pending:
            return
        if utterance.clock.buffered_ms(time.monotonic()) > 0:  # playback was paused: wait on
            self._arm_end_timer(utterance)
            return
        self.utterance = None
        self.feed.restart()
        if utterance.started:
            await self.done(utterance, cancelled=False)

    async def _start_backlog(self) -> None:
        items, self.backlog = self.backlog, []
        flushed, self.backlog_flushed = self.backlog_flushed, False
        since, self.backlog_since_s = self.backlog_since_s, None
        await self.queue(items, since)
        if flushed and self.utterance is not None:
            await self.utterance.end()

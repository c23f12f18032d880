"""The text side of a realtime session: text in, segments queued on utterances.

`SessionText` is mixed into `gateway.realtime.Session`: `text.append` goes through the
session's TextStream (gateway/text/), whose items are queued on the current utterance,
or on the backlog (the next utterance) once the current one was flushed. Timers: the
*tail* timer speaks an unfinished tail after `text_buffer_ms` without new text; the
*end* timer ends an utterance that is never flushed, `utterance_end_ms` after its
audio has played out. `text_since_s` is the first `text.append` of the utterance to
come, which its `ttfa_ms` counts from.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from engine.types import EngineError, InputTooLong, InvalidInput
from gateway.errors import ApiError
from gateway.settings import Settings
from gateway.state import AppState
from gateway.text import Item, TextStream
from gateway.utterance import Utterance

APPEND_SLICE_CHARS = 256


class SessionText:
    state: AppState
    settings: Settings
    text: TextStream
    utterance: Utterance | None
    sample_rate: int
    backlog: list[Item]
    backlog_flushed: bool
    backlog_since_s: float | None
    text_since_s: float | None
    tail_timer: asyncio.TimerHandle | None
    end_timer: asyncio.TimerHandle | None

    async def advance(self) -> None:
        raise NotImplementedError

    async def done(self, utterance: Utterance, cancelled: bool, error: str | None = None) -> None:
        raise NotImplementedError

    async def send_error(self, error: Exception) -> None:
        raise NotImplementedError

    async def append(self, text: Any) -> None:
        if not isinstance(text, str):
            raise InvalidInput("text must be a string", field="text")
        queued = (self.utterance.queued_chars if self.utterance else 0) + sum(
            len(item) for item in self.backlog if isinstance(item, str))
        if self.text.pending_chars + queued + len(text) > self.settings.max_input_chars:
            raise InputTooLong(f"more than {self.settings.max_input_chars} characters of text are waiting "
                               "to be spoken", field="text")
        self.text.check(text)  # an unreadable <break> refuses the whole append
        if self.text_since_s is None and text.strip():
            self.text_since_s = time.monotonic()
        self._cancel_timer("end_timer")
        self._cancel_timer("tail_timer")
        for at in range(0, len(text), APPEND_SLICE_CHARS):
            if at:
                await asyncio.sleep(0)  # a long append lets the server's other sessions run
            await self.queue(self.text.append(text[at:at + APPEND_SLICE_CHARS]))
        if self.text.pending:
            loop = asyncio.get_running_loop()
            self.tail_timer = loop.call_later(self.settings.text_buffer_ms / 1000.0,
                                              lambda: asyncio.ensure_future(self._speak_tail()))

    def _cancel_timer(self, name: str) -> None:
        timer = getattr(self, name)
        if timer is not None:
            timer.cancel()
            setattr(self, name, None)

    async def _speak_tail(self) -> None:
        self.tail_timer = None
        try:
            await self.queue(self.text.release())
            await self.advance()
        except (ApiError, EngineError) as error:
            await self.send_error(error)

    async def flush(self) -> None:
        self._cancel_timer("tail_timer")
        self._cancel_timer("end_timer")
        items = self.text.flush()
        since, self.text_since_s = self.text_since_s, None
        if self.utterance is not None and self.utterance.flushed:
            if items and self.backlog_since_s is None:
                self.backlog_since_s = since
            self.backlog.extend(items)  # the next utterance, once this one is done
            self.backlog_flushed = bool(self.backlog)
            return
        await self.queue(items, since)
        if self.utterance is not None:
            self.utterance.flushed = True
            await self.advance()

    async def cancel(self) -> None:
        self._cancel_timer("tail_timer")
        self._cancel_timer("end_timer")
        self.text.restart()
        self.text_since_s = None
        self.backlog, self.backlog_flushed, self.backlog_since_s = [], False, None
        utterance, self.utterance = self.utterance, None
        if utterance is None:
            return
        if utterance.request_id is not None:
            self.state.engine.cancel(utterance.request_id)
        if utterance.pump is not None and utterance.pump is not asyncio.current_task():
            utterance.pump.cancel()
        await self.done(utterance, cancelled=True)

    async def queue(self, items: list[Item], since_s: float | None = None) -> None:
        """Queue items on the current utterance (or the backlog, after a flush); start one if none."""
        if not any(isinstance(item, str) for item in items):
            if self.utterance is not None and self.utterance.started:
                self.utterance.items.extend(items)  # pauses mid-utterance still count
            return
        since_s = since_s if since_s is not None else self.text_since_s
        if self.utterance is not None and self.utterance.flushed:
            if self.backlog_since_s is None:
                self.backlog_since_s = since_s
            self.backlog.extend(items)
            self.text_since_s = None
            return
        if self.utterance is None:
            self.utterance = Utterance(self.sample_rate, self.settings.ttfa_target_ms, since_s)
        if self.utterance.ready_s is None:
            self.utterance.ready_s = time.monotonic()
        self.utterance.items.extend(items)
        await self.advance()

    def _arm_end_timer(self, utterance: Utterance) -> None:
        """End an unflushed utterance once its audio has played out and no text came for a while."""
        self._cancel_timer("end_timer")
        delay_s = (utterance.clock.buffered_ms(time.monotonic()) + self.settings.utterance_end_ms) / 1000.0
        loop = asyncio.get_running_loop()
        self.end_timer = loop.call_later(delay_s, lambda: asyncio.ensure_future(self._end_idle(utterance)))

    async def _end_idle(self, utterance: Utterance) -> None:
        self.end_timer = None
        if self.utterance is not utterance or utterance.request_id is not None or utterance.items \
                or self.text.pending:
            return
        if utterance.clock.buffered_ms(time.monotonic()) > 0:  # playback was paused: wait on
            self._arm_end_timer(utterance)
            return
        self.utterance = None
        self.text.restart()
        self.text_since_s = None
        if utterance.started:
            await self.done(utterance, cancelled=False)

    async def _start_backlog(self) -> None:
        items, self.backlog = self.backlog, []
        flushed, self.backlog_flushed = self.backlog_flushed, False
        since, self.backlog_since_s = self.backlog_since_s, None
        await self.queue(items, since)
        if flushed and self.utterance is not None:
            self.utterance.flushed = True
            await self.advance()

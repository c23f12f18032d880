"""Whole-text speech for the vendor HTTP routes, through the same utterance stream.

`start_speech` queues every sentence of the text at once on a context (gateway/
vendor_context.py) and waits for its first piece, so that any error up to then is a
proper JSON error; the pieces that follow are `Piece`s (encoded audio, the words it
speaks, its span). Leaving the iteration early (a client that disconnects) cancels
the engine request.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator, Sequence

from engine.types import EngineError, WordTiming
from gateway.errors import ApiError
from gateway.state import AppState
from gateway.text import check_input, split_segments
from gateway.vendor_context import TextContext
from gateway.vendor_formats import OutputFormat
from gateway.voices import Choice


@dataclass(frozen=True, slots=True)
class Piece:
    """Encoded `data`, the `words` it speaks (ms from the start), its PCM span in ms."""

    data: bytes
    words: tuple[WordTiming, ...]
    start_ms: float
    end_ms: float


class QueuedContext(TextContext):
    def __init__(self, state: AppState, choice: Choice, fmt: OutputFormat, source: str) -> None:
        self.source = source
        super().__init__(state, source, choice, fmt, timings=True)
        self.pieces: asyncio.Queue[Piece | ApiError | EngineError | None] = asyncio.Queue()

    async def send_audio(self, data: bytes, words: Sequence[WordTiming], start_ms: float, end_ms: float) -> None:
        self.pieces.put_nowait(Piece(data, tuple(words), start_ms, end_ms))

    async def send_final(self) -> None:
        self.pieces.put_nowait(None)

    async def send_error(self, error: ApiError | EngineError) -> None:
        self.pieces.put_nowait(error)


async def start_speech(state: AppState, choice: Choice, text: object, fmt: OutputFormat, *,
                       source: str, field: str) -> AsyncIterator[Piece]:
    """Pieces of `text` spoken; raises (InvalidInput, InputTooLong, 404s, 503s) before the first.

    `text` is checked as `field` (a string, 1..max_input_chars, something speakable).
    """
    clean = check_input(text, state.settings.max_input_chars, field=field)
    context = QueuedContext(state, choice, fmt, source)
    try:
        await context.stream.queue(split_segments(clean))
        context.closing = True
        await context.stream.end()
        first = await context.pieces.get()
    except BaseException:
        context.cancel()
        raise
    if isinstance(first, (ApiError, EngineError)):
        context.cancel()
        raise first
    return _pieces(context, first)


async def _pieces(context: QueuedContext, first: Piece | None) -> AsyncIterator[Piece]:
    try:
        item: Piece | ApiError | EngineError | None = first
        while item is not None:
            if not isinstance(item, Piece):
                raise item
            yield item
            item = await context.pieces.get()
    finally:
        context.cancel()  # nothing when it ended; frees the engine request when the client left

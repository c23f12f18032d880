"""A small in-process pub/sub: events fan out to subscribers on the event loop.

Download progress goes through it to the SSE endpoint (and could feed a WebSocket).
A slow subscriber loses its oldest queued events, never the newest: progress is a
state, so the latest event says everything.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator


class Subscription:
    """Async iterator of progress events; a slow reader loses old events, never new ones."""

    def __init__(self, broker: Broker, max_events: int) -> None:
        self._broker = broker
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(max_events)

    def put(self, event: dict[str, Any]) -> None:
        if self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(event)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self

    async def __anext__(self) -> dict[str, Any]:
        return await self.queue.get()

    def close(self) -> None:
        self._broker.subscribers.discard(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Broker:
    """Fan-out of events to subscribers on the event loop (SSE, WebSocket, tests)."""

    def __init__(self, max_events: int = 256) -> None:
        self.subscribers: set[Subscription] = set()
        self.max_events = max_events

    def subscribe(self) -> Subscription:
        subscription = Subscription(self, self.max_events)
        self.subscribers.add(subscription)
        return subscription

    def publish(self, event: dict[str, Any]) -> None:
        for subscription in list(self.subscribers):
            subscription.put(event)

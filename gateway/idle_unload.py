"""The idle reaper: unloads models nobody used for `idle_unload_s` (docs/library.md, Residency).

`Residency.start` runs `idle_unload_loop` as a task when `idle_unload_s` > 0 and `close` cancels it.
A model counts as used while busy (requests in the engine, a lease held, or the submit grace
after a lease): the engine does not say when a model's last request ends, so the loop polls,
every quarter of `idle_unload_s` (between 0.02 and 1 s).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.residency import Residency


async def idle_unload_loop(residency: Residency) -> None:
    """Poll forever (until cancelled), unloading each loaded model idle for `residency.idle_unload_s` s."""
    interval = min(1.0, max(0.02, residency.idle_unload_s / 4))
    while True:
        await asyncio.sleep(interval)
        now = time.monotonic()
        for model_id in [r["id"] for r in residency.residents()]:
            await residency.unload_if_idle(model_id, now)

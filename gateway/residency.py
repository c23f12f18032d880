"""Which models are resident: loaded lazily on first use, off the event loop.

Loading runs in a worker thread (never on the event loop, never on the engine thread),
so requests to models already resident keep streaming while another one loads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool

from engine.engine import Engine
from engine.types import EngineError, UnknownModel
from gateway.library import Library
from models import family

log = logging.getLogger(__name__)


class LoadFailed(EngineError):
    code = "model_load_failed"
    status = 503


class Residency:
    def __init__(self, engine: Engine, library: Library, device: str = "cpu") -> None:
        self.engine = engine
        self.library = library
        self.device = device
        self._locks: dict[str, asyncio.Lock] = {}
        self.loading: set[str] = set()
        self.load_seconds: dict[str, float] = {}
        self.last_used: dict[str, float] = {}

    async def acquire(self, model_id: str) -> None:
        """Return once `model_id` is attached to the engine, loading it if needed.

        Raises UnknownModel (not in the library) or LoadFailed.
        """
        self.last_used[model_id] = time.time()
        if self.engine.is_attached(model_id):
            return
        lock = self._locks.setdefault(model_id, asyncio.Lock())
        async with lock:
            if self.engine.is_attached(model_id):
                return
            record = await self.library.get_model(model_id)
            if record is None:
                raise UnknownModel(f"model {model_id!r} is not installed", field="model")
            self.loading.add(model_id)
            t0 = time.perf_counter()
            try:
                runner = await run_in_threadpool(self._load, record)
            except Exception as error:
                log.exception("loading model %s failed", model_id)
                raise LoadFailed(f"model {model_id!r} failed to load: {error}", field="model") from error
            finally:
                self.loading.discard(model_id)
            await asyncio.wrap_future(self.engine.attach(model_id, runner))
            self.load_seconds[model_id] = time.perf_counter() - t0
            log.info("model %s loaded in %.2f s", model_id, self.load_seconds[model_id])
        await self.library.touch_model(model_id)

    def _load(self, record: dict[str, Any]) -> Any:
        path = Path(record["path"]) if record["path"] else None
        return family(record["family"]).load(record["id"], path, record["options"], self.device)

    async def unload(self, model_id: str) -> bool:
        runner = await asyncio.wrap_future(self.engine.detach(model_id))
        if runner is None:
            return False
        await run_in_threadpool(runner.close)
        return True

    def status(self, model_id: str) -> dict[str, Any]:
        runner = self.engine.runner(model_id)
        return {
            "loaded": runner is not None,
            "loading": model_id in self.loading,
            "busy": self.engine.num_requests(model_id) > 0,
            "memory_bytes": runner.memory_bytes() if runner is not None else 0,
            "last_used": self.last_used.get(model_id),
        }

    async def close(self) -> None:
        for model_id in list(self.last_used):
            if self.engine.is_attached(model_id):
                await self.unload(model_id)

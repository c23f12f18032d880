"""The engine: one scheduler thread that owns every model call (DESIGN.md §3).

The gateway talks to it through four calls, all safe from any thread:
`submit(spec)` returns an `AudioStream` (an async iterator of `AudioChunk`),
`cancel(request_id)`, `report_playback(request_id, played_ms, playing)`, and
`attach`/`detach` of loaded runners. Commands travel through an inbox that the thread
drains between iterations, so runner and scheduler state have a single owner and a
cancel takes effect at the next chunk boundary.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, AsyncIterator

from engine.config import EngineConfig
from engine.request import Request
from engine.runner import Runner
from engine.scheduler import Scheduler
from engine.types import (
    AudioChunk, Cancelled, ChunkOut, EngineError, GenerationFailed, ModelNotLoaded, SpeechRequest,
)

log = logging.getLogger(__name__)

_END = object()


class AudioStream:
    """Async iterator over one request's chunks; raises the engine's error if it fails.

    Items cross from the engine thread through `loop.call_soon_threadsafe`, so the event
    loop never blocks. Leaving the iteration early (break, exception, disconnect) must be
    followed by `Engine.cancel`; `aclose()` does that.
    """

    def __init__(self, engine: Engine, request_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.engine = engine
        self.request_id = request_id
        self._loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self.done = False
        self.ttfa_ms: float | None = None
        self.stalls = 0
        self.audio_ms = 0.0

    def _put(self, item: Any) -> None:  # engine thread
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # loop closed: nobody is listening any more
            pass

    def __aiter__(self) -> AsyncIterator[AudioChunk]:
        return self

    async def __anext__(self) -> AudioChunk:
        if self.done:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _END:
            self.done = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self.done = True
            raise item
        assert isinstance(item, AudioChunk)
        return item

    async def aclose(self) -> None:
        if not self.done:
            self.done = True
            self.engine.cancel(self.request_id)


@dataclass(slots=True)
class _Model:
    runner: Runner
    scheduler: Scheduler


class Engine:
    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self._inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._models: dict[str, _Model] = {}
        self._streams: dict[str, AudioStream] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="voxgate-engine", daemon=True)
        # Read-only snapshots for other threads (metrics, residency, tests).
        self._counts: dict[str, int] = {}
        self.last_batch: dict[str, dict[str, int]] = {}

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel everything, release runners and join the thread."""
        self._send("stop")
        self._thread.join(timeout_s)

    # -- calls from other threads -----------------------------------------------------

    def attach(self, model_id: str, runner: Runner) -> Future[None]:
        """Start serving a loaded runner under `model_id`."""
        fut: Future[None] = Future()
        self._send("attach", model_id, runner, fut)
        return fut

    def detach(self, model_id: str) -> Future[Runner | None]:
        """Stop serving `model_id` (its requests are cancelled) and return its runner."""
        fut: Future[Runner | None] = Future()
        self._send("detach", model_id, fut)
        return fut

    def submit(self, spec: SpeechRequest) -> AudioStream:
        """Queue a request; must be called from the event loop that will read the stream.

        Raises ModelNotLoaded or the runner's validation errors (UnknownVoice, ...)
        before anything is queued. Overloaded comes through the stream.
        """
        model = self._models.get(spec.model_id)
        if model is None:
            raise ModelNotLoaded(f"model {spec.model_id!r} is not loaded", field="model")
        model.runner.check(spec)
        stream = AudioStream(self, spec.request_id, asyncio.get_running_loop())
        self._streams[spec.request_id] = stream
        self._send("submit", spec)
        return stream

    def cancel(self, request_id: str) -> None:
        self._send("cancel", request_id)

    def report_playback(self, request_id: str, played_ms: float, playing: bool) -> None:
        self._send("report", request_id, float(played_ms), bool(playing), time.monotonic())

    def num_requests(self, model_id: str | None = None) -> int:
        """Requests queued or running (all models, or one); counts streams not yet ended."""
        if model_id is None:
            return len(self._streams)
        return self._counts.get(model_id, 0)

    def is_attached(self, model_id: str) -> bool:
        return model_id in self._models

    def stats(self) -> dict[str, Any]:
        models = dict(self._models)
        return {
            "requests": len(self._streams),
            "models": {
                mid: {
                    "waiting": len(m.scheduler.waiting),
                    "running": len(m.scheduler.running),
                    "est_chunk_ms": round(m.scheduler.est_chunk_ms, 2),
                    "est_step_ms": round(m.scheduler.est_step_ms, 2),
                    "last_batch": self.last_batch.get(mid, {}),
                }
                for mid, m in models.items()
            },
        }

    def _send(self, *command: Any) -> None:
        self._inbox.put(command)
        self._wake.set()

    # -- the engine thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._drain_inbox()
            if self._stopping:
                break
            worked = False
            for model_id, model in list(self._models.items()):
                try:
                    worked |= self._iterate(model_id, model)
                except Exception:  # a runner bug must not kill the loop
                    log.exception("engine iteration failed for model %s", model_id)
                    self._fail_all(model_id, model, GenerationFailed("internal error in the model runner"))
            if not worked:
                self._wake.wait(0.05)
                self._wake.clear()
        for model_id, model in list(self._models.items()):
            self._fail_all(model_id, model, Cancelled("server is shutting down"))
            model.runner.close()
        self._models.clear()

    def _drain_inbox(self) -> None:
        while True:
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                return
            kind = command[0]
            if kind == "submit":
                self._on_submit(command[1])
            elif kind == "cancel":
                self._on_cancel(command[1])
            elif kind == "report":
                _, request_id, played_ms, playing, at_s = command
                request = self._find(request_id)
                if request is not None:
                    request.clock.on_report(at_s, played_ms, playing)
            elif kind == "attach":
                _, model_id, runner, fut = command
                self._models[model_id] = _Model(
                    runner,
                    Scheduler(self.config, has_backbone=runner.has_backbone,
                              max_codec_batch=runner.max_codec_batch),
                )
                self._counts[model_id] = 0
                fut.set_result(None)
            elif kind == "detach":
                _, model_id, fut = command
                model = self._models.pop(model_id, None)
                if model is not None:
                    self._fail_all(model_id, model, Cancelled(f"model {model_id!r} was unloaded"))
                self._counts.pop(model_id, None)
                fut.set_result(model.runner if model else None)
            elif kind == "stop":
                self._stopping = True

    def _find(self, request_id: str) -> Request | None:
        for model in self._models.values():
            request = model.scheduler.get(request_id)
            if request is not None:
                return request
        return None

    def _on_submit(self, spec: SpeechRequest) -> None:
        stream = self._streams.get(spec.request_id)
        model = self._models.get(spec.model_id)
        if stream is None or stream.done:  # cancelled before it arrived
            self._streams.pop(spec.request_id, None)
            return
        try:
            if model is None:
                raise ModelNotLoaded(f"model {spec.model_id!r} was unloaded", field="model")
            model.scheduler.add(spec)
            self._counts[spec.model_id] = model.scheduler.num_requests
        except EngineError as error:
            self._finish(spec.request_id, error)

    def _on_cancel(self, request_id: str) -> None:
        for model_id, model in self._models.items():
            request = model.scheduler.remove(request_id)
            if request is not None:
                model.runner.release(request_id)
                self._counts[model_id] = model.scheduler.num_requests
                log.info("request %s cancelled", request_id)
                break
        self._finish(request_id, Cancelled("request was cancelled"))

    def _finish(self, request_id: str, error: BaseException | None = None) -> None:
        stream = self._streams.pop(request_id, None)
        if stream is not None:
            stream._put(error if error is not None else _END)

    def _fail_all(self, model_id: str, model: _Model, error: EngineError) -> None:
        for request in list(model.scheduler.running.values()) + list(model.scheduler.waiting):
            model.scheduler.remove(request.request_id)
            model.runner.release(request.request_id)
            self._finish(request.request_id, error)
        self._counts[model_id] = 0

    def _iterate(self, model_id: str, model: _Model) -> bool:
        """One scheduling round for one model; returns whether any work was done."""
        runner, scheduler = model.runner, model.scheduler
        if not scheduler.num_requests:
            return False
        now = time.monotonic()
        scheduler.admit(now, can_admit=runner.can_admit, admit=runner.admit, ready=runner.ready_chunks())
        plan = scheduler.plan(
            now,
            needs_backbone=runner.needs_backbone,
            ready=runner.ready_chunks(),
            is_first_chunk=runner.is_first_chunk,
            early=runner.early_chunks(),
        )
        if plan.is_empty:
            return False
        if plan.backbone:
            t0 = time.perf_counter()
            failures = runner.step_backbone([r.request_id for r in plan.backbone])
            scheduler.observe_step(1000.0 * (time.perf_counter() - t0))
            self._deliver(model_id, model, failures)
        if plan.codec:
            t0 = time.perf_counter()
            outs = runner.decode_chunks([r.request_id for r in plan.codec])
            scheduler.observe_chunks(1000.0 * (time.perf_counter() - t0), len(plan.codec))
            self._deliver(model_id, model, outs)
        self.last_batch[model_id] = {"backbone": len(plan.backbone), "codec": len(plan.codec)}
        return True

    def _deliver(self, model_id: str, model: _Model, outs: list[ChunkOut]) -> None:
        now = time.monotonic()
        for out in outs:
            request = model.scheduler.running.get(out.request_id)
            stream = self._streams.get(out.request_id)
            if request is None or stream is None:
                continue
            if out.error is not None:
                log.warning("request %s failed: %s", out.request_id, out.error.message)
                self._end(model_id, model, request, out.error)
                continue
            pcm = out.pcm
            if pcm is not None and (len(pcm) or out.is_last):
                duration_ms = 1000.0 * len(pcm) / model.runner.sample_rate
                late_ms = request.clock.on_delivery(now, duration_ms)
                chunk = AudioChunk(out.request_id, request.num_chunks, pcm,
                                   model.runner.sample_rate, out.is_last, late_ms, out.words)
                request.num_chunks += 1
                stream._put(chunk)
            if out.is_last:
                self._end(model_id, model, request, None)

    def _end(self, model_id: str, model: _Model, request: Request, error: EngineError | None) -> None:
        model.scheduler.remove(request.request_id)
        model.runner.release(request.request_id)
        self._counts[model_id] = model.scheduler.num_requests
        self._finish(request.request_id, error)

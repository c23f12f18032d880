"""The engine: worker threads that step `EngineCore`s, and the calls the gateway uses.

A worker per device steps every speech LM there, each synthesiser has its own (a sentence
never delays an LM's step). A model attached on several devices has a replica
on each; a request goes to the one with the most slack, the next if it refuses
(engine/replicas.py). Calls are safe from any thread: commands go to a worker's inbox;
`prepare` runs in a small pool, its errors come through the stream.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import queue
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, AsyncIterator, Sequence

from engine.config import EngineConfig
from engine.core import EngineCore, Output
from engine.replicas import merge_stats, rank
from engine.request import Prepared
from engine.runner import Runner
from engine.types import AudioChunk, Cancelled, EngineError, GenerationFailed, ModelNotLoaded, Overloaded, \
    SpeechRequest

log = logging.getLogger(__name__)

_END = object()
STATS_EVERY_S = 0.25  # how often a worker refreshes its stats snapshot
# A synthesiser's worker runs niced: device workers' steps are latency-bound (a GPU waits for
# its launching thread); on an otherwise idle machine it loses nothing.
SYNTH_NICE = 10
SWITCH_INTERVAL_S = 0.001  # GIL hand-over (default 5 ms): a step waits ~1 ms behind another worker's Python


def _executor(name: str, size: int, nice: bool = False) -> ThreadPoolExecutor:
    """Threads for a lane; a synthesiser's pool runs niced."""
    return ThreadPoolExecutor(size, f"voxgate-{name}", initializer=_nice if nice else None)


def _nice() -> None:
    """Lower this thread's CPU priority by SYNTH_NICE (Linux: per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SYNTH_NICE)
    except (AttributeError, OSError):
        log.warning("could not lower the priority of thread %s", threading.current_thread().name)


class AudioStream:
    """Async iterator over one request's chunks (put by the worker via `call_soon_threadsafe`);
    raises the request's error. Leaving early must be followed by `aclose()` (a cancel).
    `worker`: the replica's it was last handed to (its cancel and playback reports go there)."""

    def __init__(self, engine: Engine, spec: SpeechRequest, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self.engine, self.request_id, self.model_id, self.worker = engine, spec.request_id, spec.model_id, worker
        self._loop, self._queue, self.done = loop, asyncio.Queue[Any](), False
        self._put_ms = self._taken_ms = 0.0  # audio put (by the worker thread), taken (by the event loop)
        self.prepared_s = 0.0  # when the family's prepare ended (monotonic s; a prepare thread sets it)

    def unread_ms(self) -> float:
        """Audio delivered to this stream that its reader has not taken yet."""
        return self._put_ms - self._taken_ms

    def _put(self, item: Any) -> None:  # worker thread
        if isinstance(item, AudioChunk):
            self._put_ms += item.duration_ms
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
        if item is _END or isinstance(item, BaseException):  # the end, or the request's error
            self.done = True
            raise item if isinstance(item, BaseException) else StopAsyncIteration()
        assert isinstance(item, AudioChunk)
        self._taken_ms += item.duration_ms
        if self.unread_ms() < self.engine.config.max_unread_ms and self.engine._streams.get(self.request_id) is self:
            self.worker.wake.set()  # a paused request may go on
        return item

    async def aclose(self) -> None:
        if not self.done:
            self.done = True
            self.engine.cancel(self.request_id)


class Worker:
    """A thread stepping the cores of the models placed on it, round robin."""

    def __init__(self, name: str, engine: Engine, low_priority: bool = False) -> None:
        self.name, self.low_priority, self.engine = name, low_priority, engine
        self.cores: dict[str, EngineCore] = {}
        self.stats: dict[str, dict[str, Any]] = {}  # per model, refreshed after each step
        self.num_refused: dict[str, int] = {}  # per model: requests refused here that no other replica took
        self._inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.wake = threading.Event()
        self._stopping, self._stats_s, self._stats_stale = False, 0.0, False
        self.thread = threading.Thread(target=self._run, name=f"voxgate-{name}", daemon=True)

    def send(self, *command: Any) -> None:
        self._inbox.put(command)
        self.wake.set()

    def _run(self) -> None:
        if self.low_priority:
            _nice()
        while not self._stopping:
            self.wake.clear()
            self._drain()
            worked = self._step()
            now = time.monotonic()
            # A snapshot for other threads, off the step path: every STATS_EVERY_S, and when work stops.
            self._stats_stale |= worked
            if self._stats_stale and (not worked or now - self._stats_s > STATS_EVERY_S):
                self._stats_s, self._stats_stale = now, False
                self.stats = {model_id: core.stats() for model_id, core in self.cores.items()}
            if not worked and not self._stopping:
                self.wake.wait(0.05)
        for core in self.cores.values():
            self.engine._deliver(core.fail_all(Cancelled("server is shutting down")))
            core.shutdown()
            core.runner.close()
        self.cores.clear()

    def _step(self) -> bool:
        """One step of each core with work; whether any worked. (A method of its own: a loop variable of
        `_run` would keep the last core, and so its model, alive after the model's unload.)"""
        worked = False
        for model_id, core in list(self.cores.items()):
            if not core.has_work:
                continue
            try:
                outputs = core.step()
            except Exception:  # a runner bug must not kill the worker
                log.exception("engine step failed for model %s", model_id)
                outputs = core.fail_all(GenerationFailed("internal error in the model runner"))
            self.engine._deliver(outputs)
            worked |= not core.was_idle
        return worked

    def _drain(self) -> None:
        while not self._inbox.empty():  # only this thread takes from it
            kind, *args = self._inbox.get_nowait()
            getattr(self, f"_on_{kind}")(*args)
            self._stats_stale = True  # an add (maybe refused) or a cancel changes the counts without a step

    def _on_add(self, spec: SpeechRequest, prepared: Future[Prepared], replicas: Sequence[Replica]) -> None:
        with self.engine._lock:
            replicas[0].num_pending -= 1
        others, stream = replicas[1:], self.engine._streams.get(spec.request_id)
        if stream is None or stream.done:  # cancelled before it got here
            self.engine._finish(spec.request_id, None)
            return
        core = self.cores.get(spec.model_id)
        try:
            if core is None:
                raise ModelNotLoaded(f"model {spec.model_id!r} was unloaded", field="model")
            core.add(spec, prepared.result(), stream.unread_ms).prepared_s = stream.prepared_s
        except EngineError as error:
            if others and isinstance(error, (Overloaded, ModelNotLoaded)):  # the next replica may take it
                self.engine._hand_on(spec, prepared, others)
                return
            if isinstance(error, Overloaded):
                self.num_refused[spec.model_id] = self.num_refused.get(spec.model_id, 0) + 1
            self.engine._finish(spec.request_id, error)
        except Exception:
            log.exception("request %s: preparing it failed", spec.request_id)
            self.engine._finish(spec.request_id, GenerationFailed("internal error preparing the request"))

    def _passed_on(self, request_id: str, *command: Any) -> bool:
        """Whether the request went on to another replica's worker since (then `command` follows it)."""
        stream = self.engine._streams.get(request_id)
        if stream is None or stream.worker is self:
            return False
        stream.worker.send(*command)
        return True

    def _on_cancel(self, request_id: str) -> None:
        if not self._passed_on(request_id, "cancel", request_id):
            any(core.cancel(request_id) for core in self.cores.values())
            self.engine._finish(request_id, Cancelled("request was cancelled"))

    def _on_report(self, request_id: str, played_ms: float, playing: bool, at_s: float) -> None:
        if not self._passed_on(request_id, "report", request_id, played_ms, playing, at_s):
            for core in self.cores.values():
                core.report_playback(request_id, at_s, played_ms, playing)

    def _on_attach(self, model_id: str, core: EngineCore, fut: Future[None]) -> None:
        core.notify = self.wake.set
        self.cores[model_id] = core
        self.stats[model_id] = core.stats()
        fut.set_result(None)

    def _on_detach(self, model_id: str, fut: Future[list[Runner]], runners: list[Runner],
                   others: Sequence[Replica]) -> None:
        core = self.cores.pop(model_id, None)
        self.stats.pop(model_id, None)
        if core is not None:
            self.engine._deliver(core.fail_all(Cancelled(f"model {model_id!r} was unloaded")))
            core.shutdown()
            runners.append(core.runner)
        if others:
            others[0].worker.send("detach", model_id, fut, runners, others[1:])
        else:
            fut.set_result(runners)

    def _on_stop(self) -> None:
        self._stopping = True  # the loop ends after this drain


@dataclass(eq=False, slots=True)
class Replica:
    """One device's copy of a model: its runner, the worker stepping it, its core."""

    runner: Runner
    worker: Worker
    core: EngineCore
    num_pending: int = 0  # handed to it, not yet taken (or refused) by its worker; under Engine._lock


class Engine:
    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self._workers: dict[str, Worker] = {}
        self._models: dict[str, tuple[Replica, ...]] = {}  # model id -> its replicas, one a device
        self._streams: dict[str, AudioStream] = {}  # by request id, until the request ends
        self._prepare = ThreadPoolExecutor(max_workers=2, thread_name_prefix="voxgate-prepare")
        self._started = False
        self._lock = threading.Lock()  # Replica.num_pending: prepare threads add, workers subtract

    def start(self) -> None:
        self._started = True
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        for worker in self._workers.values():
            if not worker.thread.is_alive():
                worker.thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel everything, close runners and join the workers."""
        for worker in list(self._workers.values()):
            worker.send("stop")
        for worker in list(self._workers.values()):
            worker.thread.join(timeout_s)
        self._prepare.shutdown(wait=False, cancel_futures=True)

    def attach(self, model_id: str, runner: Runner, core: EngineCore | None = None,
               device: str | None = None) -> Future[None]:
        """Serve a built runner as `model_id` on the worker of `device` (default `runner.device`; a
        synthesiser: its own). A runner of an attached model on another device adds a replica;
        raises ValueError if the model has one on that worker already."""
        key = (device or runner.device) if runner.has_backbone else f"synth:{model_id}"
        if any(replica.worker.name == key for replica in self._models.get(model_id, ())):
            raise ValueError(f"model {model_id!r} is attached on {key} already")
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = Worker(key, self, low_priority=not runner.has_backbone)
            if self._started:
                worker.thread.start()
        fut: Future[None] = Future()
        if core is None:  # fifo, the baseline, decodes a speech LM's chunks in its step: one stream
            lanes = runner.lanes if self.config.uses("lanes") or not runner.has_backbone else {}
            executor = functools.partial(_executor, nice=not runner.has_backbone)
            # Replicas on the same kind of device share what they learn of the costs: a replica
            # with few timings would otherwise look cheap at any batch (its table is flat).
            kind = key.split(":")[0]
            cost = next((r.core.cost for r in self._models.get(model_id, ()) if r.worker.name.split(":")[0] == kind),
                        None)
            core = EngineCore(runner, self.config, cost=cost, lanes=lanes, executor=executor)
        self._models[model_id] = (*self._models.get(model_id, ()), Replica(runner, worker, core))
        worker.send("attach", model_id, core, fut)
        return fut

    def detach(self, model_id: str) -> Future[list[Runner]]:
        """Stop serving `model_id` on every device (its requests are cancelled); its runners."""
        fut: Future[list[Runner]] = Future()
        replicas = self._models.pop(model_id, ())
        if replicas:  # one worker after the other (each passes it on), the last one resolves `fut`
            replicas[0].worker.send("detach", model_id, fut, [], replicas[1:])
        else:
            fut.set_result([])
        return fut

    def submit(self, spec: SpeechRequest) -> AudioStream:
        """Queue a request, from the loop that reads the stream; raises ModelNotLoaded. UnknownVoice,
        InvalidInput, InputTooLong and Overloaded come through the stream."""
        replicas = self._models.get(spec.model_id)
        if not replicas:
            raise ModelNotLoaded(f"model {spec.model_id!r} is not loaded", field="model")
        stream = AudioStream(self, spec, replicas[0].worker, asyncio.get_running_loop())
        self._streams[spec.request_id] = stream
        prepared = self._prepare.submit(replicas[0].runner.spec.prepare, spec)
        prepared.add_done_callback(lambda fut: self._route(spec, fut, replicas))
        return stream

    def _route(self, spec: SpeechRequest, prepared: Future[Prepared], replicas: Sequence[Replica]) -> None:
        """Hand a prepared request to the replica with the most slack, the others after it (a
        prepare thread, or the submitting one if it was prepared at once)."""
        if len(replicas) > 1 and not prepared.cancelled() and prepared.exception() is None:
            order = rank([replica.core for replica in replicas], spec, prepared.result(), time.monotonic(),
                         [replica.num_pending for replica in replicas])
            replicas = [replicas[i] for i in order]
        self._hand_on(spec, prepared, replicas)

    def _hand_on(self, spec: SpeechRequest, prepared: Future[Prepared], replicas: Sequence[Replica]) -> None:
        stream = self._streams.get(spec.request_id)
        if stream is not None:
            stream.worker = replicas[0].worker  # before the add: a cancel sent elsewhere follows it
            stream.prepared_s = stream.prepared_s or time.monotonic()
        with self._lock:
            replicas[0].num_pending += 1
        replicas[0].worker.send("add", spec, prepared, replicas)

    def cancel(self, request_id: str) -> None:
        self._to_owner(request_id, "cancel", request_id)

    def report_playback(self, request_id: str, played_ms: float, playing: bool) -> None:
        self._to_owner(request_id, "report", request_id, float(played_ms), bool(playing), time.monotonic())

    def _to_owner(self, request_id: str, *command: Any) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.worker.send(*command)

    def num_requests(self, model_id: str | None = None) -> int:
        """Requests queued or running (all models, or one): streams not yet ended."""
        streams = list(self._streams.values())  # a snapshot: workers remove ended streams
        return len(streams) if model_id is None else sum(stream.model_id == model_id for stream in streams)

    def is_attached(self, model_id: str) -> bool:
        return model_id in self._models

    def stats(self) -> dict[str, Any]:
        """Per model: its replicas' core stats merged (engine/replicas.py `merge_stats`)."""
        models = {}
        for model_id, replicas in list(self._models.items()):
            each = [{**replica.worker.stats[model_id], "worker": replica.worker.name} for replica in replicas
                    if model_id in replica.worker.stats]
            if each:
                refused = sum(replica.worker.num_refused.get(model_id, 0) for replica in replicas)
                models[model_id] = merge_stats(each, refused)
        return {"requests": len(self._streams), "policy": self.config.policy, "models": models}

    def _deliver(self, outputs: list[Output]) -> None:
        for request_id, item in outputs:
            stream = self._streams.get(request_id)
            if isinstance(item, EngineError):
                log.warning("request %s failed: %s", request_id, item.message)
                self._finish(request_id, item)
            elif stream is not None:
                stream._put(item)
                if item.is_last:
                    self._finish(request_id, None)

    def _finish(self, request_id: str, error: EngineError | None) -> None:
        stream = self._streams.pop(request_id, None)
        if stream is not None:
            stream._put(error if error is not None else _END)

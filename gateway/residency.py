"""Which models are loaded (docs/library.md, Residency): lazy loads, LRU eviction, idle unload, memory guard.

- A model loads on first use (`acquire`), or at start (`start(preload=...)`).
- At most `max_loaded_models` are resident (loading ones count). When a load needs room,
  the least recently used *idle* model goes first. A model is busy while the engine has
  requests for it or a `Lease` on it is held; a busy model is never evicted, so in-flight
  requests finish on the model they started with.
- The memory guard estimates a model's footprint before loading (gateway/model_spec.py
  `estimate_memory`: the family's own estimate, Piper's from its onnxruntime sessions, else
  size on disk × `memory_factor`; a speech LM's KV cache added) and keeps `min_free_memory_mb` free (GPU memory for CUDA
  devices, host `MemAvailable` bounded by cgroup limits otherwise: gateway/host_memory.py); it evicts idle
  models to make room, or refuses.
- Several `devices` (issue 17): a speech LM is placed on every device with room for it,
  each its own replica in the engine (which routes requests by slack, engine/replicas.py),
  with the memory guard per device. Where none has room, idle models holding room on one
  device are evicted (the device needing the fewest evictions): evictions buy a model its
  first replica, never more. A synthesiser (no backbone: a CPU pool) is placed once.
- A request waits at most its busy timeout for room, then gets 503 `server_busy` or
  `insufficient_memory`. Once its model is loading, it waits for the load to finish.
- Nothing is evicted for a load that would fail for good (gateway/model_spec.py
  `LoadErrors.refusal`: files read, not loaded): a model is checked before a load that needs
  evictions, and before every load once one failed for good (broken files, options that cannot
  work); it gets 503 `model_load_failed` (`x-should-retry: false`), unloading nothing, until what it
  reads changes. A `model_load_failed` message names the model and the file, not the server's paths
  (gateway/model_spec.py `without_paths`); the log line of the failed load has them.
- Loads run in a worker thread (`asyncio.to_thread`), off the event loop and off the
  engine thread, so other resident models keep streaming meanwhile.
"""

from __future__ import annotations

import contextlib
import asyncio
import dataclasses
import functools
import logging
import time
from typing import Any, Iterable, Sequence

from engine.engine import Engine
from engine.runner import Runner
from engine.types import EngineError, UnknownModel
from gateway.library import Library
from gateway.model_spec import FreeMemory, Loader, LoadErrors, Lookup, ModelSpec, estimate_memory, \
    free_memory_bytes, library_lookup, load_runner, without_paths
from gateway.idle_unload import idle_unload_loop
from gateway.memory import return_freed
from gateway.placement import memory_message, plan
from gateway.resident import (
    SUBMIT_GRACE_S, UNLOAD_REASONS, InsufficientMemory, Lease, LoadFailed, ModelBusy, Resident, ResidentState,
    ServerBusy, ShuttingDown, check_files, close_runners, describe, status_fields, without_frames,
)
from gateway.settings import MB as MB  # MB: the unit of min_free_memory_mb

log = logging.getLogger(__name__)


class Residency:
    def __init__(
        self,
        engine: Engine,
        library: Library | Lookup,
        device: str = "cpu",
        *,
        devices: Sequence[str] = (),
        max_loaded_models: int = 2,
        idle_unload_s: float = 0.0,
        busy_timeout_ms: float = 5000.0,
        min_free_memory_mb: float = 0.0,
        memory_factor: float = 1.5,
        max_running: int = 64,
        cpu_workers: int = 0,
        loader: Loader | None = None,
        free_memory: FreeMemory | None = None,
        poll_s: float = 0.05,
    ) -> None:
        assert max_loaded_models >= 1, "max_loaded_models must be >= 1"
        assert busy_timeout_ms >= 0 and idle_unload_s >= 0 and memory_factor > 0
        self.stopping = asyncio.Event()  # set by the server's drain: waits for a load give up (at stop_deadline_s)
        self.stop_deadline_s: float | None = None  # time.monotonic() until which a wait for a load goes on
        self.engine = engine
        self.library = library if isinstance(library, Library) else None
        self._lookup = library_lookup(library) if isinstance(library, Library) else library
        # Where speech LMs are placed, a replica each; "cuda" is cuda:0 (the worker's name, as its runner says).
        self.devices = tuple("cuda:0" if d == "cuda" else d for d in tuple(devices) or (device,))
        self.device = self.devices[0]
        self.max_loaded_models = max_loaded_models
        self.idle_unload_s = idle_unload_s
        self.busy_timeout_ms = busy_timeout_ms
        self.min_free_bytes = int(min_free_memory_mb * MB)
        self.memory_factor = memory_factor
        self.cpu_workers = cpu_workers  # sizes a Piper pool, and so its estimate
        self.max_running = max_running  # sizes a speech LM's KV cache, and so its estimate
        self.load_errors = LoadErrors()  # each model's last failed load (it records them), for GET /v1/models
        self._loader = self.load_errors.wrap(
            loader or functools.partial(load_runner, max_running=max_running, cpu_workers=cpu_workers))
        self._free_memory = free_memory or free_memory_bytes
        self.poll_s = poll_s
        self._residents: dict[str, Resident] = {}
        self._lock = asyncio.Lock()  # one eviction/load plan at a time
        self._changed = asyncio.Event()
        self._idle_task: asyncio.Task[None] | None = None
        self.num_loads = self.num_evictions = 0  # evictions: the unloads of reasons max_loaded_models and memory
        self.num_unloads = dict.fromkeys(UNLOAD_REASONS, 0)  # every unload, by reason (gateway/resident.py)

    # -- lifecycle --------------------------------------------------------------------

    async def start(self, preload: Iterable[str] = ()) -> None:
        if self.idle_unload_s > 0 and self._idle_task is None:
            self._idle_task = asyncio.create_task(idle_unload_loop(self), name="residency-idle-unload")
        for model_id in preload:
            try:
                lease = await self.acquire(model_id, keep_loaded=True)
            except EngineError as error:  # the server still starts; the model loads on use
                log.warning("preloading model %s failed: %s", model_id, error.message)
            else:
                lease.release()

    async def close(self) -> None:
        """Stop the idle task and unload everything (requests in flight are cancelled).

        Call before `engine.stop()`: unloading goes through the engine thread.
        """
        async with self._lock:  # lets an unload in progress finish first
            if self._idle_task is not None:
                self._idle_task.cancel()
                await asyncio.gather(self._idle_task, return_exceptions=True)
                self._idle_task = None
        for resident in list(self._residents.values()):
            if resident.state is ResidentState.LOADING:
                await resident.ready.wait()
            if resident.state is ResidentState.LOADED:
                async with self._lock:
                    await self._unload(resident, "shutdown")

    # -- queries ----------------------------------------------------------------------

    def is_loaded(self, model_id: str) -> bool:
        resident = self._residents.get(model_id)
        return resident is not None and resident.state is ResidentState.LOADED

    def is_busy(self, model_id: str) -> bool:
        resident = self._residents.get(model_id)
        return resident is not None and self._busy(resident)

    def status(self, model_id: str) -> dict[str, Any]:
        """Residency fields of one model, for GET /v1/models (gateway/resident.py `status_fields`)."""
        resident = self._residents.get(model_id)
        return status_fields(resident, resident is not None and self._busy(resident))

    def residents(self) -> list[dict[str, Any]]:
        """Every model loaded, loading or unloading, least recently used first."""
        ordered = sorted(self._residents.values(), key=lambda r: r.last_used_s)
        return [{"id": r.model_id, **self.status(r.model_id), "requests": self.engine.num_requests(r.model_id),
                 "leases": r.num_leases} for r in ordered]

    # -- acquire / load / unload ------------------------------------------------------

    async def _until_ready(self, resident: Resident) -> None:
        """Wait for `resident`'s load; raises ShuttingDown if the server stops first: a request already
        waiting when the drain begins waits on until `stop_deadline_s` (the end of the grace that running
        requests get), so a quick load still serves it; without a deadline it gives up at once."""
        waits = [asyncio.ensure_future(resident.ready.wait()), asyncio.ensure_future(self.stopping.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        left_s = (self.stop_deadline_s or 0.0) - time.monotonic()
        if not resident.ready.is_set() and left_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(resident.ready.wait(), left_s)
        if not resident.ready.is_set():
            raise ShuttingDown("server is shutting down")

    async def acquire(self, model_id: str, timeout_ms: float | None = None, *,
                      keep_loaded: bool = False) -> Lease:
        """Return once `model_id` is attached to the engine, holding a Lease on it.

        Waits at most the busy timeout (server default, capped by the model's own and by
        `timeout_ms`) for room; raises UnknownModel, ServerBusy, InsufficientMemory or
        LoadFailed.
        """
        spec: ModelSpec | None = None
        checked = trimmed = False  # whether the load would fail for good, asked before anything is evicted for it
        started = time.monotonic()
        while True:
            resident = self._residents.get(model_id)
            if resident is not None and resident.state is ResidentState.LOADED:
                resident.num_leases += 1
                resident.last_used_s = time.monotonic()
                return Lease(self._release, resident)
            if resident is not None and resident.state is ResidentState.LOADING:
                await self._until_ready(resident)  # loads are not cut short by the busy timeout
                if isinstance(resident.error, InsufficientMemory):  # (its load found it too big: a 503 saying so)
                    raise InsufficientMemory(resident.error.message, field="model")
                if resident.error is not None:
                    raise LoadFailed(f"model {model_id!r} failed to load: "
                                     f"{without_paths(describe(resident.error), resident.spec)}",
                                     field="model") from resident.error  # (the log has the paths: _load)
                continue
            if spec is None:
                spec = await self._lookup(model_id)
                if spec is None:
                    raise UnknownModel(f"model {model_id!r} is not installed", field="model")
                if keep_loaded and not spec.keep_loaded:
                    spec = dataclasses.replace(spec, keep_loaded=True)
                footprint, how = await asyncio.to_thread(estimate_memory, spec, self.memory_factor, self.cpu_workers,
                                                         self.device, self.max_running)
                timeout_s = self._timeout_s(spec, timeout_ms)
                if self.load_errors.failed_for_good(model_id):  # not even loaded while that stands
                    await self._check_files(spec)
                    checked = True
            async with self._lock:
                if model_id in self._residents:
                    continue
                victims, devices, blocked = self._plan(footprint)
                if blocked is None and (checked or not victims):
                    excess = len(self._residents) + 1 - self.max_loaded_models  # the first victims (placement.py)
                    for n, victim in enumerate(victims):
                        self.num_evictions += 1
                        await self._unload(victim, "max_loaded_models" if n < excess else "memory",
                                           f"evicted (LRU) to load {model_id!r}")
                    self._begin_load(spec, {device: footprint for device in devices})
                    continue
            if blocked is None:  # room, by evicting: first the check, then the plan again
                await self._check_files(spec)
                checked = True
                continue
            if blocked == "never" and not trimmed:  # what an unload freed, which the allocator may keep, first
                trimmed = True
                if await return_freed():
                    continue
            remaining = timeout_s - (time.monotonic() - started)
            if blocked == "never" or (remaining <= 0 and blocked == "memory"):
                frees = {device: self._free_memory(device) for device in self.devices}
                busy = [other for other, resident in self._residents.items() if self._busy(resident)]
                raise InsufficientMemory(memory_message(model_id, footprint, how, frees, self.min_free_bytes, busy,
                                                        never=blocked == "never"), field="model")
            if remaining <= 0:
                raise ServerBusy(
                    f"cannot load {model_id!r}: {self.max_loaded_models} model(s) are loaded or loading, and in use "
                    f"({', '.join(f'{m}: {r.state}' for m, r in self._residents.items())}); waited "
                    f"{1000 * timeout_s:.0f} ms. Retry later, or "
                    "raise max_loaded_models", field="model")
            await self._wait_change(min(remaining, self.poll_s))

    async def load(self, model_id: str, timeout_ms: float | None = None) -> dict[str, Any]:
        """Load without holding it (POST /v1/models/{id}/load); returns its status."""
        lease = await self.acquire(model_id, timeout_ms)
        lease.release()
        return self.status(model_id)

    async def unload(self, model_id: str, reason: str = "manual") -> bool:
        """Unload an idle model ("manual" or "deleted"); False if it was not loaded. ModelBusy (409) while busy."""
        async with self._lock:
            resident = self._residents.get(model_id)
            if resident is None:
                return False
            if resident.state is ResidentState.LOADING:
                raise ModelBusy(f"model {model_id!r} is loading; try again once it has loaded", field="model")
            if resident.state is ResidentState.UNLOADING:
                return True
            if self._busy(resident):
                num_requests = self.engine.num_requests(model_id)
                doing = f"serving {num_requests} request(s)" if num_requests else "starting a request"
                raise ModelBusy(f"model {model_id!r} is {doing}; try again when it is idle", field="model")
            await self._unload(resident, reason)
            return True

    # -- internals --------------------------------------------------------------------

    def _timeout_s(self, spec: ModelSpec, timeout_ms: float | None) -> float:
        bounds = [self.busy_timeout_ms]
        if spec.busy_timeout_ms is not None:
            bounds.append(spec.busy_timeout_ms)
        if timeout_ms is not None:
            bounds.append(max(0.0, timeout_ms))
        return min(bounds) / 1000.0

    def _busy(self, resident: Resident) -> bool:
        return (resident.num_leases > 0 or self.engine.num_requests(resident.model_id) > 0
                or time.monotonic() < resident.grace_until_s)

    def _plan(self, footprint: int) -> tuple[list[Resident], list[str], str | None]:
        """gateway/placement.py `plan`, over the residents now (busy ones count as just used)."""
        now = time.monotonic()
        residents = list(self._residents.values())
        for resident in residents:
            if resident.state is ResidentState.LOADED and self._busy(resident):
                resident.last_used_s = now
        free = {device: self._free_memory(device) for device in self.devices}
        victims, devices, blocked = plan(residents, free, footprint + self.min_free_bytes, self.max_loaded_models,
                                         self._busy)
        if blocked == "never" and any(r.state is ResidentState.LOADING for r in residents):
            blocked = "memory"  # a load in progress counts whole; once loaded and idle, it may make way: wait
        return victims, devices, blocked

    async def _check_files(self, spec: ModelSpec) -> None:
        """gateway/resident.py `check_files`, in a thread: before anything is evicted for `spec`."""
        await asyncio.to_thread(check_files, self.load_errors, spec, self.device)

    def _begin_load(self, spec: ModelSpec, footprints: dict[str, int]) -> None:
        resident = Resident(spec, footprints, last_used_s=time.monotonic())
        self._residents[spec.model_id] = resident
        # A task of its own: a waiter that goes away does not abandon a half-done load.
        asyncio.create_task(self._load(resident), name=f"load-{spec.model_id}")

    async def _load(self, resident: Resident) -> None:
        t0 = time.perf_counter()
        devices, runners = list(resident.footprints), resident.runners
        try:
            runners.append(await asyncio.to_thread(self._loader, resident.spec, devices[0]))
            if not runners[0].has_backbone:
                devices = devices[:1]  # a synthesiser (a CPU pool): one is enough
            if len(devices) > 1:  # the other replicas side by side
                more = await asyncio.gather(*(asyncio.to_thread(self._loader, resident.spec, device)
                                              for device in devices[1:]), return_exceptions=True)
                runners += [runner for runner in more if isinstance(runner, Runner)]
                for error in more:
                    if isinstance(error, BaseException):
                        raise error
            for device, runner in zip(devices, runners):
                await asyncio.wrap_future(self.engine.attach(resident.model_id, runner, device=device))
            resident.footprints = {device: max(int(runner.memory_bytes()), 1)
                                   for device, runner in zip(devices, runners)}
            resident.state = ResidentState.LOADED
            resident.loaded_s = time.monotonic()
            resident.last_used_s = resident.loaded_s
            resident.load_seconds = time.perf_counter() - t0
            self.num_loads += 1
            where = devices if runners[0].has_backbone else [runners[0].device]  # a synthesiser runs where it runs
            log.info("model %s loaded on %s in %.2fs (%.0f MB)", resident.model_id, ", ".join(where),
                     resident.load_seconds, resident.footprint_bytes / MB)
        except BaseException as error:
            resident.error = without_frames(error)  # kept for its message: not the half-built model its frames hold
            self._residents.pop(resident.model_id, None)
            await asyncio.wrap_future(self.engine.detach(resident.model_id))  # the replicas attached so far
            await close_runners(runners)
            resident.runners = runners = []
            log.warning("model %s failed to load: %s", resident.model_id, describe(error))
            if not isinstance(error, Exception):
                raise
        finally:
            resident.ready.set()
            self._notify()
        # Not while the server stops: the library may be closing (a load that ended during shutdown).
        if self.library is not None and resident.error is None and not self.stopping.is_set():
            try:
                await self.library.touch_model(resident.model_id)
            except Exception:
                log.exception("could not record the use of model %s", resident.model_id)

    async def _unload(self, resident: Resident, reason: str, detail: str = "") -> None:  # reason: UNLOAD_REASONS
        resident.state = ResidentState.UNLOADING  # no new lease from here on
        try:
            await close_runners(await asyncio.wrap_future(self.engine.detach(resident.model_id)))
        finally:
            self._residents.pop(resident.model_id, None)
            resident.runners = []  # (a Lease still held keeps the Resident, not its model)
            self.num_unloads[reason] += 1
            self._notify()
        log.info("model %s unloaded (%s)%s", resident.model_id, reason, f": {detail}" if detail else "")

    def _release(self, resident: Resident, grace: bool) -> None:
        resident.num_leases = max(0, resident.num_leases - 1)
        resident.last_used_s = time.monotonic()
        if grace:
            resident.grace_until_s = resident.last_used_s + SUBMIT_GRACE_S
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_change(self, timeout_s: float) -> None:
        # Polls too: the engine does not tell us when a model's last request ends.
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    async def unload_if_idle(self, model_id: str, now_s: float) -> None:
        """The idle reaper's step for one model (gateway/idle_unload.py): a loaded model not kept loaded
        is unloaded once unused for `idle_unload_s`; a busy one counts as used at `now_s` (monotonic s)."""
        resident = self._residents.get(model_id)
        if resident is None or resident.state is not ResidentState.LOADED or resident.spec.keep_loaded:
            return
        if self._busy(resident):
            resident.last_used_s = now_s
        elif now_s - resident.last_used_s >= self.idle_unload_s:
            async with self._lock:  # (a load may hold it for seconds: a request meanwhile makes the model used)
                if (self._residents.get(model_id) is resident and not self._busy(resident)
                        and resident.state is ResidentState.LOADED
                        and time.monotonic() - resident.last_used_s >= self.idle_unload_s):
                    await self._unload(resident, "idle", f"idle for {self.idle_unload_s:g}s")

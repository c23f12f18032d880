"""One model's residency record and the handles on it (gateway/residency.py decides them).

`Resident`: a model loading, loaded or unloading, with its runners (one a device it is
placed on), estimated footprint on each device, leases and last use. `Lease`: keeps its
model resident while held (a request's stream), released at the end or, if dropped unheld,
after `SUBMIT_GRACE_S`. The errors a request gets from residency: 503 `server_busy`,
`insufficient_memory`, `model_load_failed`, `shutting_down`, and 409 `model_busy` for an
unload while it serves.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from engine.runner import Runner
from engine.types import EngineError, Overloaded
from gateway.model_spec import LoadErrors, ModelSpec, without_paths

if TYPE_CHECKING:
    from gateway.residency import Residency

log = logging.getLogger(__name__)


class ServerBusy(Overloaded):
    code = "server_busy"


class InsufficientMemory(Overloaded):
    code = "insufficient_memory"


class ModelBusy(EngineError):
    code = "model_busy"
    status = 409


class LoadFailed(EngineError):
    code = "model_load_failed"
    status = 503


class ShuttingDown(EngineError):
    """The server is stopping: a request still waiting for its model's load gives up."""
    code = "shutting_down"
    status = 503


# A Lease dropped unheld (`await residency.acquire(m)` with the result ignored, then
# `engine.submit`) keeps its model busy this long: the engine counts a submitted request
# only once its thread has read it, and an eviction must not come in between.
SUBMIT_GRACE_S = 1.0

# Why a model is unloaded (gateway/residency.py `num_unloads`, the metric `voxgate_model_unloads_total{reason}`):
# evicted, least recently used first, to load another past `max_loaded_models` or for the memory it needs (the
# memory guard); unused for `idle_unload_s`; `POST /v1/models/{id}/unload` ("manual"); its model deleted from the
# library; the server stopping.
UNLOAD_REASONS = ("max_loaded_models", "memory", "idle", "manual", "deleted", "shutdown")


class ResidentState(enum.StrEnum):
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADING = "unloading"


@dataclass(eq=False)
class Resident:
    spec: ModelSpec
    footprints: dict[str, int]  # bytes per device it is placed on: estimated before loading, memory_bytes() after
    state: ResidentState = ResidentState.LOADING
    runners: list[Runner] = field(default_factory=list)  # one a device, in the order of `footprints`
    error: BaseException | None = None
    num_leases: int = 0
    last_used_s: float = 0.0
    grace_until_s: float = float("-inf")  # busy until then (see SUBMIT_GRACE_S)
    loaded_s: float | None = None
    load_seconds: float | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def model_id(self) -> str:
        return self.spec.model_id

    @property
    def footprint_bytes(self) -> int:
        return sum(self.footprints.values())

    @property
    def runner(self) -> Runner | None:
        """The first device's (replicas are the same model: its facts, e.g. `sample_rate`)."""
        return self.runners[0] if self.runners else None


class Lease:
    """Keeps a model resident while held. Release it when the request's stream ends."""

    def __init__(self, release: Callable[[Resident, bool], None], resident: Resident) -> None:
        self._release = release
        self._resident: Resident | None = resident
        self.model_id = resident.model_id
        assert resident.runner is not None
        self.runner: Runner = resident.runner

    def release(self, grace: bool = False) -> None:
        if self._resident is not None:
            self._release(self._resident, grace)
            self._resident = None

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:  # a dropped lease must not pin its model forever
        if self._resident is not None:
            try:
                self.release(grace=True)
            except RuntimeError:  # event loop already closed
                pass


def without_frames(error: BaseException) -> BaseException:
    """`error` (and its causes) without tracebacks: a load that failed part way holds the tensors it
    had made in its frames' locals, which a kept traceback would keep (found by a new-user trial:
    each failed 0.6B load kept ~3.6 GB)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.__traceback__ = None
        current = current.__cause__ or current.__context__
    return error


def describe(error: BaseException) -> str:
    """An error's message for a log line or a LoadFailed: its `message`, its text, or its type."""
    return getattr(error, "message", None) or str(error) or type(error).__name__


def check_files(load_errors: LoadErrors, spec: ModelSpec, device: str) -> None:
    """Raise LoadFailed (a 503 not to retry: its cause is InvalidModel) where a load of `spec` would fail for
    good (`LoadErrors.refusal`: its files broken, or unchanged since such a load), before anything is evicted
    for it: a client retrying a broken model must not unload healthy ones. Blocking (reads files)."""
    try:
        error = load_errors.refusal(spec, device)
    except Exception:  # a check that breaks refuses nothing: the load says what is wrong
        log.exception("could not check the files of model %s before loading it", spec.model_id)
        return
    if error is not None:
        log.warning("model %s not loaded, nothing unloaded for it: %s", spec.model_id, describe(error))
        raise LoadFailed(f"model {spec.model_id!r} failed to load: {without_paths(describe(error), spec)}",
                         field="model") from error


def status_fields(resident: Resident | None, busy: bool) -> dict[str, Any]:
    """A model's residency fields for GET /v1/models (`resident` None: not loaded)."""
    if resident is None:
        return {"loaded": False, "loading": False, "busy": False, "memory_bytes": 0, "devices": [],
                "last_used": None, "state": "unloaded"}
    loaded = resident.state is ResidentState.LOADED
    return {"loaded": loaded, "loading": resident.state is ResidentState.LOADING, "busy": busy,
            "state": str(resident.state), "memory_bytes": resident.footprint_bytes if loaded else 0,
            "devices": list(resident.footprints) if loaded else [],
            "last_used": time.time() - (time.monotonic() - resident.last_used_s), "load_seconds": resident.load_seconds}


async def unload_removed(residency: Residency, model_id: str, poll_s: float = 0.05) -> None:
    """Unload `model_id` once its library record is gone (DELETE /v1/library/models/{id}): no request can
    load it any more, but one that looked it up just before may have begun a load, or still stream on it.
    Wait for those to end, then unload (found by an operator trial: the DELETE answered 409 "is loading; try
    again", its record already removed, and the model stayed loaded, unlisted, and a retry was a 404)."""
    while True:
        try:
            await residency.unload(model_id, reason="deleted")
            return
        except ModelBusy:
            await asyncio.sleep(poll_s)


async def close_runners(runners: list[Runner]) -> None:
    """Close each runner (in a worker thread), emptying `runners` and keeping no reference to one in this frame:
    nothing keeps an unloaded model alive (tests/gateway/test_residency.py checks it with automatic collection
    off)."""
    while runners:
        await asyncio.to_thread(runners.pop().close)

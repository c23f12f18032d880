"""What residency knows of a model before it loads it, and how it loads one.

`ModelSpec` comes from the library's `models` row (`library_lookup`); `load_runner` turns it
into an engine runner (the family's `load`, then `engine.runner.build_runner`); the memory
guard measures `free_memory_bytes` on the device and `estimate_memory` says what a model will
hold: the family's own estimate where it has one (Piper counts its onnxruntime sessions), else
its `folder_size` on disk x `memory_factor`.

A load that fails is checked with the family's `validate` (its files read, not loaded): when
that finds them broken, the load raises `InvalidModel` saying which file, and the request gets
503 `model_load_failed` with `x-should-retry: false` and no `Retry-After` (gateway/errors.py), not
one a client retries; a load that fails with good files (out of memory, a busy GPU) is a plain 503.
Either message is the client's through `without_paths`: the file named, not the server's folders.
`LoadErrors` keeps each model's last failed load for `GET /v1/models` (`load_error`), and says
before a load (`refusal`) whether it would fail for good as the last one did, so that residency
refuses it without evicting other models for it (gateway/residency.py).
"""

from __future__ import annotations

import glob
import importlib.util
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any, Awaitable, Callable, Mapping

from engine.runner import Runner, build_runner
from gateway import host_memory
from gateway.library import Library
from gateway.settings import MB
from models import FamilyUnavailable, InvalidModel, family


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What residency needs to load one model; built by the library from its `models` row."""

    model_id: str
    family: str
    path: Path | None  # None: the family's embedded model
    options: Mapping[str, Any] = field(default_factory=dict)
    size_bytes: int = 0  # on disk; 0 = measure the folder
    busy_timeout_ms: float | None = None  # this model's ceiling on waiting for room
    keep_loaded: bool = False  # exempt from idle unload (preloaded models)


Lookup = Callable[[str], Awaitable[ModelSpec | None]]
Loader = Callable[[ModelSpec, str], Runner]
FreeMemory = Callable[[str], int | None]  # bytes free on a device, None: unknown

# Options the gateway reads from a model's row; the rest go to the family's load().
RESIDENCY_OPTIONS = ("busy_timeout_ms",)


def library_lookup(library: Library) -> Lookup:
    """ModelSpecs from the library's `models` rows."""

    async def lookup(model_id: str) -> ModelSpec | None:
        record = await library.get_model(model_id)
        if record is None:
            return None
        options = dict(record.get("options") or {})
        timeout = options.get("busy_timeout_ms")
        return ModelSpec(
            model_id=record["id"], family=record["family"],
            path=Path(record["path"]) if record.get("path") else None,
            options={k: v for k, v in options.items() if k not in RESIDENCY_OPTIONS},
            size_bytes=int(record.get("size_bytes") or 0),
            busy_timeout_ms=float(timeout) if isinstance(timeout, (int, float)) else None)

    return lookup


def load_runner(spec: ModelSpec, device: str, max_running: int = 64, cpu_workers: int = 0) -> Runner:
    """The default loader (runs in a worker thread): the family module's `load` gives the
    model's parts, the engine builds the runner; `max_running` unless the model's options
    set their own. `cpu_workers` (the server's setting, 0: the family's default) sizes the
    pool of a family with one (its module's `WORKERS_OPTION`) unless the model's options do.
    `cpu:N` (another CPU worker, settings.py `devices`) loads on the CPU."""
    device = "cpu" if device.split(":")[0] == "cpu" else device
    module = family(spec.family)
    try:
        parts = module.load(spec.model_id, spec.path, _family_options(module, spec, cpu_workers), device)
    except InvalidModel:
        raise
    except Exception as error:
        if _out_of_memory(error):
            raise _too_big(spec, device, max_running, error) from None
        broken = files_problem(spec)
        if broken is not None:
            raise InvalidModel(f"{broken}; its load failed with: {_short(error)}") from error
        raise
    try:
        runner = build_runner(spec.model_id, parts, device, max_running)
        runner.warm_up()  # the cost model's first estimates (engine/runner.py)
        return runner
    except Exception as error:
        if _out_of_memory(error):
            raise _too_big(spec, device, max_running, error) from None
        raise


def _out_of_memory(error: BaseException) -> bool:
    """An allocation the device could not make (torch's CPU "can't allocate", CUDA's out of memory)."""
    text = str(error)
    return type(error).__name__ in ("OutOfMemoryError", "MemoryError") or "can't allocate" in text \
        or "out of memory" in text.lower()


def _too_big(spec: ModelSpec, device: str, max_running: int, error: BaseException) -> Exception:
    """503 insufficient_memory naming what sizes a speech LM's KV cache (found by a new-user trial: a
    0.6B Qwen3-TTS on a CPU asked for 30 GB, 64 slots x 2048 positions in float32, and the answer was
    torch's raw message as a retryable `model_load_failed`)."""
    from gateway.resident import InsufficientMemory

    slots = spec.options.get("max_running", max_running)
    return InsufficientMemory(
        f"model {spec.model_id!r} does not fit in the memory free on {device} ({_short(error, 160)}); a speech "
        f"LM's KV cache grows with max_running ({slots} requests at once) x max_seq_len (positions a request): "
        f"add the model with smaller ones, e.g. `voxgate models add ... --option max_running=4`", field="model")


def _family_options(module: ModuleType, spec: ModelSpec, cpu_workers: int) -> dict[str, Any]:
    """The options the family's `load` gets: the model's, with `cpu_workers` sizing a pool they leave out."""
    options = dict(spec.options)
    workers_option = getattr(module, "WORKERS_OPTION", None)
    if cpu_workers and workers_option is not None:
        options.setdefault(workers_option, cpu_workers)
    return options


def estimate_memory(spec: ModelSpec, memory_factor: float, cpu_workers: int = 0, device: str = "cpu",
                    max_running: int = 64) -> tuple[int, str]:
    """(bytes, how) `spec` will hold once loaded on `device`, for the memory guard before it loads it
    (runs in a worker thread): the family's `estimate_memory(size on disk, options)` where it has one
    (models/piper_pool.py: its onnxruntime sessions), else the size on disk x `memory_factor`; plus, for a
    speech LM (its family's `kv_cache_shape`), the KV cache its runner allocates: 2 (K, V) x layers x
    `max_running` slots (the model's option first) x KV heads x (positions + 1) x head dim x bytes an
    element (models/lm_runner.py `_allocate_kv_cache`). A family that cannot say (unknown, not installed,
    a bad option, an unreadable config) gets the size alone; its load reports why."""
    size = spec.size_bytes or folder_size(spec.path)
    num_bytes, how = int(size * memory_factor), f"size on disk x {memory_factor:g}"
    try:
        module = family(spec.family)
        options = _family_options(module, spec, cpu_workers)
        estimate = getattr(module, "estimate_memory", None)
        if estimate is not None:
            found, said = estimate(size, options)
            num_bytes, how = int(found), str(said)
        shape = getattr(module, "kv_cache_shape", None)
        if shape is not None:
            layers, heads, head_dim, positions, element = shape(spec.path, options, device)
            slots = int(options.get("max_running") or max_running)
            kv = 2 * layers * slots * heads * (positions + 1) * head_dim * element
            num_bytes += kv
            how += (f" + a KV cache of {kv / MB:.0f} MB: max_running {slots} slots x max_seq_len {positions} "
                    "positions, model options that shrink it")
    except (KeyError, FamilyUnavailable, InvalidModel, OSError, ValueError, TypeError):
        pass
    return num_bytes, how


def files_problem(spec: ModelSpec) -> str | None:
    """What the family's `validate` finds wrong with a model's folder now (a file truncated,
    corrupt or gone), or None: nothing, or the embedded model (no folder)."""
    if spec.path is None:
        return None
    try:
        family(spec.family).validate(spec.path, dict(spec.options))
    except InvalidModel as problem:
        return problem.message
    except Exception:  # validate itself broke on it: say nothing more than the load's own error
        pass
    return None


# An absolute POSIX path in an error's text: a `/` that starts a word (not a URL's `//`, a ratio's `3/4`
# or a relative `a/b`), up to a space, a quote or a bracket.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/-])/[^\s'\"`,;()\[\]<>]+")


def without_paths(text: str, spec: ModelSpec) -> str:
    """`text` (a load error's message) for a client: the server's paths taken out. A path under the
    model's folder (or a folder a path option names) is its part below that folder (`bob.onnx`), the
    folder itself its name, and any other absolute path its last part (`model.safetensors`), so the
    message still says which file, not where the server keeps it. The log keeps the whole message."""
    roots = [spec.path] if spec.path is not None else []
    roots += [Path(value) for name, value in spec.options.items() if name.endswith("_path") and isinstance(value, str)]
    for root in sorted(roots, key=lambda r: len(str(r)), reverse=True):  # (a nested folder first)
        if str(root) not in ("", "/", "."):
            text = text.replace(f"{root}/", "").replace(str(root), root.name)

    def last_part(found: re.Match[str]) -> str:
        path = found.group(0)
        core = path.rstrip(".:")  # a sentence's or a label's end stays
        return (PurePosixPath(core).name or core) + path[len(core):]

    return _ABSOLUTE_PATH.sub(last_part, text)


def _short(error: BaseException, limit: int = 300) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= limit else text[:limit] + "…"


def files_stamp(spec: ModelSpec) -> tuple[Any, ...]:
    """What a load of `spec` reads, told apart cheaply (stat, nothing read; runs in a worker thread):
    its family, folder and options, and the size, change times and inode of every file under its
    folder (a voice file: the files beside it named after it) and under the folders its path options
    name (the family's `OPTIONS` of kind "path", e.g. Orpheus' `backbone_path`)."""
    try:
        known: Mapping[str, Any] = getattr(family(spec.family), "OPTIONS", {})
    except (KeyError, FamilyUnavailable):
        known = {}
    roots = [spec.path] if spec.path is not None else []
    roots += [Path(value) for name, value in spec.options.items() if getattr(known.get(name), "kind", "") == "path"]
    files: list[tuple[Any, ...]] = []
    for root in roots:
        try:
            found = ([root, *sorted(root.rglob("*"))] if root.is_dir()
                     else sorted(root.parent.glob(glob.escape(root.name) + "*")) or [root])
            for path in found:
                status = path.stat()
                files.append((str(path), status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino))
        except OSError as error:  # gone, or unreadable: that too is a state of its files
            files.append((str(root), type(error).__name__))
    return spec.family, spec.path, dict(spec.options), tuple(files)


@dataclass(frozen=True, slots=True)
class _Verdict:
    """A load that failed for good (`InvalidModel`), with what it read then (`files_stamp`)."""

    stamp: tuple[Any, ...]
    message: str  # its error's, not the error: its traceback would keep what the load had read alive
    field: str
    files: bool  # the family's `validate` found the files broken too (else: the load's own verdict)

    def error(self) -> InvalidModel:
        return InvalidModel(self.message, self.field)


class LoadErrors:
    """Each model's last failed load (its message, device, when, and whether another try may work:
    not when the load raised `InvalidModel`, files broken or options that cannot work), for
    `GET /v1/models`; a successful load or a removal clears it.
    `wrap(loader)` records them; the loader runs in worker threads, hence the lock.

    `refusal(spec)`, residency's check before it loads a model that failed for good or evicts
    another for one, says whether the load would fail for good; one that would is not tried."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._errors: dict[str, dict[str, Any]] = {}
        self._verdicts: dict[str, _Verdict] = {}

    def wrap(self, loader: Loader) -> Loader:
        def load(spec: ModelSpec, device: str) -> Runner:
            try:
                runner = loader(spec, device)
            except Exception as error:
                verdict = None
                if isinstance(error, InvalidModel):  # what it read, and whether validate sees it too
                    verdict = _Verdict(files_stamp(spec), error.message, error.field, files_problem(spec) is not None)
                self._record(spec, error, device, verdict)
                raise
            self.forget(spec.model_id)
            return runner

        return load

    def failed_for_good(self, model_id: str) -> bool:
        """Whether `model_id`'s last load failed with `InvalidModel` (`refusal` looks again)."""
        with self._lock:
            return model_id in self._verdicts

    def refusal(self, spec: ModelSpec, device: str) -> InvalidModel | None:
        """Why a load of `spec` would fail for good, found without loading it (runs in a worker
        thread; ~0.2 s on a tiny Orpheus folder, mostly its tokenizer), or None: try it. Where its last
        load failed for good and nothing it reads has changed since (`files_stamp`), that error
        again: at once when the load itself refused the model (weights that do not match the
        config, options this server cannot run), else while the family's `validate` still finds
        the files broken. Otherwise `validate` decides: files broken now are recorded as a failed
        load on `device` (`load_error`), good ones are loaded (a load that works clears the record)."""
        with self._lock:
            verdict = self._verdicts.get(spec.model_id)
        stamp = files_stamp(spec)
        if verdict is not None and verdict.stamp == stamp and not verdict.files:
            return verdict.error()
        problem = files_problem(spec)
        if problem is None:
            return None
        if verdict is not None and verdict.stamp == stamp:
            return verdict.error()
        error = InvalidModel(f"{problem} (found by checking its files before loading it)")
        self._record(spec, error, device, _Verdict(stamp, error.message, error.field, True))
        return error

    def _record(self, spec: ModelSpec, error: Exception, device: str, verdict: _Verdict | None) -> None:
        model_id = spec.model_id
        message = without_paths(getattr(error, "message", None) or _short(error), spec)  # (shown by GET /v1/models)
        with self._lock:
            self._errors[model_id] = {"message": message, "retryable": verdict is None, "device": device,
                                      "at": time.time()}
            if verdict is not None:
                self._verdicts[model_id] = verdict
            else:
                self._verdicts.pop(model_id, None)

    def get(self, model_id: str) -> dict[str, Any] | None:
        with self._lock:
            error = self._errors.get(model_id)
        return dict(error) if error is not None else None

    def forget(self, model_id: str) -> None:
        with self._lock:
            self._errors.pop(model_id, None)
            self._verdicts.pop(model_id, None)


def free_memory_bytes(device: str) -> int | None:
    """Free memory where `device` keeps weights (bytes), or None when it cannot be measured: a CUDA
    device's free memory, else the host's (gateway/host_memory.py: `MemAvailable` bounded by this
    process's cgroup limits, psutil's `available` where neither can be read)."""
    if device.startswith("cuda"):
        if importlib.util.find_spec("torch") is None:
            return None
        import torch

        if not torch.cuda.is_available():
            return None
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    available = host_memory.available_bytes()  # MemAvailable, bounded by a container's cgroup limit
    if available is not None:
        return available
    if importlib.util.find_spec("psutil") is not None:
        import psutil

        return int(psutil.virtual_memory().available)
    return None


def folder_size(path: Path | None) -> int:
    if path is None or not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())

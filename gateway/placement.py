"""Where one more model goes (gateway/residency.py): the devices with room for it and the idle
models to evict for that room, or why it cannot be placed now (pure Python).

A device has room when its free memory, less what loading models will take, covers the
model's footprint plus the memory that must stay free. Evictions are the least recently used
idle models: first as many as `max_loaded_models` demands; then, where that frees room on no
device, the fewest more that free it on one device (then the least recently used set).
Evictions buy a model its first replica, never more.
"""

from __future__ import annotations

from typing import Callable, Mapping

from gateway.resident import Resident, ResidentState
from gateway.settings import MB, format_mb


def plan(residents: list[Resident], free: Mapping[str, int | None], need_bytes: int, max_loaded_models: int,
         busy: Callable[[Resident], bool]) -> tuple[list[Resident], list[str], str | None]:
    """(idle models to evict, devices to place the model on, None), or ([], [], reason): "count"
    (too many loaded and busy), "memory" (busy models hold what is needed on every device) or
    "never" (it would fit on no device even with nothing loaded). `free`: bytes free per device
    (None: unknown, taken as room); `need_bytes`: the model's footprint a device plus what must
    stay free."""
    missing: dict[str, int] = {}  # bytes to free on each device where it can fit at all
    for device, free_bytes in free.items():
        if free_bytes is None:
            missing[device] = 0
            continue
        loading = sum(r.footprints.get(device, 0) for r in residents if r.state is ResidentState.LOADING)
        need = need_bytes - (free_bytes - loading)
        if need - sum(r.footprints.get(device, 0) for r in residents) <= 0:
            missing[device] = need
    if not missing:
        return [], [], "never"
    idle = sorted((r for r in residents if r.state is ResidentState.LOADED and not busy(r)),
                  key=lambda r: r.last_used_s)
    excess_count = len(residents) + 1 - max_loaded_models
    victims = idle[:max(0, excess_count)]  # the least recently used make way first
    if len(victims) < excess_count:
        return [], [], "count"

    def fits(device: str, evicted: list[Resident]) -> bool:
        return missing[device] <= sum(r.footprints.get(device, 0) for r in evicted)

    if not any(fits(device, victims) for device in missing):  # room on one device: the fewest evictions,
        options = []  # then the least recently used
        for device in missing:
            more = list(victims)
            for resident in (r for r in idle if r not in victims and r.footprints.get(device)):
                if fits(device, more):
                    break
                more.append(resident)
            if fits(device, more):
                options.append((len(more), max((r.last_used_s for r in more), default=0.0), more))
        if not options:
            return [], [], "memory"
        victims = min(options, key=lambda option: option[:2])[2]
    return victims, [device for device in missing if fits(device, victims)], None


def memory_message(model_id: str, footprint: int, how: str, free: Mapping[str, int | None], min_free_bytes: int,
                   busy: list[str], never: bool = False) -> str:
    """The 503 `insufficient_memory` message: what `model_id` needs (`how`: the estimate's reasoning), what
    must stay free, what each device has (`free`, bytes or None: unknown) and the busy models holding it;
    `never`: it would fit on no device with nothing loaded (plan's "never", with nothing loading and the
    allocator's freed memory returned), which the message says instead (it named every loaded model as
    busy, idle ones too: found by a new-user trial)."""
    frees = ", ".join(f"{'unknown' if n is None else f'{n / MB:.0f} MB'} free on {device}" for device, n in free.items())
    held = ("; unloading every model would not make room either (by the estimates and the memory free now)" if never
            else f", held by busy models {', '.join(busy)}" if busy else "")
    return (f"not enough memory to load {model_id!r}: it needs about {footprint / MB:.0f} MB "
            f"({how}) and {format_mb(min_free_bytes)} must stay free (min_free_memory_mb); {frees}{held}")

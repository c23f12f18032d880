"""How a host thread waits for the GPU: the CUDA primary context's scheduling flag.

By default (`CU_CTX_SCHED_AUTO`) a thread that waits on an event or a copy spins on a core
while it waits. A spinning lane thread on the sibling hyperthread of the core stepping the
engine slows that step's Python. `blocking` makes waits sleep on an OS primitive. `yield`
spins but yields the core between polls. Driver API: `cuDevicePrimaryCtxSetFlags`, CUDA
Driver API reference §6.7, flags `CU_CTX_SCHED_SPIN = 1`, `YIELD = 2`, `BLOCKING_SYNC = 4`.
"""

from __future__ import annotations

import ctypes

MODES = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}


def set_sync_mode(mode: str, device: int = 0) -> None:
    """Set device `device`'s primary-context scheduling flag to `mode` (a key of MODES). Call it
    before the process first uses CUDA. Raises KeyError for an unknown mode, OSError without a
    driver (libcuda.so.1), RuntimeError if the driver refuses (its CUresult code in the message)."""
    flags = MODES[mode]
    cuda = ctypes.CDLL("libcuda.so.1")
    result = cuda.cuInit(ctypes.c_uint(0))
    if result == 0:
        result = cuda.cuDevicePrimaryCtxSetFlags_v2(ctypes.c_int(device), ctypes.c_uint(flags))
    if result != 0:
        raise RuntimeError(f"setting the CUDA sync mode {mode!r} failed with CUresult {result}")

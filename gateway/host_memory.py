"""Host memory a model may still take: the kernel's `MemAvailable`, bounded by this process's cgroup limits.

Why: in a container (`docker run --memory 4g`, a Kubernetes pod's limit) or a systemd unit with `MemoryMax`,
`/proc/meminfo` shows the whole host's memory, so a memory guard reading only `MemAvailable` let a load
through that the container could not hold, and the kernel's OOM killer ended the server.

A cgroup's room is its limit less its working set, as the kubelet and `docker stats` count it: usage less
the inactive file cache (which the kernel reclaims before it kills; cgroup v2 `memory.current` and
`memory.stat`'s `inactive_file`, v1 `memory.usage_in_bytes` and `total_inactive_file`). Every level from
the process's own cgroup up to the root counts (a parent's limit binds its children too), and the least
room wins. Sources: the kernel's Documentation/admin-guide/cgroup-v2.rst (memory.max, memory.current,
memory.stat) and cgroup-v1/memory.rst; /proc/self/cgroup's format: cgroups(7).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
MEMINFO = Path("/proc/meminfo")
UNLIMITED_V1 = 1 << 60  # (v1 reports "no limit" as a page-rounded 2^63 - 1; anything this large is none)


def meminfo_available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """`MemAvailable` of /proc/meminfo in bytes (int), or None where there is none (not Linux, < 3.14)."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # (v2 writes "max" for no limit)


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _levels(root: Path, member: str) -> list[Path]:
    """The cgroup folders from `member` (a path inside the hierarchy, "/" for the root) up to `root`."""
    parts = PurePosixPath(member).parts[1:] if member.startswith("/") else ()
    folders = [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]
    return [folder for folder in folders if folder.is_dir()]


def cgroup_room_bytes(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int | None:
    """Bytes (int, >= 0) this process's cgroups let it still take (module docstring), or None where no level
    has a memory limit (or there are no cgroups). v2 (a "0::<path>" line in `proc_cgroup`) under `root`; v1
    (a line whose controllers include "memory") under `root`/memory."""
    try:
        lines = proc_cgroup.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    rooms: list[int] = []
    for line in lines:
        number, _, rest = line.partition(":")
        controllers, _, member = rest.partition(":")
        if number == "0" and controllers == "":  # v2's unified hierarchy
            for folder in _levels(root, member):
                limit, usage = _read_int(folder / "memory.max"), _read_int(folder / "memory.current")
                if limit is not None and usage is not None:
                    rooms.append(limit - max(0, usage - _stat(folder / "memory.stat", "inactive_file")))
        elif "memory" in controllers.split(","):  # v1's memory hierarchy
            for folder in _levels(root / "memory", member):
                limit = _read_int(folder / "memory.limit_in_bytes")
                usage = _read_int(folder / "memory.usage_in_bytes")
                if limit is not None and usage is not None and limit < UNLIMITED_V1:
                    rooms.append(limit - max(0, usage - _stat(folder / "memory.stat", "total_inactive_file")))
    return max(0, min(rooms)) if rooms else None


def available_bytes() -> int | None:
    """Host memory a model may still take (bytes): the least of `MemAvailable` and the cgroups' room; None
    when neither can be read (then psutil's `virtual_memory().available` is the caller's last resort)."""
    known = [n for n in (meminfo_available_bytes(), cgroup_room_bytes()) if n is not None]
    return min(known) if known else None

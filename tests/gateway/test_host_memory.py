"""The memory guard's host reading (gateway/host_memory.py): `MemAvailable` bounded by the process's cgroup
limits, v2 and v1, every level up to the root, the inactive file cache counted as room. Fake hierarchies in
tmp_path, in the kernel's file formats."""

from __future__ import annotations

from pathlib import Path

from gateway import host_memory
from gateway.host_memory import cgroup_room_bytes, meminfo_available_bytes

GIB = 1 << 30


def _write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text + "\n")


def test_v2_room_is_the_limit_less_the_working_set_at_the_tightest_level(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/voxgate.service\n")
    root = tmp_path / "fs"
    _write(root, memory_stat="anon 1\n")  # the root: no memory.max
    _write(root / "system.slice", memory_max="max", memory_current=str(9 * GIB), memory_stat="inactive_file 0")
    # 4 GiB limit, 3 GiB used of which 1 GiB is inactive file cache: 2 GiB of room
    _write(root / "system.slice" / "voxgate.service", memory_max=str(4 * GIB), memory_current=str(3 * GIB),
           memory_stat=f"anon {GIB}\nfile {2 * GIB}\ninactive_file {GIB}\nactive_file {GIB}")
    assert cgroup_room_bytes(root, proc) == 2 * GIB
    _write(root / "system.slice", memory_max=str(10 * GIB))  # the slice: 10 GiB, 9 used, none reclaimable
    assert cgroup_room_bytes(root, proc) == GIB


def test_v2_without_a_limit_or_over_it(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/\n")  # a container's own namespace
    _write(tmp_path / "fs", memory_max="max", memory_current=str(GIB))
    assert cgroup_room_bytes(tmp_path / "fs", proc) is None
    _write(tmp_path / "fs", memory_max=str(GIB // 2))  # over its limit (swap, or reclaim under way): no room
    assert cgroup_room_bytes(tmp_path / "fs", proc) == 0


def test_v1_memory_controller(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("12:cpu,cpuacct:/docker/abc\n7:memory:/docker/abc\n1:name=systemd:/docker/abc\n")
    memory = tmp_path / "fs" / "memory"
    _write(memory, memory_limit_in_bytes=str(9223372036854771712), memory_usage_in_bytes=str(50 * GIB))
    _write(memory / "docker" / "abc", memory_limit_in_bytes=str(8 * GIB), memory_usage_in_bytes=str(5 * GIB),
           memory_stat=f"cache {2 * GIB}\ntotal_inactive_file {GIB}")
    assert cgroup_room_bytes(tmp_path / "fs", proc) == 4 * GIB
    # Docker on v1: the mount is the container's own cgroup, /proc/self/cgroup names its path on the host
    _write(tmp_path / "v1" / "memory", memory_limit_in_bytes=str(2 * GIB), memory_usage_in_bytes=str(GIB))
    assert cgroup_room_bytes(tmp_path / "v1", proc) == GIB


def test_no_cgroups_and_meminfo(tmp_path: Path) -> None:
    assert cgroup_room_bytes(tmp_path / "fs", tmp_path / "missing") is None
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2000000 kB\n")
    assert meminfo_available_bytes(meminfo) == 2000000 * 1024
    assert meminfo_available_bytes(tmp_path / "missing") is None


def test_the_guard_reads_the_least_of_the_two(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gateway.model_spec import free_memory_bytes

    monkeypatch.setattr(host_memory, "meminfo_available_bytes", lambda: 20 * GIB)
    monkeypatch.setattr(host_memory, "cgroup_room_bytes", lambda: 3 * GIB)  # a container limited to a few GiB
    assert free_memory_bytes("cpu") == 3 * GIB
    monkeypatch.setattr(host_memory, "cgroup_room_bytes", lambda: None)
    assert free_memory_bytes("cpu") == 20 * GIB

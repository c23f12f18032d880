"""A `voxgate serve` process for a benchmark: started, measured (RSS, fds, CPU), stopped.

Shared by bench/storm.py and bench/soak.py. `serve_and_run(run, **settings)` starts the
server on a fresh data dir and a free loopback port (loopback only), runs `run(url, pid)`
in asyncio and stops the server, whatever happened. `usage(pid)` reads a process's
memory and open fds from /proc; `CpuMeter` tells how many cores the server, this
benchmark and everything else on the machine used over a stretch of time (the machine
is shared: another developer's work can slow the clients or the server).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(log: Path | None, lines: int = 8) -> str:
    """"; the end of its log (LOG):" and the log's last `lines` lines, or "" without one: what a benchmark
    says when its server exited or did not answer (the reason is in the log, not in the exit status)."""
    said = log.read_text(errors="replace").strip().splitlines()[-lines:] if log and log.is_file() else []
    return f"; the end of its log ({log}):\n  " + "\n  ".join(said) if said else ""


def start_server(data_dir: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    """`voxgate serve` on `data_dir` and a free loopback port, with `VOXGATE_<NAME>` settings
    from `env`; returns the process and its base URL once /health answers (RuntimeError
    if it exits or takes over 120 s)."""
    port = free_port()
    environ = {**os.environ, "VOXGATE_LOG_LEVEL": "warning", **{f"VOXGATE_{k.upper()}": v for k, v in env.items()}}
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--data-dir",
                             str(data_dir)], cwd=ROOT, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("server did not start")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)


def serve_and_run(run: Callable[[str, int], Awaitable[dict[str, Any]]], **settings: str) -> dict[str, Any]:
    """Start a server (`start_server`, fresh data dir), run `run(url, server_pid)`, stop it.
    Returns `run`'s record after the command line and the machine's CPU count."""
    with tempfile.TemporaryDirectory() as data:
        proc, url = start_server(Path(data), **settings)
        try:
            return {"command": " ".join(["python", *sys.argv]), "cpus": os.cpu_count(),
                    "machine": f"{os.cpu_count()} CPUs, no GPU (CPU-only server)", "gpu": None,
                    **asyncio.run(run(url, proc.pid))}
        finally:
            proc.terminate()
            proc.wait(30)


def usage(pid: int) -> dict[str, int]:
    """RSS (bytes; and its anonymous part, the heaps, apart from the file-backed part,
    library code and data the kernel may drop and read back under memory pressure) and
    open file descriptors of a process, from /proc/<pid>/status and /proc/<pid>/fd."""
    fields = {"VmRSS:": "rss_bytes", "RssAnon:": "rss_anon_bytes", "RssFile:": "rss_file_bytes"}
    out = dict.fromkeys(fields.values(), 0)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(maxsplit=1)[0] if line else ""
        if key in fields:
            out[fields[key]] = int(line.split()[1]) * 1024
    return {**out, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


async def engine_requests(client: httpx.AsyncClient) -> int:
    """The engine's open requests (`GET /v1/stats`)."""
    return int((await client.get("/v1/stats")).json()["requests"])


async def memory_trims(client: httpx.AsyncClient) -> dict[str, int]:
    """The server's idle trims so far and the RSS they released (`GET /metrics`,
    gateway/memory.py); zeros when it runs none (`memory_trim_idle_s` 0, no glibc)."""
    samples = {s.name: s.value for family in text_string_to_metric_families((await client.get("/metrics")).text)
               for s in family.samples}
    return {"trims": int(samples.get("voxgate_memory_trims_total", 0)),
            "trim_released_bytes": int(samples.get("voxgate_memory_trim_released_bytes_total", 0))}


async def wait_idle(client: httpx.AsyncClient, timeout_s: float = 60) -> float:
    """Wait until the engine holds no request (at most `timeout_s`); returns the seconds waited."""
    t0 = time.monotonic()
    while await engine_requests(client) and time.monotonic() - t0 < timeout_s:
        await asyncio.sleep(0.1)
    return time.monotonic() - t0


def _process_ticks(pid: int) -> int:
    """utime + stime of a process (clock ticks; proc(5): fields 14 and 15 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # (fields after the command name start at field 3)


def _machine_busy_ticks() -> int:
    """CPU time not idle, all cores (clock ticks; proc(5): the `cpu` line of /proc/stat;
    idle and iowait are idle, guest time is already counted in user)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values[:8]) - values[3] - values[4]


class CpuMeter:
    """Cores used between `start()` and `read()`: by the server, by this benchmark process
    and by everything else on the machine (`others`: other developers' work)."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.start()

    def _ticks(self) -> tuple[float, int, int, int]:
        return time.monotonic(), _machine_busy_ticks(), _process_ticks(self.server_pid), _process_ticks(os.getpid())

    def start(self) -> None:
        self.begin = self._ticks()

    def read(self) -> dict[str, float]:
        """{"machine", "server", "bench", "others"}: mean cores busy since `start()`."""
        now = self._ticks()
        seconds = max(1e-6, now[0] - self.begin[0])
        machine, server, bench = ((b - a) / CLOCK_TICKS / seconds for a, b in zip(self.begin[1:], now[1:]))
        return {"machine": round(machine, 2), "server": round(server, 2), "bench": round(bench, 2),
                "others": round(max(0.0, machine - server - bench), 2)}

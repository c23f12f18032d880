"""A local HTTP mirror for download tests (honours Range, and can cut, corrupt, delay or ask
for a token), tiny catalog models served from it, and a DownloadManager over a fake registry."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gateway.catalog import CatalogFile, CatalogModel
from gateway.downloads import DownloadManager


class FileServer(ThreadingHTTPServer):
    """Serves `files` (path -> bytes) with ETag and single-range support.

    `cut_after[path] = n` sends n body bytes of the next response for path, then drops
    the connection (once; a list of n: one per response, in order); `cut_every[path] = n`
    does so on every response. A retry that gets nothing new counts toward the client's
    limit, so `[n, 0]` makes a download fail with n bytes kept. `corrupt`
    flips a byte in what is sent. `ignore_range` answers every request with the whole
    file (200). `delay_s` sleeps between 16 KiB pieces so a download can be watched or
    killed midway.
    """

    daemon_threads = True

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files = files
        self.cut_after: dict[str, int | list[int]] = {}
        self.cut_every: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.ignore_range = False
        self.delay_s = 0.0
        self.token: str | None = None
        self.requests: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def gets(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FileServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.lstrip("/")
        server = self.server
        server.requests.append({"path": path, "range": self.headers.get("Range"),
                                "if_range": self.headers.get("If-Range"),
                                "authorization": self.headers.get("Authorization")})
        data = server.files.get(path)
        if data is None:
            return self._empty(404)
        if server.token is not None and self.headers.get("Authorization") != f"Bearer {server.token}":
            return self._empty(401)
        etag = '"%s"' % hashlib.sha256(data).hexdigest()[:16]
        start = 0
        requested = self.headers.get("Range")
        if requested and self.headers.get("If-Range") in (None, etag) and not server.ignore_range:
            start = int(requested.removeprefix("bytes=").split("-")[0])
            if start >= len(data):
                return self._empty(416)
        body = data[start:]
        if path in server.corrupt:
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        cuts = server.cut_after.get(path)
        if isinstance(cuts, int):
            cuts = server.cut_after[path] = [cuts]
        cut = cuts.pop(0) if cuts else server.cut_every.get(path)
        try:
            for i in range(0, len(body), 16384):
                piece = body[i:i + 16384]
                if cut is not None and i + len(piece) > cut:
                    self.wfile.write(piece[:cut - i])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(piece)
                if server.delay_s:
                    self.wfile.flush()
                    time.sleep(server.delay_s)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def blob(num_bytes: int, seed: int = 0) -> bytes:
    return bytes((i * 31 + seed) % 251 for i in range(num_bytes))


def tiny_model(files: dict[str, bytes], model_id: str = "tiny", gated: bool = False,
           with_hash: bool = True) -> CatalogModel:
    return CatalogModel(
        id=model_id, family="piper", name="Tiny", gated=gated,
        files=tuple(CatalogFile(f"repo/resolve/v1/{name}", name, len(data), False,
                                hashlib.sha256(data).hexdigest() if with_hash else None)
                    for name, data in files.items()))


def serve(model: CatalogModel, files: dict[str, bytes]) -> FileServer:
    return FileServer({f.url: files[f.dest] for f in model.files})


class Registry:
    def __init__(self) -> None:
        self.models: dict[str, Path] = {}

    async def register(self, model: CatalogModel, path: Path) -> None:
        self.models[model.id] = path

    async def is_registered(self, model_id: str) -> bool:
        return model_id in self.models


def new_manager(tmp_path: Path, registry: Registry, base_url: str, **kwargs: Any) -> DownloadManager:
    kwargs.setdefault("min_free_disk_bytes", 0)
    kwargs.setdefault("retry_backoff_s", 0.01)
    return DownloadManager(tmp_path / "data", registry.register, is_registered=registry.is_registered,
                           base_url=base_url, **kwargs)


FILES = {"voice.onnx": blob(600_000), "voice.onnx.json": b'{"audio": {"sample_rate": 22050}}'}

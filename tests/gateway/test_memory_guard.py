"""The memory guard's messages (found by the new-user trial): the settings' MB as given."""

from __future__ import annotations

import asyncio

import pytest

from engine.engine import Engine
from gateway.model_spec import ModelSpec
from gateway.residency import MB, Residency
from gateway.resident import InsufficientMemory


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
    assert ("it needs about 150 MB (size on disk x 1.5) and 256.5 MB must stay free; 100 MB free on cpu"
            in message), message
    assert "and 100000000 MB must stay free" in _refusal(spec, min_free_memory_mb=100_000_000)

"""Model families: one module each, imported only when a model of that family is used.

A family module provides:
- `FAMILY: str` and `SAMPLE_RATE` (or a per-model rate on the runner);
- `validate(path: Path, options: dict) -> dict`: check a model folder without loading
  weights; returns facts for the library (voices, size); raises `InvalidModel`;
- `load(model_id: str, path: Path, options: dict, device: str) -> engine.runner.LMParts | SynthParts`
  (the parts the engine builds a runner from, engine/runner.py `build_runner`);
- optionally `estimate_memory(size_bytes: int, options: dict) -> (bytes, how)`: what a model
  will hold once loaded, for the memory guard (gateway/model_spec.py; without it: size on
  disk x `memory_factor`).

The core never imports a family module directly (piper-tts is GPL-3.0 and optional for
library users); it goes through `family()`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from engine.types import EngineError

FAMILIES: dict[str, str] = {
    "piper": "models.piper",
    "orpheus": "models.orpheus",
    "qwen3_tts": "models.qwen3_tts",
}
EXTRAS: dict[str, str] = {"orpheus": "lm", "qwen3_tts": "lm"}  # pip extra that brings a family's packages


class FamilyUnavailable(EngineError):
    """The family's packages (e.g. torch for speech LMs) are not installed on this server."""

    code = "family_unavailable"
    status = 501


class InvalidModel(Exception):
    """A model folder is missing files or has the wrong format. `field` names the input."""

    def __init__(self, message: str, field: str = "path") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def family(name: str) -> ModuleType:
    """Import and return the module of family `name`.

    Raises KeyError for unknown names, FamilyUnavailable when its packages are missing.
    """
    if name not in FAMILIES:
        raise KeyError(name)
    try:
        return importlib.import_module(FAMILIES[name])
    except ImportError as error:
        extra = EXTRAS.get(name)
        how = f"pip install '.[{extra}]' in Voxgate's source folder" if extra else "reinstall voxgate"
        raise FamilyUnavailable(f"model family {name!r} needs the package {error.name!r}, which is not "
                                f"installed on this server; install it with: {how}", field="family") from error

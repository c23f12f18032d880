"""Which family a model folder looks like, from its layout and config.json alone (nothing else is
read): for an add or install that named the wrong family, whose own `validate` can only say which
of its files is missing ("config.json is missing"), so the error can say what the folder is.

- qwen3_tts: a `config.json` whose `model_type` is `qwen3_tts`, or that has `tts_model_type`;
- orpheus: `backbone/config.json` and a `codec/` folder;
- piper: a `<name>.onnx` with its `<name>.onnx.json` (the path itself, or one in the folder).
"""

from __future__ import annotations

import json
from pathlib import Path

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB; a larger file is no config to read here


def looks_like(path: Path) -> tuple[str, str] | None:
    """(family, why) for the family `path` looks like, `why` naming what says so; None when it
    looks like none (or cannot be read). Never raises."""
    try:
        return _looks_like(Path(path))
    except (OSError, ValueError):
        return None


def other_family(path: Path, asked: str) -> tuple[str, str] | None:
    """(family, why) when `path` is no `asked` model but looks like another family's, `why` as
    "it looks like a qwen3_tts model (config.json has tts_model_type), not an orpheus one"; None
    when it looks like `asked`'s or none. Never raises."""
    found = looks_like(path)
    if found is None or found[0] == asked:
        return None
    article = "an" if asked[:1] in "aeiou" else "a"
    return found[0], f"it looks like a {found[0]} model ({found[1]}), not {article} {asked} one"


def _looks_like(path: Path) -> tuple[str, str] | None:
    if path.is_file():
        if path.suffix == ".onnx" and path.with_name(path.name + ".json").is_file():
            return "piper", f"{path.name} has its {path.name}.json beside it"
        return None
    if not path.is_dir():
        return None
    config = path / "config.json"
    if config.is_file() and config.stat().st_size <= MAX_CONFIG_BYTES:
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            data = None
        if isinstance(data, dict) and data.get("model_type") == "qwen3_tts":
            return "qwen3_tts", "config.json has model_type qwen3_tts"
        if isinstance(data, dict) and "tts_model_type" in data:
            return "qwen3_tts", "config.json has tts_model_type"
    if (path / "backbone" / "config.json").is_file() and (path / "codec").is_dir():
        return "orpheus", "it holds backbone/ and codec/"
    voices = [onnx for onnx in sorted(path.glob("*.onnx")) if onnx.with_name(onnx.name + ".json").is_file()]
    if len(voices) == 1:
        return "piper", f"it holds {voices[0].name} and {voices[0].name}.json"
    return None

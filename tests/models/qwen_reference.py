"""Import qwen-tts's reference modeling modules for the parity tests, without its runtime.

`scripts/test.sh` installs `qwen-tts` with `--no-deps`: its package `__init__` (and
`qwen_tts.core`'s) import the inference wrapper and the 25 Hz tokenizer, which need librosa,
torchaudio, sox and onnxruntime. The modules these tests compare against (the talker, the
code predictor and the 12 Hz tokenizer's decoder) need only torch and transformers, so the
two parent packages are registered as bare namespaces pointing at the installed folders and
the submodules are imported directly. Two imports those modules make for code the tests do
not run are given empty stand-ins when the real package is absent: `librosa.filters.mel`
(mel filters of the speaker encoder's input features) and `qwen_tts.inference.
qwen3_tts_tokenizer.Qwen3TTSTokenizer` (used by `from_pretrained`, which the tests avoid).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest


def _bare_package(name: str, path: Path | None, **attrs: Any) -> None:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=path is not None)
    if path is not None:
        module.__path__ = [str(path)]
    module.__dict__.update(attrs)
    sys.modules[name] = module


def modules() -> tuple[Any, Any, Any, Any]:
    """(modeling_qwen3_tts, configuration_qwen3_tts, modeling_qwen3_tts_tokenizer_v2,
    configuration_qwen3_tts_tokenizer_v2); skips the test when qwen-tts is not installed."""
    if "qwen_tts.core.models" not in sys.modules:
        spec = importlib.util.find_spec("qwen_tts")
        if spec is None or not spec.submodule_search_locations:
            pytest.skip("qwen-tts is not installed (scripts/test.sh installs it)")
        pytest.importorskip("transformers")
        root = Path(list(spec.submodule_search_locations)[0])
        _bare_package("qwen_tts", root)
        _bare_package("qwen_tts.core", root / "core")
        _bare_package("qwen_tts.inference", root / "inference")
        _bare_package("qwen_tts.inference.qwen3_tts_tokenizer", None, Qwen3TTSTokenizer=None)
        if importlib.util.find_spec("librosa") is None:
            _bare_package("librosa", Path("/nonexistent/librosa"))
            _bare_package("librosa.filters", None, mel=None)
    return (importlib.import_module("qwen_tts.core.models.modeling_qwen3_tts"),
            importlib.import_module("qwen_tts.core.models.configuration_qwen3_tts"),
            importlib.import_module("qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2"),
            importlib.import_module("qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2"))

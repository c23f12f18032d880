"""Reading a model's weight files without loading them: what each family's `validate` checks,
so a truncated or corrupt file is refused when the model is added (or downloaded) instead
of failing at its first load. Each raises `InvalidModel` naming the file.

- safetensors: `safetensors.safe_open` parses the header (8-byte length + JSON) and checks
  that the tensors it lists cover the file exactly (a truncated file or one with bytes
  appended fails); the file is memory-mapped, no tensor is read.
- ONNX (Piper voices): `onnx.checker.check_model` on the path parses the protobuf and checks
  the graph (every node's inputs defined, opsets known); ~75 ms for a 60 MB voice on one core.
- PyTorch `.bin` (the SNAC codec): a zip archive since PyTorch 1.6; `zipfile` reads its central
  directory, which sits at the end, so a truncated file fails. The older pickle format (before
  1.6) cannot be checked without loading it and is accepted as it is.

None of these catch a file whose bytes were changed in place; a hash does (the catalog's
`sha256`).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from models import InvalidModel

_AGAIN = "copy or download it again"


def check_safetensors(path: Path) -> None:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as weights:
            weights.keys()
    except (SafetensorError, OSError) as error:
        raise InvalidModel(f"{path} is not a complete safetensors file ({error}; it is {_size(path)}): "
                           f"truncated or corrupt, {_AGAIN}") from error


def check_onnx(path: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(str(path))
    except Exception as error:  # onnx's ValidationError, or a protobuf error the checker lets through
        raise InvalidModel(f"{path} is not a readable ONNX model ({str(error).strip()}; it is {_size(path)}): "
                           f"truncated or corrupt, {_AGAIN}") from error


def check_torch_file(path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(2)
        if head == b"PK":  # the zip format (torch.save since 1.6)
            with zipfile.ZipFile(path):
                return
        if head[:1] == b"\x80":  # a pickle: the legacy format, not checkable without loading it
            return
        raise InvalidModel(f"{path} is not a PyTorch checkpoint (neither a zip archive nor a pickle); {_AGAIN}")
    except (zipfile.BadZipFile, OSError) as error:
        raise InvalidModel(f"{path} is not a complete PyTorch checkpoint ({error}; it is {_size(path)}): "
                           f"truncated or corrupt, {_AGAIN}") from error


def check_weights(files: list[Path]) -> None:
    """Every file by its suffix: `.safetensors`, `.onnx`, else a PyTorch file."""
    for file in files:
        if file.suffix == ".safetensors":
            check_safetensors(file)
        elif file.suffix == ".onnx":
            check_onnx(file)
        else:
            check_torch_file(file)


def _size(path: Path) -> str:
    try:
        return f"{path.stat().st_size} bytes"
    except OSError:
        return "unreadable"

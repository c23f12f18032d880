"""Files a kill or a lost race leaves in a folder of audio Voxgate writes: partial writes (`.part`,
written then renamed into place: gateway/projects_audio.py `write_wav`, gateway/takes.py's uploads)
and WAV files no row names. The takes' and the projects' sweeps at start remove them."""

from __future__ import annotations

from collections.abc import Container
from pathlib import Path


def remove_strays(folder: Path, kept: Container[str]) -> tuple[int, int]:
    """Delete `folder`'s `.part` files and the `.wav` files whose names are not in `kept`; returns
    (partials, orphans) removed. Blocking: call it in a worker thread."""
    partials = orphans = 0
    for path in folder.iterdir():
        if path.name.endswith(".part"):
            path.unlink(missing_ok=True)
            partials += 1
        elif path.suffix == ".wav" and path.name not in kept:
            path.unlink(missing_ok=True)
            orphans += 1
    return partials, orphans

"""A downloaded model's folder, `<data_dir>/models/<id>/`: moved into place in one rename, marked as ours.

A download's install (gateway/downloads.py) writes `MARKER` into its staging folder before the
rename, so the folder it leaves is told apart from one a person made: a kill between the rename
and the registration leaves a marked folder, which the next start registers (complete) or a new
download replaces (incomplete). A folder without the marker (say, a model folder copied there by
hand) is never replaced, registered or deleted by a download: the install is refused, 409
`folder_in_the_way`, naming the model and the folder, and nothing is lost (the downloaded files
stay in `downloads/<id>/` for the next install, which resumes from them).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

from gateway.catalog import CatalogModel
from gateway.download import DownloadError
from gateway.partials import fsync_dir

MARKER = ".voxgate-download"  # in models/<id>/: JSON {"model_id": id}, written by the install


def write_marker(folder: Path, model_id: str) -> None:
    """Mark `folder` (still the staging folder) as installed by a download of `model_id`."""
    (folder / MARKER).write_text(json.dumps({"model_id": model_id}) + "\n")


def is_ours(folder: Path, model_id: str) -> bool:
    """Whether `folder` is a real folder (no link) that a download of `model_id` installed (its marker)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    try:
        found = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and found.get("model_id") == model_id


def in_the_way(folder: Path, model_id: str) -> DownloadError | None:
    """The 409 for an entry at `folder` (a folder, file or link) that a download must not replace; None if
    there is none, or it is ours (`is_ours`)."""
    if not os.path.lexists(folder) or is_ours(folder, model_id):
        return None
    return DownloadError(
        "folder_in_the_way", f"cannot install {model_id!r}: a folder is in the way: {folder} exists and was not "
        f"made by a Voxgate download, so it is left as it is; move or rename it, then install {model_id!r} again "
        "(what was downloaded is kept and resumed)", 409)


def is_complete(model: CatalogModel, folder: Path) -> bool:
    """Whether `folder` is ours (`is_ours`) and holds every file of `model` at its catalog size (each was
    verified before the move): what a kill between the rename and the registration leaves."""
    if not is_ours(folder, model.id):
        return False
    for f in model.files:
        path = folder / f.dest
        if not path.is_file() or (not f.size_is_approximate and path.stat().st_size != f.size_bytes):
            return False
    return True


def move_into_place(model: CatalogModel, work: Path, models_dir: Path) -> Path:
    """Move `model`'s verified `<dest>.part` files from `work` into `models_dir/<id>/` in one rename (runs in a
    worker thread); a marked folder already there is replaced. Raises DownloadError 409 `folder_in_the_way`
    (nothing moved: the parts stay in `work`) when a folder that is not ours is there, OSError otherwise
    (the files go back to `work` where they can, the staging folder is removed; a folder in the way is
    never touched)."""
    final = models_dir / model.id
    refusal = in_the_way(final, model.id)
    if refusal is not None:
        raise refusal
    staging = models_dir / f".tmp-{model.id}-{uuid.uuid4().hex[:8]}"
    try:
        staging.mkdir()
        for f in model.files:
            target = staging / f.dest
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(work / (f.dest + ".part"), target)
        write_marker(staging, model.id)
        if is_ours(final, model.id):  # left by a kill between this rename and registration
            trash = models_dir / f".trash-{model.id}-{uuid.uuid4().hex[:8]}"
            os.replace(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(staging, final)  # (onto a folder made meanwhile: ENOTEMPTY, or an empty one replaced)
        fsync_dir(models_dir)
    except BaseException:
        for f in model.files:  # back where the next install resumes from
            try:
                os.replace(staging / f.dest, work / (f.dest + ".part"))
            except OSError:
                pass
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final

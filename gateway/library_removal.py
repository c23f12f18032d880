"""What removing a model takes beside its row, shared by `DELETE /v1/library/models/{id}`
(gateway/library_api.py) and `voxgate models remove` (gateway/cli_models.py): which models may not
go (`protected_message`), the presets it leaves unusable, and its downloaded folder, deleted unless
another model uses it."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Collection

from gateway.library import Library


def protected_message(model_id: str, source: str = "embedded", default_model: str | None = None,
                      config_ids: Collection[str] | None = None) -> str | None:
    """Why a model of `source` cannot be removed (None: it can): the embedded voice, and a model of a
    [[models]] entry the config file still has (`config_ids`, the entries' ids; None: no config file was
    read, so any such model), come back at the next start; the `default_model` (the setting) serves every
    request that names no model, and a server does not start without it (found by a new-user trial). A
    model whose entry has left the config file can go (before, it could never be removed)."""
    if model_id == default_model and source != "embedded":
        return (f"{model_id!r} is the default_model, which requests that name no model use and without which the "
                "server does not start; set default_model to another model first")
    if source == "embedded":
        return f"{model_id!r} is built in and would come back at the next start"
    if source == "config" and (config_ids is None or model_id in config_ids):
        return (f"{model_id!r} comes from a [[models]] entry of the config file and would come back at the next "
                "start; remove the entry there")
    return None


async def presets_using(library: Library, model_id: str) -> list[str]:
    """The presets of `model_id`: unusable once it is removed (they stay, answering 404)."""
    return [p["name"] for p in await library.list_presets() if p["model_id"] == model_id]


async def folder_users(library: Library, record: dict[str, Any]) -> list[str]:
    """For a downloaded model (`record`), the other models whose files are in its folder (e.g. one
    registered with `voxgate models add` there): that folder is not deleted with it."""
    if not record["path"] or record["source"] != "catalog":
        return []
    folder = Path(record["path"]).resolve()
    return [other["id"] for other in await library.list_models() if other["id"] != record["id"] and other["path"]
            and Path(other["path"]).resolve().is_relative_to(folder)]


async def delete_downloaded_folder(data_dir: Path, record: dict[str, Any], users: list[str] | None = None) -> bool:
    """Delete a removed model's folder if Voxgate downloaded it (a catalog model's, in
    `<data_dir>/models/`) and no other model uses it (`users`, from `folder_users`); a folder
    registered from elsewhere is left alone. Whether it deleted."""
    owned = (data_dir / "models").resolve()  # (the data dir as the server or the CLI spelled it)
    path = Path(record["path"]).resolve() if record["path"] else None
    if path is None or record["source"] != "catalog" or path.parent != owned or users:
        return False
    # Rename first: a half-deleted folder must never look like an installed model.
    trash = owned / f".trash-{record['id']}-{uuid.uuid4().hex[:8]}"
    try:
        await asyncio.to_thread(os.replace, path, trash)
    except FileNotFoundError:  # deleted by hand already
        return False
    await asyncio.to_thread(shutil.rmtree, trash, True)
    return True

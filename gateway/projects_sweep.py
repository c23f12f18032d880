"""The start-up sweep of `<data_dir>/projects/`: what a kill or a lost race left there (gateway/projects_store.py
writes a take's file before the row that names it and removes it after the row is gone)."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path

from gateway.projects_export import EXPORT_DIR
from gateway.projects_store import ProjectStore
from gateway.strays import remove_strays

log = logging.getLogger(__name__)


def _empty(folder: Path) -> int:
    """Remove what `folder` holds (exports a kill left: an export's file goes once it is sent); returns how
    many files and folders went."""
    removed = 0
    for path in folder.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed += 1
    return removed


async def sweep_projects(store: ProjectStore) -> tuple[int, int]:
    """Remove partial files (`.part`), audio files no take names (as its audio or in its undo history),
    the folders of projects that are gone, and exports a kill left in `EXPORT_DIR` (the folder itself is
    kept), under `store.folder`; returns (files, folders) removed, logged only when some were. Only a
    server's start-up calls this, inside the data dir's exclusive lock, as `TakeStore.sweep` (found by a
    new-user trial: nothing removed such files, while the takes folder had its sweep)."""
    if not store.folder.is_dir():
        return 0, 0
    async with store.library.db.execute("SELECT id FROM projects") as cur:
        projects = {str(row[0]) for row in await cur.fetchall()}
    kept: dict[str, set[str]] = {}  # project id -> the files its takes name
    async with store.library.db.execute("SELECT project_id, audio_file, history FROM project_takes") as cur:
        for pid, audio, history in await cur.fetchall():
            kept.setdefault(str(pid), set()).update((audio, *json.loads(history or "[]")))

    def sweep() -> tuple[int, int]:
        files = folders = 0
        for folder in (path for path in store.folder.iterdir() if path.is_dir()):
            if folder.name == EXPORT_DIR:  # the projects' own: kept (the next export made it again), emptied
                files += _empty(folder)
            elif folder.name not in projects:
                shutil.rmtree(folder, ignore_errors=True)
                folders += 1
            else:
                files += sum(remove_strays(folder, kept.get(folder.name, set())))
        return files, folders

    files, folders = await asyncio.to_thread(sweep)
    if files or folders:
        log.info("projects: removed %d file(s) and %d folder(s) no project or take names", files, folders)
    return files, folders

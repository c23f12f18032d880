"""Studio projects in SQLite (migrations/0003_projects.sql) and their audio files.

A project holds ordered passages; a passage holds takes, one of them chosen. Audio is a
PCM16 mono WAV per take version under `<data_dir>/projects/<project id>/`: a file is
written (under a temporary name, then renamed) before the row that names it, and
removed only after the row or history entry naming it is gone, so a row always has its
file. Every change is one transaction on the library's connection. A file that would leave
less than `min_free_disk_mb` free is not written: ApiError 507 `insufficient_storage`.

Out of date: a take is out of date when the passage's text or effective speaker (its
own, else the project's) differs from what the take was generated with (`is_current`); a
passage is out of date when its chosen take is (or it has none): the export speaks the
chosen take. A change of a passage's text or effective speaker that leaves its chosen take
out of date while another take is current re-chooses the newest current take (`_rechoose`:
text edited back, a speaker set back). Nothing here deletes a chosen take except deleting
its passage or project, which the user asks for by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool

from gateway.audio import wav_header
from gateway.disk_space import check_disk, full_disk_error
from gateway.library import Library
from gateway.projects_audio import write_wav

log = logging.getLogger(__name__)
PROJECT_FIELDS = ("name", "model_id", "speaker", "pause_ms")
PASSAGE_FIELDS = ("text", "speaker", "pause_ms", "chosen_take")


def is_current(take: dict[str, Any], text: str, speaker: str) -> bool:
    """Whether `take` was made from `text` spoken by `speaker` (a passage's effective speaker)."""
    return bool(take["text"] == text and take["speaker"] == speaker)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class ProjectStore:
    def __init__(self, library: Library, folder: Path, min_free_disk_mb: float = 0.0) -> None:
        self.library = library
        self.folder = folder  # <data_dir>/projects
        self.min_free_disk_mb = min_free_disk_mb  # a take's file that would leave less free is refused (507)
        self._take_locks: dict[str, asyncio.Lock] = {}  # take id -> its lock, while anyone holds or awaits it
        self._take_users: Counter[str] = Counter()

    @contextlib.asynccontextmanager
    async def editing(self, take_id: str) -> AsyncIterator[None]:
        """Hold take `take_id` alone: its edits, undos and deletion run one after another (two at
        once had read the same audio, written the same temporary file and lost one of the edits).
        Read the take again inside: the one before may have changed it."""
        lock = self._take_locks.setdefault(take_id, asyncio.Lock())
        self._take_users[take_id] += 1
        try:
            async with lock:
                yield
        finally:
            self._take_users[take_id] -= 1
            if not self._take_users[take_id]:
                del self._take_users[take_id], self._take_locks[take_id]

    @property
    def db(self) -> Any:
        return self.library.db

    def take_path(self, take: dict[str, Any], name: str | None = None) -> Path:
        return self.folder / str(take["project_id"]) / (name or str(take["audio_file"]))

    # -- projects ---------------------------------------------------------------------

    async def create_project(self, name: str, model_id: str, speaker: str, pause_ms: float) -> str:
        project_id, now = new_id("prj"), time.time()
        async with self.library.transaction() as db:
            await db.execute("INSERT INTO projects (id, name, model_id, speaker, pause_ms, created_at, updated_at)"
                             " VALUES (?, ?, ?, ?, ?, ?, ?)", (project_id, name, model_id, speaker, pause_ms, now, now))
        return project_id

    async def list_projects(self) -> list[dict[str, Any]]:
        async with self.db.execute(
                "SELECT p.*, (SELECT COUNT(*) FROM passages s WHERE s.project_id = p.id) AS num_passages"
                " FROM projects p ORDER BY p.updated_at DESC, p.id") as cur:
            return [dict(row) for row in await cur.fetchall()]

    async def get_project(self, project_id: str) -> dict[str, Any] | None:
        async with self.db.execute("SELECT * FROM projects WHERE id = ?", (project_id,)) as cur:
            row = await cur.fetchone()
        return dict(row) if row else None

    async def update_project(self, project_id: str, changes: dict[str, Any]) -> None:
        sets = ", ".join(f"{k} = :{k}" for k in changes if k in PROJECT_FIELDS)
        async with self.library.transaction(immediate=True) as db:
            before = await self._states(db, "s.project_id = ?", (project_id,))
            await db.execute(f"UPDATE projects SET {sets + ', ' if sets else ''}updated_at = :now WHERE id = :id",
                             {**changes, "now": time.time(), "id": project_id})
            await self._rechoose(db, before, "s.project_id = ?", (project_id,))

    async def delete_project(self, project_id: str) -> bool:
        async with self.library.transaction() as db:
            cur = await db.execute("DELETE FROM projects WHERE id = ?", (project_id,))
        if cur.rowcount:
            await run_in_threadpool(shutil.rmtree, self.folder / project_id, True)
        return cur.rowcount > 0

    async def _touch(self, db: Any, project_id: str) -> None:
        await db.execute("UPDATE projects SET updated_at = ? WHERE id = ?", (time.time(), project_id))

    # -- passages ---------------------------------------------------------------------

    async def passages(self, project_id: str) -> list[dict[str, Any]]:
        async with self.db.execute("SELECT * FROM passages WHERE project_id = ? ORDER BY position",
                                   (project_id,)) as cur:
            return [dict(row) for row in await cur.fetchall()]

    async def get_passage(self, project_id: str, passage_id: str) -> dict[str, Any] | None:
        async with self.db.execute("SELECT * FROM passages WHERE id = ? AND project_id = ?",
                                   (passage_id, project_id)) as cur:
            row = await cur.fetchone()
        return dict(row) if row else None

    async def insert_passages(self, project_id: str, texts: list[str], position: int | None = None,
                              replace: bool = False) -> list[str]:
        """Insert passages at `position` (None: at the end); `replace` deletes the others first."""
        now = time.time()
        ids = [new_id("psg") for _ in texts]
        async with self.library.transaction() as db:
            old_files = await self._files_of(db, "project_id = ?", (project_id,)) if replace else []
            if replace:
                await db.execute("DELETE FROM passages WHERE project_id = ?", (project_id,))
            async with db.execute("SELECT COUNT(*) FROM passages WHERE project_id = ?", (project_id,)) as cur:
                row = await cur.fetchone()
            count = int(row[0]) if row else 0
            at = count if position is None else max(0, min(position, count))
            await db.execute("UPDATE passages SET position = position + ? WHERE project_id = ? AND position >= ?",
                             (len(texts), project_id, at))
            await db.executemany(
                "INSERT INTO passages (id, project_id, position, text, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(pid, project_id, at + i, text, now, now) for i, (pid, text) in enumerate(zip(ids, texts))])
            await self._touch(db, project_id)
        await self._unlink(project_id, old_files)
        return ids

    async def update_passage(self, passage: dict[str, Any], changes: dict[str, Any]) -> None:
        """Apply `changes`; a `chosen_take` among them is kept as asked (a stale take may be chosen on
        purpose), else a change of text or speaker may re-choose (`_rechoose`)."""
        sets = ", ".join(f"{k} = :{k}" for k in changes if k in PASSAGE_FIELDS)
        async with self.library.transaction(immediate=True) as db:
            before = await self._states(db, "s.id = ?", (passage["id"],))
            await db.execute(f"UPDATE passages SET {sets + ', ' if sets else ''}updated_at = :now WHERE id = :id",
                             {**changes, "now": time.time(), "id": passage["id"]})
            if "chosen_take" not in changes:
                await self._rechoose(db, before, "s.id = ?", (passage["id"],))
            await self._touch(db, passage["project_id"])

    async def delete_passage(self, passage: dict[str, Any]) -> None:
        async with self.library.transaction() as db:
            files = await self._files_of(db, "passage_id = ?", (passage["id"],))
            await db.execute("DELETE FROM passages WHERE id = ?", (passage["id"],))
            await db.execute("UPDATE passages SET position = position - 1 WHERE project_id = ? AND position > ?",
                             (passage["project_id"], passage["position"]))
            await self._touch(db, passage["project_id"])
        await self._unlink(passage["project_id"], files)

    async def split_passage(self, passage: dict[str, Any], head: str, tail: str) -> str:
        """`passage` keeps `head` and its takes (out of date, but for one made from `head`, which
        `_rechoose` chooses); a new passage after it gets `tail`."""
        now, new = time.time(), new_id("psg")
        async with self.library.transaction(immediate=True) as db:
            before = await self._states(db, "s.id = ?", (passage["id"],))
            await db.execute("UPDATE passages SET position = position + 1 WHERE project_id = ? AND position > ?",
                             (passage["project_id"], passage["position"]))
            await db.execute("UPDATE passages SET text = ?, updated_at = ? WHERE id = ?", (head, now, passage["id"]))
            await db.execute(
                "INSERT INTO passages (id, project_id, position, text, speaker, pause_ms, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (new, passage["project_id"], passage["position"] + 1, tail, passage["speaker"],
                 passage["pause_ms"], now, now))
            # The join that followed the old passage now follows the new one.
            await db.execute("UPDATE passages SET pause_ms = NULL WHERE id = ?", (passage["id"],))
            await self._rechoose(db, before, "s.id = ?", (passage["id"],))
            await self._touch(db, passage["project_id"])
        return new

    async def merge_passages(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        """`first` gets both texts and both passages' takes (its chosen take, else the second's, unless
        `_rechoose` finds a take of the joined text); `second` goes."""
        now = time.time()
        async with self.library.transaction(immediate=True) as db:
            before = await self._states(db, "s.id = ?", (first["id"],))
            await db.execute("UPDATE project_takes SET passage_id = ? WHERE passage_id = ?", (first["id"], second["id"]))
            chosen = first["chosen_take"] or second["chosen_take"]
            await db.execute("UPDATE passages SET text = ?, chosen_take = ?, pause_ms = ?, updated_at = ? WHERE id = ?",
                             (f"{first['text']} {second['text']}", chosen, second["pause_ms"], now, first["id"]))
            await db.execute("DELETE FROM passages WHERE id = ?", (second["id"],))
            await db.execute("UPDATE passages SET position = position - 1 WHERE project_id = ? AND position > ?",
                             (first["project_id"], second["position"]))
            await self._rechoose(db, before, "s.id = ?", (first["id"],))
            await self._touch(db, first["project_id"])

    async def source(self, passage_id: str) -> tuple[str, str] | None:
        """(text, effective speaker) of passage `passage_id` now; None when it is gone."""
        return (await self._states(self.db, "s.id = ?", (passage_id,))).get(passage_id)

    async def _states(self, db: Any, where: str, args: tuple[Any, ...]) -> dict[str, tuple[str, str]]:
        """Passage id -> (text, effective speaker) of the passages `s` matching `where`."""
        async with db.execute(
                "SELECT s.id, s.text, COALESCE(NULLIF(s.speaker, ''), p.speaker) FROM passages s"
                f" JOIN projects p ON p.id = s.project_id WHERE {where}", args) as cur:
            return {str(row[0]): (str(row[1]), str(row[2])) for row in await cur.fetchall()}

    async def _rechoose(self, db: Any, before: dict[str, tuple[str, str]], where: str,
                        args: tuple[Any, ...]) -> None:
        """After a change, in its transaction: each passage matching `where` whose text or effective
        speaker differs from `before`, whose chosen take is now out of date and which has a current
        take, gets its newest current take chosen: a text edited back (or a speaker set back) chose
        nothing, so the export spoke the other take while the passage showed up to date (found by a
        new-user trial). No current take: the chosen one stays (out of date, until generated)."""
        for passage_id, (text, speaker) in (await self._states(db, where, args)).items():
            if before.get(passage_id) == (text, speaker):
                continue
            async with db.execute("SELECT t.id, t.text, t.speaker, s.chosen_take FROM project_takes t"
                                  " JOIN passages s ON s.id = t.passage_id WHERE t.passage_id = ?"
                                  " ORDER BY t.created_at, t.id", (passage_id,)) as cur:
                rows = [dict(row) for row in await cur.fetchall()]
            current = [row["id"] for row in rows if is_current(row, text, speaker)]
            if current and rows[0]["chosen_take"] not in current:
                await db.execute("UPDATE passages SET chosen_take = ? WHERE id = ?", (current[-1], passage_id))

    # -- takes ------------------------------------------------------------------------

    async def takes(self, project_id: str) -> list[dict[str, Any]]:
        async with self.db.execute("SELECT * FROM project_takes WHERE project_id = ? ORDER BY created_at, id",
                                   (project_id,)) as cur:
            return [_take(row) for row in await cur.fetchall()]

    async def get_take(self, project_id: str, take_id: str) -> dict[str, Any] | None:
        async with self.db.execute("SELECT * FROM project_takes WHERE id = ? AND project_id = ?",
                                   (take_id, project_id)) as cur:
            row = await cur.fetchone()
        return _take(row) if row else None

    async def add_take(self, passage: dict[str, Any], meta: dict[str, Any], sample_rate: int, pcm16: bytes,
                       choose: bool | None) -> str | None:
        """Store a generated take; `choose` makes it the passage's chosen take (the old one stays), None
        when the passage has no chosen take or its chosen take is out of date, judged in the transaction
        that inserts it: a job that judged before storing (its WAV written in the thread pool) chose its
        take over the current one a text edited back had chosen meanwhile. None (and no file left) when
        the passage or its project was deleted meanwhile (the insert failed on its foreign key)."""
        take_id, project_id = new_id("ptk"), passage["project_id"]
        name = f"{take_id}-0.wav"
        row = {**meta, "id": take_id, "project_id": project_id, "passage_id": passage["id"],
               "sample_rate": sample_rate, "audio_ms": 1000.0 * (len(pcm16) // 2) / sample_rate,
               "audio_file": name, "created_at": time.time()}
        # Shielded: a cancel (its project deleted) waits for the thread, then removes the file (not waited
        # for, the thread renamed it into place after the delete, where no row named it).
        write = asyncio.ensure_future(run_in_threadpool(self._write, self.folder / project_id / name,
                                                        sample_rate, pcm16, "passages"))
        try:
            await asyncio.shield(write)
            async with self.library.transaction(immediate=True) as db:
                async with db.execute("SELECT 1 FROM passages WHERE id = ?", (passage["id"],)) as cur:
                    gone = await cur.fetchone() is None
                if not gone:
                    await self._insert_take(db, row, choose)
        except BaseException:
            await asyncio.wait([write])
            await self._discard(project_id, name)
            raise
        if gone:
            await self._discard(project_id, name)
        return None if gone else take_id

    async def _insert_take(self, db: Any, row: dict[str, Any], choose: bool | None) -> None:
        if choose is None:
            choose = not await self._chosen_is_current(db, row["passage_id"])
        await db.execute(
            "INSERT INTO project_takes (id, project_id, passage_id, text, speaker, model_id, voice,"
            " sample_rate, audio_ms, audio_file, created_at) VALUES (:id, :project_id, :passage_id, :text,"
            " :speaker, :model_id, :voice, :sample_rate, :audio_ms, :audio_file, :created_at)", row)
        if choose:
            await db.execute("UPDATE passages SET chosen_take = ? WHERE id = ?", (row["id"], row["passage_id"]))
        await self._touch(db, row["project_id"])

    async def _chosen_is_current(self, db: Any, passage_id: str) -> bool:
        """Whether passage `passage_id` has a chosen take of its text and effective speaker."""
        async with db.execute(
                "SELECT s.text, COALESCE(NULLIF(s.speaker, ''), p.speaker), t.text, t.speaker FROM passages s"
                " JOIN projects p ON p.id = s.project_id JOIN project_takes t ON t.id = s.chosen_take"
                " WHERE s.id = ?", (passage_id,)) as cur:
            row = await cur.fetchone()
        return row is not None and is_current({"text": row[2], "speaker": row[3]}, str(row[0]), str(row[1]))

    async def replace_audio(self, take: dict[str, Any], sample_rate: int, pcm16: bytes) -> bool:
        """An edit: the take's audio becomes `pcm16`; the file it had goes onto the undo history.
        False (and no file left) when the take was deleted meanwhile (with its passage or project)."""
        name = f"{take['id']}-{len(take['history']) + 1}.wav"
        await run_in_threadpool(self._write, self.take_path(take, name), sample_rate, pcm16, "op")
        history = [*take["history"], take["audio_file"]]
        try:
            async with self.library.transaction() as db:
                cur = await db.execute(
                    "UPDATE project_takes SET audio_file = ?, audio_ms = ?, history = ? WHERE id = ?",
                    (name, 1000.0 * (len(pcm16) // 2) / sample_rate, json.dumps(history), take["id"]))
        except BaseException:
            self.take_path(take, name).unlink(missing_ok=True)
            raise
        if not cur.rowcount:
            await self._discard(take["project_id"], name)
        return cur.rowcount > 0

    async def undo(self, take: dict[str, Any], audio_ms: float) -> bool:
        """Back to the previous audio file (`audio_ms` its length); the edited file is removed.
        False when the take was deleted meanwhile."""
        history = list(take["history"])
        previous = history.pop()
        async with self.library.transaction() as db:
            cur = await db.execute("UPDATE project_takes SET audio_file = ?, audio_ms = ?, history = ? WHERE id = ?",
                                   (previous, audio_ms, json.dumps(history), take["id"]))
        self.take_path(take).unlink(missing_ok=True)
        return cur.rowcount > 0

    async def delete_take(self, take: dict[str, Any]) -> bool:
        """False (and nothing deleted) when the take is its passage's chosen one."""
        async with self.library.transaction() as db:
            cur = await db.execute(
                "DELETE FROM project_takes WHERE id = ? AND id NOT IN"
                " (SELECT chosen_take FROM passages WHERE chosen_take IS NOT NULL)", (take["id"],))
        if cur.rowcount:
            await self._unlink(take["project_id"], [take["audio_file"], *take["history"]])
        return cur.rowcount > 0

    # -- files ------------------------------------------------------------------------

    def check_disk(self, num_bytes: int, field: str) -> None:
        """ApiError 507 `insufficient_storage` naming `field` where `num_bytes` more would leave less than
        `min_free_disk_mb` free (gateway/disk_space.py). Blocking: call it in a thread."""
        check_disk(self.folder, num_bytes, self.min_free_disk_mb, field)

    def _write(self, path: Path, sample_rate: int, pcm16: bytes, field: str) -> None:
        """`write_wav` once the disk has room (`check_disk`; a disk full meanwhile: the same 507); a refused or
        failed write leaves no file."""
        self.check_disk(len(wav_header(sample_rate, 0)) + len(pcm16), field)
        try:
            write_wav(path, sample_rate, pcm16)
        except OSError as error:
            raise full_disk_error(error, field) or error

    async def _files_of(self, db: Any, where: str, args: tuple[Any, ...]) -> list[str]:
        async with db.execute(f"SELECT audio_file, history FROM project_takes WHERE {where}", args) as cur:
            rows = await cur.fetchall()
        return [name for row in rows for name in [row[0], *json.loads(row[1] or "[]")]]

    async def _discard(self, project_id: str, name: str) -> None:
        """Remove file `name`, written for a row not stored (or a take gone), and the project's folder
        if the project went meanwhile (`write_wav` made it again)."""
        path = self.folder / project_id / name
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            if await self.get_project(project_id) is None:
                path.parent.rmdir()

    async def _unlink(self, project_id: str, names: list[str]) -> None:
        def unlink() -> None:
            for name in names:
                (self.folder / project_id / name).unlink(missing_ok=True)

        if names:
            await run_in_threadpool(unlink)


def _take(row: Any) -> dict[str, Any]:
    data = dict(row)
    data["history"] = json.loads(data["history"] or "[]")
    return data

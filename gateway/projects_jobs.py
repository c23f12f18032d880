"""Background generation of project passages, through the engine like any other request.

One job per project: an asyncio task that takes passages from its queue one at a time,
resolves the speaker (gateway/clone_voices.py `resolve_voice`), holds a residency `Lease` on the
model and reads the `engine.submit` stream to its end, exactly as `POST
/v1/audio/speech` does; the engine thread does the work, so pages and other requests
stay responsive. Its requests carry a relaxed first-chunk target
(`BACKGROUND_TTFA_MS`), so under the EDF scheduler a listener waiting on realtime audio
goes first. Passages asked for while a job runs join its queue, the one being spoken too (it
may have changed since its turn began): it is spoken again after the others unless the take it
got is of its text and effective speaker as they are once that take is stored.

Progress (`as_json`) counts passages queued, done and failed; a failed passage (unknown
preset, model not installed, engine error, a disk too full for its take: 507
`insufficient_storage`, checked before it is spoken and as it is stored) records its error
and the job goes on.
Cancelling stops the engine request at once; its partial audio is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.types import EngineError, InvalidInput
from gateway.audio import to_pcm16
from gateway.clone_voices import resolve_voice
from gateway.errors import ApiError
from gateway.projects_store import ProjectStore, is_current
from gateway.state import AppState
from gateway.stitch import SERVER_EMOJI, Stitched, plan, request_chars, speech_options, spoken_items
from gateway.text import check_input
from gateway.voices import Choice

log = logging.getLogger(__name__)

BACKGROUND_TTFA_MS = 2000.0


async def resolve_speaker(state: AppState, project: dict[str, Any], speaker: str | None) -> Choice:
    """A passage's speaker (its own, else the project's): a voice of the project's model, a preset,
    or with a Base model a library reference voice (gateway/clone_voices.py)."""
    return await resolve_voice(state, model=project["model_id"], voice=speaker or project["speaker"], speed=None,
                               preset_may_switch_model=True)


class PassageGone(Exception):
    """A queued passage was deleted before (or while) its turn: the job drops it from its total, as a
    replacing import's hundreds of passages counted as failures (found by a new-user trial)."""


@dataclass(eq=False)
class Job:
    project_id: str
    job_id: str = field(default_factory=lambda: f"job-{uuid.uuid4().hex[:12]}")
    state: str = "running"  # running | done | cancelled
    queue: list[str] = field(default_factory=list)
    num_total: int = 0
    num_done: int = 0
    num_failed: int = 0
    current: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    task: asyncio.Task[None] | None = None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.job_id, "object": "project.job", "project_id": self.project_id, "state": self.state,
                "total": self.num_total, "done": self.num_done, "failed": self.num_failed,
                "queued": list(self.queue), "current": self.current, "errors": list(self.errors),
                "started_at": self.started_at, "finished_at": self.finished_at}


class Generator:
    """The jobs of every project; `close()` cancels them (server shutdown)."""

    def __init__(self, state: AppState, store: ProjectStore) -> None:
        self.state = state
        self.store = store
        self.jobs: dict[str, Job] = {}  # project id -> its latest job

    def job(self, project_id: str) -> Job | None:
        return self.jobs.get(project_id)

    def enqueue(self, project_id: str, passage_ids: list[str]) -> Job:
        job = self.jobs.get(project_id)
        if job is None or job.state != "running":
            job = Job(project_id)
            self.jobs[project_id] = job
            job.task = asyncio.create_task(self._run(job), name=f"project-{project_id}")
        for passage_id in passage_ids:
            # The current passage too: skipping it left a passage edited while it was spoken out of date
            # after the job, asked for again or not; `_run` drops the ask if its take turns out current.
            if passage_id not in job.queue:
                job.queue.append(passage_id)
                job.num_total += 1
        return job

    async def cancel(self, project_id: str) -> Job | None:
        job = self.jobs.get(project_id)
        if job is not None and job.task is not None and not job.task.done():
            job.task.cancel()
            await asyncio.gather(job.task, return_exceptions=True)
        return job

    async def close(self) -> None:
        for project_id in list(self.jobs):
            await self.cancel(project_id)

    async def _run(self, job: Job) -> None:
        try:
            while job.queue:
                job.current = job.queue.pop(0)
                try:
                    current = await self._generate(job.project_id, job.current)
                    job.num_done += 1
                    if current and job.current in job.queue:  # asked again while spoken, but unchanged
                        job.queue.remove(job.current)
                        job.num_total -= 1
                except PassageGone:  # deleted (a replacing import) before or while its turn: not a failure
                    job.num_total -= 1
                except (EngineError, ApiError) as error:  # (ApiError: 507, the disk too full for its take)
                    job.num_failed += 1
                    job.errors.append({"passage_id": job.current, "code": error.code, "message": error.message,
                                       "field": error.field})
                    log.info("project %s: passage %s failed: %s", job.project_id, job.current, error.message)
                except Exception as error:  # a bug, a full disk: record it, go on
                    log.exception("project %s: passage %s failed", job.project_id, job.current)
                    job.num_failed += 1
                    job.errors.append({"passage_id": job.current, "code": "internal_error",
                                       "message": f"generation failed: {error}", "field": None})
                job.current = None
            job.state = "done"
        except asyncio.CancelledError:
            job.state = "cancelled"
            if job.current is not None:  # not done: queued again, so done + failed + queued is the total
                if job.current in job.queue:  # (asked again while spoken: once is enough)
                    job.queue.remove(job.current)
                    job.num_total -= 1
                job.queue.insert(0, job.current)
            raise
        finally:
            job.current = None
            job.finished_at = time.time()

    async def _generate(self, project_id: str, passage_id: str) -> bool:
        """Speak passage `passage_id` and store its take; True when that take is of the passage's text
        and effective speaker as they are once it is stored (False: changed while spoken). Raises
        PassageGone, EngineError."""
        project = await self.store.get_project(project_id)
        passage = await self.store.get_passage(project_id, passage_id)
        if project is None or passage is None:
            raise PassageGone(passage_id)
        speaker = passage["speaker"] or project["speaker"]
        choice = await resolve_speaker(self.state, project, passage["speaker"])
        text = check_input(passage["text"], self.state.settings.max_input_chars, field="text", speakable=False)
        await asyncio.to_thread(self.store.check_disk, 0, "passages")  # (not spoken for nothing)
        pcm, sample_rate = await self._synthesise(choice, text)
        # Re-read: the passage may have changed while it was spoken; the take says what it was made from.
        current = await self.store.get_passage(project_id, passage_id)
        if current is None:
            raise PassageGone(passage_id)
        meta = {"text": passage["text"], "speaker": speaker, "model_id": choice.model_id, "voice": choice.voice}
        # Chosen when the passage has no current chosen take as the take is stored (the store judges).
        if await self.store.add_take(current, meta, sample_rate, to_pcm16(pcm), choose=None) is None:
            raise PassageGone(passage_id)  # deleted since the re-read (its insert had failed: internal_error)
        now = await self.store.source(passage_id)
        return now is not None and is_current(meta, *now)

    async def _synthesise(self, choice: Choice, text: str) -> tuple[np.ndarray, int]:
        """A passage through the same text frontend and stitching as `/v1/audio/speech`."""
        state = self.state
        options = await speech_options(state, choice, {})
        items = await spoken_items(text, options, "text", SERVER_EMOJI)  # (the passage's own checks, again)
        lease = await state.residency.acquire(choice.model_id)  # the model stays resident until the end
        audio = Stitched(state.engine, choice, plan(items, request_chars(lease.runner)), BACKGROUND_TTFA_MS,
                         request_id=f"project-{uuid.uuid4().hex[:16]}")
        try:
            sample_rate = (await audio.start()).sample_rate
            pieces = []
            async for chunk in audio:  # from the first chunk again: start() keeps it for the iteration
                pieces.append(chunk.pcm)
                if chunk.is_last:
                    break
        finally:
            await audio.aclose()
            lease.release()
        if not sum(len(p) for p in pieces):
            raise InvalidInput("the model produced no audio for this passage", field="text")
        return np.concatenate(pieces), sample_rate

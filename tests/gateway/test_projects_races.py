"""Studio projects: a take edited while its passage or project is deleted (found by a trial)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.conftest import LiveServer
from tests.gateway.test_projects import imported, new_project, wait_job


@pytest.mark.parametrize("deleted", ["passage", "project"])
@pytest.mark.parametrize("read_first", [True, False])
def test_an_edit_of_a_take_deleted_meanwhile_is_a_404_and_leaves_no_file(
        client: httpx.Client, server: LiveServer, monkeypatch: pytest.MonkeyPatch, deleted: str,
        read_first: bool) -> None:
    """A cut under way when the take's passage (or project) is deleted: it answered a 500 (an
    AssertionError after the cut, an unreadable file before it) and a cut made after the
    delete left its WAV behind with no row naming it."""
    import gateway.projects_takes as takes

    pid = imported(client, new_project(client)["id"], "A passage long enough to cut a few times.")["id"]
    client.post(f"/v1/projects/{pid}/generate", json={})
    assert wait_job(client, pid)["done"] == 1
    passage = client.get(f"/v1/projects/{pid}").json()["passages"][0]
    take_id = passage["chosen_take"]
    started, go_on = threading.Event(), threading.Event()
    real = takes.read_pcm16

    def slow_read(*args: Any) -> tuple[np.ndarray, int]:  # (in the thread pool) the delete lands meanwhile
        audio = real(*args) if read_first else None
        started.set()
        go_on.wait(10)
        return audio or real(*args)

    monkeypatch.setattr(takes, "read_pcm16", slow_read)
    answer: list[httpx.Response] = []
    edit = threading.Thread(target=lambda: answer.append(httpx.post(
        f"{server.url}/v1/projects/{pid}/takes/{take_id}/edit", timeout=30,
        json={"op": "delete_range", "start_ms": 100, "end_ms": 200})))
    edit.start()
    assert started.wait(10)
    url = f"/v1/projects/{pid}" + (f"/passages/{passage['id']}" if deleted == "passage" else "")
    assert client.delete(url).status_code == 204
    go_on.set()
    edit.join(30)
    assert answer[0].status_code == 404, answer[0].text
    assert answer[0].json()["error"]["code"] == "take_not_found"
    folder = server.settings.data_dir / "projects" / pid
    assert not folder.exists() or list(folder.iterdir()) == []


def test_a_start_sweeps_what_no_project_or_take_names(tmp_path: Path) -> None:
    """Found by a new-user trial: a kill mid-write (`.part`), an edit's file whose take went, and the
    folder of a deleted project stayed under `<data_dir>/projects/` for good; the takes folder had its
    sweep at start, the projects folder none. What a take names (its audio and its undo history) stays."""
    import asyncio

    from gateway.library import Library
    from gateway.projects_store import ProjectStore
    from gateway.projects_sweep import sweep_projects

    async def main() -> tuple[tuple[int, int], list[str]]:
        library = await Library.open(tmp_path / "voxgate.db")
        try:
            store = ProjectStore(library, tmp_path / "projects")
            pid = await store.create_project("Swept", "piper-joe", "default", 300.0)
            await store.insert_passages(pid, ["One passage."])
            passage = (await store.passages(pid))[0]
            meta = {"text": "One passage.", "speaker": "default", "model_id": "piper-joe", "voice": "default"}
            take_id = await store.add_take(passage, meta, 24000, b"\1\0" * 2400, choose=True)
            take = await store.get_take(pid, take_id)
            assert take is not None and await store.replace_audio(take, 24000, b"\2\0" * 1200)  # history: -0.wav
            folder = tmp_path / "projects" / pid
            (folder / "ptk-000000000000-1.wav").write_bytes(b"RIFF")  # an edit whose take went
            (folder / "ptk-000000000001-0.wav.part").write_bytes(b"RI")  # a kill mid-write
            (tmp_path / "projects" / "prj-000000000000").mkdir()  # a deleted project's folder, made again
            (tmp_path / "projects" / "prj-000000000000" / "x-0.wav").write_bytes(b"RIFF")
            swept = await sweep_projects(store)
            return swept, sorted(path.name for path in (tmp_path / "projects").rglob("*"))
        finally:
            await library.close()

    swept, left = asyncio.run(main())
    assert swept == (2, 1)
    assert len(left) == 3 and left[-2].endswith("-0.wav") and left[-1].endswith("-1.wav"), left  # the folder, 2 files


def _held_generation(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """(started, go_on): each passage's synthesis waits for `go_on` once it has started."""
    import asyncio

    from gateway.projects_jobs import Generator

    started, go_on = threading.Event(), threading.Event()
    real = Generator._synthesise

    async def held(self: Generator, *args: Any) -> Any:
        started.set()
        await asyncio.to_thread(go_on.wait, 20)
        return await real(self, *args)

    monkeypatch.setattr(Generator, "_synthesise", held)
    return started, go_on


def test_passages_deleted_before_their_turn_leave_the_job_and_a_cancel_requeues_the_current(
        client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new-user trial: a replacing import during a 300-passage job ended it `failed 283`,
    one error a deleted passage; and a cancelled job's current passage was counted nowhere."""
    started, go_on = _held_generation(monkeypatch)
    pid = imported(client, new_project(client)["id"], "First one.\n\nSecond one.\n\nThird one.")["id"]
    first, second, third = (p["id"] for p in client.get(f"/v1/projects/{pid}").json()["passages"])
    client.post(f"/v1/projects/{pid}/generate", json={})
    assert started.wait(20)
    for passage in (second, third):
        assert client.delete(f"/v1/projects/{pid}/passages/{passage}").status_code == 204
    go_on.set()
    job = wait_job(client, pid)
    assert (job["total"], job["done"], job["failed"], job["errors"]) == (1, 1, 0, []), job

    started.clear()
    go_on.clear()
    client.post(f"/v1/projects/{pid}/passages", json={"text": "Fourth one."})
    client.post(f"/v1/projects/{pid}/generate", json={"passages": [p["id"] for p in
                                                                   client.get(f"/v1/projects/{pid}").json()["passages"]]})
    assert started.wait(20)
    job = client.delete(f"/v1/projects/{pid}/job").json()
    go_on.set()
    assert job["state"] == "cancelled" and job["done"] + job["failed"] + len(job["queued"]) == job["total"] == 2, job
    assert job["queued"][0] == first


def test_a_text_edited_back_while_a_take_is_stored_keeps_its_current_chosen_take(
        client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job decided `choose=` from the passage as it read it after the synthesis, then stored
    the take (its WAV in the thread pool, then the row): a text edited back meanwhile had chosen
    its current take again, and the job's take of the other text replaced it as the chosen one,
    so the passage showed out of date (and exported the other text) while a current take was there."""
    import gateway.projects_store as store

    pid = imported(client, new_project(client)["id"], "Alpha is first.")["id"]
    client.post(f"/v1/projects/{pid}/generate", json={})
    assert wait_job(client, pid)["done"] == 1
    passage = client.get(f"/v1/projects/{pid}").json()["passages"][0]
    alpha, url = passage["chosen_take"], f"/v1/projects/{pid}/passages/{passage['id']}"
    assert client.patch(url, json={"text": "Beta is second."}).json()["num_out_of_date"] == 1
    started, go_on = threading.Event(), threading.Event()
    real = store.write_wav

    def held_write(*args: Any) -> None:  # (in the thread pool) the edit lands meanwhile
        started.set()
        go_on.wait(20)
        real(*args)

    monkeypatch.setattr(store, "write_wav", held_write)
    client.post(f"/v1/projects/{pid}/generate", json={})
    assert started.wait(60)
    back = client.patch(url, json={"text": "Alpha is first."}).json()
    assert back["passages"][0]["chosen_take"] == alpha and back["num_out_of_date"] == 0
    go_on.set()
    assert wait_job(client, pid)["done"] == 1
    project = client.get(f"/v1/projects/{pid}").json()
    passage = project["passages"][0]
    assert len(passage["takes"]) == 2, passage  # the job's take of "Beta is second." is kept
    assert passage["chosen_take"] == alpha and not passage["out_of_date"], passage
    assert project["num_out_of_date"] == 0


def test_a_passage_edited_while_it_is_generated_and_asked_for_again_is_generated_again(
        client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking again for the passage the job was speaking did nothing (`Generator.enqueue` skipped
    the current passage), so its take, of the text as it was, left it out of date after the job."""
    started, go_on = _held_generation(monkeypatch)
    pid = imported(client, new_project(client)["id"], "Alpha is first.")["id"]
    passage_id = client.get(f"/v1/projects/{pid}").json()["passages"][0]["id"]
    client.post(f"/v1/projects/{pid}/generate", json={})
    assert started.wait(20)
    client.patch(f"/v1/projects/{pid}/passages/{passage_id}", json={"text": "Beta is second."})
    job = client.post(f"/v1/projects/{pid}/generate", json={}).json()
    assert job["queued"] == [passage_id] and job["total"] == 2, job
    go_on.set()
    job = wait_job(client, pid)
    assert (job["total"], job["done"], job["failed"], job["queued"]) == (2, 2, 0, []), job
    passage = client.get(f"/v1/projects/{pid}").json()["passages"][0]
    assert [take["text"] for take in passage["takes"]] == ["Alpha is first.", "Beta is second."], passage
    assert not passage["out_of_date"], passage


def test_a_passage_asked_for_again_unchanged_while_it_is_generated_is_generated_once(
        client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Generate pressed twice while the job speaks a passage: the take under way is of its text, so
    the second ask needs no second take."""
    started, go_on = _held_generation(monkeypatch)
    pid = imported(client, new_project(client)["id"], "Alpha is first.")["id"]
    client.post(f"/v1/projects/{pid}/generate", json={})
    assert started.wait(20)
    assert client.post(f"/v1/projects/{pid}/generate", json={}).status_code == 202
    go_on.set()
    job = wait_job(client, pid)
    assert (job["total"], job["done"], job["failed"], job["queued"]) == (1, 1, 0, []), job
    assert len(client.get(f"/v1/projects/{pid}").json()["passages"][0]["takes"]) == 1
@pytest.mark.parametrize("deleted", ["passage", "project"])
def test_a_passage_deleted_while_its_take_is_stored_leaves_the_job_and_no_file(
        client: httpx.Client, server: LiveServer, monkeypatch: pytest.MonkeyPatch, deleted: str) -> None:
    """The job re-read the passage after the synthesis, then stored the take (its WAV in the thread
    pool, then the row): a passage deleted meanwhile failed the row's insert on its foreign key, and
    the job counted an internal_error rather than dropping the passage (`PassageGone`). A project
    deleted meanwhile (its job cancelled) must leave no file either."""
    import gateway.projects_store as store

    pid = imported(client, new_project(client)["id"], "Alpha is first.\n\nBeta is second.")["id"]
    first = client.get(f"/v1/projects/{pid}").json()["passages"][0]["id"]
    started, go_on, written = threading.Event(), threading.Event(), threading.Event()
    real = store.write_wav

    def held_write(*args: Any) -> None:  # (in the thread pool) the delete lands meanwhile
        started.set()
        go_on.wait(20)
        try:
            real(*args)
        finally:
            written.set()

    monkeypatch.setattr(store, "write_wav", held_write)
    client.post(f"/v1/projects/{pid}/generate", json={"passages": [first]})
    assert started.wait(60)
    url = f"{server.url}/v1/projects/{pid}" + (f"/passages/{first}" if deleted == "passage" else "")
    answer: list[httpx.Response] = []
    delete = threading.Thread(target=lambda: answer.append(httpx.delete(url, timeout=30)))
    delete.start()  # (a project's delete cancels its job, which waits for the file being written)
    time.sleep(0.5)
    go_on.set()
    delete.join(30)
    assert written.wait(20) and answer[0].status_code == 204, answer
    if deleted == "passage":
        job = wait_job(client, pid)
        assert (job["total"], job["done"], job["failed"], job["errors"]) == (0, 0, 0, []), job
    else:
        time.sleep(0.5)  # (the clean-up after the write, were it not waited for)
    folder = server.settings.data_dir / "projects" / pid
    assert not folder.exists() or list(folder.iterdir()) == [], list(folder.iterdir())


def test_a_failed_write_of_a_take_leaves_no_partial_file(tmp_path: Path) -> None:
    """`write_wav` left its `.part` file behind when the write failed (until the next start's sweep)."""
    from gateway.projects_audio import write_wav

    class Unwritable:  # bytes that fail to write, as a full disk would
        def __len__(self) -> int:
            return 4

    with pytest.raises(TypeError):
        write_wav(tmp_path / "take.wav", 24000, Unwritable())  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_start_keeps_the_exports_folder_and_logs_only_what_it_removed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Found by a new-user trial: every start logged `projects: removed 0 file(s) and 1 folder(s) no project or
    take names`: the sweep removed `.exports` (no project's id), the projects' own folder, which the next export
    made again. It is kept; an export a kill left in it is removed, and a start with nothing to remove is quiet."""
    import asyncio
    import logging

    from gateway.library import Library
    from gateway.projects_export import EXPORT_DIR
    from gateway.projects_store import ProjectStore
    from gateway.projects_sweep import sweep_projects

    exports = tmp_path / "projects" / EXPORT_DIR
    exports.mkdir(parents=True)
    (exports / "export-000000000000.wav").write_bytes(b"RIFF")  # a kill while an export was sent

    async def sweeps() -> list[tuple[int, int]]:
        library = await Library.open(tmp_path / "voxgate.db")
        try:
            store = ProjectStore(library, tmp_path / "projects")
            return [await sweep_projects(store), await sweep_projects(store)]
        finally:
            await library.close()

    caplog.set_level(logging.INFO, logger="gateway.projects_sweep")
    assert asyncio.run(sweeps()) == [(1, 0), (0, 0)]
    assert exports.is_dir() and list(exports.iterdir()) == []
    assert [r.getMessage() for r in caplog.records if r.name == "gateway.projects_sweep"] == [
        "projects: removed 1 file(s) and 0 folder(s) no project or take names"]

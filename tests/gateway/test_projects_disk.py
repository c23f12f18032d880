"""Project takes on a disk that is too full (gateway/projects_store.py, gateway/disk_space.py): generating,
editing and a job's takes are refused with 507 `insufficient_storage` where their file would leave less than
`min_free_disk_mb` free, as takes are, and no file is left half-written or at all."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest
import soundfile as sf

from tests.conftest import run_server
from tests.gateway.test_projects import imported, new_project, wait_job
from tests.gateway.test_projects_races import _held_generation


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}


def _insufficient(response: httpx.Response, field: str) -> None:
    assert response.status_code == 507, response.text
    error = response.json()["error"]
    assert error["code"] == "insufficient_storage" and error["field"] == field
    assert "min_free_disk_mb" in error["message"]


def test_generating_on_a_full_disk_is_refused_before_anything_is_spoken(tmp_path: Path) -> None:
    for live in run_server(tmp_path, min_free_disk_mb=1e12):  # more than any disk has
        with httpx.Client(base_url=live.url, timeout=60) as client:
            pid = imported(client, new_project(client)["id"], "One passage.")["id"]
            _insufficient(client.post(f"/v1/projects/{pid}/generate", json={}), "passages")
            assert client.get(f"/v1/projects/{pid}/job").status_code == 404  # no job started
            assert client.get(f"/v1/projects/{pid}").json()["passages"][0]["takes"] == []
    assert _files(tmp_path / "projects") == {}


def test_edits_and_a_jobs_take_are_refused_when_the_disk_fills(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for live in run_server(tmp_path):
        assert live.app_state.projects is not None
        store = live.app_state.projects.store
        with httpx.Client(base_url=live.url, timeout=60) as client:
            project = imported(client, new_project(client)["id"], "The first passage is here.")
            pid, passage = project["id"], project["passages"][0]
            assert client.post(f"/v1/projects/{pid}/generate", json={}).status_code == 202
            assert wait_job(client, pid)["done"] == 1
            take = client.get(f"/v1/projects/{pid}").json()["passages"][0]["takes"][0]
            take_url = f"/v1/projects/{pid}/takes/{take['id']}"
            before = _files(tmp_path / "projects")

            store.min_free_disk_mb = 1e12  # the disk has filled since
            for edit in ({"op": "trim_silence"}, {"op": "delete_range", "start_ms": 100, "end_ms": 300}):
                _insufficient(client.post(f"{take_url}/edit", json=edit), "op")
            assert client.get(f"/v1/projects/{pid}").json()["passages"][0]["takes"][0]["num_edits"] == 0
            assert _files(tmp_path / "projects") == before

            # A job that passed its checks, and the disk filled while it spoke: the take is not stored.
            store.min_free_disk_mb = 0.0
            started, go_on = _held_generation(monkeypatch)
            assert client.post(f"/v1/projects/{pid}/generate", json={"passages": [passage["id"]]}).status_code == 202
            assert started.wait(30)
            store.min_free_disk_mb = 1e12
            go_on.set()
            job = wait_job(client, pid)
            assert job["done"] == 0 and job["failed"] == 1, job
            assert job["errors"][0]["code"] == "insufficient_storage" and job["errors"][0]["field"] == "passages"
            assert len(client.get(f"/v1/projects/{pid}").json()["passages"][0]["takes"]) == 1
            assert _files(tmp_path / "projects") == before
            audio, _ = sf.read(io.BytesIO(client.get(f"{take_url}/audio").content), dtype="int16")
            assert len(audio)


def test_a_take_write_the_full_disk_cuts_short_is_a_507_and_leaves_no_file(tmp_path: Path) -> None:
    """A disk that filled between the check and the write (ENOSPC): a 507 naming the field, not a 500."""
    from gateway.errors import ApiError
    from gateway.projects_store import ProjectStore

    store = ProjectStore(None, tmp_path / "projects")  # type: ignore[arg-type]  # (writes only: no rows)
    folder = tmp_path / "projects" / "prj-1"
    folder.mkdir(parents=True)
    (folder / "ptk-1-0.wav.part").symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.raises(ApiError) as refused:
        store._write(folder / "ptk-1-0.wav", 24000, b"\1\0" * 24000, "op")
    assert (refused.value.status, refused.value.code, refused.value.field) == (507, "insufficient_storage", "op")
    assert list(folder.iterdir()) == []

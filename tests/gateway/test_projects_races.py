"""Studio projects: a take edited while its passage or project is deleted (found by a trial)."""

from __future__ import annotations

import threading
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

"""Studio projects: a passage is out of date when its chosen take is, and a change of text or
speaker back to what an existing take was made from chooses that take again (found by a new-user
trial: text edited A -> B -> A showed "up to date" while B's take stayed chosen and was exported)."""

from __future__ import annotations

import io
from typing import Any

import httpx
import soundfile as sf

from tests.gateway.test_projects import imported, new_project, wait_job


def generate(client: httpx.Client, pid: str, passages: Any = "out_of_date") -> dict[str, Any]:
    started = client.post(f"/v1/projects/{pid}/generate", json={"passages": passages})
    assert started.status_code == 202, started.text
    job = wait_job(client, pid)
    assert job["state"] == "done" and job["failed"] == 0, job
    project: dict[str, Any] = client.get(f"/v1/projects/{pid}").json()
    return project


def export_ms(client: httpx.Client, pid: str) -> float:
    response = client.get(f"/v1/projects/{pid}/export")
    assert response.status_code == 200, response.text
    audio, rate = sf.read(io.BytesIO(response.content), dtype="int16")
    return 1000.0 * len(audio) / rate


def test_text_edited_back_chooses_its_take_again_and_a_stale_choice_is_out_of_date(client: httpx.Client) -> None:
    pid = imported(client, new_project(client)["id"], "Alpha is first.")["id"]
    passage = generate(client, pid)["passages"][0]
    url = f"/v1/projects/{pid}/passages/{passage['id']}"
    alpha = passage["takes"][0]
    client.patch(url, json={"text": "Beta is second, and it is rather longer than the first."})
    passage = generate(client, pid)["passages"][0]
    beta = passage["takes"][1]
    assert passage["chosen_take"] == beta["id"] and not passage["out_of_date"]

    back = client.patch(url, json={"text": "Alpha is first."}).json()
    passage = back["passages"][0]
    assert passage["chosen_take"] == alpha["id"], "the take of the text as it is now is chosen again"
    assert not passage["out_of_date"] and back["num_out_of_date"] == 0
    assert [t["chosen"] for t in passage["takes"]] == [True, False]
    assert [t["out_of_date"] for t in passage["takes"]] == [False, True]
    assert client.post(f"/v1/projects/{pid}/generate", json={}).json()["error"]["code"] == "nothing_to_generate"
    assert abs(export_ms(client, pid) - alpha["audio_ms"]) < 1  # the export speaks "Alpha is first."

    # Choosing the stale take on purpose is kept, and shows: the passage is out of date, so
    # "generate out-of-date" regenerates it (and its new take is chosen).
    stale = client.patch(url, json={"chosen_take": beta["id"]}).json()
    assert stale["passages"][0]["chosen_take"] == beta["id"]
    assert stale["passages"][0]["out_of_date"] and stale["num_out_of_date"] == 1
    assert abs(export_ms(client, pid) - beta["audio_ms"]) < 1
    passage = generate(client, pid)["passages"][0]
    assert len(passage["takes"]) == 3 and passage["chosen_take"] == passage["takes"][2]["id"]
    assert not passage["out_of_date"]


def test_an_edit_with_no_current_take_keeps_the_chosen_one_out_of_date(client: httpx.Client) -> None:
    pid = imported(client, new_project(client)["id"], "Alpha is first.")["id"]
    passage = generate(client, pid)["passages"][0]
    url = f"/v1/projects/{pid}/passages/{passage['id']}"
    edited = client.patch(url, json={"text": "Gamma is new."}).json()
    assert edited["passages"][0]["chosen_take"] == passage["takes"][0]["id"]
    assert edited["passages"][0]["out_of_date"] and edited["num_out_of_date"] == 1
    passage = generate(client, pid)["passages"][0]
    assert passage["chosen_take"] == passage["takes"][1]["id"] and not passage["out_of_date"]
    # A text and a chosen take in one change: the take asked for is chosen, stale or not.
    both = client.patch(url, json={"text": "Alpha is first.", "chosen_take": passage["takes"][1]["id"]}).json()
    assert both["passages"][0]["chosen_take"] == passage["takes"][1]["id"] and both["passages"][0]["out_of_date"]


def test_the_default_speaker_set_back_chooses_its_takes_again(client: httpx.Client) -> None:
    assert client.post("/v1/presets", json={"name": "Back and forth", "speed": 0.8}).status_code == 201
    project = imported(client, new_project(client)["id"], "One passage here.\n\nAnd another one.")
    pid, first_speaker = project["id"], project["speaker"]
    originals = [p["takes"][0]["id"] for p in generate(client, pid)["passages"]]
    changed = client.patch(f"/v1/projects/{pid}", json={"speaker": "Back and forth"}).json()
    assert changed["num_out_of_date"] == 2
    project = generate(client, pid)
    assert [p["chosen_take"] for p in project["passages"]] != originals
    back = client.patch(f"/v1/projects/{pid}", json={"speaker": first_speaker}).json()
    assert [p["chosen_take"] for p in back["passages"]] == originals
    assert back["num_out_of_date"] == 0 and not any(p["out_of_date"] for p in back["passages"])
    # A passage with a speaker of its own does not follow the default speaker: its choice (here a
    # stale take chosen on purpose) stays; the others' preset takes are chosen again.
    own = back["passages"][0]
    mine = client.patch(f"/v1/projects/{pid}/passages/{own['id']}",
                        json={"speaker": first_speaker, "chosen_take": own["takes"][1]["id"]}).json()
    assert mine["passages"][0]["chosen_take"] == own["takes"][1]["id"] and mine["passages"][0]["out_of_date"]
    again = client.patch(f"/v1/projects/{pid}", json={"speaker": "Back and forth"}).json()
    assert again["passages"][0]["chosen_take"] == own["takes"][1]["id"] and again["passages"][0]["out_of_date"]
    assert again["passages"][1]["chosen_take"] == project["passages"][1]["takes"][1]["id"]
    assert not again["passages"][1]["out_of_date"] and again["num_out_of_date"] == 1

def test_split_and_merge_back_choose_the_take_of_the_text_again(client: httpx.Client) -> None:
    pid = imported(client, new_project(client)["id"], "Alpha beta.")["id"]
    passage = generate(client, pid)["passages"][0]
    short = passage["takes"][0]["id"]
    client.patch(f"/v1/projects/{pid}/passages/{passage['id']}", json={"text": "Alpha beta. Gamma delta."})
    passage = generate(client, pid)["passages"][0]
    whole = passage["takes"][1]["id"]
    assert passage["chosen_take"] == whole
    split = client.post(f"/v1/projects/{pid}/passages/{passage['id']}/split", json={"at": 11}).json()
    head, tail = split["passages"]
    assert head["text"] == "Alpha beta." and head["chosen_take"] == short and not head["out_of_date"]
    assert tail["out_of_date"] and tail["chosen_take"] is None
    merged = client.post(f"/v1/projects/{pid}/passages/{head['id']}/merge", json={}).json()
    [passage] = merged["passages"]
    assert passage["text"] == "Alpha beta. Gamma delta." and passage["chosen_take"] == whole
    assert not passage["out_of_date"] and merged["num_out_of_date"] == 0

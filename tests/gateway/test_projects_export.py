"""The project export written piece by piece into a temporary file (gateway/projects_export.py): the same
audio and loudness as rendering the whole in memory, the file gone once sent, a full disk a 507."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyloudnorm
import pytest
import soundfile as sf

from gateway.audio import OUTPUT_RATE, to_pcm16, wav_header
from gateway.projects_audio import Piece, render, write_wav
from gateway.projects_export import EXPORT_DIR, ProgrammeLoudness, export_file
from tests.conftest import run_server
from tests.gateway.test_projects import imported, new_project, wait_job


def _takes(folder: Path) -> list[Piece]:
    """Three takes at other rates with pauses between: speech-like bursts, quiet and loud parts."""
    rng = np.random.default_rng(7)
    pieces: list[Piece] = []
    for i, (rate, seconds, level) in enumerate([(22050, 1.37, 0.3), (24000, 0.81, 0.05), (16000, 2.03, 0.6)]):
        t = np.arange(int(rate * seconds)) / rate
        burst = level * np.sin(2 * np.pi * (180 + 40 * i) * t) * (np.sin(2 * np.pi * 3 * t) > 0)
        noisy = np.clip(burst + 0.01 * rng.standard_normal(len(t)), -1, 1)
        write_wav(folder / f"take-{i}.wav", rate, (noisy * 32767).astype("<i2").tobytes())
        pieces += [Piece(folder / f"take-{i}.wav"), Piece(pause_ms=250.0 + 33.3 * i)]
    return pieces[:-1]


def test_the_loudness_of_pieces_fed_in_turn_is_pyloudnorms_of_the_whole(tmp_path: Path) -> None:
    pieces = _takes(tmp_path)
    whole = render(pieces)
    expected = pyloudnorm.Meter(OUTPUT_RATE).integrated_loudness(whole.astype(np.float64))
    meter = ProgrammeLoudness(OUTPUT_RATE)
    for piece in pieces:
        meter.feed(render([piece]))
    assert meter.num_samples == len(whole) and meter.peak == pytest.approx(float(np.max(np.abs(whole))))
    assert meter.integrated() == pytest.approx(expected, abs=0.01)
    odd = ProgrammeLoudness(OUTPUT_RATE)  # pieces of any length, none a hop's multiple
    for start in range(0, len(whole), 1777):
        odd.feed(whole[start:start + 1777])
    assert odd.integrated() == pytest.approx(expected, abs=0.01)
    silent = ProgrammeLoudness(OUTPUT_RATE)
    silent.feed(np.zeros(OUTPUT_RATE, np.float32))
    assert silent.integrated() == -np.inf


def test_an_export_file_is_the_whole_rendering(tmp_path: Path) -> None:
    pieces = _takes(tmp_path)
    whole = render(pieces)
    path, headers = export_file(pieces, "wav", None, tmp_path)
    assert path.parent == tmp_path / EXPORT_DIR
    assert path.read_bytes() == wav_header(OUTPUT_RATE, len(whole)) + to_pcm16(whole)
    assert headers["X-Voxgate-Duration-Ms"] == f"{1000.0 * len(whole) / OUTPUT_RATE:.1f}"
    for fmt in ("flac", "mp3", "opus"):
        path, _ = export_file(pieces, fmt, None, tmp_path)
        audio, rate = sf.read(path, dtype="float32")
        assert rate == OUTPUT_RATE and abs(len(audio) - len(whole)) < 0.08 * OUTPUT_RATE, fmt
    loud, headers = export_file(pieces, "wav", -20.0, tmp_path)
    audio, _ = sf.read(loud, dtype="float64")
    assert float(headers["X-Voxgate-Measured-Lufs"]) == pytest.approx(
        pyloudnorm.Meter(OUTPUT_RATE).integrated_loudness(whole.astype(np.float64)), abs=0.01)
    assert headers["X-Voxgate-Loudness-Limited"] == "false"
    assert pyloudnorm.Meter(OUTPUT_RATE).integrated_loudness(audio) == pytest.approx(-20.0, abs=0.05)


def _until_gone(exports: Path) -> None:
    deadline = time.monotonic() + 10
    while exports.exists() and list(exports.iterdir()):
        assert time.monotonic() < deadline, list(exports.iterdir())
        time.sleep(0.02)


def test_an_export_is_sent_from_a_file_that_is_then_gone_and_a_full_disk_is_a_507(tmp_path: Path) -> None:
    for live in run_server(tmp_path):
        assert live.app_state.projects is not None
        store = live.app_state.projects.store
        exports = tmp_path / "projects" / EXPORT_DIR
        with httpx.Client(base_url=live.url, timeout=60) as client:
            pid = imported(client, new_project(client)["id"], "One passage.\n\nAnd another one.")["id"]
            assert client.post(f"/v1/projects/{pid}/generate", json={}).status_code == 202
            assert wait_job(client, pid)["done"] == 2
            duration_ms = client.get(f"/v1/projects/{pid}").json()["duration_ms"]
            for params in ({"format": "wav"}, {"format": "flac", "loudness": -18}):
                response = client.get(f"/v1/projects/{pid}/export", params=params)
                assert response.status_code == 200, response.text
                audio, rate = sf.read(io.BytesIO(response.content), dtype="float32")
                assert abs(1000 * len(audio) / rate - duration_ms) < 1
                _until_gone(exports)  # deleted once sent (just after the last byte went)
            store.min_free_disk_mb = 1e12  # the disk has filled since
            response = client.get(f"/v1/projects/{pid}/export")
            assert response.status_code == 507, response.text
            assert response.json()["error"]["code"] == "insufficient_storage"
            assert response.json()["error"]["field"] == "format"
            assert not exports.exists() or list(exports.iterdir()) == []


def _generated(client: httpx.Client) -> tuple[str, dict[str, Any]]:
    """A project of two passages, both generated: its id and its first passage."""
    pid = imported(client, new_project(client)["id"], "One passage.\n\nAnd another one.")["id"]
    assert client.post(f"/v1/projects/{pid}/generate", json={}).status_code == 202
    assert wait_job(client, pid)["done"] == 2
    return pid, client.get(f"/v1/projects/{pid}").json()["passages"][0]


def test_a_chosen_takes_file_gone_is_a_404_naming_its_passage_not_a_500(tmp_path: Path) -> None:
    """A take's file deleted by hand: the export and the join read it as a 500 with a traceback in the log."""
    for live in run_server(tmp_path):
        with httpx.Client(base_url=live.url, timeout=60) as client:
            pid, first = _generated(client)
            (tmp_path / "projects" / pid / f"{first['chosen_take']}-0.wav").unlink()
            for url in (f"/v1/projects/{pid}/export", f"/v1/projects/{pid}/passages/{first['id']}/join"):
                response = client.get(url)
                assert response.status_code == 404, response.text
                error = response.json()["error"]
                assert error["code"] == "take_audio_missing" and error["field"] == "passages"
                assert f"passage 1 ({first['id']})" in error["message"] and first["chosen_take"] in error["message"]
            assert not (tmp_path / "projects" / EXPORT_DIR).exists() or \
                list((tmp_path / "projects" / EXPORT_DIR).iterdir()) == []


def test_head_says_the_exports_headers_without_rendering_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Starlette runs GET's handler for HEAD: HEAD rendered (and measured) the whole programme into a
    file to send only its headers. Now it reads the takes' file headers: GET's type, file name,
    duration and a WAV's size; the loudness headers (which need the measurement) are left out."""
    from gateway import projects_takes

    renders: list[str] = []
    real = projects_takes.export_file
    monkeypatch.setattr(projects_takes, "export_file", lambda *a: renders.append(a[1]) or real(*a))
    for live in run_server(tmp_path):
        with httpx.Client(base_url=live.url, timeout=60) as client:
            pid = imported(client, new_project(client, name="Émile 1")["id"], "One passage.\n\nAnd another one.")["id"]
            assert client.post(f"/v1/projects/{pid}/generate", json={}).status_code == 202
            assert wait_job(client, pid)["done"] == 2
            url = f"/v1/projects/{pid}/export"
            for params in ({"format": "wav"}, {"format": "mp3"}, {"format": "wav", "loudness": -18}):
                head = client.head(url, params=params)
                assert head.status_code == 200 and head.content == b"" and renders == [], (params, renders)
                got = client.get(url, params=params)
                assert got.status_code == 200
                renders.clear()
                for name in ("content-type", "content-disposition", "x-voxgate-duration-ms", "accept-ranges"):
                    assert head.headers[name] == got.headers[name], (name, params)
                if params["format"] == "wav":
                    assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.content))
                else:  # a compressed file's size is known once it is written
                    assert "content-length" not in head.headers, head.headers
                assert "x-voxgate-gain-db" not in head.headers
            assert client.head(url, params={"format": "ogg"}).status_code == 400  # GET's refusals, no body
            assert client.head(f"/v1/projects/{pid}x/export").status_code == 404
            assert renders == []


def test_a_take_file_gone_while_head_reads_it_is_the_404_get_gives(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """HEAD checked the files once, then read their headers: a file gone in between was a 500 (a review);
    it is GET's 404 naming the passage, checked again after the failure as GET does."""
    from gateway import projects_takes

    real = projects_takes.head_headers
    doomed: list[Path] = []

    def gone_meanwhile(*args: object) -> dict[str, str]:
        for path in doomed:
            path.unlink()
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(projects_takes, "head_headers", gone_meanwhile)
    for live in run_server(tmp_path):
        with httpx.Client(base_url=live.url, timeout=60) as client:
            pid, first = _generated(client)
            doomed.append(tmp_path / "projects" / pid / f"{first['chosen_take']}-0.wav")
            head = client.head(f"/v1/projects/{pid}/export")
            assert head.status_code == 404 and head.content == b"", head.status_code

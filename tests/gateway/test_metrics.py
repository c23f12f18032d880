"""`voxgate serve --policy` and `/metrics` (gateway/metrics.py), on the embedded voice.

`/metrics` is read with prometheus-client's own text parser, as a scraper reads it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient
from websockets.sync.client import connect

from gateway.app import create_app
from gateway.cli import main, parser, settings_from_args
from gateway.metrics import Metrics
from tests.conftest import LiveServer

MODEL = "piper-joe"


def scrape(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of `/metrics`: (name, sorted labels) -> value."""
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_policy_flag_wins_over_the_environment_and_shows_in_stats(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXGATE_POLICY", "lifo")  # overridden by the flag, so never checked
    args = parser().parse_args(["serve", "--policy", "fifo+early", "--data-dir", str(tmp_path)])
    settings = settings_from_args(args)
    assert settings.policy == "fifo+early"
    with TestClient(create_app(settings), base_url="http://localhost") as client:  # a Host the server answers
        stats = client.get("/v1/stats")
        assert stats.status_code == 200 and stats.json()["policy"] == "fifo+early"
    monkeypatch.delenv("VOXGATE_POLICY")
    default = settings_from_args(parser().parse_args(["serve", "--data-dir", str(tmp_path)]))
    with TestClient(create_app(default), base_url="http://localhost") as client:
        assert client.get("/v1/stats").json()["policy"] == "edf"


@pytest.mark.parametrize("argv, env, source", [
    (["--policy", "lifo"], {}, "--policy"),
    (["--policy", "edf+lanes"], {}, "--policy"),  # edf has every mechanism already
    (["--policy", "fifo+order+warp"], {}, "--policy"),
    ([], {"VOXGATE_POLICY": "round-robin"}, "VOXGATE_POLICY"),
])
def test_a_bad_policy_stops_the_start_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str], argv: list[str],
                                                    env: dict[str, str], source: str) -> None:
    monkeypatch.delenv("VOXGATE_POLICY", raising=False)
    for key, setting in env.items():
        monkeypatch.setenv(key, setting)
    assert main(["serve", *argv, "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "policy must be" in err and f"(from {source})" in err and "Traceback" not in err
    assert not (tmp_path / "data").exists()  # nothing started


def test_metrics_after_one_rest_synthesis(server: LiveServer, client: httpx.Client) -> None:
    text = "The first sentence is short. The second one is a little longer. And a third ends it."
    response = client.post("/v1/audio/speech", json={"input": text, "response_format": "pcm"})
    assert response.status_code == 200 and len(response.content) > 0
    assert server.wait_idle() == 0
    deadline = time.monotonic() + 5  # the engine's stats snapshot follows its last step
    while value(samples := scrape(client), "voxgate_running_requests", model=MODEL) and time.monotonic() < deadline:
        time.sleep(0.05)
    names = {name for name, _ in samples}
    assert not any(name.startswith("voxgate_ttfa_ms") for name in names)

    ttfa_count = value(samples, "voxgate_ttfa_seconds_count", model=MODEL)
    ttfa_sum = value(samples, "voxgate_ttfa_seconds_sum", model=MODEL)
    assert ttfa_count >= 1 and 0 < ttfa_sum / ttfa_count < 60
    assert value(samples, "voxgate_ttfa_seconds_bucket", model=MODEL, le="+Inf") == ttfa_count
    chunks = value(samples, "voxgate_chunk_lateness_seconds_count", model=MODEL)
    on_time = value(samples, "voxgate_chunk_lateness_seconds_bucket", model=MODEL, le="0.0")
    assert chunks >= 1 and 0 <= on_time <= chunks
    assert value(samples, "voxgate_chunk_lateness_seconds_sum", model=MODEL) < 60 * chunks
    assert value(samples, "voxgate_stalls_total", model=MODEL) == chunks - on_time  # a stall is a late chunk
    assert value(samples, "voxgate_requests_total", model=MODEL) >= 1
    assert value(samples, "voxgate_audio_seconds_total", model=MODEL) > 0

    assert value(samples, "voxgate_waiting_requests", model=MODEL) == 0
    assert value(samples, "voxgate_running_requests", model=MODEL) == 0
    assert value(samples, "voxgate_batch_size", model=MODEL, lane="synth") >= 0
    assert ("voxgate_batch_size", (("lane", "decode"), ("model", MODEL))) not in samples  # Piper has no LM lanes
    host_s = value(samples, "voxgate_step_host_median_seconds", model=MODEL)
    assert 0 < host_s < 1
    assert value(samples, "voxgate_prefill_deferrals_total", model=MODEL) == 0
    assert value(samples, "voxgate_refused_requests_total", model=MODEL) == 0
    assert not any(name.startswith("voxgate_cuda_graph") or name.startswith("voxgate_decode_step")
                   for name, labels in samples if ("model", MODEL) in labels)  # a synthesiser has neither


def test_realtime_chunks_are_observed_as_they_are_sent(server: LiveServer, client: httpx.Client) -> None:
    before = scrape(client)
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        ws.send(json.dumps({"type": "text.append", "text": "One sentence here. Then another one. And a last."}))
        ws.send(json.dumps({"type": "text.flush"}))
        frames, done = 0, None
        while done is None:
            message = ws.recv(timeout=60)
            if isinstance(message, bytes):
                frames += 1
            elif json.loads(message)["type"] in ("utterance.done", "error"):
                done = json.loads(message)
    assert done["type"] == "utterance.done" and frames >= 2, done
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, model=MODEL, **labels) - before.get((name, tuple(sorted(
            {"model": MODEL, **labels}.items()))), 0.0)

    # Every audio frame after the first is one lateness observation (the first one is TTFA's).
    assert delta("voxgate_chunk_lateness_seconds_count") == frames - 1
    late = delta("voxgate_chunk_lateness_seconds_count") - delta("voxgate_chunk_lateness_seconds_bucket", le="0.0")
    assert delta("voxgate_stalls_total") == late == done["stalls"]
    assert delta("voxgate_ttfa_seconds_count") == 1


def test_a_realtime_session_closed_mid_utterance_still_counts_its_ttfa(server: LiveServer,
                                                                      client: httpx.Client) -> None:
    """A client that leaves after its first audio: the utterance's TTFA is observed, as a dropped
    REST stream's is, and it is no completed request (found by an operator trial: it was lost)."""
    before = scrape(client)
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        ws.send(json.dumps({"type": "text.append", "text": "A long answer the client will not wait for. " * 8}))
        ws.send(json.dumps({"type": "text.flush"}))
        while not isinstance(ws.recv(timeout=60), bytes):
            pass
    assert server.wait_idle() == 0
    after = scrape(client)

    def delta(name: str) -> float:
        key = (name, (("model", MODEL),))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("voxgate_ttfa_seconds_count") == 1
    assert delta("voxgate_requests_total") == 0
    assert value(after, "voxgate_realtime_sessions") == 0


def test_an_unflushed_realtime_utterance_rtf_is_its_synthesis_not_its_playback(server: LiveServer,
                                                                              client: httpx.Client) -> None:
    """Without `text.flush` an utterance ends `utterance_end_ms` after it has played out; its RTF
    stops at its last chunk, not then (found by an operator trial: 1.23 for Piper, which runs at ~0.05)."""
    since = client.get("/v1/stats").json()["time"]
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        ws.send(json.dumps({"type": "text.append", "text": "Never flushed, this ends on its own. "}))
        done = None
        while done is None:
            message = ws.recv(timeout=60)
            if isinstance(message, str) and json.loads(message)["type"] in ("utterance.done", "error"):
                done = json.loads(message)
    assert done["type"] == "utterance.done" and done["audio_ms"] > 0, done
    recent = client.get("/v1/stats", params={"since": since}).json()["recent"]
    assert [u["source"] for u in recent] == ["realtime"]
    assert 0 < recent[0]["rtf"] < 0.9, recent


def test_vendor_http_chunks_are_observed(client: httpx.Client) -> None:
    """A Cartesia `/tts/bytes` stream goes through gateway/vendor_http.py, like ElevenLabs' HTTP routes."""
    before = scrape(client)
    response = client.post("/tts/bytes", headers={"Cartesia-Version": "2026-03-01"}, json={
        "model_id": "sonic-3", "voice": {"mode": "id", "id": "v"}, "transcript": "One sentence here. Then "
        "another one. And a last.", "output_format": {"container": "raw", "encoding": "pcm_s16le",
                                                       "sample_rate": 24000}})
    assert response.status_code == 200 and len(response.content) > 0
    after = scrape(client)

    def delta(name: str) -> float:
        key = (name, (("model", MODEL),))
        return after[key] - before.get(key, 0.0)

    assert delta("voxgate_ttfa_seconds_count") == 1 and delta("voxgate_requests_total") == 1
    assert delta("voxgate_chunk_lateness_seconds_count") >= 1  # three sentences: chunks after the first


def test_unloads_are_counted_by_reason(server: LiveServer, client: httpx.Client) -> None:
    """`voxgate_model_unloads_total{reason}`: every reason from the start (tests/gateway/test_residency_unloads.py
    has each one's path); an unload by hand is `manual` (voxgate_model_evictions_total counts none)."""
    from gateway.resident import UNLOAD_REASONS

    assert client.post(f"/v1/models/{MODEL}/load", json={}).status_code == 200
    before = scrape(client)
    assert {reason for (name, labels) in before if name == "voxgate_model_unloads_total"
            for _, reason in labels} == set(UNLOAD_REASONS)
    unloaded = client.post(f"/v1/models/{MODEL}/unload", json={})
    assert unloaded.status_code == 200 and unloaded.json()["unloaded"] is True, unloaded.text
    after = scrape(client)
    for reason in UNLOAD_REASONS:
        counted = value(after, "voxgate_model_unloads_total", reason=reason)
        assert counted == value(before, "voxgate_model_unloads_total", reason=reason) + (reason == "manual")
    assert value(after, "voxgate_model_evictions_total") == value(before, "voxgate_model_evictions_total")


class _Engine:
    """Engine.stats() as a GPU speech LM reports it (CUDA graph counts need a GPU)."""

    def __init__(self, stats: dict[str, Any]) -> None:
        self._stats = stats

    def stats(self) -> dict[str, Any]:
        return self._stats


class _Residency:
    num_loads = num_evictions = 0
    num_unloads: dict[str, int] = {}

    def residents(self) -> list[dict[str, Any]]:
        return []


def test_engine_figures_are_read_at_scrape_time_in_base_units() -> None:
    lm = {"waiting": 3, "running": 17, "has_backbone": True, "prefill_deferrals": 5, "refused": 2, "cut": 6,
          "last_batch": {"prefill": 1, "decode": 17, "urgent": 2, "background": 8},
          "lanes": {"prefill": 1, "decode": 17, "urgent": 2, "background": 8},
          "graphs": {"hit": 120, "miss": 4}, "est_step_ms": 12.5, "est_codec_ms": 3.0, "host_ms_p50": 0.11}
    stats: dict[str, Any] = {"requests": 20, "policy": "edf", "models": {"orpheus": lm}}
    metrics = Metrics()
    metrics.watch(_Residency(), _Engine(stats))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(metrics.render().decode()) for s in family.samples}
    assert value(samples, "voxgate_waiting_requests", model="orpheus") == 3
    assert value(samples, "voxgate_running_requests", model="orpheus") == 17
    assert [value(samples, "voxgate_batch_size", model="orpheus", lane=lane)
            for lane in ("prefill", "decode", "urgent", "background")] == [1, 17, 2, 8]
    assert value(samples, "voxgate_decode_step_estimate_seconds", model="orpheus") == pytest.approx(0.0125)
    assert value(samples, "voxgate_step_host_median_seconds", model="orpheus") == pytest.approx(0.00011)
    assert value(samples, "voxgate_prefill_deferrals_total", model="orpheus") == 5
    assert value(samples, "voxgate_refused_requests_total", model="orpheus") == 2
    assert value(samples, "voxgate_cut_requests_total", model="orpheus") == 6
    assert value(samples, "voxgate_cuda_graph_hits_total", model="orpheus") == 120
    assert value(samples, "voxgate_cuda_graph_misses_total", model="orpheus") == 4
    lm["running"], lm["graphs"] = 2, {"hit": 130, "miss": 4}  # a later scrape reads the engine again
    again = metrics.render().decode()
    assert 'voxgate_running_requests{model="orpheus"} 2.0' in again
    assert 'voxgate_cuda_graph_hits_total{model="orpheus"} 130.0' in again


def test_ttfa_phases_are_nearest_rank_percentiles() -> None:
    """Found by a new-user trial: with two first chunks p50 was the larger and p90 the smaller."""
    from engine.core import PHASES
    from gateway.stats import phases

    two = phases([[1.0] * len(PHASES), [9.0] * len(PHASES)])
    assert two is not None and all(pair == [1.0, 9.0] for pair in two.values())
    ten = phases([[float(i)] * len(PHASES) for i in range(1, 11)])
    assert ten is not None and ten["prepare"] == [5.0, 9.0]
    assert phases([]) is None

"""Schemathesis over the REST API, generated from the server's own /openapi.json: every
operation gets valid and invalid requests; none may answer 5xx or hang, or a status its
schema does not list (a 201 documented as 200 once), and the server is alive and idle afterwards. Bounded: a few examples per operation (CI time)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, status_code_conformance

from gateway import openapi
from gateway.app import create_app
from gateway.settings import load_settings
from tests.conftest import LiveServer, run_server

MAX_EXAMPLES = 12
REQUEST_TIMEOUT_S = 30.0  # a request that takes longer is a hang
# A long-lived stream by design (Server-Sent Events, up to 15 minutes): not fuzzed here.
NOT_FUZZED = "/v1/library/downloads/events"


FUZZ_SETTINGS: dict[str, Any] = {"max_input_chars": 80, "min_free_disk_mb": 0}  # short inputs: fast synthesis


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("fuzz")
    (base / "roots").mkdir()
    (base / "catalog.json").write_text(json.dumps({"version": 1, "models": [
        {"id": "tiny", "family": "piper", "name": "Missing files", "files": [{"url": "none.onnx", "size_bytes": 4}]}]}))
    # The catalog and the mirror are local (and the mirror empty): installs fail fast, offline.
    yield from run_server(base / "data", catalog_path=str(base / "catalog.json"),
                          download_base_url=f"file://{base}/mirror", local_model_roots=[str(base / "roots")],
                          **FUZZ_SETTINGS)


def _schema() -> Any:
    """The document the fuzzed server serves at /openapi.json (the same settings; routes need no lifespan)."""
    settings = load_settings(env={}, data_dir=Path("/nonexistent"), **FUZZ_SETTINGS)
    return schemathesis.openapi.from_dict(openapi.build(create_app(settings).routes, settings)).exclude(
        path=NOT_FUZZED)


schemathesis.serializer.alias("audio/pcm", "application/octet-stream")  # takes' raw PCM16 bodies
schema = _schema()


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_input_gets_a_5xx(case: Any, fuzzed: LiveServer) -> None:
    response = case.call(base_url=fuzzed.url, timeout=REQUEST_TIMEOUT_S)
    # 503 is the API's answer for an overloaded or busy server, with a JSON body; anything else 5xx is a bug.
    if response.status_code == 503:
        assert response.json()["error"]["code"] in ("overloaded", "server_busy", "insufficient_memory",
                                                    "model_load_failed", "shutting_down"), response.text
        return
    case.validate_response(response, checks=[not_a_server_error, status_code_conformance])  # (codes documented)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"code", "message", "field", "type", "param"}, response.text


def test_the_served_schema_is_the_fuzzed_one(fuzzed: LiveServer) -> None:
    served = httpx.get(f"{fuzzed.url}/openapi.json").json()
    settings = load_settings(env={}, data_dir=Path("/nonexistent"), **FUZZ_SETTINGS)
    assert served == json.loads(json.dumps(openapi.build(create_app(settings).routes, settings)))


def test_the_server_is_alive_and_idle_after_fuzzing(fuzzed: LiveServer) -> None:
    assert httpx.get(f"{fuzzed.url}/health", timeout=10).status_code == 200
    assert fuzzed.wait_idle(30) == 0
    assert not list(Path(fuzzed.settings.data_dir / "takes").glob("*.part")) if \
        (fuzzed.settings.data_dir / "takes").exists() else True

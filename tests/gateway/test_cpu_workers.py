"""The `cpu_workers` setting sizes a CPU family's pool (issue 11): on a real server, through
the library and the residency loader, the loaded Piper runner holds that many sessions,
and a model's own `workers` option still wins."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from engine.runner import SynthRunner
from gateway.settings import load_settings
from models import InvalidModel
from models.piper import embedded_model_path, validate
from tests.conftest import LiveServer, run_server


def _runner(server: LiveServer, model_id: str) -> SynthRunner:
    runner = server.app_state.residency._residents[model_id].runner
    assert isinstance(runner, SynthRunner)
    return runner


def test_cpu_workers_reaches_the_pool_and_a_model_option_overrides_it(tmp_path: Path) -> None:
    own = {"id": "joe-one", "family": "piper", "path": str(embedded_model_path()), "workers": 1}
    for server in run_server(tmp_path / "data", cpu_workers=3, models=(own,),
                             preload_models=("piper-joe", "joe-one")):
        pool = _runner(server, "piper-joe")
        assert len(pool.synthesizers) == 3 and pool.lanes == {"codec": 3}
        assert len({id(s) for s in pool.synthesizers}) == 3  # three sessions, not one thrice
        assert len(_runner(server, "joe-one").synthesizers) == 1
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for model in ("piper-joe", "joe-one"):
                response = client.post("/v1/audio/speech", json={"model": model, "input": "One, two, three.",
                                                                 "response_format": "pcm"})
                assert response.status_code == 200 and len(response.content) > 0


def test_cpu_workers_is_checked_where_it_is_set() -> None:
    assert load_settings(env={"VOXGATE_CPU_WORKERS": "4"}).cpu_workers == 4
    assert load_settings(env={}).cpu_workers == 0  # one per core
    with pytest.raises(ValueError, match="cpu_workers must be >= 0"):
        load_settings(env={"VOXGATE_CPU_WORKERS": "-1"})
    with pytest.raises(ValueError, match="VOXGATE_CPU_WORKERS must be an integer"):
        load_settings(env={"VOXGATE_CPU_WORKERS": "two"})


@pytest.mark.parametrize("options", [{"workers": 0}, {"workers": "2"}, {"workers": True}, {"num_threads": -1},
                                     {"alone_threads": -1}])
def test_a_bad_pool_option_is_refused_before_loading(options: dict[str, object]) -> None:
    with pytest.raises(InvalidModel) as raised:
        validate(embedded_model_path(), options)
    assert raised.value.field == f"options.{next(iter(options))}"

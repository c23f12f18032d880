"""The settings that size concurrency or a queue refuse what bounds nothing, in one line naming the
setting and where it was set (gateway/settings.py `_COUNTS`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import load_settings

HUGE = "1" + "0" * 400  # (an environment variable is any integer; TOML's stop at 2**63)


@pytest.mark.parametrize(("name", "most"), [
    ("max_running", 4096), ("max_waiting", 1_000_000), ("key_max_concurrent", 1_000_000),
    ("max_loaded_models", 1024), ("realtime_message_burst", 1_000_000), ("cpu_workers", 1024)])
def test_a_count_that_bounds_nothing_is_refused(name: str, most: int) -> None:
    """A realtime_message_burst of 10**400 failed every WebSocket session (OverflowError: the rate's
    bucket is a float) and cpu_workers of 10**400 every request (500); the others bounded nothing."""
    variable = f"VOXGATE_{name.upper()}"
    assert getattr(load_settings(env={variable: str(most)}), name) == most  # the most is allowed
    for value, shown in ((str(most + 1), str(most + 1)), (HUGE, HUGE[:24] + "…")):
        with pytest.raises(ValueError) as refused:
            load_settings(env={variable: value})
        assert str(refused.value) == (f"invalid settings: {name} must be <= {most} (more bounds nothing), "
                                      f"got {shown} (from {variable})")


def test_a_zero_period_in_the_key_rate_limit_setting_is_refused() -> None:
    with pytest.raises(ValueError) as refused:
        load_settings(env={"VOXGATE_KEY_RATE_LIMIT": "5/0 seconds"})
    assert str(refused.value) == ("invalid settings: key_rate_limit: a rate limit's period is at least 1 (e.g. "
                                  "'10/second' or '5/2 seconds'), got '5/0 seconds' (from VOXGATE_KEY_RATE_LIMIT)")


def test_a_models_own_max_running_has_the_settings_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model's `max_running` option overrides the setting; it took any integer >= 1."""
    from gateway.cli import main
    from models.piper import embedded_model_path

    base = ["models", "add", "--family", "piper", "--path", str(embedded_model_path()), "--data-dir", str(tmp_path)]
    assert main([*base, "--id", "wide", "--option", "max_running=4097"]) == 2
    assert capsys.readouterr().err.strip() == "error: options.max_running must be an integer from 1 to 4096, got 4097"
    assert main([*base, "--id", "wide", "--option", "max_running=4096"]) == 0


def test_more_preload_models_than_max_loaded_models_is_refused() -> None:
    """A trial's finding: `VOXGATE_PRELOAD_MODELS=a,b VOXGATE_MAX_LOADED_MODELS=1` started, loading a
    and then evicting it at once to load b (`unloaded (max_loaded_models)`), in silence: a model the
    user asked to have ready was not. The start is refused in one line naming both settings."""
    env = {"VOXGATE_PRELOAD_MODELS": "orph,qvd", "VOXGATE_MAX_LOADED_MODELS": "1"}
    with pytest.raises(ValueError, match=r"preload_models names 2 models, more than max_loaded_models \(1\) keeps "
                                         r"loaded; name fewer, or raise max_loaded_models"):
        load_settings(env=env)
    assert load_settings(env={**env, "VOXGATE_MAX_LOADED_MODELS": "2"}).preload_models == ("orph", "qvd")
    assert load_settings(env={**env, "VOXGATE_PRELOAD_MODELS": "orph,orph"}).max_loaded_models == 1

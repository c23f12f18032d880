"""Settings that are numbers: a float setting refuses NaN, infinities and negatives (zero where it
means nothing), an integer setting its out-of-range values, a model option NaN and infinities; each
in one line naming the setting and where it was set (gateway/settings.py). The counts that size
concurrency or a queue are in test_settings_counts.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.settings import load_settings


FLOAT_SETTINGS = ("ttfa_target_ms", "urgent_slack_ms", "max_predicted_ttfa_ms", "text_buffer_ms", "utterance_end_ms",
                  "realtime_pace_ms", "realtime_messages_per_s", "idle_unload_s", "busy_timeout_ms",
                  "min_free_memory_mb", "memory_factor", "min_free_disk_mb", "send_timeout_s", "header_timeout_s",
                  "body_timeout_s", "graceful_shutdown_s", "memory_trim_idle_s")


def test_every_float_setting_is_listed_here() -> None:
    import dataclasses

    from gateway.settings import Settings

    assert {f.name for f in dataclasses.fields(Settings) if f.type == "float"} == set(FLOAT_SETTINGS)


@pytest.mark.parametrize("name", FLOAT_SETTINGS)
def test_nan_and_inf_are_refused_naming_the_setting_and_where_it_was_set(name: str, tmp_path: Path) -> None:
    """float() reads 'nan', 'inf' and '1e400' (inf), and TOML has nan and inf: none is a value
    a setting can mean, and NaN passes every range check that compares (`x < 0` is False)."""
    env_key = f"VOXGATE_{name.upper()}"
    for raw, shown in (("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ("1e400", "inf"), ("NaN", "nan")):
        with pytest.raises(ValueError, match=rf"^invalid settings: {name} must be a finite number, got {shown} "
                                             rf"\(from {env_key}\)$"):
            load_settings(env={env_key: raw})
    config = tmp_path / "voxgate.toml"
    for literal, shown in (("nan", "nan"), ("+inf", "inf"), ("-inf", "-inf")):
        config.write_text(f"{name} = {literal}\n")
        with pytest.raises(ValueError, match=rf"{name} must be a finite number, got {shown} \(from {name} in "):
            load_settings(config, env={})
    config.write_text(f"{name} = {10 ** 400}\n")  # a TOML integer too large for a float
    with pytest.raises(ValueError, match=rf"{name} must be a finite number, got 1{'0' * 23}…"):
        load_settings(config, env={})
    flag = "--" + name.replace("_", "-")
    with pytest.raises(ValueError, match=rf"{name} must be a finite number, got nan \(from {flag}\)"):
        load_settings(env={}, **{name: float("nan")})


@pytest.mark.parametrize("name", FLOAT_SETTINGS)
def test_a_negative_number_is_refused_naming_the_setting(name: str) -> None:
    env_key = f"VOXGATE_{name.upper()}"
    with pytest.raises(ValueError, match=rf"^invalid settings: {name} must be (>= 0|positive).*, got -1.5 "
                                         rf"\(from {env_key}\)$"):
        load_settings(env={env_key: "-1.5"})


def test_zero_is_refused_only_where_it_means_nothing() -> None:
    must_be_positive = {"realtime_messages_per_s", "memory_factor", "send_timeout_s", "header_timeout_s", "body_timeout_s",
                        "graceful_shutdown_s"}
    for name in FLOAT_SETTINGS:
        env = {f"VOXGATE_{name.upper()}": "0"}
        if name in must_be_positive:
            with pytest.raises(ValueError, match=rf"{name} must be positive, got 0.0"):
                load_settings(env=env)
        else:
            assert getattr(load_settings(env=env), name) == 0.0
    assert load_settings(env={"VOXGATE_REALTIME_PACE_MS": "12.5"}).realtime_pace_ms == 12.5


def test_serve_with_a_nan_setting_says_so_in_one_line_before_touching_the_data_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VOXGATE_REALTIME_PACE_MS", "nan")
    assert main(["serve", "--data-dir", str(tmp_path / "data"), "--port", "18767"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: invalid settings: realtime_pace_ms must be a finite number, got nan (from VOXGATE_REALTIME_PACE_MS)"]
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_model_option_is_refused_naming_it(raw: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`--option KEY=VALUE` reads VALUE as JSON, and Python's json reads NaN and Infinity; a
    `[[models]]` entry's TOML has nan and inf."""
    from models.piper import embedded_model_path

    base = ["models", "add", "--family", "piper", "--path", str(embedded_model_path()), "--data-dir", str(tmp_path)]
    assert main([*base, "--id", "bad", "--option", f"busy_timeout_ms={raw}"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: options.busy_timeout_ms must be a number of ms > 0, "
                                               f"got {float(raw)!r}")
    config = tmp_path / "voxgate.toml"
    literal = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[raw]
    config.write_text(f'[[models]]\nid = "joe2"\nfamily = "piper"\npath = "{embedded_model_path()}"\n'
                      f"busy_timeout_ms = {literal}\n")
    assert main(["serve", "--config", str(config), "--data-dir", str(tmp_path / "data"), "--port", "18768"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: [[models]] 'joe2' in the config file: options.busy_timeout_ms must be a number of ms > 0, "
        f"got {float(raw)!r}"]
    assert main(["models", "list", "--data-dir", str(tmp_path)]) == 0
    assert "bad" not in capsys.readouterr().out


@pytest.mark.parametrize(("name", "bad", "message"), [
    ("max_running", "0", "max_running must be >= 1, got 0"),
    ("max_waiting", "-1", "max_waiting must be >= 1, got -1"),
    ("first_segment_chars", "-1", r"first_segment_chars must be >= 0 \(0: off\), got -1"),
    ("realtime_first_chars", "-1", "realtime_first_chars must be >= 0, got -1"),
    # (each was checked with another setting, and the message named both and neither's source)
    ("max_input_chars", "0", "max_input_chars must be >= 1, got 0"),
    ("max_body_bytes", "0", "max_body_bytes must be >= 1, got 0"),
    ("max_json_depth", "0", "max_json_depth must be >= 1, got 0"),
    ("key_max_concurrent", "0", "key_max_concurrent must be >= 1, got 0"),
])
def test_integer_settings_out_of_range_name_the_setting(name: str, bad: str, message: str) -> None:
    with pytest.raises(ValueError, match=rf"^invalid settings: {message} \(from VOXGATE_{name.upper()}\)$"):
        load_settings(env={f"VOXGATE_{name.upper()}": bad})


def test_a_limit_set_in_the_config_file_is_named_with_the_file(tmp_path: Path) -> None:
    config = tmp_path / "voxgate.toml"
    config.write_text("max_input_chars = 100\nmax_body_bytes = 0\n")
    with pytest.raises(ValueError, match=rf"^invalid settings: max_body_bytes must be >= 1, got 0 "
                                         rf"\(from max_body_bytes in {config}\)$"):
        load_settings(config, env={})

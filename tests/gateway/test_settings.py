"""Settings layering: defaults < config file < VOXGATE_* env < command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.settings import load_settings


def test_layers_and_precedence(tmp_path: Path) -> None:
    config = tmp_path / "voxgate.toml"
    config.write_text('port = 9001\nhost = "0.0.0.0"\ndefault_voice = "x"\n'
                      '[[models]]\nid = "a"\nfamily = "piper"\npath = "/tmp/a"\n')
    assert load_settings(env={}).host == "127.0.0.1"
    settings = load_settings(config, env={"VOXGATE_PORT": "9002", "VOXGATE_TTFA_TARGET_MS": "150"})
    assert (settings.host, settings.port, settings.ttfa_target_ms) == ("0.0.0.0", 9002, 150.0)
    assert settings.models[0]["id"] == "a"
    assert load_settings(config, env={"VOXGATE_PORT": "9002"}, port=9003).port == 9003


def test_bad_settings_name_the_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("prot = 1\n")
    with pytest.raises(ValueError, match="prot"):
        load_settings(config, env={})
    with pytest.raises(ValueError, match="port"):
        load_settings(env={"VOXGATE_PORT": "70000"})


@pytest.mark.parametrize("url", ["ftp://mirror.example/", "file://relative/path", "127.0.0.1:8765/", "mirror"])
def test_a_download_base_url_that_cannot_work_is_refused_at_start(url: str) -> None:
    """It was accepted, then every install answered 500 with a traceback in the log (found by a new-user
    trial); a host without http:// was read as a folder relative to the working directory."""
    with pytest.raises(ValueError, match="download_base_url.*VOXGATE_DOWNLOAD_BASE_URL"):
        load_settings(env={"VOXGATE_DOWNLOAD_BASE_URL": url})
    for good in ("https://mirror.example/hf/", "file:///srv/mirror", "/srv/mirror", "~/mirror"):
        load_settings(env={"VOXGATE_DOWNLOAD_BASE_URL": good})


def test_models_add_validates_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["models", "add", "--family", "piper", "--path", str(empty), "--data-dir", str(tmp_path)]) == 2
    assert "exactly one .onnx" in capsys.readouterr().err
    assert main(["models", "add", "--family", "nope", "--path", str(empty), "--data-dir", str(tmp_path)]) == 2


def test_models_add_takes_options_and_refuses_a_bad_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from models.piper import embedded_model_path

    base = ["models", "add", "--family", "piper", "--path", str(embedded_model_path()), "--data-dir", str(tmp_path)]
    assert main([*base, "--id", "bad", "--option", "workers=0"]) == 2
    assert capsys.readouterr().err.strip() == "error: options.workers must be an integer >= 1, got 0"
    assert main([*base, "--id", "bad", "--option", "workers"]) == 2
    assert "not KEY=VALUE" in capsys.readouterr().err
    assert main([*base, "--id", "two", "--option", "workers=2", "--option", "num_threads=1"]) == 0
    assert main(["models", "list", "--data-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "two" in listed and "bad" not in listed


def test_setting_errors_name_the_setting_and_its_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"VOXGATE_PORT must be an integer, got 'abc'"):
        load_settings(env={"VOXGATE_PORT": "abc"})
    with pytest.raises(ValueError, match=r"VOXGATE_TTFA_TARGET_MS must be a number"):
        load_settings(env={"VOXGATE_TTFA_TARGET_MS": "fast"})
    with pytest.raises(ValueError, match=r"config file '/no/such.toml' \(--config\) does not exist"):
        load_settings("/no/such.toml", env={})
    with pytest.raises(ValueError, match=r"\(VOXGATE_CONFIG\) does not exist"):
        load_settings(env={"VOXGATE_CONFIG": "/no/such.toml"})
    config = tmp_path / "types.toml"
    config.write_text('port = "abc"\n')
    with pytest.raises(ValueError, match=r"port in .*types.toml must be an integer"):
        load_settings(config, env={})
    config.write_text("port = [\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_settings(config, env={})
    config.write_text("port = 9000\n", encoding="utf-16")  # (Windows Notepad's "Unicode")
    with pytest.raises(ValueError, match=r"types.toml' \(--config\) is not UTF-8 text"):
        load_settings(config, env={})
    with pytest.raises(ValueError, match=r"host must be an address .*got '' \(from VOXGATE_HOST\)"):
        load_settings(env={"VOXGATE_HOST": ""})  # (not every interface, as uvicorn binds "")


def test_the_command_line_says_what_is_wrong_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    def voxgate(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True, text=True,
                              timeout=60, env={"PATH": "/usr/bin:/bin", **env}, cwd=Path(__file__).parents[2])

    version = voxgate("--version")
    assert version.returncode == 0 and version.stdout.startswith("voxgate "), version
    for result, needle in ((voxgate("serve", "--config", str(tmp_path / "none.toml")), "--config"),
                           (voxgate("serve", "--data-dir", str(tmp_path), VOXGATE_PORT="abc"), "VOXGATE_PORT")):
        assert result.returncode == 2 and needle in result.stderr, result
        assert "Traceback" not in result.stderr
    unknown = voxgate("models", "add", "--family", "nope", "--path", str(tmp_path), "--data-dir", str(tmp_path))
    assert unknown.returncode == 2 and "known families: piper, orpheus" in unknown.stderr


def test_security_settings_from_the_environment() -> None:
    settings = load_settings(env={"VOXGATE_ALLOWED_HOSTS": "tts.example.org, box.lan", "VOXGATE_AUTH": "required",
                                  "VOXGATE_SEND_TIMEOUT_S": "2.5", "VOXGATE_LOCAL_MODEL_ROOTS": "/models"})
    assert settings.allowed_hosts == ("tts.example.org", "box.lan") and settings.local_model_roots == ("/models",)
    assert settings.keys_required and settings.send_timeout_s == 2.5
    assert not load_settings(env={}).keys_required  # loopback: keys optional
    assert load_settings(env={}, host="0.0.0.0").keys_required
    assert not load_settings(env={}, host="::1").keys_required
    assert not load_settings(env={"VOXGATE_AUTH": "off"}, host="0.0.0.0").keys_required
    for env, name in (({"VOXGATE_AUTH": "maybe"}, "auth"), ({"VOXGATE_KEY_RATE_LIMIT": "lots"}, "rate limit"),
                      ({"VOXGATE_MAX_JSON_DEPTH": "0"}, "max_json_depth")):
        with pytest.raises(ValueError, match=name):
            load_settings(env=env)


def test_a_bad_models_entry_in_the_config_stops_serve_with_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from models.piper import embedded_model_path

    config = tmp_path / "voxgate.toml"
    config.write_text(f'[[models]]\nid = "joe2"\nfamily = "piper"\npath = "{embedded_model_path()}"\nworkers = 0\n')
    assert main(["serve", "--config", str(config), "--data-dir", str(tmp_path / "data"), "--port", "18765"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "error: [[models]] 'joe2' in the config file: options.workers must be an integer >= 1, got 0"]
    assert not (tmp_path / "data").exists()  # stopped before start-up touched the data dir


def test_devices_from_each_layer_and_bad_values_name_the_setting(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import parser, settings_from_args

    assert load_settings(env={}).devices == ("cpu",)  # the device setting alone
    assert load_settings(env={}, device="cuda:1").devices == ("cuda:1",)
    two = settings_from_args(parser().parse_args(["serve", "--devices", "cuda:0, cuda:1"]))
    assert two.devices == ("cuda:0", "cuda:1") and two.device == "cuda:0"
    assert load_settings(env={"VOXGATE_DEVICES": "cpu:0,cpu:1"}).devices == ("cpu:0", "cpu:1")
    config = tmp_path / "voxgate.toml"
    config.write_text('devices = ["cuda:2", "cuda:3"]\n')
    assert load_settings(config, env={}).devices == ("cuda:2", "cuda:3")
    for given, needle in (("cuda:x", r"devices must name cpu, cpu:N, cuda or cuda:N .*got 'cuda:x' \(from --devices\)"),
                          ("gpu0", r"got 'gpu0' \(from --devices\)"),
                          ("cuda,cuda:0", r"devices names a device twice: cuda, cuda:0 \(from --devices\)")):
        with pytest.raises(ValueError, match=needle):
            load_settings(env={}, devices=given)
    config.write_text("devices = 2\n")
    with pytest.raises(ValueError, match=r"devices in .*voxgate.toml must be a list of strings"):
        load_settings(config, env={})
    config.write_text("devices = [0, 1]\n")
    with pytest.raises(ValueError, match=r"devices in .*voxgate.toml must be a list of strings .* got \[0, 1\]"):
        load_settings(config, env={})
    assert main(["serve", "--devices", "cuda:0,cuda:0", "--data-dir", str(tmp_path / "data"), "--port", "18766"]) == 2
    assert capsys.readouterr().err.strip() == ("error: invalid settings: devices names a device twice: "
                                               "cuda:0, cuda:0 (from --devices)")
    assert not (tmp_path / "data").exists()


def test_serve_refuses_a_device_this_machine_does_not_have(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`device` is checked like `devices`; a CUDA device past the GPUs there are stops the start
    with one line (not a 503 at the first request)."""
    with pytest.raises(ValueError, match=r"device must be cpu, cpu:N, cuda or cuda:N, got 'tpu'"):
        load_settings(env={}, device="tpu")
    from gateway.cli import devices_problem

    torch = pytest.importorskip("torch")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert devices_problem(("cpu:0", "cpu:1")) is None
    assert f"device cuda:{count} is not here: this machine has {count} CUDA GPU(s)" in devices_problem(
        ("cpu", f"cuda:{count}"))
    assert main(["serve", "--devices", f"cuda:{count}", "--data-dir", str(tmp_path / "data"), "--port", "18767"]) == 2
    assert f"error: device cuda:{count} is not here" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def _voice_folder(folder: Path) -> Path:
    """A piper voice folder (links to the embedded voice's files)."""
    from models.piper import embedded_model_path

    onnx = Path(embedded_model_path())
    folder.mkdir(parents=True)
    for source in (onnx, onnx.with_name(onnx.name + ".json")):
        (folder / source.name).symlink_to(source)
    return folder


def test_a_relative_models_path_is_taken_from_the_config_files_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """As TOML users expect (and whatever directory the server starts in); stored absolute, so the
    model works for a server or command started anywhere."""
    from gateway.app import create_app
    from tests.conftest import local_client

    conf = tmp_path / "conf"
    voice = _voice_folder(conf / "voices" / "joe")
    config = conf / "voxgate.toml"
    config.write_text('[[models]]\nid = "joe2"\nfamily = "piper"\npath = "voices/joe"\n'
                      'codec_path = "~/codec"\n')  # (a *_path option too; ~ is the home folder)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # where `voices/joe` does not exist
    for given in (str(config), "../conf/voxgate.toml"):  # the config file named relative to the cwd too
        entry = load_settings(given, env={}).models[0]
        assert entry["path"] == str(voice) and entry["codec_path"] == str(Path.home() / "codec")
    config.write_text('[[models]]\nid = "joe2"\nfamily = "piper"\npath = "voices/joe"\n')
    settings = load_settings(config, env={}, data_dir=tmp_path / "data")
    with local_client(create_app(settings)) as client:
        assert client.get("/v1/models/joe2").status_code == 200
        assert client.post("/v1/models/joe2/load", json={}).json()["loaded"] is True
    assert main(["models", "list", "--data-dir", str(tmp_path / "data")]) == 0
    listed = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row for row in listed if row[0] == "joe2"][0][2] == str(voice)
    # A wrong relative path is named as resolved, from the config file's directory.
    config.write_text('[[models]]\nid = "joe3"\nfamily = "piper"\npath = "voices/nobody"\n')
    assert main(["serve", "--config", str(config), "--data-dir", str(tmp_path / "data"), "--port", "18769"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: [[models]] 'joe3' in the config file: "
                                               f"{conf / 'voices' / 'nobody'} does not exist")


def test_models_entries_given_as_settings_are_taken_from_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(env={}, models=[{"id": "a", "family": "piper", "path": "voices/a"}])
    assert settings.models[0]["path"] == str(tmp_path / "voices" / "a")


@pytest.mark.parametrize(("toml", "message"), [
    ("models = 3\n", r"models in .*voxgate.toml must be \[\[models\]\] tables \(id, family, path\), got 3"),
    ('models = ["x"]\n', r"models must be \[\[models\]\] tables \(id, family, path\), got 'x' \(from models in "),
    ('[[models]]\nid = "a"\nfamily = "piper"\npath = 3\n',
     r"\[\[models\]\] entry 'a': path must be a non-empty string \(a folder\), got 3"),
    ('[[models]]\nid = "a"\nfamily = "piper"\npath = ""\n',
     r"\[\[models\]\] entry 'a': path must be a non-empty string \(a folder\), got ''"),
])
def test_a_malformed_models_setting_is_named(tmp_path: Path, toml: str, message: str) -> None:
    config = tmp_path / "voxgate.toml"
    config.write_text(toml)
    with pytest.raises(ValueError, match=message):
        load_settings(config, env={})


def test_settings_a_new_user_got_wrong_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each was found by a new-user trial: a traceback at start (max_waiting 0, allowed_hosts of
    numbers, a data_dir that is a file), a silent surprise (an empty data_dir is the current
    directory, a rate of 0 that refuses every request) or a message naming no setting."""
    cases = [({"VOXGATE_MAX_WAITING": "0"}, r"max_waiting must be >= 1, got 0 \(from VOXGATE_MAX_WAITING\)"),
             ({"VOXGATE_KEY_RATE_LIMIT": "lots"}, r"key_rate_limit: a rate limit looks like '600/minute' or "
                                                  r"'10/second', got 'lots' \(from VOXGATE_KEY_RATE_LIMIT\)"),
             ({"VOXGATE_KEY_RATE_LIMIT": "0/minute"}, r"key_rate_limit: a rate limit allows at least one request"),
             ({"VOXGATE_LOG_LEVEL": "LOUD"}, r"log_level must be one of debug, info, warning, error, critical, "
                                             r"got 'LOUD' \(from VOXGATE_LOG_LEVEL\)"),
             ({"VOXGATE_DATA_DIR": ""}, r"data_dir must be a folder's path, got an empty one"),
             ({"VOXGATE_DATA_DIR": "/etc/passwd"}, r"data_dir must be a folder, and '/etc/passwd' is a file"),
             ({"VOXGATE_DATA_DIR": "/etc/passwd/sub"}, r"data_dir must be a folder, and '/etc/passwd' is a file: "
                                                   r"'/etc/passwd/sub'"),
             # entries that could never match, whose refusal then said to add what was there
             ({"VOXGATE_ALLOWED_ORIGINS": "team2.example"}, r"allowed_origins entries are origins, "
                                                            r"scheme://host\[:port\] .* got 'team2.example'"),
             ({"VOXGATE_CORS_ORIGINS": '["http://a.example"]'}, r"cors_origins entries are origins.* got "
                                                                r"""'\["http://a.example"\]' \(a list is comma-separated\)"""),
             # parsed as the browser guard parses them (gateway/origins.py), which would drop these
             ({"VOXGATE_ALLOWED_ORIGINS": "http://a.example:99999"}, r"allowed_origins entries are origins.* got "
                                                                     r"'http://a.example:99999'"),
             ({"VOXGATE_CORS_ORIGINS": "https://me@a.example"}, r"cors_origins entries are origins.* got "
                                                                r"'https://me@a.example'"),
             ({"VOXGATE_ALLOWED_HOSTS": "http://tts.example"}, r"allowed_hosts entries are host names without scheme, "
                                                               r"port or path .* got 'http://tts.example'")]
    for env, message in cases:
        with pytest.raises(ValueError, match=rf"^invalid settings: {message}"):
            load_settings(env=env)
    assert load_settings(env={"VOXGATE_LOG_LEVEL": "WARNING"}).log_level == "WARNING"
    fine = load_settings(env={"VOXGATE_ALLOWED_ORIGINS": "http://localhost:3000/,*", "VOXGATE_ALLOWED_HOSTS": "tts.example,[::1]"})
    assert fine.allowed_origins == ("http://localhost:3000/", "*") and fine.allowed_hosts == ("tts.example", "[::1]")
    config = tmp_path / "voxgate.toml"
    for text, message in (("allowed_hosts = [1, 2]\n", r"allowed_hosts in .* must be a list of strings"),
                          ("max_body_byte = 10\n", r"unknown setting\(s\) in .*: max_body_byte \(did you mean "
                                                    r"max_body_bytes\?\)$"),
                          ("[server]\nport = 8001\n", r"\[server\] \(settings are top-level keys"),
                          ("port = 18700.5\n", r"port in .* must be an integer, got 18700.5")):
        config.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_settings(config, env={})
    assert main(["models", "list", "--data-dir", "/etc/passwd"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: invalid settings: data_dir must be a folder, and '/etc/passwd' is a file: '/etc/passwd' "
        "(from --data-dir)"]

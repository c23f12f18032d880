"""The `voxgate` command's own help (its models commands: test_cli_models.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from gateway.cli import main


def test_checkpoint_help_says_the_default_size_and_each_familys_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["checkpoint", "random", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "tiny (the default)" in text
    assert "orpheus takes tiny and full; qwen3_tts also 0.6b and 1.7b (= full)" in text


def test_a_checkpoint_into_a_file_is_refused_in_a_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    target = tmp_path / "afile"
    target.write_text("not a folder")
    assert main(["checkpoint", "random", "--family", "orpheus", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is a file, not a folder" in err and "Traceback" not in err
    assert target.read_text() == "not a folder"


def test_a_checkpoint_that_cannot_be_written_is_refused_and_leaves_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that fills halfway (the tokenizer's write fails after the config's): one line,
    and the folder it made is gone."""
    pytest.importorskip("torch")
    from models import checkpoint

    def full_disk() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "tokenizer.json")

    monkeypatch.setattr(checkpoint, "build_tokenizer", full_disk)
    target = tmp_path / "new" / "model"
    assert main(["checkpoint", "random", "--family", "orpheus", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write the checkpoint to {target}: No space left on device") and \
        "Traceback" not in err, err
    assert not target.exists()


def test_a_seed_torch_refuses_leaves_no_partial_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--seed` past 64 bits: torch's "Overflow when unpacking long long" (naming nothing) came after
    the folders were made, and `backbone/` and `codec/` stayed, so the next run said the folder was
    not empty. The seed is checked first now, and an error torch raises removes what was made."""
    pytest.importorskip("torch")
    target = tmp_path / "model"
    assert main(["checkpoint", "random", "--family", "orpheus", "--seed", str(10 ** 20), str(target)]) == 2
    assert capsys.readouterr().err == f"error: --seed must be 0 to {2 ** 63 - 1}, got {10 ** 20}\n"
    assert not target.exists()


def test_ctrl_c_during_a_checkpoint_says_so_and_leaves_no_partial_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while a full checkpoint was written (minutes, 6.6 GB) printed a KeyboardInterrupt
    traceback and left the folder with a 2 GB `shard-1.tmp`, which the next run refused as not
    empty (found by a new-user trial). Now: one line, exit 130, and a folder the command made is
    gone; one that was there before (`--force`) stays, said to be incomplete."""
    pytest.importorskip("torch")
    from models import checkpoint

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "build_tokenizer", ctrl_c)
    target = tmp_path / "model"
    assert main(["checkpoint", "random", "--family", "orpheus", str(target)]) == 130
    assert capsys.readouterr().err == f"interrupted; removed the partial checkpoint {target}\n"
    assert not target.exists()
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    assert main(["checkpoint", "random", "--family", "orpheus", "--force", str(target)]) == 130
    assert capsys.readouterr().err == (f"interrupted; {target} holds an incomplete checkpoint now: run the same "
                                       "command again to finish it\n")
    assert (target / "notes.txt").read_text() == "mine"


def test_ctrl_c_in_any_command_is_one_line_and_130(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`voxgate models add` reads every weight file of the folder to its end (a 6.6 GB model takes a
    while); Ctrl-C there printed a KeyboardInterrupt traceback (found by a new-user trial)."""
    from models import piper

    def ctrl_c(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(piper, "validate", ctrl_c)
    assert main(["models", "add", "--family", "piper", "--path", str(tmp_path), "--data-dir",
                 str(tmp_path / "data")]) == 130
    assert capsys.readouterr().err == "interrupted\n"


@pytest.mark.parametrize("command", [["models", "list"], ["models", "install", "x"], ["models", "remove", "x"],
                                     ["keys", "list"], ["serve", "--port", "1"]])
def test_a_data_dir_that_cannot_be_made_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    """A data dir that cannot be created (in /proc here, which takes no folders, even from root;
    elsewhere a folder without write permission, a read-only disk) was a FileNotFoundError or
    PermissionError traceback from every command (found by a new-user trial)."""
    if not Path("/proc/self").is_dir():
        pytest.skip("needs Linux's /proc")
    data = Path("/proc/voxgate-test/data")
    monkeypatch.setenv("VOXGATE_DATA_DIR", str(data))
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err == (f"error: cannot make the data dir {data} (from VOXGATE_DATA_DIR): No such file or directory; "
                   "set data_dir (--data-dir or VOXGATE_DATA_DIR) to a folder this user can write\n"), err


@pytest.mark.parametrize("command", [["models", "catalog"], ["models", "list"]])
def test_a_reader_that_leaves_is_no_traceback(tmp_path: Path, command: list[str]) -> None:
    """`voxgate models catalog | head -3` printed a BrokenPipeError traceback once head had its lines
    (found by a new-user trial). The reader here is gone before the first line."""
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "gateway.cli", *command, "--data-dir", str(tmp_path / "data")],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parents[2])
    finally:
        os.close(write)
    assert done.stderr == "" and done.returncode == 141, done.stderr


def test_a_fractional_grace_is_not_cut_short_by_uvicorns(tmp_path: Path) -> None:
    """uvicorn's own timeout took int(graceful_shutdown_s): at 1.5 it cancelled the streams at 1 s, before
    the server's drain ended them, with two tracebacks in the log (found by an operator trial)."""
    from gateway.app import create_app
    from gateway.server import Server
    from gateway.settings import Settings

    server = Server(create_app(Settings(data_dir=tmp_path, graceful_shutdown_s=1.5)), Settings(data_dir=tmp_path,
                    graceful_shutdown_s=1.5))
    assert server.config.timeout_graceful_shutdown == 2 and server.grace_s == 1.5

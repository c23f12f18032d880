"""`pip install .` (not the suite's editable install) ships every module: a subpackage left
out of pyproject's package list once made `voxgate serve` fail right after the README's
install command."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "engine", "models", "webui", "static", "migrations")


def test_the_wheel_holds_every_source_file(tmp_path: Path) -> None:
    tracked = subprocess.run(["git", "ls-files", "pyproject.toml", "README.md", *PACKAGES], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    source = tmp_path / "src"  # the tracked files alone: no build/ left over from an earlier build
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("voxgate-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    tracked = [name for name in tracked if name.split("/")[0] in PACKAGES]
    missing = [f for f in tracked if f not in shipped and not f.endswith((".md", ".gitignore"))]
    assert not missing, f"not in the wheel: {missing}"

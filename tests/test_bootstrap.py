"""``scripts/bootstrap`` on a stock Debian Python: ``/usr/bin/python3`` first on the PATH and no
``uv`` anywhere on it, in a fresh copy of the repository (uv's own cache keeps the sync quick)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = Path("/usr/bin/python3")
# What uv needs to build and install the package: the rest of the repository plays no part.
PROJECT_FILES = ("pyproject.toml", "uv.lock", "README.md", "scripts", "kuitti", "clients")


@pytest.mark.sqlite_only  # touches no database: once per suite run is enough
@pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="needs the system's /usr/bin/python3")
def test_bootstrap_with_the_system_python_and_no_uv(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in PROJECT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, clone / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, clone / name)
    path = f"{SYSTEM_PYTHON.parent}:/bin"
    assert shutil.which("uv", path=path) is None, "this test needs a PATH without uv"
    env = {**os.environ, "PATH": path}
    env.pop("VIRTUAL_ENV", None)

    first = subprocess.run(
        [clone / "scripts/bootstrap"], env=env, capture_output=True, text=True, timeout=600
    )
    assert first.returncode == 0, first.stderr
    assert "installing uv" in first.stderr
    version = subprocess.run(
        [clone / ".venv/bin/kuitti", "--help"], capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0, version.stderr

    again = subprocess.run(
        [clone / "scripts/bootstrap"], env=env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr
    assert "installing uv" not in again.stderr  # the second run only syncs

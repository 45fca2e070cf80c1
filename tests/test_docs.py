"""The docs that operators rely on stay true to the code."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fastapi.routing import APIRoute

from kuitti.app import create_app
from kuitti.config import Settings

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_is_in_the_readme_table() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [
        f"KUITTI_{name.upper()}"
        for name in Settings.model_fields
        if f"| `KUITTI_{name.upper()}` |" not in readme
    ]
    assert missing == [], f"document these settings in README.md: {missing}"


def test_readme_names_the_two_commands_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "./scripts/serve" in readme
    assert "./scripts/test" in readme
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_nothing_refers_to_files_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    outside = re.compile(r"\.\./shared")
    offenders = [
        name
        for name in tracked
        if name.endswith((".py", ".md", ".html", ".toml", ".cfg")) or name.startswith("scripts/")
        if outside.search((ROOT / name).read_text(errors="replace"))
    ]
    assert offenders == []


# The numbered endpoints and spec sections of documents the reader does not have; the API is
# described in docs/api.md.
def _prose_and_code() -> list[Path]:
    """Every file a reader of the repository meets: README, docs, the package, benches, tests."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("kuitti", "bench", "tests"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return [path for path in files if path != Path(__file__).resolve()]


def test_no_numbered_endpoints_or_spec_sections() -> None:
    """The repository stands alone: its reader has neither the interface document nor the spec."""
    pattern = re.compile(r"Endpoint \d|SPEC §|\bSPEC\b")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _prose_and_code()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_api_reference_names_every_api_route(tmp_path: Path) -> None:
    api = (ROOT / "docs" / "api.md").read_text()
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'k.db'}", var_dir=tmp_path)
    routes = {
        route.path.rstrip("/")
        for route in create_app(settings).routes
        if isinstance(route, APIRoute) and route.path.startswith("/api/")
    }
    normalised = re.sub(r"<[a-z_]+>", "{}", api)
    missing = [p for p in routes if re.sub(r"\{[a-z_:]+\}", "{}", p) not in normalised]
    assert missing == []

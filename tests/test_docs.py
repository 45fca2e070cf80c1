"""The docs that operators rely on stay true to the code."""

from __future__ import annotations

from pathlib import Path

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

"""Where the package's own files live: templates (pages and e-mails) and static files (CSS,
fonts, colour profiles). Shared by the web layer, the e-mail builder and the PDF renderers."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"
STATIC_DIR = PACKAGE_DIR / "static"

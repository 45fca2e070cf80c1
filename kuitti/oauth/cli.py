"""``kuitti keys …`` (built by the OAuth work)."""

from __future__ import annotations

import typer

keys_app = typer.Typer(help="Token signing keys.", no_args_is_help=True)

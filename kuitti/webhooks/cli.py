"""``kuitti webhooks …`` (built by the webhooks work)."""

from __future__ import annotations

import typer

webhooks_app = typer.Typer(help="Webhook deliveries: list and replay.", no_args_is_help=True)

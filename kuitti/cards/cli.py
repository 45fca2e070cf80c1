"""``kuitti card …`` and ``kuitti receipts …`` (built by the card-linking work)."""

from __future__ import annotations

import typer

card_app = typer.Typer(help="Cards: enrol pilot cards.", no_args_is_help=True)
receipts_app = typer.Typer(help="Receipts: explain matching.", no_args_is_help=True)

"""``kuitti receipts …``: ``validate`` receipt files as a post would (offline by default, for a
merchant's CI), ``purge-sandbox`` (delete expired sandbox receipts now) and ``explain``
card-linking (defined with the cards).

``validate`` runs the dry run of ``POST /api/v1/receipts/validate`` on each file. Offline it
needs no database and no server; namespace ownership and RECEIPT_ID use are then skipped, and
the output says so. With ``--partner`` it reads the configured database as that partner and
runs those checks too. Exit status: 0 when every file is valid, 1 when one is not, 2 for a
mistake in the command itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy.orm import Session

from kuitti.cards.cli import explain
from kuitti.cli_helpers import JsonFlag, emit, fail, open_services, settings_or_exit
from kuitti.config import Settings
from kuitti.errors import InvalidRequest
from kuitti.models import Partner, PartnerRole
from kuitti.partners.service import PartnerInputError, get_partner
from kuitti.posting.checks import dry_run
from kuitti.receipts.sandbox import purge_sandbox_receipts

receipts_app = typer.Typer(
    help="Receipts: validate files offline, explain card-linking.", no_args_is_help=True
)
receipts_app.command("explain")(explain)

SKIPPED_OFFLINE = (
    "namespace ownership and RECEIPT_ID use were not checked: they need the database "
    "(pass --partner PARTNER_ID where KUITTI_DATABASE_URL is set)"
)


@receipts_app.command("validate")
def validate(
    files: Annotated[list[Path], typer.Argument(help="Receipt bodies as a till would post them.")],
    partner_id: Annotated[
        str | None,
        typer.Option(
            "--partner", help="Check as this partner against the configured database as well."
        ),
    ] = None,
    attachments: Annotated[
        bool, typer.Option(help="Offline: the partner has premium attachments enabled.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Check receipt files as posting them would, storing and sending nothing."""
    bodies = {}
    for path in files:
        try:
            bodies[str(path)] = path.read_bytes()
        except OSError as exc:
            fail(f"{path}: {exc.strerror or exc}")
    if partner_id is None:
        offline = Partner(
            name="offline", roles=[PartnerRole.MERCHANT.value], attachments_enabled=attachments
        )
        settings = settings_or_exit()
        results = [_check(name, body, offline, settings, None) for name, body in bodies.items()]
    else:
        services = open_services()
        try:
            with services.db.session(write=False) as session:
                partner = get_partner(session, partner_id)
                results = [
                    _check(name, body, partner, services.settings, session)
                    for name, body in bodies.items()
                ]
        except PartnerInputError as exc:
            fail(str(exc))
    valid = all(r["valid"] for r in results)
    data: dict[str, Any] = {
        "valid": valid,
        "database_checks": partner_id is not None,
        "skipped": [] if partner_id is not None else [SKIPPED_OFFLINE],
        "files": results,
    }
    emit(data, as_json, _human(data))
    if not valid:
        raise typer.Exit(1)


def _check(
    name: str, body: bytes, partner: Partner, settings: Settings, session: Session | None
) -> dict[str, Any]:
    try:
        warnings = dry_run(body, partner, settings, session)
    except InvalidRequest as exc:
        errors = [e.as_json() for e in exc.details()]
        return {"file": name, "valid": False, "errors": errors, "warnings": []}
    return {
        "file": name,
        "valid": True,
        "errors": [],
        "warnings": [w.as_json() for w in warnings],
    }


def _human(data: dict[str, Any]) -> str:
    lines = []
    for item in data["files"]:
        errors = item["errors"]
        lines.append(f"{item['file']}: {'valid' if item['valid'] else f'{len(errors)} error(s)'}")
        lines += [f"  error {e['error']}: {e['decription']}" for e in errors]
        lines += [f"  warning {w['code']} at {w['path']}: {w['message']}" for w in item["warnings"]]
    lines += [f"note: {note}" for note in data["skipped"]]
    return "\n".join(lines)


@receipts_app.command("purge-sandbox")
def purge_sandbox(as_json: JsonFlag = False) -> None:
    """Delete sandbox receipts older than KUITTI_SANDBOX_RETENTION_DAYS now (the worker does it
    every hour)."""
    services = open_services()
    deleted = purge_sandbox_receipts(services)
    days = services.settings.sandbox_retention_days
    data = {"deleted": deleted, "retention_days": days}
    emit(data, as_json, f"deleted {deleted} sandbox receipt(s) older than {days} day(s)")

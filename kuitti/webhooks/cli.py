"""``kuitti webhooks list`` and ``kuitti webhooks replay``: the operator's delivery log."""

from __future__ import annotations

import uuid
from typing import Annotated

import typer

from kuitti.cli_helpers import JsonFlag, emit, fail, open_services
from kuitti.models.outbox import DeliveryStatus
from kuitti.webhooks.service import UnknownDelivery, delivery_json, list_deliveries, replay

webhooks_app = typer.Typer(help="Webhook deliveries: list and replay.", no_args_is_help=True)


def _uuid(value: str, what: str) -> uuid.UUID:

    try:
        return uuid.UUID(value)
    except ValueError:
        fail(f"{what} {value!r} is not a UUID")


@webhooks_app.command("list")
def list_command(
    partner: Annotated[str | None, typer.Option(help="Only this partner's deliveries.")] = None,
    status: Annotated[
        DeliveryStatus | None, typer.Option(help="pending, delivered or failed.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 100,
    as_json: JsonFlag = False,
) -> None:
    """The delivery log: each delivery with its attempts (status code, latency, error)."""

    partner_id = _uuid(partner, "partner") if partner else None
    services = open_services()
    with services.db.session(write=False) as session:
        rows = [
            delivery_json(d)
            for d in list_deliveries(session, partner_id=partner_id, status=status, limit=limit)
        ]
    lines = []
    for d in rows:
        last = d["attempts"][-1] if d["attempts"] else None
        result = ""
        if last is not None:
            result = f"  last: {last['status_code'] or '-'} {last['latency_ms']} ms"
            if last["error"]:
                result += f" {last['error']}"
        due = f"  next: {d['next_attempt_at']}" if d["next_attempt_at"] else ""
        lines.append(
            f"{d['delivery_id']}  {d['notification_type']:<27} {d['status']:<9} "
            f"attempts: {len(d['attempts'])}{due}{result}"
        )
    emit({"deliveries": rows}, as_json, "\n".join(lines) or "no deliveries")


@webhooks_app.command("replay")
def replay_command(
    delivery_id: Annotated[str, typer.Argument(help="The delivery (its webhook-id).")],
    as_json: JsonFlag = False,
) -> None:
    """Send a delivery again now, with the same webhook-id and a fresh retry schedule."""

    target = _uuid(delivery_id, "delivery")
    services = open_services()
    try:
        with services.db.session() as session:
            data = delivery_json(replay(session, target, now=services.clock.now()))
    except UnknownDelivery as exc:
        fail(str(exc))
    emit(data, as_json, f"delivery {data['delivery_id']} is pending again and will be sent now")

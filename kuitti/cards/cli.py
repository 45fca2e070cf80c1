"""``kuitti card …`` (enrol pilot cards, run the deferred re-check) and ``kuitti receipts
explain`` (why a receipt's card payments matched, or why they wait; listed in the
``receipts`` group of ``kuitti/receipts/cli.py``)."""

from __future__ import annotations

import uuid
from typing import Annotated

import typer

from kuitti.cards import service
from kuitti.cards.explain import explain_receipt
from kuitti.cards.settler import settle_due_matches
from kuitti.cli_helpers import JsonFlag, emit, fail, open_services
from kuitti.errors import KuittiError
from kuitti.models import Partner, PartnerRole, Receipt
from kuitti.receipts.relations import relations, relations_json

card_app = typer.Typer(help="Cards: enrol pilot cards.", no_args_is_help=True)


@card_app.command("enroll")
def enroll(
    partner: Annotated[str, typer.Option(help="Issuer or pilot bank partner id.")],
    partner_card_id: Annotated[str, typer.Option(help="The bank's own id for the card.")],
    masked_pan: Annotated[
        str, typer.Option(help="First six and last four digits, e.g. 415301******1234.")
    ],
    exp_date: Annotated[str, typer.Option(help="2028-12-31T23:59:59Z or YYYY-MM.")],
    name: Annotated[str | None, typer.Option(help="Card holder name.")] = None,
    pilot: Annotated[
        bool, typer.Option("--pilot", help="A pilot card (bank_pilot partner).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Enrol a card by hand (pilot cards: matched on their masked PAN alone)."""

    services = open_services()
    try:
        partner_id = uuid.UUID(partner)
    except ValueError:
        fail("--partner must be a partner id (see 'kuitti partner list')")
    try:
        request = service.check_card_request(partner_card_id, masked_pan, exp_date, name)
        with services.db.session() as session:
            issuer = session.get(Partner, partner_id)
            if issuer is None:
                fail("no partner with that id")
            role = PartnerRole.BANK_PILOT if pilot else PartnerRole.CARD_ISSUER
            if not issuer.has_role(role):
                fail(f"the partner needs the {role.value} role for this card")
            card, _created = service.enroll_card(
                session, issuer, request, now=services.clock.now(), pilot=pilot
            )
            data = {"service_card_id": str(card.id), "partner_card_id": card.partner_card_id}
    except KuittiError as exc:
        fail("; ".join(d.description for d in exc.details()))
    finally:
        services.db.dispose()
    emit(data, as_json, f"enrolled card {data['service_card_id']} ({data['partner_card_id']})")


@card_app.command("settle")
def settle() -> None:
    """Run the deferred re-check once (the delivery worker also runs it)."""

    services = open_services()
    try:
        count = settle_due_matches(services)
    finally:
        services.db.dispose()
    typer.echo(f"re-checked {count} waiting card payment(s)")


def explain(
    receipt_id: Annotated[str, typer.Argument(help="The receipt id.")],
    as_json: JsonFlag = False,
) -> None:
    """Why each CARD payment of a receipt matched (keys, window, transaction), or why it
    waits (no candidate, which cards tied, the auth window); and a return's original or a
    purchase's returns."""

    services = open_services()
    try:
        try:
            wanted = uuid.UUID(receipt_id)
        except ValueError:
            fail("not a receipt id")
        with services.db.session(write=False) as session:
            receipt = session.get(Receipt, wanted)
            if receipt is None:
                fail("no such receipt")
            data = explain_receipt(session, wanted, services.clock.now())
            data.update(relations_json(relations(session, receipt)))
    finally:
        services.db.dispose()
    emit(data, as_json, _human(data))


def _human(data: dict[str, object]) -> str:
    payments = data["card_payments"]
    assert isinstance(payments, list)
    lines = [f"receipt {data['receipt_id']}"]
    original = data.get("original")
    if isinstance(original, dict):
        lines.append(f"  return of receipt {_related(original)}")
    returned = data.get("returns")
    assert isinstance(returned, list)
    lines.extend(f"  returned by receipt {_related(item)}" for item in returned)
    if not payments:
        lines.append("  no CARD payments: card-linking has nothing to match")
    for item in payments:
        lines.append(
            f"  payment {item['payment_index']}: {item['status']} — MID {item['merchant_id']}, "
            f"amount {item['amount']} {item['currency']}, paid {item['paid_at']}, "
            f"PAN {item['masked_pan']}"
        )
        match = item.get("match")
        if match:
            lines.append(
                f"    matched card {match['service_card_id']} ({match['partner_card_id']}) "
                f"on {', '.join(match['keys'])}; window {match['window']}"
            )
            if match.get("transaction_id"):
                lines.append(
                    f"    transaction {match['transaction_id']} ({match['transaction_type']} at "
                    f"{match['transaction_time']}), purchase {match['purchase_id']}"
                )
            lines.append(f"    delivered {match['delivered']}")
        else:
            reason = item["reason"]
            lines.append(f"    {reason.get('why')}: {reason.get('detail')}")
            for candidate in reason.get("candidates", []):
                lines.append(
                    f"    candidate card {candidate['service_card_id']} "
                    f"({candidate['kind']}; keys {', '.join(candidate['keys'])})"
                )
            if reason.get("settle_at"):
                lines.append(f"    re-checked at {reason['settle_at']}")
    return "\n".join(lines)


def _related(item: dict[str, str]) -> str:
    return f"{item['receipt_id']} ({item['receipt_number']}, {item['receipt_time']})"

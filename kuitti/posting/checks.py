"""Every check a receipt post makes before it stores anything, shared by the post itself
(``service.create_receipt``) and the dry run (``dry_run``: ``POST /api/v1/receipts/validate``
and ``kuitti receipts validate``), so the two can never disagree about what is refused.

Two stages: ``check_body`` needs only the body and the partner's settings (it runs offline
too); ``check_tokens`` needs the database (namespace ownership, RECEIPT_ID use). Then
``advisories`` lists what is allowed but probably a mistake: warnings, never errors.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from babel.core import get_global
from babel.numbers import get_currency_precision
from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti import links, locks
from kuitti.config import Settings
from kuitti.errors import ErrorDetail, InvalidRequest
from kuitti.inputs import json_path
from kuitti.models import IdPolicy, Partner, Receipt, ReceiptLink
from kuitti.partners.idpolicy import identifier_problem
from kuitti.partners.keys import KeyHolder
from kuitti.receipts.readers import Reader, may_read
from kuitti.receipts.validation import ReceiptRequest, Token, TokenType, parse_receipt_request


def check_body(body: bytes, partner: Partner | KeyHolder) -> ReceiptRequest:
    """The body's JSON, shape, rules and token syntax, for this partner (``InvalidRequest``)."""
    request = parse_receipt_request(body, attachments_enabled=partner.attachments_enabled)
    refuse_weak_identifiers(request.tokens, partner.id_policies)
    return request


@dataclass
class LinkPlan:
    """A RECEIPT_ID token of the request and the receipt that already holds it, if any."""

    token: Token
    url: str
    existing_receipt: uuid.UUID | None = None
    existing_hash: str | None = field(default=None)


@dataclass(frozen=True)
class TokenCheck:
    plans: list[LinkPlan]
    # An unchanged resend of a receipt this partner posted: the post answers with that one.
    resend_of: uuid.UUID | None


def check_tokens(
    session: Session,
    settings: Settings,
    partner: Partner | KeyHolder,
    request: ReceiptRequest,
    *,
    lock: bool,
) -> TokenCheck:
    """Namespace ownership, then RECEIPT_ID use (``InvalidRequest``).

    ``lock``: take the ``receipt-link`` lock of each identifier, which a post that will insert
    the links needs until it commits; a dry run reads without it."""
    plans = _plan_links(session, settings, partner, request.tokens, lock=lock)
    existing = {p.existing_receipt for p in plans if p.existing_receipt is not None}
    if not existing:
        return TokenCheck(plans, None)
    return TokenCheck(plans, _unchanged_resend(session, partner, plans, request.document_hash))


def _plan_links(
    session: Session,
    settings: Settings,
    partner: Partner | KeyHolder,
    tokens: list[Token],
    *,
    lock: bool,
) -> list[LinkPlan]:
    owned = set(partner.namespace_names)
    errors: list[ErrorDetail] = []
    plans: list[LinkPlan] = []
    for index, token in enumerate(tokens):
        if token.type is not TokenType.RECEIPT_ID:
            continue
        assert token.namespace is not None
        if token.namespace not in owned:
            errors.append(
                ErrorDetail(
                    "unknown_namespace",
                    f"attributes.tokens[{index}].namespace: {token.namespace!r} is not one of "
                    "your namespaces.",
                )
            )
            continue
        if lock:
            # Serialise writers of the same identifier; the primary key is the final guard.
            locks.acquire(session, "receipt-link", token.namespace, token.value)
        plan = LinkPlan(token, links.namespace_link(settings, token.namespace, token.value))
        link = session.get(ReceiptLink, (token.namespace, token.value))
        if link is not None:
            plan.existing_receipt = link.receipt_id
            plan.existing_hash = session.scalar(
                select(Receipt.document_hash).where(Receipt.id == link.receipt_id)
            )
        plans.append(plan)
    if errors:
        raise InvalidRequest(errors)
    return plans


def _unchanged_resend(
    session: Session, partner: Partner | KeyHolder, plans: list[LinkPlan], document_hash: str
) -> uuid.UUID:
    """The receipt a POS resends unchanged under its RECEIPT_IDs; anything else under a used
    identifier is ``duplicate_receipt_id``."""
    originals = {p.existing_receipt for p in plans}
    receipt_id = next(iter(originals)) if len(originals) == 1 else None
    unchanged = (
        receipt_id is not None
        and all(p.existing_hash == document_hash for p in plans)
        and may_read(session, Reader(partner.id, sandbox=partner.sandbox), receipt_id)
    )
    if not unchanged:
        raise InvalidRequest(
            [
                ErrorDetail(
                    "duplicate_receipt_id",
                    f"attributes.tokens: receipt identifier {p.token.value!r} is already used "
                    f"in namespace {p.token.namespace!r} by a different receipt.",
                )
                for p in plans
                if p.existing_receipt is not None
            ]
        )
    assert receipt_id is not None
    return receipt_id


def dry_run(
    body: bytes, partner: Partner | KeyHolder, settings: Settings, session: Session | None
) -> list[Advisory]:
    """Every check of a post of ``body`` by ``partner``, storing nothing and taking no lock:
    the warnings, or ``InvalidRequest`` with the post's errors. Without a ``session`` (offline)
    the database checks, namespace ownership and RECEIPT_ID use, are skipped."""
    request = check_body(body, partner)
    found: list[Advisory] = []
    if session is not None:
        checked = check_tokens(session, settings, partner, request, lock=False)
        if checked.resend_of is not None:
            found.append(
                Advisory(
                    "unchanged_resend",
                    "attributes.tokens",
                    f"this receipt is already stored under its RECEIPT_ID ({checked.resend_of}); "
                    "posting it again answers with that receipt and stores nothing new.",
                )
            )
    return found + advisories(request)


# -- advisories -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Advisory:
    """Allowed but probably a mistake; the shape is documented in docs/api.md."""

    code: str
    path: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"code": self.code, "path": self.path, "message": self.message}


def advisories(request: ReceiptRequest) -> list[Advisory]:
    """The advisory rules for a body ``check_body`` accepted: what a till most likely did not
    mean, in document order. Paths are the body's own, as errors' are."""
    # The token form (``posted``) nests the document under "receipt", and so do its paths.
    prefix: tuple[str, ...] = ("receipt",) if request.posted is not None else ()
    doc = request.receipt
    found: list[Advisory] = []

    def warn(code: str, parts: tuple[str | int, ...], message: str) -> None:
        found.append(Advisory(code, json_path((*prefix, *parts)), message))

    purchase = doc.kind == "PURCHASE"
    if purchase and doc.totalPriceIncVAT < 0:
        warn(
            "negative_total",
            ("totalPriceIncVAT",),
            "a PURCHASE totals below zero; a refund is usually sent as a RETURN receipt.",
        )
    digits = int(get_currency_precision(doc.currencyISOCode))
    for i, product in enumerate(doc.products):
        if purchase and Decimal(product["quantity"]) < 0:
            warn(
                "negative_quantity",
                ("products", i, "quantity"),
                "a negative quantity on a PURCHASE; a returned item belongs on a RETURN receipt.",
            )
        for j, discount in enumerate(product.get("discounts") or ()):
            if discount.amount < 0:
                warn(
                    "negative_discount",
                    ("products", i, "discounts", j, "amount"),
                    "a negative discount raises the price; discounts are positive amounts.",
                )
        unit_price = product.get("unitPriceIncVATDecimal")
        if unit_price is not None and _decimals(unit_price) > digits:
            warn(
                "sub_unit_precision",
                ("products", i, "unitPriceIncVATDecimal"),
                f"{_decimals(unit_price)} decimals, but {doc.currencyISOCode} has {digits}: "
                "the amount cannot be paid exactly.",
            )
    step = _cash_rounding(doc.currencyISOCode)
    for i, payment in enumerate(doc.payments or ()):
        if step > 1 and payment.type == "CASH" and payment.amount % step:
            warn(
                "cash_rounding",
                ("payments", i, "amount"),
                f"{doc.currencyISOCode} cash is paid in steps of {step} minor units; this cash "
                "amount is not one.",
            )
    return found


def _decimals(text: str) -> int:
    return len(text.partition(".")[2])


def _cash_rounding(currency: str) -> int:
    """The smallest step of cash payments in minor units (5 for CHF, 50 for DKK; 1 when the
    currency has no cash rounding), from the Unicode CLDR data that Babel ships."""
    fractions: Mapping[str, tuple[int, int, int, int]] = get_global("currency_fractions")
    digits, _rounding, cash_digits, cash_rounding = fractions.get(currency, fractions["DEFAULT"])
    if not cash_rounding:
        return 1
    return int(cash_rounding * 10 ** (digits - cash_digits))


def refuse_weak_identifiers(tokens: list[Token], policies: Iterable[IdPolicy]) -> None:
    """``InvalidRequest`` (``invalid_token``, naming each token's path) for every RECEIPT_ID
    token whose identifier breaks its namespace's policy."""
    by_namespace = {policy.namespace: policy for policy in policies}
    if not by_namespace:
        return
    errors = []
    for index, token in enumerate(tokens):
        policy = by_namespace.get(token.namespace or "")
        if token.type is not TokenType.RECEIPT_ID or policy is None:
            continue
        problem = identifier_problem(policy, token.value)
        if problem is not None:
            errors.append(
                ErrorDetail("invalid_token", f"attributes.tokens[{index}].value: {problem}")
            )
    if errors:
        raise InvalidRequest(errors)

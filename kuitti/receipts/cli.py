"""``kuitti receipts …``: ``validate`` receipt files as a post would (offline by default, for a
merchant's CI), ``purge-sandbox`` (delete expired sandbox receipts now), ``explain``
card-linking (defined with the cards), and the signatures (``kuitti.signatures``): ``keys
rotate`` and ``keys list``, ``sign-existing`` (the backfill) and ``verify`` saved receipts.

``validate`` runs the dry run of ``POST /api/v1/receipts/validate`` on each file. Offline it
needs no database and no server; namespace ownership and RECEIPT_ID use are then skipped, and
the output says so. With ``--partner`` it reads the configured database as that partner and
runs those checks too. Exit status: 0 when every file is valid, 1 when one is not, 2 for a
mistake in the command itself.
"""

from __future__ import annotations

import io
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import orjson
import pypdf
import typer
from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti import signatures
from kuitti.cards.cli import explain
from kuitti.cli_helpers import JsonFlag, emit, fail, open_services, settings_or_exit
from kuitti.clock import iso_utc
from kuitti.config import Settings
from kuitti.errors import InvalidRequest
from kuitti.models import Partner, PartnerRole, ReceiptSigningKey
from kuitti.partners.service import PartnerInputError, get_partner
from kuitti.posting.checks import dry_run
from kuitti.receipts import log
from kuitti.receipts.sandbox import purge_sandbox_receipts
from kuitti.security import SecretBox

receipts_app = typer.Typer(
    help="Receipts: validate files offline, explain card-linking, sign and verify.",
    no_args_is_help=True,
)
receipts_app.command("explain")(explain)
keys_app = typer.Typer(help="Receipt-signing keys.", no_args_is_help=True)
receipts_app.add_typer(keys_app, name="keys")
log_app = typer.Typer(help="The receipt log: signed tree heads.", no_args_is_help=True)
receipts_app.add_typer(log_app, name="log")

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


@keys_app.command("rotate")
def rotate_keys(as_json: JsonFlag = False) -> None:
    """Make a new receipt-signing key. New receipts are signed with it (every instance within a
    minute); the keys that signed until now are retired and stay published for eight years."""
    services = open_services()
    box = SecretBox(services.settings.resolved_secret_key)
    with services.db.session() as session:
        row = signatures.rotate(session, box, now=services.clock.now())
        data = {"kid": row.kid, "algorithm": row.algorithm}
    emit(data, as_json, f"new receipt-signing key {row.kid} ({row.algorithm})")


@keys_app.command("list")
def list_keys(as_json: JsonFlag = False) -> None:
    """List the receipt-signing keys, newest first: the one that signs, then the retired ones."""
    services = open_services()
    with services.db.session(write=False) as session:
        rows = [
            {
                "kid": r.kid,
                "algorithm": r.algorithm,
                "status": "signing" if r.retired_at is None else "retired",
                "created_at": iso_utc(r.created_at),
                "retired_at": iso_utc(r.retired_at) if r.retired_at else None,
                "published_until": iso_utc(r.published_until) if r.published_until else None,
            }
            for r in session.scalars(
                select(ReceiptSigningKey).order_by(
                    ReceiptSigningKey.created_at.desc(), ReceiptSigningKey.kid
                )
            )
        ]
    human = "\n".join(
        f"{r['kid']}  {r['algorithm']}  {r['status']}  {r['created_at']}" for r in rows
    )
    emit({"keys": rows}, as_json, human or "no keys yet (one is made on first use)")


@receipts_app.command("sign-existing")
def sign_existing(
    batch: Annotated[int, typer.Option(min=1, help="Receipts signed per transaction.")] = 500,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Stop after this many (default: all).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sign the stored receipts that have no signature yet (stored before signing began).
    Resumable: stopped at any point, run it again and it goes on where it stopped."""
    services = open_services()
    count = signatures.sign_existing(
        services.db, services.settings, now=services.clock.now(), batch=batch, limit=limit
    )
    emit({"signed": count}, as_json, f"signed {count} receipt(s)")


@log_app.command("seal")
def seal_log(as_json: JsonFlag = False) -> None:
    """Sign a tree head over the receipt log's batches that no head holds yet, now (the worker
    does it every KUITTI_RECEIPT_LOG_SEAL_SECONDS)."""
    services = open_services()
    head = log.seal_now(services.db, services.settings, now=services.clock.now())
    if head is None:
        emit({"head": None}, as_json, "nothing to seal: every batch is in a tree head")
        return
    human = f"tree head {head['seq']}: {head['tree_size']} batch(es), {head['receipts']} receipt(s)"
    emit({"head": head}, as_json, human)


@receipts_app.command("verify")
def verify(
    files: Annotated[
        list[Path],
        typer.Argument(help="Saved signed receipts (signed_json) or receipt PDFs (service_pdf)."),
    ],
    keys: Annotated[
        str | None,
        typer.Option(
            "--keys",
            help="The published keys: a JWKS file, or its URL. Default: the configured "
            f"service's {signatures.JWKS_PATH}.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Check saved receipts against the published receipt-signing keys, and the proof each
    carries that it is in the receipt log: exit status 0 when every file is genuine, 1 when one
    is not (tampered, a false proof, an unknown key, not a signed receipt)."""
    key_set = _key_set(keys)
    results = []
    for path in files:
        try:
            saved = path.read_bytes()
        except OSError as exc:
            fail(f"{path}: {exc.strerror or exc}")
        attached = _attached(saved)
        if attached is None:
            result = signatures.Verdict(signatures.MALFORMED, _NO_ATTACHMENT).as_json()
        else:
            result = log.check_saved(attached, key_set)
        results.append({"file": str(path), **result})
    valid = all(r["valid"] for r in results)
    human = "\n".join(
        f"{r['file']}: {r['status']}"
        + (
            f" (receipt {r['receipt_id']} signed by {r['issuer']}, key {r['kid']}"
            + f", {r['key_status']}; {log.described(r)})"
            if r["valid"]
            else f": {r['reason']}"
        )
        for r in results
    )
    emit({"valid": valid, "files": results}, as_json, human)
    if not valid:
        raise typer.Exit(1)


_NO_ATTACHMENT = f"a PDF without a signed receipt attached ({signatures.SIGNED_FILE})"


def _attached(saved: bytes) -> bytes | None:
    """The saved receipt in ``saved``: itself, or a receipt PDF's ``SIGNED_FILE`` attachment
    (None when the PDF has none). Here, not in ``kuitti.signatures``: reading PDFs costs every
    server process a third of a second at start."""
    if not saved.startswith(b"%PDF-"):
        return saved
    try:
        attached = pypdf.PdfReader(io.BytesIO(saved)).attachments.get(signatures.SIGNED_FILE)
    except (pypdf.errors.PyPdfError, ValueError, KeyError):
        return None
    return attached[0] if attached else None


def _key_set(keys: str | None) -> dict[str, Any]:
    """The JWKS from a file or a URL (the configured service's when ``keys`` is None)."""
    if keys is None:
        keys = settings_or_exit().issuer + signatures.JWKS_PATH
    try:
        if keys.startswith(("https://", "http://")):
            with urllib.request.urlopen(keys, timeout=30) as answer:  # noqa: S310  (http(s) only)
                raw = answer.read()
        else:
            raw = Path(keys).read_bytes()
        data = orjson.loads(raw)
    except (OSError, orjson.JSONDecodeError) as exc:
        fail(f"could not read the keys from {keys}: {exc}")
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        fail(f"{keys} is not a JWKS (an object with a list of keys)")
    return data

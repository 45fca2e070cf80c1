"""``kuitti keys rotate`` and ``kuitti keys list``: the JWT signing keys."""

from __future__ import annotations

import typer
from sqlalchemy import select

from kuitti.cli_helpers import JsonFlag, emit, open_services
from kuitti.clock import iso_utc
from kuitti.models import SigningKey
from kuitti.oauth import keys
from kuitti.security import SecretBox

keys_app = typer.Typer(help="Token signing keys.", no_args_is_help=True)


@keys_app.command("rotate")
def rotate(as_json: JsonFlag = False) -> None:
    """Make a new signing key. New tokens are signed with it; older keys stay in the JWKS and
    keep verifying the tokens they signed."""

    services = open_services()
    box = SecretBox(services.settings.resolved_secret_key)
    with services.db.session() as session:
        row = keys.create_key(session, box, now=services.clock.now())
        total = len(list(session.scalars(select(SigningKey.kid))))
        data = {"kid": row.kid, "algorithm": row.algorithm, "keys": total}
    emit(data, as_json, f"new signing key {row.kid} ({row.algorithm}); {total} keys verify")


@keys_app.command("list")
def list_keys(as_json: JsonFlag = False) -> None:
    """List the signing keys, newest (the one that signs) first."""

    services = open_services()
    with services.db.session(write=False) as session:
        rows = [
            {"kid": r.kid, "algorithm": r.algorithm, "created_at": iso_utc(r.created_at)}
            for r in session.scalars(
                select(SigningKey).order_by(SigningKey.created_at.desc(), SigningKey.kid)
            )
        ]
    human = "\n".join(f"{r['kid']}  {r['algorithm']}  {r['created_at']}" for r in rows)
    emit({"keys": rows}, as_json, human or "no keys yet (one is made on first use)")

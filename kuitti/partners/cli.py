"""``kuitti partner …``: create, list, show, change, rotate the secrets of, disable and enable
partners.

Secrets are printed once (at creation and on rotation) and stored only as digests, or sealed for
the webhook key, which signing needs. A rotated secret and a disabled partner are refused by the
very next request on every instance: API keys are looked up in the database on each request,
never cached in a process.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kuitti.cli_helpers import JsonFlag, emit, fail, open_services
from kuitti.models import PartnerRole
from kuitti.partners import service as partners
from kuitti.security import SecretBox

partner_app = typer.Typer(
    help="Partners: merchants, apps, card issuers, pilot banks.", no_args_is_help=True
)

PartnerId = Annotated[str, typer.Argument(help="The partner's id (see 'kuitti partner list').")]


def _human(data: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in data.items() if v is not None)


@partner_app.command("create")
def partner_create(
    name: Annotated[str, typer.Option(help="Partner name shown to users.")],
    role: Annotated[
        list[PartnerRole], typer.Option(help="merchant, app, card_issuer, bank_pilot.")
    ],
    namespace: Annotated[list[str] | None, typer.Option(help="Receipt-link namespace.")] = None,
    redirect_uri: Annotated[list[str] | None, typer.Option(help="OAuth redirect URI.")] = None,
    webhook_url: Annotated[str | None, typer.Option(help="Where webhooks are sent.")] = None,
    attachments: Annotated[bool, typer.Option(help="Enable premium attachments.")] = False,
    iban: Annotated[str | None, typer.Option(help="Seller bank account for Finvoice.")] = None,
    bic: Annotated[str | None, typer.Option(help="BIC of that account.")] = None,
    public_client: Annotated[
        bool, typer.Option(help="An app that cannot keep a secret (PKCE required).")
    ] = False,
    sandbox: Annotated[
        bool,
        typer.Option(
            help="A test partner: kt_test_ keys; what it posts never reaches a person "
            "(docs/sandbox.md)."
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Create a partner; its secrets are printed once."""
    try:
        services = open_services()
        with services.db.session() as session:
            box = SecretBox(services.settings.resolved_secret_key)
            created = partners.create_partner(
                session,
                box,
                name=name,
                roles=role,
                now=services.clock.now(),
                namespaces=namespace or [],
                redirect_uris=redirect_uri or [],
                webhook_url=webhook_url,
                attachments=attachments,
                iban=iban,
                bic=bic,
                public_client=public_client,
                allow_insecure_webhooks=services.settings.webhook_allow_insecure,
                sandbox=sandbox,
            )
            data = created.as_json()
    except partners.PartnerInputError as exc:
        fail(str(exc))
    emit(data, as_json, _human(data) + "\n(secrets are shown only now)")


@partner_app.command("list")
def partner_list(as_json: JsonFlag = False) -> None:
    """List partners (no secrets)."""
    services = open_services()
    with services.db.session(write=False) as session:
        rows = [partners.partner_summary(p) for p in partners.list_partners(session)]
    human = "\n".join(
        f"{p['partner_id']}  {p['name']}  {','.join(p['roles'])}"
        + ("  (sandbox)" if p["sandbox"] else "")
        + ("  (disabled)" if p["disabled"] else "")
        for p in rows
    )
    emit({"partners": rows}, as_json, human or "no partners")


@partner_app.command("show")
def partner_show(partner_id: PartnerId, as_json: JsonFlag = False) -> None:
    """Show one partner as 'partner list' does (no secrets)."""
    services = open_services()
    try:
        with services.db.session(write=False) as session:
            data = partners.partner_summary(partners.get_partner(session, partner_id))
    except partners.PartnerInputError as exc:
        fail(str(exc))
    emit(data, as_json, _human(data))


@partner_app.command("update")
def partner_update(
    partner_id: PartnerId,
    name: Annotated[str | None, typer.Option(help="New name shown to users.")] = None,
    webhook_url: Annotated[
        str | None, typer.Option(help="New webhook URL (the webhook key stays).")
    ] = None,
    iban: Annotated[str | None, typer.Option(help="Seller bank account for Finvoice.")] = None,
    bic: Annotated[str | None, typer.Option(help="BIC of that account.")] = None,
    add_redirect_uri: Annotated[
        list[str] | None, typer.Option(help="Add an OAuth redirect URI.")
    ] = None,
    remove_redirect_uri: Annotated[
        list[str] | None, typer.Option(help="Remove an OAuth redirect URI.")
    ] = None,
    attachments: Annotated[
        bool | None, typer.Option("--attachments/--no-attachments", help="Premium attachments.")
    ] = None,
    id_policy: Annotated[
        list[str] | None,
        typer.Option(
            help="NAMESPACE:min-length=N,alphabet=A (digits, hex, base32, alnum, base64url; "
            "either part may be left out): receipt identifiers that break it are refused with "
            "invalid_token. NAMESPACE:none removes it."
        ),
    ] = None,
    retention_days: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Days its receipts are kept after their receipt time, where the law or its "
            "contract differs from KUITTI_RECEIPT_RETENTION_DAYS; 0: that setting again.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Change a partner's settings; prints the partner as 'partner list' shows it."""
    services = open_services()
    try:
        with services.db.session() as session:
            partner = partners.update_partner(
                session,
                partners.get_partner(session, partner_id),
                name=name,
                webhook_url=webhook_url,
                iban=iban,
                bic=bic,
                add_redirect_uris=add_redirect_uri or [],
                remove_redirect_uris=remove_redirect_uri or [],
                attachments=attachments,
                id_policies=id_policy or [],
                retention_days=retention_days,
                allow_insecure_webhooks=services.settings.webhook_allow_insecure,
            )
            data = partners.partner_summary(partner)
    except partners.PartnerInputError as exc:
        fail(str(exc))
    emit(data, as_json, _human(data))


@partner_app.command("rotate")
def partner_rotate(
    partner_id: PartnerId,
    secret: Annotated[
        partners.SecretKind, typer.Option(help="Which secret to replace.", case_sensitive=False)
    ],
    as_json: JsonFlag = False,
) -> None:
    """Issue a new secret, printed once; the old one is refused at once."""
    services = open_services()
    try:
        with services.db.session() as session:
            partner = partners.get_partner(session, partner_id)
            box = SecretBox(services.settings.resolved_secret_key)
            new_secret = partners.rotate_secret(session, box, partner, secret)
    except partners.PartnerInputError as exc:
        fail(str(exc))
    data = {"partner_id": partner_id, secret.value: new_secret}
    emit(data, as_json, _human(data) + "\n(the secret is shown only now)")


def _set_disabled(partner_id: str, *, disabled: bool) -> None:
    services = open_services()
    try:
        with services.db.session() as session:
            partner = partners.get_partner(session, partner_id)
            partners.set_disabled(session, partner, disabled=disabled, now=services.clock.now())
    except partners.PartnerInputError as exc:
        fail(str(exc))
    typer.echo(f"partner {partner_id} {'disabled' if disabled else 'enabled'}")


@partner_app.command("disable")
def partner_disable(partner_id: PartnerId) -> None:
    """Refuse the partner's keys, client credentials and tokens; hold its webhooks."""
    _set_disabled(partner_id, disabled=True)


@partner_app.command("enable")
def partner_enable(partner_id: PartnerId) -> None:
    """Accept the partner again; its waiting webhooks are sent."""
    _set_disabled(partner_id, disabled=False)

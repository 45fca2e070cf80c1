"""The ``kuitti`` operator command line: the list of its commands, each imported only when it runs.

Every command that creates something takes ``--json`` and then prints exactly one JSON object.
Secrets are printed once, at creation. What the commands share (settings, output, failure) is in
``kuitti/cli_helpers.py``; the commands live with their domain.
"""

from __future__ import annotations

import importlib
from typing import Annotated, NamedTuple

import typer
from typer import _click as click  # Typer's own copy of click: the types TyperGroup is made of
from typer.core import TyperCommand, TyperGroup

from kuitti.cli_helpers import JsonFlag, emit, fail, open_services
from kuitti.models import PartnerRole
from kuitti.partners import service as partners
from kuitti.security import SecretBox


class Command(NamedTuple):
    """Where a command is defined (a ``typer.Typer`` group or a command function) and its
    one-line help."""

    module: str
    attribute: str
    help: str


# Listed here so that ``kuitti --help`` imports none of them (the application takes seconds).
COMMANDS = {
    "serve": Command(
        "kuitti.service_cli",
        "serve",
        "Run the service (and, unless --no-worker, the delivery worker in-process).",
    ),
    "worker": Command(
        "kuitti.service_cli", "worker", "Run the delivery worker alone (webhooks and e-mail)."
    ),
    "demo": Command(
        "kuitti.service_cli",
        "demo",
        "Fill an empty database with a realistic example and print how to try it.",
    ),
    "db": Command("kuitti.service_cli", "db_app", "Database schema."),
    "user": Command("kuitti.users.cli", "user_app", "Service users."),
    "card": Command("kuitti.cards.cli", "card_app", "Cards: enrol pilot cards."),
    "webhooks": Command(
        "kuitti.webhooks.cli", "webhooks_app", "Webhook deliveries: list and replay."
    ),
    "keys": Command("kuitti.oauth.cli", "keys_app", "Token signing keys."),
    "receipts": Command("kuitti.cards.cli", "receipts_app", "Receipts: explain matching."),
}


def load_command(name: str) -> click.Command:
    """The command itself: its module is imported now."""
    spec = COMMANDS[name]
    defined = getattr(importlib.import_module(spec.module), spec.attribute)
    if isinstance(defined, typer.Typer):
        return typer.main.get_group(defined)
    single = typer.Typer()
    single.command(name)(defined)
    return typer.main.get_command(single)


class LazyGroup(TyperGroup):
    """Lists every command from ``COMMANDS`` and loads one only when it is run."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *super().list_commands(ctx)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return super().get_command(ctx, cmd_name)
        return TyperCommand(cmd_name, help=spec.help)  # enough to list it in the help

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name in COMMANDS:
            command = load_command(name)
        return name, command, rest


app = typer.Typer(
    cls=LazyGroup,
    help="kuitti, an open digital receipt service.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
partner_app = typer.Typer(help="Partners: merchants, apps, card issuers, pilot banks.")
app.add_typer(partner_app, name="partner")


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
            )
            data = created.as_json()
    except partners.PartnerInputError as exc:
        fail(str(exc))
    human = "\n".join(f"{k}: {v}" for k, v in data.items() if v is not None)
    emit(data, as_json, human + "\n(secrets are shown only now)")


@partner_app.command("list")
def partner_list(as_json: JsonFlag = False) -> None:
    """List partners (no secrets)."""
    services = open_services()
    with services.db.session(write=False) as session:
        rows = [partners.partner_summary(p) for p in partners.list_partners(session)]
    human = "\n".join(f"{p['partner_id']}  {p['name']}  {','.join(p['roles'])}" for p in rows)
    emit({"partners": rows}, as_json, human or "no partners")

"""``kuitti user create``: a verified service user made by an operator."""

from __future__ import annotations

from typing import Annotated

import typer

from kuitti.cli_helpers import JsonFlag, emit, fail, open_services
from kuitti.users import service as users

user_app = typer.Typer(help="Service users.", no_args_is_help=True)


@user_app.command("create")
def user_create(
    email: Annotated[str, typer.Option(help="E-mail address (login).")],
    password: Annotated[str, typer.Option(help="Password (at least 8 characters).")],
    as_json: JsonFlag = False,
) -> None:
    """Create a verified service user."""
    try:
        services = open_services()
        with services.db.session() as session:
            user = users.create_user(
                session, email, password, now=services.clock.now(), verified=True
            )
            data = {"user_id": str(user.id), "email": user.email}
    except users.UserInputError as exc:
        fail(str(exc))
    emit(data, as_json, f"user {data['email']} created ({data['user_id']})")

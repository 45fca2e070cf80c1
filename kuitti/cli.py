"""The ``kuitti`` operator command line: the list of its commands, each imported only when it runs.

Every command that creates something takes ``--json`` and then prints exactly one JSON object.
Secrets are printed once, at creation. What the commands share (settings, output, failure) is in
``kuitti/cli_helpers.py``; the commands live with their domain.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer
from typer import _click as click  # Typer's own copy of click: the types TyperGroup is made of
from typer.core import TyperCommand, TyperGroup

from kuitti import __version__


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
        "Add a realistic example (merchant, app, user, receipts) and print how to try it.",
    ),
    "db": Command("kuitti.db_cli", "db_app", "Database schema."),
    "partner": Command(
        "kuitti.partners.cli",
        "partner_app",
        "Partners: merchants, apps, card issuers, pilot banks.",
    ),
    "user": Command("kuitti.users.cli", "user_app", "Service users."),
    "card": Command("kuitti.cards.cli", "card_app", "Cards: enrol pilot cards."),
    "webhooks": Command(
        "kuitti.webhooks.cli", "webhooks_app", "Webhook deliveries: list and replay."
    ),
    "keys": Command("kuitti.oauth.cli", "keys_app", "Token signing keys."),
    "receipts": Command(
        "kuitti.receipts.cli",
        "receipts_app",
        "Receipts: validate files offline, explain card-linking, sign and verify.",
    ),
    "archive": Command(
        "kuitti.archive.cli",
        "archive_app",
        "Archives of a month of receipts: export, verify, restore.",
    ),
}


# Every command's --help, as it prints it: answering from here imports no command module (the
# application takes seconds to import). tests/test_cli.py fails when it differs from the
# commands; 'python -m kuitti.cli' writes it anew.
HELP_FILE = Path(__file__).with_name("cli_help.json")
HELP_WIDTH = 100
CONTEXT_SETTINGS = {"max_content_width": HELP_WIDTH, "terminal_width": HELP_WIDTH}


def load_command(name: str) -> click.Command:
    """The command itself: its module is imported now."""
    spec = COMMANDS[name]
    defined = getattr(importlib.import_module(spec.module), spec.attribute)
    if isinstance(defined, typer.Typer):
        command: click.Command = typer.main.get_group(defined)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(defined)
        command = typer.main.get_command(single)
    for each in _tree(command):  # click's plain help: wrapped, never cut at the terminal's edge
        each.rich_markup_mode = None  # type: ignore[attr-defined]
    return command


def _tree(command: click.Command) -> Iterator[click.Command]:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _tree(sub)


def help_texts() -> dict[str, str]:
    """Every command's help by its path (``""`` for the root, ``"partner create"``)."""
    root = typer.main.get_command(app)
    root_ctx = root.make_context("kuitti", [], resilient_parsing=True)
    texts = {"": root.get_help(root_ctx)}

    def walk(command: click.Command, ctx: click.Context, path: str) -> None:
        texts[path] = command.get_help(ctx)
        for name, sub in getattr(command, "commands", {}).items():
            walk(
                sub,
                sub.make_context(name, [], parent=ctx, resilient_parsing=True),
                f"{path} {name}",
            )

    for name in COMMANDS:
        command = load_command(name)
        walk(command, command.make_context(name, [], parent=root_ctx, resilient_parsing=True), name)
    return texts


def cached_help(args: Sequence[str]) -> str | None:
    """The help that ``args`` asks for, when it is a plain ``kuitti [COMMAND…] --help``."""
    if "--help" not in args:
        return None
    words = []
    for arg in args:
        if arg.startswith("-"):
            break
        words.append(arg)
    try:
        texts: dict[str, str] = json.loads(HELP_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return texts.get(" ".join(words))


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

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Run; a usage mistake (an unknown option, ``--port abc``) is one line on stderr and
        exit status 2, as every other configuration mistake is (``cli_helpers.fail``)."""
        text = cached_help(sys.argv[1:] if args is None else list(args))
        if text is not None:
            click.echo(text)
            if not standalone_mode:
                return 0
            sys.exit(0)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            code = exc.exit_code
        except click.exceptions.UsageError as exc:
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"error: {exc.format_message()}{where}", err=True)
            code = exc.exit_code
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            code = exc.exit_code
        except typer.Abort:
            click.echo("Aborted!", err=True)
            code = 1
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=LazyGroup,
    help="kuitti, an open digital receipt service.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=CONTEXT_SETTINGS,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kuitti {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """kuitti, an open digital receipt service."""
    # Every command is lazy (COMMANDS): the callback is what makes the root a group.


if __name__ == "__main__":  # python -m kuitti.cli: write HELP_FILE anew
    HELP_FILE.write_text(json.dumps(help_texts(), indent=1, ensure_ascii=False) + "\n")

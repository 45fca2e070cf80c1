"""``kuitti archive …``: ``export`` a month of receipts to a file, ``verify`` a file without a
database, ``restore`` a month from a file (docs/operations.md, "Archives").

Exit status: 0 done (``verify``: the archive is whole), 1 the archive is not whole or does not
fit the database, 2 a mistake in the command itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kuitti.archive.export import export_month
from kuitti.archive.fileformat import ArchiveError, file_sha256, verify
from kuitti.archive.restore import RestoreRefused, restore
from kuitti.cli_helpers import JsonFlag, emit, fail, open_services
from kuitti.months import Month

archive_app = typer.Typer(
    help="Archives of a month of receipts: export, verify, restore.", no_args_is_help=True
)

ArchiveFile = Annotated[Path, typer.Argument(help="An archive made by 'kuitti archive export'.")]


@archive_app.command("export")
def export(
    month: Annotated[
        str, typer.Option("--month", help="YYYY-MM: the receipts whose time falls in it (UTC).")
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", help="The file to write (default: kuitti-YYYY-MM.tar here)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Write a month of receipts to a compressed archive file.

    With their links, claims, grants, deliveries and card matches, and a manifest of counts and
    SHA-256 checksums. The file is never overwritten."""
    try:
        which = Month.parse(month)
    except ValueError as exc:
        fail(f"--month: {exc}")
    path = output or Path(f"kuitti-{which}.tar")
    if path.exists():
        fail(f"{path} exists: name another with --output, or move it away")
    if not path.parent.is_dir():
        fail(f"{path.parent} is not a directory")
    services = open_services()
    manifest = export_month(services.db, which, path, now=services.clock.now())
    tables = {name: entry["rows"] for name, entry in manifest["tables"].items()}
    data = {
        "file": str(path),
        "month": str(which),
        "receipts": tables["receipts"],
        "tables": tables,
        "bytes": path.stat().st_size,
        "sha256": file_sha256(path),
    }
    emit(
        data,
        as_json,
        f"{path}: {tables['receipts']} receipt(s) of {which}, sha256 {data['sha256']}",
    )


@archive_app.command("verify")
def verify_command(file: ArchiveFile, as_json: JsonFlag = False) -> None:
    """Check an archive without a database (exit status 1 when it is not whole).

    Its manifest, every table's checksums and row count, and that every row reads and belongs to
    a receipt of the archive."""
    report = verify(file)
    if report["ok"]:
        human = f"{file}: whole, {report['receipts']} receipt(s) of {report['month']}"
    else:
        human = f"{file}: not whole: {report['problem']}"
    emit(report, as_json, human)
    if not report["ok"]:
        raise typer.Exit(1)


@archive_app.command("restore")
def restore_command(file: ArchiveFile, as_json: JsonFlag = False) -> None:
    """Bring an archived month back, so that its receipts read exactly as before.

    Receipts already in the database are skipped, so running it twice adds nothing. Exit status
    1 when the archive is not whole or does not fit the database, found before anything is
    written."""
    services = open_services()
    data: dict[str, Any] = {"file": str(file), "ok": False}
    try:
        data.update(restore(services.db, file), ok=True)
    except ArchiveError as exc:
        data["problems"] = [f"not whole: {exc}"]
    except RestoreRefused as exc:
        data["problems"] = exc.problems
    if data["ok"]:
        human = (
            f"{file}: {data['restored']} receipt(s) of {data['month']} restored, "
            f"{data['skipped']} already there"
        )
    else:
        human = "\n".join([f"{file}: not restored", *(f"  {p}" for p in data["problems"])])
    emit(data, as_json, human)
    if not data["ok"]:
        raise typer.Exit(1)

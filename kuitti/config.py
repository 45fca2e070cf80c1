"""Every setting of kuitti, read from ``KUITTI_…`` environment variables.

This class is the one place settings are declared; ``docs/operations.md`` and the README's
configuration table list the same names. Invalid values stop the service at start with a message
that names the variable.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from functools import cached_property
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# The databases kuitti is tested on; postgresql:// means the psycopg 3 driver we ship.
DATABASE_SCHEMES = ("sqlite://", "postgresql://", "postgres://", "postgresql+psycopg://")
DEFAULT_RETRY_SCHEDULE_SECONDS = (5, 30, 120, 600, 1800, 3600, 10800, 21600, 43200, 86400, 86400)

# Where state lives unless KUITTI_VAR_DIR says: one place whatever the current directory.
PROJECT_DIR = Path(__file__).resolve().parent.parent
MIN_SECRET_KEY_BYTES = 32


def default_var_dir() -> Path:
    """``var/`` of the checkout kuitti runs from (the directory holding its ``pyproject.toml``);
    an installed kuitti keeps its state in ``$XDG_DATA_HOME/kuitti`` (``~/.local/share/kuitti``)."""
    pyproject = PROJECT_DIR / "pyproject.toml"
    if pyproject.is_file() and 'name = "kuitti"' in pyproject.read_text(encoding="utf-8"):
        return PROJECT_DIR / "var"
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "kuitti"


def sqlite_file(url: str) -> Path | None:
    """The file an ``sqlite:///`` URL names (None for PostgreSQL and an in-memory SQLite)."""
    if not url.startswith("sqlite:///") or url.endswith(":memory:"):
        return None
    return Path(url.removeprefix("sqlite:///").partition("?")[0])


def directory_problem(path: Path) -> str | None:
    """Why ``path`` cannot hold kuitti's files, or None: it must be a directory, or be missing in
    a directory that exists (it is then created; a missing parent is a mistyped path)."""
    if path.is_dir():
        return None
    if path.exists():
        return f"{path} is not a directory"
    parent = path.absolute().parent
    if not parent.exists():
        return f"{path} does not exist, nor does {parent}"
    if not parent.is_dir():
        return f"{path} is under {parent}, which is not a directory"
    return None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KUITTI_", extra="ignore", frozen=True)

    public_url: str = Field(
        "http://127.0.0.1:8000",
        description="Public address of the server; default for the three base addresses and the "
        "JWT issuer. Unset, 'kuitti serve' sets it to the address it listens on.",
    )
    auth_url: str | None = Field(None, description="Address of the user-facing pages ({auth_url}).")
    receipt_link_base: str | None = Field(
        None, description="Address of the public receipt web view ({receipt_link_base})."
    )
    database_url: str | None = Field(
        None,
        description="Default: an SQLite file kuitti.db in the var directory (sqlite:///path). A "
        "postgresql:// URL selects PostgreSQL (driver psycopg 3) in any form libpq takes: several "
        "hosts (db1:5432,db2:5432), target_session_attrs, sslmode (docs/operations.md).",
    )
    read_database_url: str | None = Field(
        None,
        description="PostgreSQL only: a read replica (a streaming standby of the primary, any "
        "form libpq takes) that answers receipt reads, lists and link pages; rights are still "
        "decided on the primary (docs/replication.md, Read replicas).",
    )
    # Beyond one database machine (docs/replication.md): a pooler between kuitti and PostgreSQL.
    listen_database_url: str | None = Field(
        None,
        description="PostgreSQL only: where LISTEN for wake-ups connects, straight to the "
        "database, when KUITTI_DATABASE_URL goes through a pooler in transaction mode. "
        "Default: KUITTI_DATABASE_URL.",
    )
    db_prepared_statements: bool = Field(
        True,
        description="PostgreSQL only: false behind a pooler in transaction mode that does not "
        "keep prepared statements (PgBouncer before 1.21, or max_prepared_statements = 0).",
    )
    var_dir: Path = Field(
        default_factory=default_var_dir,
        description="Directory for the SQLite file, mail and the generated secret. Default: var/ "
        "of the checkout kuitti runs from, else $XDG_DATA_HOME/kuitti.",
    )
    secret_key: str | None = Field(
        None,
        description="Server secret for sessions, receipt-link tokens and encrypting webhook "
        "keys at rest, at least 32 bytes. Default: generated once into var/secret_key.",
    )
    max_body_bytes: int = Field(1_048_576, gt=0, description="Largest accepted request body.")
    db_pool_size: int = Field(20, gt=0, description="Database connections per process.")
    threads: int = Field(
        4,
        gt=0,
        le=200,
        description="Threads per server process for request handlers (measured best at 4 on "
        "2 cores; see docs/performance.md).",
    )
    smtp_url: str | None = Field(
        None,
        description="smtp://[user:password@]host:port (smtps:// for TLS, ?starttls=true). Without "
        "it, mail is written as .eml files under var/mail/.",
    )
    mail_from: str = Field("kuitti <no-reply@kuitti.invalid>", description="Sender of e-mails.")
    webhook_allow_insecure: bool = Field(
        False,
        description="Development and tests only: allow http webhook URLs and loopback/private "
        "targets.",
    )
    webhook_retry_schedule: Annotated[tuple[int, ...], NoDecode] = Field(
        DEFAULT_RETRY_SCHEDULE_SECONDS,
        description="Comma-separated retry delays in seconds (each with ±10 % jitter).",
    )
    webhook_timeout_seconds: float = Field(10.0, gt=0, description="Timeout of one webhook call.")
    qr_code_ttl_seconds: int = Field(600, gt=0, description="Lifetime of a DYNAMIC_QR_CODE value.")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR.")
    log_json: bool = Field(True, description="JSON log lines (false: human-readable console).")
    link_rate_limit_per_minute: int = Field(
        120, gt=0, description="Receipt-link page views allowed per client IP and minute."
    )
    # Guessing a namespace link's identifier shows as a burst of misses (docs/security.md).
    link_miss_limit_per_client: int = Field(
        20,
        gt=0,
        description="Receipt-link lookups that find nothing (404) allowed per client IP and "
        "minute; the client's further link requests get 429 until the minute ends.",
    )
    link_miss_limit_per_namespace: int = Field(
        100,
        gt=0,
        description="Receipt-link lookups that find nothing allowed per namespace and minute, "
        "across clients; beyond it, clients that missed in that minute get 429 on the "
        "namespace's links.",
    )
    receipt_retention_days: int | None = Field(
        None,
        gt=0,
        description="Days a receipt is kept after its receipt time, then deleted with "
        "everything that refers to it (a partner's own retention overrides it); unset: kept.",
    )
    months_ahead: int = Field(
        3,
        ge=1,
        description="PostgreSQL: months ahead for which the worker keeps partitions made.",
    )
    receipt_log_seal_seconds: float = Field(
        60.0,
        gt=0,
        description="Seconds between the worker's signed tree heads of the receipt log (a "
        "receipt's proof is pending until the next one).",
    )
    sandbox_retention_days: int = Field(
        7, gt=0, description="Days a sandbox partner's receipt is kept before it is deleted."
    )
    # Retention of what the service keeps only for a while (kuitti.housekeeping).
    webhook_retention_days: int = Field(
        30,
        gt=0,
        description="Days a delivered or failed webhook delivery and its attempts are kept after "
        "the last attempt (the log and replays of `kuitti webhooks`).",
    )
    mail_retention_days: int = Field(
        30, gt=0, description="Days a sent or failed e-mail is kept after its last attempt."
    )
    idempotency_retention_days: int = Field(
        7,
        gt=0,
        description="Days an Idempotency-Key's first answer is replayed; after that the key may "
        "be used again.",
    )

    # The edge: which peers may forward a client's address (kuitti/clients.py), how large and how
    # slow a request may be, how long it may wait and how many a process works on at once
    # (kuitti/edge.py, kuitti/admission.py).
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Comma-separated addresses or networks (CIDR) of the reverse proxies whose "
        "X-Forwarded-For/-Proto are believed; empty: none, the peer is the client.",
    )
    max_header_bytes: int = Field(
        32_768, ge=1024, description="Largest request line and headers together (431 beyond)."
    )
    header_timeout_seconds: float = Field(
        10.0, gt=0, description="Time a client has to send a request's line and headers (408)."
    )
    body_timeout_seconds: float = Field(
        30.0, gt=0, description="Time a client has to send a request's body after its headers."
    )
    max_queue_seconds: float = Field(
        0.5,
        gt=0,
        description="Longest a request may have waited, from its last byte's arrival until its "
        "server process starts on it; an older one is answered 503 with Retry-After at once, "
        "and a PostgreSQL read waits at most a quarter of it for a connection of its pool "
        "(kuitti/edge.py, kuitti/db.py; see docs/operations.md).",
    )
    queue_target_seconds: float = Field(
        0.01,
        gt=0,
        description="Under a standing queue (in a 100 ms interval, most requests and at least "
        "32 waited longer than this, and at least 32 of them before the process read them; it "
        "goes on while over a third do), the rest of that interval and the next serve only the "
        "requests that waited less, answer the others 503 at once, and on PostgreSQL refuse a "
        "read still without a connection this long after its request arrived (kuitti/edge.py; "
        "see docs/operations.md).",
    )
    max_requests_in_flight: int = Field(
        64,
        gt=0,
        description="Requests a server process works on at once; the excess is answered 503 "
        "with Retry-After at once (kuitti/edge.py; see docs/operations.md).",
    )

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _parse_proxies(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list | tuple):
            try:
                return tuple(str(ipaddress.ip_network(str(part))) for part in value)
            except ValueError as exc:
                raise ValueError(
                    "must be comma-separated IP addresses or networks, e.g. 10.0.0.5,10.1.0.0/16"
                ) from exc
        return value

    @field_validator("webhook_retry_schedule", mode="before")
    @classmethod
    def _parse_schedule(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                delays = tuple(int(part) for part in value.split(",") if part.strip())
            except ValueError as exc:
                raise ValueError("must be comma-separated whole seconds, e.g. 5,30,120") from exc
            if not delays or any(d <= 0 for d in delays):
                raise ValueError("must list at least one positive delay")
            return delays
        return value

    @field_validator("public_url", "auth_url", "receipt_link_base")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(DATABASE_SCHEMES):
            raise ValueError("must be sqlite:///path/to/file.db or postgresql://user:pass@host/db")
        if value is not None and not value.startswith("sqlite://"):
            _check_libpq_url(value)
        path = sqlite_file(value) if value else None
        problem = directory_problem(path.parent) if path is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("read_database_url")
    @classmethod
    def _replica_of_postgresql(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        primary = info.data.get("database_url")
        if not primary or primary.startswith("sqlite://"):
            raise ValueError("needs a PostgreSQL primary in KUITTI_DATABASE_URL, not SQLite")
        _check_libpq_url(value)
        return value

    @field_validator("listen_database_url")
    @classmethod
    def _postgresql_only(cls, value: str | None) -> str | None:
        if value is not None:
            _check_libpq_url(value)
        return value

    @field_validator("var_dir")
    @classmethod
    def _usable_var_dir(cls, value: Path) -> Path:
        problem = directory_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("secret_key")
    @classmethod
    def _long_secret(cls, value: str | None) -> str | None:
        if value and len(value.encode()) < MIN_SECRET_KEY_BYTES:  # empty: unset, generated
            raise ValueError(
                f"must be at least {MIN_SECRET_KEY_BYTES} bytes; make one with: "
                "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        return value

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
        return upper

    @property
    def base_url(self) -> str:
        return self.public_url

    @property
    def auth_base(self) -> str:
        return self.auth_url or self.public_url

    @property
    def link_base(self) -> str:
        return self.receipt_link_base or self.public_url

    @property
    def issuer(self) -> str:
        return self.public_url

    @property
    def secure_cookies(self) -> bool:
        return self.auth_base.startswith("https://")

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            url = self.database_url
            # Plain postgresql:// means psycopg 3, the driver we ship.
            if url.startswith("postgresql://"):
                url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
            elif url.startswith("postgres://"):
                url = "postgresql+psycopg://" + url.removeprefix("postgres://")
            return url
        return f"sqlite:///{self.var_dir / 'kuitti.db'}"

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file of the database, or None for PostgreSQL and an in-memory SQLite."""
        return sqlite_file(self.resolved_database_url)

    @property
    def mail_dir(self) -> Path:
        return self.var_dir / "mail"

    @cached_property
    def resolved_secret_key(self) -> str:
        """The configured secret, or one generated once and kept in ``var/secret_key``."""
        if self.secret_key:
            return self.secret_key
        path = self.var_dir / "secret_key"
        if path.exists():
            return path.read_text().strip()
        self.var_dir.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(48)
        path.write_text(key)
        path.chmod(0o600)
        return key


def _check_libpq_url(url: str) -> None:
    """A ``ValueError`` naming what libpq refuses in a PostgreSQL URL."""
    try:
        libpq_conninfo(url)
    except ValueError as exc:
        raise ValueError(f"not a PostgreSQL URL libpq takes: {exc}") from None


POSTGRESQL_SCHEMES = ("postgresql+psycopg://", "postgresql://", "postgres://")


def libpq_conninfo(url: str) -> str:
    """The libpq connection URI of a PostgreSQL URL, as the operator wrote it (SQLAlchemy's
    ``postgresql+psycopg://`` prefix taken off), checked by libpq's own parser: every form
    libpq takes works, several hosts (``db1:5432,db2:5432``), ``target_session_attrs``,
    ``sslmode`` and the rest, where SQLAlchemy's URL parser refuses several hosts. A
    ``ValueError`` names what libpq refused, in one line."""
    scheme = next((s for s in POSTGRESQL_SCHEMES if url.startswith(s)), None)
    if scheme is None:
        raise ValueError("not a postgresql:// URL")
    conninfo = "postgresql://" + url.removeprefix(scheme)
    import psycopg  # only for a PostgreSQL URL: a command on SQLite need not load the driver

    try:
        psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ValueError(str(exc).strip().splitlines()[0]) from exc
    return conninfo


def load_settings() -> Settings:
    return Settings()

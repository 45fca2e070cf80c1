"""A PostgreSQL cluster of a test's own: made with ``initdb`` in a temporary directory, on a port
of its own, which a test may kill, restart or make read-only, and which is torn down at the end.

PostgreSQL 15's binaries are Debian's (``/usr/lib/postgresql/15/bin``). ``initdb`` and the
server refuse to run as root, so as root they run as the ``postgres`` user (``runuser``).
The role ``kuitti`` is the cluster's superuser, trusted on loopback: no password.

``fsync`` is off: a killed server process (SIGKILL) loses nothing the kernel was given, which is
what the tests crash; only a machine's power loss would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import free_port

PG_BIN = Path(os.environ.get("KUITTI_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
ROLE = "kuitti"
DATABASE = "kuitti"
START_TIMEOUT_SECONDS = 60


def _as_postgres(args: list[str]) -> list[str]:
    """``args`` run as the ``postgres`` user when this process is root."""
    return ["runuser", "-u", "postgres", "--", *args] if os.getuid() == 0 else args


class PgCluster:
    """One cluster in ``directory``: ``start``, ``kill``, ``url``; ``stop`` and ``remove`` at
    the end."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.port = port or free_port()
        self.log = directory / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL of the cluster's ``kuitti`` database, as an operator writes it."""
        return self.url_of(self.port)

    @staticmethod
    def url_of(*ports: int, database: str = DATABASE) -> str:
        """The URL of ``database`` on loopback at ``ports``: several hosts, libpq's multi-host
        form, when there are several."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
        return f"postgresql://{ROLE}@{hosts}/{database}"

    def init(self) -> None:
        initdb = [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", ROLE, "-A", "trust"]
        self._run([*initdb, "-N", "--locale=C.UTF-8", "-E", "UTF8"])
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.directory}'\n"
                "fsync = off\n"
                "max_connections = 100\n"
            )

    def start(self) -> None:
        """Start the server and wait until it takes connections. It runs as a child of this
        process (not through ``pg_ctl``, whose server is nobody's child): a container's first
        process may never reap a killed server, whose PID then blocks the next start."""
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                _as_postgres([str(PG_BIN / "postgres"), "-D", str(self.data)]),
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres did not start:\n{self.log.read_text()}")
            try:
                psycopg.connect(self.url_of(self.port, database="postgres")).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.02)  # polling a starting server, not timing a result

    def stop(self) -> None:
        """Shut the server down at once (SIGQUIT: PostgreSQL's immediate shutdown)."""
        if self.process is not None and self.process.poll() is None:
            postmaster = self._postmaster()
            if postmaster is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(postmaster, signal.SIGQUIT)
            self.process.wait(timeout=START_TIMEOUT_SECONDS)
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server and every process of it at once, as a crashed machine would
        leave it: no shutdown, no checkpoint."""
        postmaster = self._postmaster()
        assert postmaster is not None
        assert self.process is not None
        for pid in [postmaster, *_children(postmaster)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=START_TIMEOUT_SECONDS)
        self.process = None

    def _postmaster(self) -> int | None:
        pid_file = self.data / "postmaster.pid"
        return int(pid_file.read_text().split()[0]) if pid_file.exists() else None

    def make_standby(self, directory: Path, *, name: str = "standby1") -> PgCluster:
        """A streaming standby of this (running) cluster in ``directory``, from
        ``pg_basebackup``, known to the primary as ``name`` (``synchronous_standby_names``);
        not started."""
        standby = PgCluster(directory)
        backup = [str(PG_BIN / "pg_basebackup"), "-D", str(standby.data), "-U", ROLE]
        source = ["-h", "127.0.0.1", "-p", str(self.port)]
        self._run([*backup, *source, "-X", "stream", "-R", "--no-sync", "--checkpoint=fast"])
        with (standby.data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {standby.port}\nunix_socket_directories = '{directory}'\n")
        with (standby.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"primary_conninfo = 'host=127.0.0.1 port={self.port} user={ROLE} "
                f"application_name={name}'\n"
            )
        return standby

    def wait_for_sync_standby(self, name: str = "standby1") -> None:
        """Make ``name`` the synchronous standby and wait until it is: from then on a commit
        returns only once the standby has it."""
        self.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
        self.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        url = self.url_of(self.port, database="postgres")
        while True:
            with psycopg.connect(url, autocommit=True) as connection:
                state = connection.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (name,),
                ).fetchone()
            if state == ("sync",):
                return
            assert time.monotonic() < deadline, f"no synchronous standby {name}: {state}"
            time.sleep(0.02)  # polling the primary's view of its standby, not timing a result

    def reconfigure(self, line: str) -> None:
        """Add ``line`` (``name = value``) to the configuration and reload it."""
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"{line}\n")
        self.sql("SELECT pg_reload_conf()", database="postgres")

    def wait_until_applied(self, standby: PgCluster) -> None:
        """Wait until ``standby`` has applied everything this primary has written so far."""
        with psycopg.connect(self.url_of(self.port, database="postgres")) as connection:
            row = connection.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        url = standby.url_of(standby.port, database="postgres")
        with psycopg.connect(url, autocommit=True) as connection:
            while True:
                applied = connection.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (row[0],)
                ).fetchone()
                if applied == (True,):
                    return
                assert time.monotonic() < deadline, f"{standby.port} has not applied {row[0]}"
                time.sleep(0.02)  # polling the standby's replay, not timing a result

    def promote(self) -> None:
        """End a standby's recovery: it takes writes from now on (``pg_promote`` waits)."""
        self.sql("SELECT pg_promote()", database="postgres")

    def sql(self, statement: str, *, database: str = DATABASE) -> None:
        """Run one statement as the superuser, in autocommit."""
        url = self.url_of(self.port, database=database)
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(statement.encode())

    def create_database(self) -> None:
        self.sql(f'CREATE DATABASE "{DATABASE}"', database="postgres")

    def _run(self, args: list[str]) -> None:
        done = subprocess.run(_as_postgres(args), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{args[0]} failed:\n{done.stdout}{done.stderr}\n{log}")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@contextlib.contextmanager
def _directory() -> Iterator[Path]:
    """A temporary directory the server's user owns; removed at the end."""
    directory = Path(tempfile.mkdtemp(prefix="kuitti-pg-"))
    if os.getuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def pg_cluster() -> Iterator[PgCluster]:
    """A started cluster with an empty ``kuitti`` database; stopped and removed at the end."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"needs PostgreSQL's initdb in {PG_BIN}")
    with _directory() as directory:
        cluster = PgCluster(directory)
        try:
            cluster.init()
            cluster.start()
            cluster.create_database()
            yield cluster
        finally:
            cluster.stop()


@contextlib.contextmanager
def pg_standby(primary: PgCluster, *, synchronous: bool = True) -> Iterator[PgCluster]:
    """A started streaming standby of ``primary``, synchronous unless told otherwise; stopped
    and removed at the end."""
    with _directory() as directory:
        standby = primary.make_standby(directory)
        try:
            standby.start()
            if synchronous:
                primary.wait_for_sync_standby()
            yield standby
        finally:
            standby.stop()


PGBOUNCER = Path(os.environ.get("KUITTI_TEST_PGBOUNCER", "/usr/sbin/pgbouncer"))


@contextlib.contextmanager
def pgbouncer(cluster: PgCluster, *, pool_mode: str = "transaction") -> Iterator[int]:
    """PgBouncer in front of ``cluster``'s ``kuitti`` database, in ``pool_mode``, on a port of
    its own (yielded); stopped at the end. Clients log in as ``kuitti`` without a password."""
    if not PGBOUNCER.exists():
        pytest.skip(f"needs PgBouncer at {PGBOUNCER} (scripts/system-deps installs it)")
    port = free_port()
    directory = cluster.directory
    (directory / "pgbouncer-users.txt").write_text(f'"{ROLE}" ""\n')
    config = directory / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"{DATABASE} = host=127.0.0.1 port={cluster.port} dbname={DATABASE} user={ROLE}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        f"unix_socket_dir = {directory}\n"
        "auth_type = trust\n"
        f"auth_file = {directory / 'pgbouncer-users.txt'}\n"
        f"pool_mode = {pool_mode}\n"
        "default_pool_size = 10\n"
        "max_client_conn = 200\n"
        f"logfile = {directory / 'pgbouncer.log'}\n"
    )
    if os.getuid() == 0:
        for path in (config, directory / "pgbouncer-users.txt"):
            shutil.chown(path, "postgres", "postgres")
    process = subprocess.Popen(
        _as_postgres([str(PGBOUNCER), str(config)]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            assert process.poll() is None, "pgbouncer did not start"
            try:
                psycopg.connect(PgCluster.url_of(port)).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.02)  # polling a starting pooler, not timing a result
        yield port
    finally:
        process.terminate()  # SIGTERM through runuser: PgBouncer's immediate shutdown
        process.wait(timeout=START_TIMEOUT_SECONDS)

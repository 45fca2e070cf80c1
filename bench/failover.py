"""Failover under load: a primary with a synchronous standby on this machine, kuitti on top
(``kuitti serve --workers N --no-worker`` and one ``kuitti worker``, through a libpq multi-host
URL with ``target_session_attrs=read-write``), receipts posted back to back, then the primary
killed with SIGKILL. Prints what the clients saw.

    .venv/bin/python bench/failover.py                       # Patroni + etcd, kill postgres
    .venv/bin/python bench/failover.py --kill node           # postgres and its Patroni agent
    .venv/bin/python bench/failover.py --manager promote     # no manager: pg_promote() at once
    .venv/bin/python bench/failover.py --manager pg_auto_failover --kill node

``--manager``:

- ``patroni`` (default): one etcd and two Patroni agents (Debian: ``patroni``, ``etcd-server``),
  ``synchronous_mode: true``, ``ttl: 10``, ``loop_wait: 2``, ``retry_timeout: 3``;
- ``pg_auto_failover``: a monitor and two ``pg_autoctl`` keepers (Debian:
  ``postgresql-15-auto-failover``), its default timeouts;
- ``promote``: the plain primary and synchronous standby of ``tests/pgcluster.py``, and the
  standby promoted (``SELECT pg_promote()``) the moment the primary is killed, as an operator
  with a finger on the button would.

``--kill postgres`` SIGKILLs the primary's postmaster and its children (a crashed server: an HA
manager restarts it where it was, if it can); ``--kill node`` also SIGKILLs the manager's agent
on that node (a lost machine: only a failover to the standby brings writes back).

The database side runs as the ``postgres`` user (when this is root), kuitti as this user, each
in a temporary directory, on free ports; everything is stopped and removed at the end.
``--keep`` leaves the directories (the managers' configuration, every process's log) and prints
their paths. The managers' Debian packages are needed:

    apt-get install -y patroni etcd-server postgresql-15-auto-failover

Printed, as one JSON object: posts acknowledged (before and after the kill), answered 503,
answered another 5xx (must be 0), failed without an answer, the acknowledged receipts missing on
the primary afterwards (must be 0: the standby is synchronous), the outage the clients saw (first
failed post after the kill to the first 200 to a post sent after it), seconds from the kill to
a writable primary (a commit through the multi-host URL returns) and to kuitti's first 200, the
longest a post waited, and the worker: a webhook queued after the failover and how long it took
to arrive, and whether the worker's ``LISTEN`` is on the new primary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kuitti.clock import SystemClock  # noqa: E402
from kuitti.db import Database  # noqa: E402
from kuitti.services import Services  # noqa: E402
from tests.conftest import free_port, make_settings  # noqa: E402
from tests.pgcluster import PG_BIN, pg_cluster, pg_standby  # noqa: E402
from tests.test_database_away import Posts  # noqa: E402
from tests.webhooks.receivers import Receiver  # noqa: E402
from tests.webhooks.support import queue, webhook_partner  # noqa: E402

KUITTI = shutil.which("kuitti", path=str(Path(sys.executable).parent)) or "kuitti"
SECRET = "failover-bench-secret-of-at-least-32-bytes"
START_TIMEOUT_SECONDS = 180.0
FAILOVER_TIMEOUT_SECONDS = 120.0
POLL_SECONDS = 0.05
DEBIAN_PACKAGES = {
    "patroni": ("patroni", "etcd-server"),
    "pg_auto_failover": ("postgresql-15-auto-failover",),
    "promote": (),
}
COMMANDS = {"patroni": ("patroni", "etcd"), "pg_auto_failover": ("pg_autoctl",), "promote": ()}


def wait_for(what: str, condition: Callable[[], bool], timeout: float) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(POLL_SECONDS)  # polling a process's state, not timing a result


def as_postgres() -> dict[str, Any]:
    """``Popen`` arguments that run a program as the ``postgres`` user when this is root (the
    server refuses to run as root); its own process, so a SIGKILL reaches it and not a
    ``runuser`` in between."""
    return {"user": "postgres", "group": "postgres"} if os.getuid() == 0 else {}


def tree(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    found = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if parent == pid:
                    found.extend(tree(int(entry.name)))
    return found


def sigkill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def postmaster_of(data: Path) -> int:
    return int((data / "postmaster.pid").read_text().split()[0])


def is_writable(port: int, user: str = "kuitti") -> bool:
    url = f"postgresql://{user}@127.0.0.1:{port}/postgres?connect_timeout=1"
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            row = connection.execute("SELECT pg_is_in_recovery()").fetchone()
            return row is not None and row[0] is False
    except psycopg.Error:
        return False


class Topology:
    """A primary and a synchronous standby on ``ports``, under a manager or none."""

    ports: tuple[int, int]
    directory: Path

    def primary(self) -> int:
        """The port of the writable node."""
        return next(port for port in self.ports if is_writable(port))

    def kill(self, port: int, node: bool) -> None:
        raise NotImplementedError

    def after_kill(self, port: int) -> None:
        """What an operator does once the primary is gone (nothing: a manager acts)."""

    def close(self) -> None:
        raise NotImplementedError


class Promote(Topology):
    """``tests/pgcluster.py``'s primary and synchronous standby; the standby promoted by hand."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        primary = self._stack.enter_context(pg_cluster())
        standby = self._stack.enter_context(pg_standby(primary, synchronous=True))
        self.nodes = {primary.port: primary, standby.port: standby}
        self.ports = (primary.port, standby.port)
        self.directory = primary.directory

    def kill(self, port: int, node: bool) -> None:
        self.nodes[port].kill()

    def after_kill(self, port: int) -> None:
        standby = next(cluster for p, cluster in self.nodes.items() if p != port)
        standby.promote()

    def close(self) -> None:
        self._stack.close()


PATRONI_NODE = """\
scope: kuitti
name: {name}
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd3:
  host: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 3
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      parameters:
        fsync: "off"
  initdb:
  - encoding: UTF8
  - locale: C.UTF-8
  pg_hba:
  - host replication replicator 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{port}
  connect_address: 127.0.0.1:{port}
  data_dir: {directory}/{name}
  bin_dir: {bin}
  pgpass: {directory}/{name}.pgpass
  authentication:
    replication:
      username: replicator
      password: replicator-password-of-this-bench-only
    superuser:
      username: postgres
      password: superuser-password-of-this-bench-only
  basebackup:
  - checkpoint: fast
  parameters:
    unix_socket_directories: {directory}
"""


class Managed(Topology):
    """Processes started as ``postgres`` in a temporary directory, each with its log."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="kuitti-failover-"))
        if os.getuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self.processes: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "HOME": str(self.directory), "PATH": f"{PG_BIN}:/usr/bin:/bin"}

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (self.directory / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                args,
                cwd=self.directory,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **as_postgres(),
            )
        self.processes.append(process)
        return process

    def write(self, name: str, text: str) -> Path:
        path = self.directory / name
        path.write_text(text)
        if os.getuid() == 0:
            shutil.chown(path, "postgres", "postgres")
        return path

    def make_kuitti_role(self, port: int, user: str, database: str) -> None:
        url = f"postgresql://{user}@127.0.0.1:{port}/{database}"
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("CREATE ROLE kuitti LOGIN SUPERUSER")
            if database != "kuitti":
                connection.execute("CREATE DATABASE kuitti OWNER kuitti")

    def close(self) -> None:
        for process in reversed(self.processes):  # SIGTERM: each stops its own postgres
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                sigkill(tree(process.pid))
                process.wait(timeout=60)
        for data in self.directory.glob("*/postmaster.pid"):  # a server left by a killed agent
            with contextlib.suppress(ValueError, OSError):
                sigkill(tree(postmaster_of(data.parent)))


class Patroni(Managed):
    """One etcd and two Patroni agents; the first becomes the leader, the second its
    synchronous standby."""

    def __init__(self) -> None:
        super().__init__()
        client, peer = free_port(), free_port()
        self.spawn("etcd", [
            "etcd", "--name", "e1", "--data-dir", str(self.directory / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"e1=http://127.0.0.1:{peer}",
        ])  # fmt: skip
        self.ports = (free_port(), free_port())
        self.rest = (free_port(), free_port())
        self.agents: dict[int, subprocess.Popen[bytes]] = {}
        for index, (port, rest) in enumerate(zip(self.ports, self.rest, strict=True)):
            config = self.write(
                f"node{index + 1}.yml",
                PATRONI_NODE.format(
                    name=f"node{index + 1}", rest=rest, etcd=client, port=port,
                    directory=self.directory, bin=PG_BIN,
                ),
            )  # fmt: skip
            self.agents[port] = self.spawn(f"node{index + 1}", ["patroni", str(config)])
            if index == 0:
                self._lead(port)
        wait_for("a synchronous standby", self._synchronous, START_TIMEOUT_SECONDS)

    def _lead(self, port: int) -> None:
        """Wait for the first node to lead, and give it kuitti's role and database."""
        wait_for("a Patroni leader", lambda: is_writable(port, "postgres"), START_TIMEOUT_SECONDS)
        self.make_kuitti_role(port, "postgres", "postgres")

    def _synchronous(self) -> bool:
        try:
            cluster = httpx.get(f"http://127.0.0.1:{self.rest[0]}/cluster", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return False
        roles = {member["role"]: member.get("state") for member in cluster.get("members", [])}
        return roles.get("sync_standby") in {"running", "streaming"}

    def kill(self, port: int, node: bool) -> None:
        agent = self.agents[port]
        name = "node1" if port == self.ports[0] else "node2"
        pids = tree(postmaster_of(self.directory / name))
        sigkill([*(tree(agent.pid) if node else []), *pids])


class AutoFailover(Managed):
    """A pg_auto_failover monitor and two keepers (``pg_autoctl create postgres --run``)."""

    def __init__(self) -> None:
        super().__init__()
        directory = str(self.directory)
        self.env.update(
            XDG_CONFIG_HOME=f"{directory}/config",
            XDG_DATA_HOME=f"{directory}/data",
            XDG_RUNTIME_DIR=f"{directory}/run",
            PGHOST=directory,  # the keepers' own connections, over the socket in here
            PG_REGRESS_SOCK_DIR=directory,  # where pg_autoctl puts its servers' sockets
        )
        monitor_port = free_port()
        self.ports = (free_port(), free_port())
        self.spawn("monitor", [
            "pg_autoctl", "create", "monitor", "--pgdata", f"{directory}/monitor",
            "--pgport", str(monitor_port), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
            "--auth", "trust", "--no-ssl", "--run",
        ])  # fmt: skip
        self.monitor = f"postgres://autoctl_node@127.0.0.1:{monitor_port}/pg_auto_failover"
        self.keepers: dict[int, subprocess.Popen[bytes]] = {}
        wait_for("the monitor", self._monitor_answers, START_TIMEOUT_SECONDS)
        for index, port in enumerate(self.ports):
            name = f"node{index + 1}"
            self.keepers[port] = self.spawn(name, [
                "pg_autoctl", "create", "postgres", "--pgdata", f"{directory}/{name}",
                "--pgport", str(port), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
                "--monitor", f"{self.monitor}?sslmode=disable", "--auth", "trust", "--no-ssl",
                "--dbname", "kuitti", "--name", name, "--run",
            ])  # fmt: skip
            if index == 0:
                wait_for(
                    "the first node", lambda: self._states() == ["single"], START_TIMEOUT_SECONDS
                )
                self.make_kuitti_role(port, "postgres", "kuitti")
        # pg_basebackup waits for a spread checkpoint (minutes at the defaults): ask for it
        wait_for("a synchronous standby", self._synchronous, START_TIMEOUT_SECONDS)

    def _monitor_answers(self) -> bool:
        try:
            psycopg.connect(f"{self.monitor}?connect_timeout=1").close()
            return True
        except psycopg.Error:
            return False

    def _states(self) -> list[str]:
        with psycopg.connect(self.monitor, autocommit=True) as connection:
            rows = connection.execute(
                "SELECT reportedstate FROM pgautofailover.node ORDER BY nodeid"
            ).fetchall()
        return [str(row[0]) for row in rows]

    def _synchronous(self) -> bool:
        if sorted(self._states()) == ["primary", "secondary"]:
            return True
        with contextlib.suppress(psycopg.Error):
            url = f"postgresql://postgres@127.0.0.1:{self.ports[0]}/kuitti?connect_timeout=1"
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute("CHECKPOINT")
        return False

    def kill(self, port: int, node: bool) -> None:
        name = "node1" if port == self.ports[0] else "node2"
        pids = tree(postmaster_of(self.directory / name))
        sigkill([*(tree(self.keepers[port].pid) if node else []), *pids])


class Kuitti:
    """``kuitti serve --workers N --no-worker`` and one ``kuitti worker`` on ``url``, with ``env``
    added to their environment (``bench/day.py``: a read replica's URL)."""

    def __init__(
        self, url: str, directory: Path, processes: int, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.directory = directory
        self.env = {
            **os.environ,
            "KUITTI_PUBLIC_URL": self.url,
            "KUITTI_LOG_LEVEL": "WARNING",
            "KUITTI_DATABASE_URL": url,
            "KUITTI_SECRET_KEY": SECRET,
            "KUITTI_WEBHOOK_ALLOW_INSECURE": "true",
            **(env or {}),
        }
        subprocess.run([KUITTI, "db", "upgrade"], env=self.env, cwd=directory, check=True,
                       capture_output=True)  # fmt: skip
        self.processes = [
            self._start("serve", ["serve", "--port", str(self.port), "--workers", str(processes),
                                  "--no-worker"]),
            self._start("worker", ["worker", "--port", "0"]),
        ]  # fmt: skip
        wait_for("kuitti serve", self._ready, START_TIMEOUT_SECONDS)
        created = subprocess.run(
            [KUITTI, "partner", "create", "--name", "Kauppa", "--role", "merchant", "--json"],
            env=self.env, cwd=directory, capture_output=True, check=True,
        )  # fmt: skip
        self.api_key: str = orjson.loads(created.stdout)["api_key"]

    def _start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (self.directory / f"{name}.log").open("wb") as log:
            return subprocess.Popen([KUITTI, *args], env=self.env, cwd=self.directory, stderr=log)

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def tracebacks(self) -> int:
        return sum((self.directory / f"{n}.log").read_text().count("Traceback")
                   for n in ("serve", "worker"))  # fmt: skip

    def alive(self) -> bool:
        return all(process.poll() is None for process in self.processes)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(timeout=60)


def first_commit(url: str, since: float, found: dict[str, float]) -> None:
    """Record in ``found`` when a commit through the multi-host ``url`` first returns: a new
    attempt every 0.1 s, each a transaction id committed, which waits for the synchronous standby
    as kuitti's commits do (an old primary restarted in place but without its standby takes
    connections and hangs its commits: that is not a writable primary yet)."""
    lock = threading.Lock()

    def attempt() -> None:
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(url + "&connect_timeout=1", autocommit=True) as connection,
        ):
            connection.execute("SELECT txid_current()")
            with lock:
                if "writable" not in found:
                    found["port"] = connection.info.port
                    found["writable"] = time.monotonic() - since

    while "writable" not in found:
        threading.Thread(target=attempt, daemon=True).start()
        time.sleep(0.1)  # the pace of the attempts, not timing a result


def missing(url: str, receipt_ids: list[str]) -> int:
    """How many of ``receipt_ids`` the writable primary does not hold."""
    ids = [uuid.UUID(r) for r in receipt_ids]
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM receipts WHERE id = ANY(%s)", (ids,)
        ).fetchone()
    return len(ids) - (row[0] if row else 0)


def listening_on(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
        ).fetchone()
    return int(row[0]) if row else 0


def webhook_delay(services: Services, endpoint: Receiver, partner: Any, count: int) -> float:
    """Queue ``count`` webhooks one by one; the slowest time from commit to arrival."""
    slowest = 0.0
    for _ in range(count):
        arrived = len(endpoint.received)
        queued = time.monotonic()
        queue(services, partner)
        endpoint.wait_for(arrived + 1, FAILOVER_TIMEOUT_SECONDS)
        slowest = max(slowest, time.monotonic() - queued)
    return round(slowest, 3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    topology: Topology = {"patroni": Patroni, "pg_auto_failover": AutoFailover,
                          "promote": Promote}[args.manager]()  # fmt: skip
    try:
        return measure(topology, args)
    finally:
        topology.close()
        if args.keep:
            print(f"kept {topology.directory}", file=sys.stderr)
        else:
            shutil.rmtree(topology.directory, ignore_errors=True)


def measure(topology: Topology, args: argparse.Namespace) -> dict[str, Any]:
    hosts = ",".join(f"127.0.0.1:{port}" for port in topology.ports)
    url = f"postgresql://kuitti@{hosts}/kuitti?target_session_attrs=read-write"
    work = Path(tempfile.mkdtemp(prefix="kuitti-failover-serve-"))
    kuitti = Kuitti(url + "&connect_timeout=2", work, args.processes)
    db = Database(url.replace("postgresql://", "postgresql+psycopg://", 1), pool_size=1)
    settings = make_settings(url, work / "var", kuitti.url, secret_key=SECRET)
    services = Services(settings=settings, db=db, clock=SystemClock())
    posts = Posts(kuitti.url, kuitti.api_key)
    threads = [threading.Thread(target=posts.run, daemon=True) for _ in range(args.clients)]
    try:
        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            before_webhook = webhook_delay(services, endpoint, partner, 5)
            for thread in threads:
                thread.start()
            time.sleep(args.before)  # load before the kill: its length is the bench's setting
            primary = topology.primary()
            found: dict[str, float] = {}
            killed = time.monotonic()
            topology.kill(primary, node=args.kill == "node")
            prober = threading.Thread(target=first_commit, args=(url, killed, found), daemon=True)
            prober.start()
            topology.after_kill(primary)
            wait_for("a writable primary", lambda: "writable" in found, FAILOVER_TIMEOUT_SECONDS)
            writable = killed + found["writable"]
            wait_for(
                "kuitti's first 200 after the failover",
                lambda: posts.count(200, since=writable) > 0,
                FAILOVER_TIMEOUT_SECONDS,
            )
            time.sleep(args.after)  # load after the return: its length is the bench's setting
            posts.stop.set()
            for thread in threads:
                thread.join(timeout=FAILOVER_TIMEOUT_SECONDS)
            services.db.dispose()  # its connections may be to the old primary
            after_webhook = webhook_delay(services, endpoint, partner, 5)
        answers = list(posts.answers)
        acknowledged = [a.receipt_id for a in answers if a.status == 200 and a.receipt_id]
        failed = [a for a in answers if a.status != 200 and a.at >= killed]
        first_failed = min((a.at for a in failed), default=None)
        back = min((a.at for a in answers if a.status == 200 and a.at >= writable), default=None)
        first_back = min(  # the first 200 to a post sent after the first failure
            (a.at for a in answers if a.status == 200 and first_failed and a.sent > first_failed),
            default=None,
        )
        return {
            "manager": args.manager,
            "kill": args.kill,
            "processes": args.processes,
            "clients": args.clients,
            "killed_port": primary,
            "new_primary_port": int(found["port"]),
            "posts_acknowledged": len(acknowledged),
            "acknowledged_after_kill": sum(1 for a in answers if a.status == 200 and a.at > killed),
            "answered_503": sum(1 for a in answers if a.status == 503),
            "answered_other_5xx": sum(1 for a in answers if a.status >= 500 and a.status != 503),
            "answered_other": sorted({a.status for a in answers} - {0, 200, 503}),
            "no_answer": sum(1 for a in answers if a.status == 0),
            "missing_after_failover": missing(url, acknowledged),
            "outage_seen_by_clients_s": (
                round(first_back - first_failed, 2) if first_back and first_failed else 0.0
            ),
            "kill_to_writable_primary_s": round(found["writable"], 2),
            "kill_to_first_200_s": round(back - killed, 2) if back else None,
            "writable_to_first_200_s": round(back - writable, 2) if back else None,
            "longest_post_s": round(max(a.at - a.sent for a in answers), 2),
            "webhook_slowest_before_s": before_webhook,
            "webhook_slowest_after_s": after_webhook,
            "worker_listening_on_new_primary": listening_on(url) > 0,
            "kuitti_processes_alive": kuitti.alive(),
            "tracebacks_in_kuitti_logs": kuitti.tracebacks(),
        }
    finally:
        posts.stop.set()
        kuitti.stop()
        db.dispose()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manager", choices=sorted(DEBIAN_PACKAGES), default="patroni")
    parser.add_argument("--kill", choices=("postgres", "node"), default="postgres")
    parser.add_argument("--processes", type=int, default=2, help="kuitti serve --workers")
    parser.add_argument("--clients", type=int, default=8, help="threads posting back to back")
    parser.add_argument("--before", type=float, default=5.0, help="seconds of load before the kill")
    parser.add_argument("--after", type=float, default=5.0, help="seconds of load after the return")
    parser.add_argument("--keep", action="store_true", help="leave the temporary directories")
    args = parser.parse_args()
    absent = [c for c in COMMANDS[args.manager] if shutil.which(c) is None]
    if absent or not (PG_BIN / "initdb").exists():
        packages = " ".join(("postgresql-15", *DEBIAN_PACKAGES[args.manager]))
        raise SystemExit(f"needs {', '.join(absent) or PG_BIN}: apt-get install -y {packages}")
    print(json.dumps(run(args), indent=1))


if __name__ == "__main__":
    main()

"""The ingest walk: which of kuitti's rooms one receipt post enters.

Posts one card-payment receipt with tokens (a ``RECEIPT_ID`` of the merchant's namespace and the
``EMAIL`` of a registered user) through the ASGI app in this process, on a fresh SQLite database,
and records every kuitti function that starts while the request is handled (``sys.setprofile``
in every thread, so the route's worker thread is seen too). One post warms the process up first
(imports, first-call caches), so the figures are the steady walk of a post, not of a start.

It prints:

- **modules** and **packages** entered (a package is ``kuitti.<name>``; the top-level modules
  form the package ``kuitti``), and the **domain modules** among them (the count issue 14 used
  for its "about 20 modules" baseline: every module outside the top-level helpers and the models);
- **crossings**: calls from a function of one package into one of another;
- **climbs**: crossings into a domain package that is already further down the call stack (the
  walk goes back up to a room it came through, e.g. receipts → delivery → receipts); calls into
  the top-level helpers and the models are steps down, not climbs;
- **visits** per module: calls into the module from a function of another module (calls inside
  a module do not count; library frames between two kuitti frames are looked through).

    .venv/bin/python bench/ingest_walk.py           # the figures
    .venv/bin/python bench/ingest_walk.py --calls   # and every crossing, in order

Counts, not times: the figures do not depend on how loaded the machine is.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from starlette.types import ASGIApp  # noqa: E402

from kuitti.app import create_app  # noqa: E402
from kuitti.clock import FrozenClock  # noqa: E402
from kuitti.config import Settings  # noqa: E402
from kuitti.db import Database  # noqa: E402
from kuitti.dbmigrate import upgrade  # noqa: E402
from kuitti.services import Services  # noqa: E402
from tests.factories import auth, make_partner, make_user, receipt_doc, token_body  # noqa: E402

KUITTI_DIR = str(ROOT / "kuitti") + "/"
# The layer every domain stands on (the top-level helpers: db, clock, security, middleware, … and
# the models). The middleware is at the bottom of every request's stack, so a call into this
# layer is a step down, never a climb back up.
BASE_PACKAGES = frozenset({"kuitti", "models"})


def module_of(frame: FrameType) -> str | None:
    """``posting/service.py`` for a frame of kuitti's Python code, else None (templates too)."""
    filename = frame.f_code.co_filename
    if filename.startswith(KUITTI_DIR) and filename.endswith(".py"):
        return filename.removeprefix(KUITTI_DIR)
    return None


def package_of(module: str) -> str:
    return module.split("/", 1)[0] if "/" in module else "kuitti"


def kuitti_frames_below(frame: FrameType) -> list[str]:
    """The modules of the kuitti frames that called ``frame``, nearest first."""
    modules = []
    caller = frame.f_back
    while caller is not None:
        module = module_of(caller)
        if module is not None:
            modules.append(module)
        caller = caller.f_back
    return modules


@dataclass
class Walk:
    recording: bool = False
    visits: Counter[str] = field(default_factory=Counter)
    crossings: list[tuple[str, str]] = field(default_factory=list)
    climbs: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def profile(self, frame: FrameType, event: str, _arg: object) -> None:
        if not self.recording or event != "call":
            return
        module = module_of(frame)
        if module is None:
            return
        below = kuitti_frames_below(frame)
        caller = below[0] if below else None
        if caller == module:
            return
        with self.lock:
            self.visits[module] += 1
            if caller is None or package_of(caller) == package_of(module):
                return
            self.crossings.append((caller, module))
            target = package_of(module)
            if target not in BASE_PACKAGES and target in {package_of(m) for m in below[1:]}:
                self.climbs.append((caller, module))

    def report(self, show_calls: bool) -> str:
        packages = sorted({package_of(m) for m in self.visits})
        domain = sorted(m for m in self.visits if package_of(m) not in BASE_PACKAGES)
        domain_packages = sorted({package_of(m) for m in domain})
        lines = [
            f"modules entered: {len(self.visits)}",
            f"packages entered: {len(packages)} ({', '.join(packages)})",
            f"domain modules entered (the issue's count: no top-level helpers, no models): "
            f"{len(domain)} in {len(domain_packages)} packages ({', '.join(domain_packages)})",
            f"crossings between packages: {len(self.crossings)}",
            f"climbs back up: {len(self.climbs)}"
            + "".join(f"\n  {a} -> {b}" for a, b in self.climbs),
            "visits per module (calls in from another module):",
            *(f"  {count:4d}  {module}" for module, count in self.visits.most_common()),
        ]
        if show_calls:
            lines.append("crossings in order:")
            lines.extend(f"  {a} -> {b}" for a, b in self.crossings)
        return "\n".join(lines)


async def walk_one_post(walk: Walk, app: ASGIApp, api_key: str) -> None:
    """One warm-up post, then the recorded one (the lifespan is not run: no worker starts)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://kuitti.test") as client:
        for number, record in (("WARM-1", False), ("WALK-1", True)):
            body = token_body(
                receipt_doc(receiptNumber=number),
                {"type": "RECEIPT_ID", "value": number, "namespace": "kauppa"},
                {"type": "EMAIL", "value": "maija@example.com"},
            )
            walk.recording = record
            answer = await client.post("/api/v1/receipts/", json=body, headers=auth(api_key))
            walk.recording = False
            assert answer.status_code == 200, answer.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", action="store_true", help="also list every crossing")
    args = parser.parse_args()

    walk = Walk()
    threading.setprofile(walk.profile)  # threads started from here on (the route's threadpool)
    sys.setprofile(walk.profile)
    with tempfile.TemporaryDirectory() as var:
        settings = Settings(
            database_url=f"sqlite:///{var}/walk.db",
            var_dir=Path(var),
            public_url="http://127.0.0.1:8000",
            secret_key="ingest-walk-key-not-for-production",
            log_level="WARNING",
        )
        db = Database(settings.resolved_database_url)
        upgrade(db)
        services = Services(settings=settings, db=db, clock=FrozenClock())
        merchant = make_partner(services, namespaces=["kauppa"])
        make_user(services, "maija@example.com")
        app = create_app(settings, db=db, clock=services.clock)

        asyncio.run(walk_one_post(walk, app, merchant.api_key))
        sys.setprofile(None)
        threading.setprofile(None)
        db.dispose()
    print(walk.report(args.calls))


if __name__ == "__main__":
    main()

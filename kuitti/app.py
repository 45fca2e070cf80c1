"""create_app(): the routes (FastAPI's routers and the front door's table), the middleware, the
error handlers, the operations endpoints, and the lifespan that opens the database and starts the
in-process worker."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from kuitti import __version__
from kuitti.admission import POOL_WAIT_SHARE
from kuitti.allowed import allowed_methods
from kuitti.cards.routes import router as cards_router
from kuitti.clients import TrustedProxyHeaders
from kuitti.clock import Clock, SystemClock
from kuitti.config import Settings, load_settings
from kuitti.db import Database
from kuitti.dbmigrate import not_ready_reason
from kuitti.delivery.routes import router as delivery_router
from kuitti.dispatch import install_dispatch
from kuitti.errors import ErrorDetail, KuittiError
from kuitti.front import FRONT_DOCUMENTED, FRONT_ROUTES, FrontDoor
from kuitti.logs import configure_logging, log
from kuitti.middleware import RequestContextMiddleware, TrailingSlashes
from kuitti.oauth.routes import router as oauth_router
from kuitti.openapi import add_docs, build_openapi
from kuitti.paths import STATIC_DIR
from kuitti.posting.ingest import Ingest
from kuitti.receipts.dry_run import router as dry_run_router
from kuitti.receipts.routes import router as receipts_router
from kuitti.receipts.verification import router as verification_router
from kuitti.replicas import ReadReplica
from kuitti.responses import ORJSONResponse, error_response
from kuitti.services import Services
from kuitti.users.routes import router as users_router
from kuitti.web import render
from kuitti.worker import run_worker

GC_YOUNG_THRESHOLD = 100_000
ROUTERS = (
    receipts_router,
    dry_run_router,
    delivery_router,
    oauth_router,
    users_router,
    cards_router,
    verification_router,
)


def create_app(
    settings: Settings | None = None,
    *,
    db: Database | None = None,
    clock: Clock | None = None,
    run_worker_in_process: bool = False,
    listening: str | None = None,
    processes: int = 1,
    announce_ready: bool = True,
) -> FastAPI:
    """The application. For the ready line: ``listening`` is the address ``kuitti serve`` bound,
    ``processes`` how many server processes it started, and ``announce_ready`` whether this is
    the one process of them that logs the line."""
    settings = settings or load_settings()
    configure_logging(settings.log_level, json=settings.log_json)
    own_db = db is None
    db = db or Database(
        settings.resolved_database_url,
        pool_size=settings.db_pool_size,
        listen_url=settings.listen_database_url,
        prepared_statements=settings.db_prepared_statements,
        busy_wait=settings.max_queue_seconds * POOL_WAIT_SHARE,
    )
    replica = None
    if settings.read_database_url:
        replica = ReadReplica(
            settings.read_database_url,
            pool_size=settings.db_pool_size,
            prepared_statements=settings.db_prepared_statements,
        )
    services = Services(settings=settings, db=db, clock=clock or SystemClock(), replica=replica)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Few threads: the handlers are CPU-bound Python, and forty threads fighting for the GIL
        # starve the one holding a database lock (bench/ingest.py, docs/performance.md).
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.threads
        tune_garbage_collector()
        await db.open_async_reads()
        if replica is not None:
            await replica.open()
        stop = asyncio.Event()
        with db.checkpointing():
            worker = (
                asyncio.create_task(run_worker(services, stop)) if run_worker_in_process else None
            )
            if announce_ready:
                log.info(
                    "kuitti is ready",
                    listening=listening or "through its ASGI server",
                    database=db.label,
                    read_replica=replica.label if replica is not None else None,
                    processes=processes,
                    worker=_worker_place(run_worker_in_process, processes),
                )
            try:
                yield
            finally:
                stop.set()
                if worker is not None:
                    await worker
                await db.close_async_reads()
                if replica is not None:
                    await replica.close()
        if replica is not None:
            replica.dispose()
        if own_db:
            # Its connections closed: the last one to close on SQLite folds the WAL into the
            # database file and removes it.
            db.dispose()

    app = FastAPI(
        title="kuitti",
        version=__version__,
        summary="An open digital receipt service.",
        lifespan=lifespan,
        default_response_class=ORJSONResponse,
        redirect_slashes=False,
        docs_url=None,  # add_docs() serves it without a CDN
        redoc_url=None,
    )
    app.state.services = services
    app.state.ingest = Ingest(services)
    for router in ROUTERS:
        app.include_router(router)
    _add_operations_routes(app, services)
    add_docs(app)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _add_error_handlers(app)
    install_dispatch(app.router)
    # The last added runs first: the edge, then the slash, then the front door's table.
    app.add_middleware(FrontDoor, routes=FRONT_ROUTES)
    api_routes = [*FRONT_ROUTES, *(route for router in ROUTERS for route in router.routes)]
    app.add_middleware(TrailingSlashes, routes=api_routes)
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(TrustedProxyHeaders, trusted=settings.trusted_proxies)
    app.openapi = lambda: build_openapi(app, FRONT_DOCUMENTED)  # type: ignore[method-assign]
    return app


def tune_garbage_collector() -> None:
    """Keep the cyclic garbage collector off the application's own long-lived objects.

    A request allocates thousands of short-lived containers (the JSON, the Pydantic models, the
    rows), so collections run often, and with the defaults each older one walked every module,
    class and mapper loaded at start: a third of a receipt post's CPU (docs/performance.md,
    Ingest). Frozen, the objects alive at start-up are never walked again; the higher first
    threshold makes collections of young objects rarer: each one walks the documents and models
    of every request in flight, so at 10 000 a served receipt post still paid 15 % of its CPU for
    them, at 100 000 about as little as with the collector off (bench/HISTORY.md). Unreachable
    cycles are still freed."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)


def _worker_place(run_worker_in_process: bool, processes: int) -> str:
    if processes == 1:
        return "in this process" if run_worker_in_process else "not in this process"
    if run_worker_in_process:
        return f"in each of the {processes} server processes"
    return "not in the server processes"


READINESS_SCHEMA = {
    "type": "object",
    "properties": {"status": {"type": "string"}, "reason": {"type": "string"}},
    "required": ["status"],
}


def _add_operations_routes(app: FastAPI, services: Services) -> None:
    @app.get("/", include_in_schema=False)
    def home(request: Request) -> Response:
        """Where a newcomer lands: links to the API docs, the guides and the health endpoints."""
        return render(request, "home.html", {"version": __version__})

    @app.get("/healthz", tags=["operations"], summary="The process is alive")
    async def healthz() -> dict[str, str]:  # async: no thread hop for a constant
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["operations"],
        summary="The database answers, takes writes and is migrated",
        responses={
            200: {
                "description": "Ready (`status`: `ready`).",
                "content": {"application/json": {"schema": READINESS_SCHEMA}},
            },
            503: {
                "description": "Not ready: the reason says why (`status`: `unavailable`).",
                "content": {"application/json": {"schema": READINESS_SCHEMA}},
            },
        },
    )
    def readyz() -> ORJSONResponse:
        # The primary alone decides readiness: a replica away only sends reads to the primary
        # (kuitti/replicas.py), so it is reported, never a reason to be taken out of service.
        replica = _replica_state(services)
        try:
            reason = not_ready_reason(services.db)
        except Exception as exc:  # readiness reports every failure as not ready
            return ORJSONResponse({"status": "unavailable", "reason": str(exc), **replica}, 503)
        if reason is not None:
            return ORJSONResponse({"status": "unavailable", "reason": reason, **replica}, 503)
        return ORJSONResponse({"status": "ready", **replica})

    @app.get(
        "/metrics",
        tags=["operations"],
        summary="Prometheus metrics",
        response_class=Response,
        responses={
            200: {
                "description": "The Prometheus text format.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        },
    )
    def metrics() -> Response:
        if services.replica is not None:
            services.replica.refresh()  # its lag as of this scrape
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def _replica_state(services: Services) -> dict[str, str]:
    """``/readyz``'s word on the read replica, when there is one: ``ok`` or ``away``."""
    replica = services.replica
    if replica is None:
        return {}
    replica.refresh()
    return {"read_replica": "ok" if replica.available else "away"}


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(KuittiError)
    async def kuitti_error(_request: Request, exc: KuittiError) -> Response:
        return error_response(exc.details(), exc.status_code, exc.headers())

    @app.exception_handler(RequestValidationError)
    async def request_invalid(_request: Request, exc: RequestValidationError) -> Response:
        details = [
            ErrorDetail(
                "missing_field" if e["type"] == "missing" else "invalid_value",
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}",
            )
            for e in exc.errors()
        ]
        return error_response(details, 400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods([*FRONT_ROUTES, *app.router.routes], request.scope)
        return error_response([ErrorDetail(code, str(exc.detail))], exc.status_code, headers)

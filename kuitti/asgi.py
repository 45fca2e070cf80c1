"""The ASGI application as a server process builds it from the environment.

``kuitti serve`` runs uvicorn with this factory in every server process; so can any ASGI server
(``gunicorn -k uvicorn.workers.UvicornWorker 'kuitti.asgi:app_from_environment()'``).
"""

from __future__ import annotations

import os

from fastapi import FastAPI

from kuitti.app import create_app
from kuitti.config import load_settings

# Set by ``kuitti serve`` for the server processes it starts.
RUN_WORKER_ENV = "KUITTI_INTERNAL_RUN_WORKER"
LISTEN_ENV = "KUITTI_INTERNAL_LISTEN"
PROCESSES_ENV = "KUITTI_INTERNAL_PROCESSES"
# A path no file holds yet: of several server processes, the one that creates it logs the
# ready line, so an operator reads one line however many processes serve.
READY_CLAIM_ENV = "KUITTI_INTERNAL_READY_CLAIM"


def app_from_environment() -> FastAPI:
    run_worker = os.environ.get(RUN_WORKER_ENV, "1") == "1"
    return create_app(
        load_settings(),
        run_worker_in_process=run_worker,
        listening=os.environ.get(LISTEN_ENV),
        processes=int(os.environ.get(PROCESSES_ENV, "1")),
        announce_ready=claim_ready_line(os.environ.get(READY_CLAIM_ENV)),
    )


def claim_ready_line(claim_path: str | None) -> bool:
    """True for the first process to claim ``claim_path`` (creating the file is atomic), and
    for every process when there is nothing to claim."""
    if not claim_path:
        return True
    try:
        os.close(os.open(claim_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True

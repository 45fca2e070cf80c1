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


def app_from_environment() -> FastAPI:
    run_worker = os.environ.get(RUN_WORKER_ENV, "1") == "1"
    return create_app(
        load_settings(), run_worker_in_process=run_worker, listening=os.environ.get(LISTEN_ENV)
    )

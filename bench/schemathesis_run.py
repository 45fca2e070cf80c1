"""A schemathesis run against a served kuitti with real keys and a real OAuth token, on SQLite
and on PostgreSQL: how many cases answered 5xx and how many answered a status the OpenAPI
document does not list.

    uv venv /tmp/st && VIRTUAL_ENV=/tmp/st uv pip install schemathesis
    .venv/bin/python bench/schemathesis_run.py --schemathesis /tmp/st/bin/schemathesis \\
        [--database both] [--max-examples 100]

schemathesis is not a dependency of kuitti (nothing imports it), so it runs from its own
environment. Per database: a fresh database, ``kuitti serve``, ``kuitti demo`` (a merchant, an
app, a verified user and receipts), the OAuth flow walked over HTTP (log in, approve, exchange
the code) for the user's Bearer token, then ``schemathesis run`` over every operation with each
security scheme of the document filled in (``schemathesis.toml``, ``[auth.openapi.*]``), all
checks, the examples, coverage and fuzzing phases. It prints schemathesis's summary and the
failures of the two checks named above, and keeps the JUnit report in ``--out``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import database, free_port, running  # noqa: E402  (bench/ is the script's own)

from tests.oauth.flow import csrf_of  # noqa: E402

KUITTI = str(Path(sys.executable).parent / "kuitti")
HIDDEN_RE = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')
CONFIG = """\
[auth.openapi.MerchantToken]
api_key = "Token {MERCHANT_KEY}"
[auth.openapi.PartnerKey]
api_key = "{API_KEY}"
[auth.openapi.ServiceApiKey]
api_key = "{API_KEY}"
[auth.openapi.Bearer]
bearer = "{BEARER}"
[auth.openapi.ClientBasic]
username = "{CLIENT_ID}"
password = "{CLIENT_SECRET}"
"""


def demo(env: dict[str, str]) -> dict[str, str]:
    """``kuitti demo``'s exported names and values."""
    out = subprocess.run([KUITTI, "demo"], env=env, capture_output=True, text=True, check=True)
    names = {}
    for line in out.stdout.splitlines():
        if line.startswith("export "):
            for pair in line.removeprefix("export ").split("#")[0].split():
                name, _, value = pair.partition("=")
                names[name] = value
    return names


def bearer_token(url: str, names: dict[str, str]) -> str:
    """The demo user connects the demo app: log in, approve, exchange the code."""
    with httpx.Client(base_url=url, timeout=60) as client:
        page = client.get("/login", params={"next": "/account"})
        logged_in = client.post(
            "/login",
            data={
                "email": names["DEMO_EMAIL"],
                "password": names["DEMO_PASSWORD"],
                "action": "login",
                "next": "/account",
                "csrf_token": csrf_of(page),
            },
        )
        assert logged_in.status_code == 303, logged_in.text
        params = {
            "response_type": "code",
            "client_id": names["CLIENT_ID"],
            "redirect_uri": names["REDIRECT_URI"],
            "scope": "receipt:read",
            "state": "fuzz",
        }
        page = client.get("/auth", params=params)
        form = {name: value for name, value in HIDDEN_RE.findall(page.text) if name != "next"}
        approved = client.post("/auth", data={**form, "decision": "approve"})
        assert approved.status_code == 303, approved.text
        code = parse_qs(urlsplit(approved.headers["location"]).query)["code"][0]
        token = client.post(
            "/api/oauth/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "client_id": names["CLIENT_ID"],
                "client_secret": names["CLIENT_SECRET"],
                "redirect_uri": names["REDIRECT_URI"],
            },
        )
        assert token.status_code == 200, token.text
        access: str = token.json()["access_token"]
        return access


def fuzz(kind: str, options: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp, database(kind) as db_url:
        workdir = Path(tmp)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "KUITTI_VAR_DIR": str(workdir / "var"),
            "KUITTI_PUBLIC_URL": url,
            "KUITTI_LOG_LEVEL": "WARNING",
        }
        env.pop("KUITTI_DATABASE_URL", None)
        if db_url:
            env["KUITTI_DATABASE_URL"] = db_url
            subprocess.run([KUITTI, "db", "upgrade"], env=env, check=True, capture_output=True)
        with running(
            [KUITTI, "serve", "--port", str(port)], env, f"{url}/readyz", workdir / "serve.log"
        ):
            names = demo(env)
            names["BEARER"] = bearer_token(url, names)
            config = workdir / "schemathesis.toml"
            config.write_text(CONFIG.format(**names))
            report = Path(options.out) / f"schemathesis-{kind}.xml"
            command = [
                options.schemathesis, "--config-file", str(config), "run", f"{url}/openapi.json",
                "--checks", "all", "--phases", "examples,coverage,fuzzing",
                "--max-examples", str(options.max_examples), "--workers", str(options.workers),
                "--report", "junit", "--report-junit-path", str(report),
                "--request-timeout", "30", "--suppress-health-check", "all",
            ]  # fmt: skip
            print(f"== {kind}: {' '.join(command[1:])}", flush=True)
            result = subprocess.run(command, cwd=workdir, env=env, check=False)
            log = (workdir / "serve.log").read_text()
            print(f"== {kind}: server log lines with a traceback: {log.count('Traceback')}")
            return result.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemathesis", required=True, help="the schemathesis command")
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--max-examples", type=int, default=100)
    # One request at a time: with more, on a busy host, requests wait behind each other past the
    # server's queue bound and are shed (503), which is the server doing its job, not a finding.
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", default=".", help="where the JUnit reports go")
    options = parser.parse_args()
    kinds = ["sqlite", "postgresql"] if options.database == "both" else [options.database]
    codes = {kind: fuzz(kind, options) for kind in kinds}
    print(f"== schemathesis exit codes: {codes}")


if __name__ == "__main__":
    main()

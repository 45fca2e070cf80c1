"""The guides' command sequences, run from the guides' own text against a real ``kuitti serve``
on a fresh database, as a newcomer pastes them (the README tour has ``tests/test_readme.py``)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from kuitti.models import Partner, WebhookDelivery
from kuitti.services import Services
from kuitti.webhooks.events import enqueue
from kuitti.webhooks.service import replay
from tests.conftest import free_port
from tests.oauth.flow import consent, log_in
from tests.test_serve import start, stop, wait_ready
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import a_receipt_notification, deliver, queue, webhook_partner

ROOT = Path(__file__).resolve().parent.parent
GUIDE_ADDRESS = "http://127.0.0.1:8000"


def shell_blocks(path: Path, heading: str) -> list[str]:
    """The ```sh blocks of the section that starts at ``heading``, in order, unindented."""
    section = path.read_text().split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^( *)```sh\n(.*?)^\1```", section, re.S | re.M)
    assert blocks, f"no ```sh block under {heading!r} in {path.name}"
    return [re.sub(rf"^{indent}", "", body, flags=re.M) for indent, body in blocks]


def bash(script: str, env: dict[str, str], cwd: Path) -> str:
    """Runs ``script`` as a pasted sequence; it must neither fail nor complain. Whatever it
    leaves running in the background is stopped with it (its own process group)."""
    shell = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script], env=env, cwd=cwd, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = shell.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGTERM)
    assert shell.returncode == 0, stderr
    # Nothing on stderr but a command naming the database it uses.
    assert [line for line in stderr.splitlines() if not line.startswith("kuitti: database ")] == []
    return stdout


def exports_of(demo_output: str) -> dict[str, str]:
    """What the demo's ``export`` lines set."""
    found: dict[str, str] = {}
    for line in demo_output.splitlines():
        if line.startswith("export "):
            found.update(re.findall(r"(\w+)=(\S+)", line.split("#", 1)[0]))
    return found


def test_oauth_try_it_with_the_demo(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path
) -> None:
    """docs/oauth.md, "Try it with kuitti demo": demo, consent, code exchange, read, revoke."""
    url, env, args = serve
    start_block, exchange, read, revoke = shell_blocks(
        ROOT / "docs" / "oauth.md", "## Try it with `kuitti demo`"
    )
    process, log = start(args, env, tmp_path)
    try:
        wait_ready(url, process, log)
        demo = bash(start_block, env, tmp_path)
        exports = exports_of(demo)
        assert exports["KUITTI"] == url
        # Step 1 happens in a browser: open the consent URL, log in, press Allow.
        consent_url = bash(demo, env, tmp_path).strip().rsplit("\n", 1)[-1]
        assert consent_url.startswith(f"{url}/auth?")
        with httpx.Client(base_url=url) as browser:
            logged_in = log_in(browser, exports["DEMO_EMAIL"], exports["DEMO_PASSWORD"])
            assert logged_in.status_code == 303, logged_in.text
            query = dict(httpx.URL(consent_url).params)
            allowed = consent(browser, query)
        callback = httpx.URL(allowed.headers["location"])
        assert str(callback).startswith(exports["REDIRECT_URI"] + "?")
        # Steps 2 to 4, with the code "copied from the address bar".
        code_line = re.compile(r"^export CODE=.*$", re.M)
        assert code_line.search(exchange), "step 2 sets CODE"
        pasted = code_line.sub(f"export CODE={callback.params['code']}", exchange)
        steps = [pasted, read, revoke]
        exported = "\n".join(line for line in demo.splitlines() if line.startswith("export "))
        out = bash("\n".join([exported, *(f"{s}\necho '~~~'" for s in steps)]), env, tmp_path)
    finally:
        stop(process)
    _exchange_out, listed, revoked_then_read, _ = out.split("~~~\n")
    receipts = orjson.loads(listed)["receipts"]
    assert [r["merchant_name"] for r in receipts] == ["Demokauppa Oy"]
    revoked, after = revoked_then_read.replace("}{", "}\n{").splitlines()
    assert orjson.loads(revoked)["revoked"] is True
    assert orjson.loads(after)["error"] == "invalid_token"


@pytest.mark.postgres_only
def test_readme_postgresql_with_several_processes(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path, services: Services
) -> None:
    """README, "Running on PostgreSQL with several processes", on this run's test database."""
    url, env, _args = serve
    (block,) = shell_blocks(ROOT / "README.md", "## Running on PostgreSQL with several processes")
    database_line = re.compile(r"^export KUITTI_DATABASE_URL=\S+", re.M)
    assert database_line.search(block)
    script = (
        database_line.sub(f"export KUITTI_DATABASE_URL={services.settings.database_url}", block)
        .replace(GUIDE_ADDRESS, url)
        .replace("--port 8000", f"--port {url.rsplit(':', 1)[1]}")
    )
    # The guide leaves the server and the worker running; stop them as it says.
    out = bash(script + "\nkill %1 %2\nwait\n", env, tmp_path)
    assert out == 'database is at the newest revision\n{"status":"ready"}\n', out


def test_webhooks_checking_code_accepts_a_real_delivery(services: Services) -> None:
    """docs/webhooks.md, "Checking a webhook": the receiver code as printed, given the key kuitti
    printed, accepts what the worker really sent and refuses a forged or altered one."""
    section = (ROOT / "docs" / "webhooks.md").read_text().split("## Checking a webhook\n", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S)
    assert snippet is not None
    with Receiver() as bank:
        partner = webhook_partner(services, bank.url)
        assert partner.webhook_key is not None
        queue(services, partner)
        assert deliver(services) == 1
        (call,) = bank.wait_for(1)
    handled: list[tuple[object, str]] = []
    code = snippet.group(1).replace('"whsec_…"', repr(partner.webhook_key))
    namespace: dict[str, object] = {
        "already_processed": lambda _webhook_id: False,
        "enqueue_for_processing": lambda event, webhook_id: handled.append((event, webhook_id)),
    }
    exec(compile(code, "docs/webhooks.md", "exec"), namespace)  # noqa: S102
    handle = namespace["handle"]
    assert callable(handle)
    assert handle(call.body, call.headers) == 200
    assert handled == [(orjson.loads(call.body), call.webhook_id)]
    assert handle(call.body.replace(b"}", b" }", 1), call.headers) == 400
    assert handle(call.body, {**call.headers, "authorization": "Token whsec_forged"}) == 401


def test_matching_try_it_matches_today_and_again(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path
) -> None:
    """docs/matching.md, "Try it": times computed when pasted, partners of its own each run."""
    url, env, args = serve
    setup, explain = shell_blocks(
        ROOT / "docs" / "matching.md", "## Try it: a card, its transaction and a receipt that match"
    )
    setup = setup.replace(GUIDE_ADDRESS, url).replace('export PATH="$PWD/.venv/bin:$PATH"', "")
    process, log = start(args, env, tmp_path)
    try:
        wait_ready(url, process, log)
        for _ in range(2):  # pasted twice, as a newcomer might
            out = bash(setup + '\necho "$RECEIPT_ID"\n', env, tmp_path)
            receipt_id = out.strip().rsplit("\n", 1)[-1]
            deadline = time.monotonic() + 60
            while True:  # the matching step runs just after the receipt's commit
                explained = bash(f"RECEIPT_ID={receipt_id}\n{explain}", env, tmp_path)
                if "pending" not in explained or time.monotonic() > deadline:
                    break
                time.sleep(0.2)  # polling a running server, not timing a result
            assert "  payment 0: matched — MID MID-1" in explained, explained
            assert re.search(r"^    matched card \S+ \(card-1\) on ", explained, re.M), explained
    finally:
        stop(process)


def test_webhooks_runnable_receiver_takes_real_deliveries(
    services: Services, tmp_path: Path
) -> None:
    """docs/webhooks.md, "A receiver you can run": the script as printed, set up with the
    commands as printed, prints a real delivery once (not its replay) and refuses a forgery."""
    section = (ROOT / "docs" / "webhooks.md").read_text().split("### A receiver you can run\n")[1]
    script = re.search(r"```python\n(.*?)```", section, re.S)
    setup = re.search(r"```sh\n(.*?)```", section, re.S)
    assert script is not None
    assert setup is not None
    (tmp_path / "receiver.py").write_text(script.group(1))
    port = free_port()
    lines = setup.group(1).replace("8080", str(port)).strip().splitlines()
    assert lines[0].startswith("python3 -m venv hooks-venv")  # the test's Python has the package
    assert lines[-1] == f"PORT={port} hooks-venv/bin/python receiver.py &"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "KUITTI_DATABASE_URL": services.db.url,
        "KUITTI_SECRET_KEY": str(services.settings.secret_key),
        "KUITTI_VAR_DIR": str(tmp_path),
    }
    key = bash("\n".join([*lines[1:-1], 'echo "$WEBHOOK_KEY"']), env, tmp_path).strip()
    created = orjson.loads((tmp_path / "hook-app.json").read_bytes())
    receiver = subprocess.Popen(
        [sys.executable, "receiver.py"], cwd=tmp_path, env={**env, "WEBHOOK_KEY": key,
        "PORT": str(port)}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        with services.db.session() as session:
            partner = session.get(Partner, uuid.UUID(created["partner_id"]))
            assert partner is not None
            delivery = enqueue(session, partner, a_receipt_notification(), now=services.clock.now())
            assert delivery is not None
            webhook_id = str(delivery.id)
        deadline = time.monotonic() + 60
        while True:  # the receiver is starting
            with contextlib.suppress(httpx.TransportError):
                httpx.get(f"http://127.0.0.1:{port}/")
                break
            assert time.monotonic() < deadline
            assert receiver.poll() is None
            time.sleep(0.1)  # polling a starting process, not timing a result
        assert deliver(services) == 1
        with services.db.session() as session:
            replay(session, uuid.UUID(webhook_id), now=services.clock.now())
        assert deliver(services) == 1  # the same event again: answered 200, not printed again
        forged = httpx.post(
            f"http://127.0.0.1:{port}/hook", content=b"{}", headers={"Authorization": "Token x"}
        )
        assert forged.status_code == 401
        unsigned = httpx.post(
            f"http://127.0.0.1:{port}/hook", content=b"{}", headers={"Authorization": key}
        )
        assert unsigned.status_code == 400
    finally:
        receiver.terminate()
        printed, _ = receiver.communicate(timeout=30)
    with services.db.session(write=False) as session:
        row = session.get(WebhookDelivery, uuid.UUID(webhook_id))
        assert row is not None
        assert [a.status_code for a in row.attempts] == [200, 200]
    [event] = [orjson.loads(line) for line in printed.splitlines()]
    assert event["notification_type"] == "receipt_notification"

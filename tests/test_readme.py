"""The README tour, run from the README text itself against a real ``kuitti serve``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import orjson

from tests.test_serve import start, stop, wait_ready

README = Path(__file__).resolve().parent.parent / "README.md"
TOUR_ADDRESS = "http://127.0.0.1:8000"


def tour_script() -> str:
    tour = README.read_text().split("## A five-minute tour", 1)[1]
    block = re.search(r"```sh\n(.*?)```", tour, re.S)
    assert block is not None, "the tour's first ```sh block"
    return block.group(1)


def test_readme_tour_runs_as_written(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path
) -> None:
    url, env, args = serve
    script = tour_script()
    process, log = start(args, env, tmp_path)
    try:
        wait_ready(url, process, log)
        shell = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script.replace(TOUR_ADDRESS, url)],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        stop(process)
    assert shell.returncode == 0, shell.stderr
    # Nothing but the CLI naming its database: no traceback, no curl error.
    assert [line for line in shell.stderr.splitlines() if not line.startswith("kuitti: ")] == []
    posted = orjson.loads((tmp_path / "receipt.json").read_bytes())
    assert orjson.loads((tmp_path / "created.json").read_bytes())["receipt_links"] == []
    assert orjson.dumps(posted).decode() in shell.stdout  # step 3 reads back what step 2 posted
    assert (tmp_path / "receipt.pdf").read_bytes().startswith(b"%PDF")
    assert b"<Finvoice" in (tmp_path / "finvoice.xml").read_bytes()
    assert (tmp_path / "finvoice.pdf").read_bytes().startswith(b"%PDF")
    assert f'"receipt_links":["{url}/ns/kauppa/r/till-1-0001"]' in shell.stdout
    # Step 5 prints exactly the errors the README shows under it.
    shown = script.rstrip().rsplit("\n# [", 1)[1]
    expected = orjson.loads("[" + re.sub(r"\n#\s*", "", shown))
    last_answer = shell.stdout[shell.stdout.rindex('[{"error"') :]  # curl adds no newline
    assert orjson.loads(last_answer) == expected

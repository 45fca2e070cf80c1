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


def run_tour(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], env=env, cwd=cwd, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


def test_readme_tour_runs_as_written_and_again(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path
) -> None:
    url, env, args = serve
    script = tour_script().replace(TOUR_ADDRESS, url)
    process, log = start(args, env, tmp_path)
    try:
        wait_ready(url, process, log)
        shell = run_tour(script, env, tmp_path)
        again = run_tour(script, env, tmp_path)  # a newcomer pastes it twice
    finally:
        stop(process)
    for run in (shell, again):
        assert run.returncode == 0, run.stderr
        # Nothing but the CLI naming its database: no traceback, no curl error.
        assert [
            line for line in run.stderr.splitlines() if not line.startswith("kuitti: database ")
        ] == []
    # What `curl --data @receipt.json` sent: the file without its line breaks.
    posted = (tmp_path / "receipt.json").read_text().replace("\n", "")
    assert orjson.loads((tmp_path / "created.json").read_bytes())["receipt_links"] == []
    assert posted in shell.stdout  # step 3 reads back the bytes step 2 posted
    assert (tmp_path / "receipt.pdf").read_bytes().startswith(b"%PDF")
    assert b"<Finvoice" in (tmp_path / "finvoice.xml").read_bytes()
    assert (tmp_path / "finvoice.pdf").read_bytes().startswith(b"%PDF")
    links = [
        re.findall(
            rf'"receipt_links":\["{re.escape(url)}/ns/(kauppa-[0-9a-f]{{6}})/r/till-1-0001"\]',
            run.stdout,
        )
        for run in (shell, again)
    ]
    assert len(links[0]) == len(links[1]) == 1
    assert links[0] != links[1]  # each run has a namespace of its own
    # Step 5 prints exactly the errors the README shows under it.
    shown = script.rstrip().rsplit("\n# [", 1)[1]
    expected = orjson.loads("[" + re.sub(r"\n#\s*", "", shown))
    last_answer = again.stdout[again.stdout.rindex('[{"error"') :]  # curl adds no newline
    assert orjson.loads(last_answer) == expected

"""How long the ``kuitti`` command takes to start: wall and CPU seconds per run, medians.

Each command runs ``--repeat`` times, in turns with the bare interpreter (``python -c pass``) as
the reference, so that other work on the machine weighs on every figure alike. CPU seconds (user
plus system, of the child process) are what a quiet machine's wall time comes close to; wall
seconds on a busy one are larger. Goals: any ``--help`` ≤ 0.5 s, a simple command ≤ 1 s.

The commands use a database of their own (SQLite in a temporary directory, made by the first
run, which is not counted).

    .venv/bin/python bench/cli_start.py [--repeat 5] [--kuitti PATH] [--compare PATH] [--json]

``--kuitti`` measures another checkout's console script; ``--compare PATH`` measures a second
one in the same turns (an older version: a before and after of one run, on the same load).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KUITTI = str(ROOT / ".venv" / "bin" / "kuitti")


REFERENCE = {"python -c pass (reference)": [sys.executable, "-c", "pass"]}


def commands(kuitti: str) -> dict[str, list[str]]:
    return {
        "kuitti --help": [kuitti, "--help"],
        "kuitti serve --help": [kuitti, "serve", "--help"],
        "kuitti partner create --help": [kuitti, "partner", "create", "--help"],
        "kuitti partner list": [kuitti, "partner", "list"],
        "kuitti receipts explain (unknown id)": [
            kuitti, "receipts", "explain", "00000000-0000-0000-0000-000000000000",
        ],
    }  # fmt: skip


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--kuitti", default=KUITTI, help="The console script to measure.")
    parser.add_argument("--compare", help="A second console script, measured in the same turns.")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args()
    measured = {**REFERENCE, **commands(args.kuitti)}
    if args.compare:
        measured.update({f"{name} [compare]": c for name, c in commands(args.compare).items()})
    with tempfile.TemporaryDirectory(prefix="kuitti-cli-bench-") as var:
        env = {**os.environ, "KUITTI_VAR_DIR": var, "KUITTI_LOG_LEVEL": "WARNING"}
        env.pop("KUITTI_DATABASE_URL", None)
        subprocess.run([args.kuitti, "partner", "list"], env=env, capture_output=True, check=True)
        if args.compare:
            subprocess.run([args.compare, "partner", "list"], env=env, capture_output=True)
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in measured}
        for _ in range(args.repeat):
            for name, command in measured.items():
                runs[name].append(timed(command, env))
    figures = {
        name: {
            "wall_s": round(statistics.median(w for w, _ in found), 3),
            "cpu_s": round(statistics.median(c for _, c in found), 3),
        }
        for name, found in runs.items()
    }
    if args.json:
        print(json.dumps({"repeat": args.repeat, "load": os.getloadavg(), "figures": figures}))
        return
    print(f"medians of {args.repeat} runs in turns; load average {os.getloadavg()[0]:.1f}")
    print(f"{'command':<50} {'wall s':>8} {'cpu s':>8}")
    for name, figure in figures.items():
        print(f"{name:<50} {figure['wall_s']:>8.3f} {figure['cpu_s']:>8.3f}")


if __name__ == "__main__":
    main()

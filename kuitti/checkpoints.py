"""WAL checkpoints of an embedded SQLite database, copied by a thread beside the writers.

SQLite appends every commit to the WAL file; a checkpoint copies the WAL back into the
database file and syncs both files to disk. By default the connection that commits runs one
after its commit once the WAL holds 1,000 pages, and the commit call returns only when the copy
and the two syncs are done: about 20 ms on the standard machine, most of it waiting for the
disk. The process's ingest writer would be stuck that long, every hundred receipts or so,
while its clients wait.

So a long-running process (``kuitti serve``'s processes, ``kuitti worker``) runs
``BackgroundCheckpoints`` while it serves: every write commit wakes a thread that, at most
every ``PAUSE_SECONDS``, catches up (``catch_up``) on a connection of its own. A PASSIVE
checkpoint takes no lock that writers need, so they carry on meanwhile.

The WAL starts over from its beginning only when a write transaction begins while every frame
in it is copied already. Under continuous writes one pass never gets there (frames arrive while
it copies; a thread running single passes let the WAL grow by 90 MB a second), so
``catch_up`` runs passes until one finds nothing new. A committing connection still
checkpoints once the WAL reaches ``WAL_AUTOCHECKPOINT_PAGES``: a backstop that bounds the WAL
where no thread runs (one-off commands) and finds little left to copy where one does.

Durability is unchanged: a commit is in the WAL before it is answered, whoever copies it.
"""

from __future__ import annotations

import sqlite3
import threading

from kuitti.logs import log

WAL_AUTOCHECKPOINT_PAGES = 10_000
"""WAL pages (4 KB each) after which a committing connection checkpoints (SQLite's default is
1,000)."""

PAUSE_SECONDS = 0.05
"""The least time between two catch-ups: each one syncs both files at least once."""

CATCH_UP_PASSES = 8


def catch_up(connection: sqlite3.Connection, *, passes: int = CATCH_UP_PASSES) -> tuple[int, int]:
    """PASSIVE checkpoints until one finds no frame written since the one before, or another
    connection is checkpointing: the frames in the WAL, and how many of them are in the
    database file (both -1 when another checkpoint was running)."""
    previous = None
    frames = copied = -1
    for _ in range(passes):
        busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if busy or frames == previous:
            break
        previous = frames
    return int(frames), int(copied)


class BackgroundCheckpoints:
    """A thread that copies the WAL of the SQLite database at ``path`` into it after writes."""

    def __init__(self, path: str, *, pause: float = PAUSE_SECONDS) -> None:
        self.path = path
        self.pause = pause
        self.rounds = 0
        """Catch-ups done so far."""
        self.last: tuple[int, int] | None = None
        """What the last catch-up returned."""
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._done = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name="kuitti-wal-checkpoints", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """A write committed: catch up soon."""
        self._wanted.set()

    def stop(self) -> None:
        """Catch up once more, then end the thread."""
        self._stopping.set()
        self._wanted.set()
        self._thread.join()

    def wait_for_rounds(self, rounds: int, timeout: float) -> bool:
        """Whether ``rounds`` catch-ups were done within ``timeout`` seconds."""
        with self._done:
            return self._done.wait_for(lambda: self.rounds >= rounds, timeout)

    def _run(self) -> None:
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            while True:
                self._wanted.wait()
                self._wanted.clear()
                self._round(connection)
                if self._stopping.wait(self.pause):  # at once if already stopping
                    if self._wanted.is_set():
                        self._round(connection)
                    return
        finally:
            connection.close()

    def _round(self, connection: sqlite3.Connection) -> None:
        try:
            self.last = catch_up(connection)
        except sqlite3.Error as error:  # the next round tries again
            log.warning("WAL checkpoint failed", error=str(error))
        with self._done:
            self.rounds += 1
            self._done.notify_all()

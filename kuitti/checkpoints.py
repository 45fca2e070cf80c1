"""WAL checkpoints of an embedded SQLite database, done mostly outside its write lock.

SQLite appends every commit to the WAL file; a checkpoint copies the WAL back into the
database file and syncs both to disk. By default the connection that commits runs one every
1,000 pages, while it still holds the database's one write lock, so the other server process's
writer waits for the copy and the two syncs. A served receipt post writes about seven pages:
with two processes that was about nine checkpoints a second inside the lock.

So each server process on SQLite runs ``BackgroundCheckpoints``: a thread that, every quarter
of a second, runs a PASSIVE checkpoint on a connection of its own. A PASSIVE checkpoint takes no
write lock (writers carry on) and copies every frame that no reader still needs. The committing
connection still checkpoints, but only every ``WAL_AUTOCHECKPOINT_PAGES`` pages, because only a
checkpoint run while the write lock is held can finish with no newer frame behind it, and only
then does the next writer start the WAL over from its beginning (with PASSIVE checkpoints alone
the WAL grew by 90 MB a second under load). By then the thread has copied nearly every frame,
so that checkpoint is short. Measured in docs/performance.md ("Ninth round").

Durability is unchanged: a commit is in the WAL before it is answered, whoever checkpoints it.
"""

from __future__ import annotations

import sqlite3
import threading

from kuitti.logs import log

WAL_AUTOCHECKPOINT_PAGES = 4000
"""Pages of WAL (4 KB each) after which a committing connection checkpoints (SQLite's
default is 1,000)."""

INTERVAL_SECONDS = 0.25


class BackgroundCheckpoints:
    """A thread that copies the WAL of the SQLite database at ``path`` into the database."""

    def __init__(self, path: str, *, interval: float = INTERVAL_SECONDS) -> None:
        self.path = path
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="kuitti-wal-checkpoints", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            while not self._stop.wait(self.interval):
                try:
                    passive_checkpoint(connection)
                except sqlite3.Error as error:  # the next round tries again
                    log.warning("WAL checkpoint failed", error=str(error))
        finally:
            connection.close()


def passive_checkpoint(connection: sqlite3.Connection) -> tuple[int, int]:
    """One PASSIVE checkpoint: the frames in the WAL, and how many of them are now in the
    database file (-1 and -1 while another connection's checkpoint runs)."""
    _busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(frames), int(copied)

"""Which process trains a run: an exclusive lock on one file per run, held while the run trains.

Two `fedbench run` of one task both trained every run, two FINISHED MLflow runs of one hash writing into one
checkpoint folder (issue 47, item 6). Now a run is trained only by the process that holds its lock
(`results/locks/<task>/<run hash>`, `fcntl.flock`); another process skips it. The kernel releases a lock when its
holder ends, however it ends (SIGKILL included), so a lock never outlives the process that took it. The file says
who holds it and, once it is released, when its run last ended: a process that checked the store before the other
finished the run skips it too, instead of training it a second time. Local to the host whose results folder holds
it, as the checkpoints are (a sweep's trials are held by the sweep's lease on its parent run instead).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Claim:
    """What taking a run's lock found: `mine` when this process may train it now; else `holder`, the process id that
    trains it (0: unknown), or `ended_at`, when another process ended it after `since`."""

    mine: bool
    holder: int = 0
    ended_at: float = 0.0

    def why_not(self) -> str:
        if self.ended_at:
            ended = time.strftime("%H:%M:%S", time.localtime(self.ended_at))
            return f"another process ended it at {ended}; its result is in the store"
        return f"process {self.holder or '(unknown)'} is training it now (run the task again once it ends)"


@contextlib.contextmanager
def claimed(path: Path, since: float) -> Iterator[Claim]:
    """Hold run lock `path` while the block runs, where no other process holds it and none ended its run after
    `since` (this command's start: it had checked the store then); the Claim says which."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            word, number = _read(fd)
            yield Claim(False, holder=int(number) if word == "running" else 0)
            return
        word, ended = _read(fd)
        if word == "ended" and ended > since:
            yield Claim(False, ended_at=ended)
            return
        _write(fd, f"running {os.getpid()}")
        try:
            yield Claim(True)
        finally:
            _write(fd, f"ended {time.time()!r}")  # to the full precision: a command may start within the millisecond
    finally:
        os.close(fd)  # releases the lock


def _read(fd: int) -> tuple[str, float]:
    """The lock file's one line, `running <pid>` or `ended <time>`, as (word, number); ("", 0) when empty or
    unreadable (a holder that is writing it)."""
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        word, number = os.read(fd, 100).decode().split()
        return word, float(number)
    except ValueError:
        return "", 0.0


def _write(fd: int, line: str) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, line.encode())

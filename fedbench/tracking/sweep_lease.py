"""Which process runs a sweep: a lease on its parent run, so that a second `--resume` cannot delete the first's live
child runs (resuming deletes the children left RUNNING, taking them for an interrupted attempt's).

The sweep writes its host and process id on the parent run (`LEASE_TAG`) and refreshes a heartbeat there every
`HEARTBEAT_S` while it runs. Another process resuming the sweep respects a lease whose holder is alive: on the same
host its process exists, elsewhere its heartbeat is younger than `STALE_S`. Two resumes started at the same moment
both see no live lease; of those, the one that creates the attempt's claim first (an MLflow experiment name, which
the store keeps unique even after the claim is deleted) goes on, and the other is refused.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from fedbench.tracking.tags import LEASE_TAG

log = logging.getLogger(__name__)

HEARTBEAT_S = 15.0
"""How often a running sweep says it is alive."""

STALE_S = 90.0
"""A lease whose heartbeat is older than this is taken for a sweep that died without ending its parent run."""


@dataclass(frozen=True)
class Lease:
    """The process running a sweep, and when it last said so."""

    host: str
    pid: int
    heartbeat: float

    @classmethod
    def mine(cls) -> Lease:
        return cls(socket.gethostname(), os.getpid(), time.time())

    def text(self) -> str:
        return f"{self.host} {self.pid} {self.heartbeat:.0f}"

    @classmethod
    def parse(cls, text: str | None) -> Lease | None:
        try:
            host, pid, heartbeat = (text or "").split()
            return cls(host, int(pid), float(heartbeat))
        except ValueError:  # no lease, or one written by something else: nobody to respect
            return None

    def alive(self, now: float | None = None) -> bool:
        """Whether the holder may still be running: its process exists (same host), or its heartbeat is recent."""
        if self.host == socket.gethostname():
            if self.pid == os.getpid():
                return False  # this process holds no sweep it is about to resume
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:  # exists, owned by another user
                return True
            return True
        return (now or time.time()) - self.heartbeat < STALE_S

    def describe(self) -> str:
        return f"process {self.pid} on {self.host} (last heard from {time.time() - self.heartbeat:.0f} s ago)"


class Heartbeat:
    """Refreshes this process's lease on a parent run every `HEARTBEAT_S` until stopped."""

    def __init__(self, client, run_id: str):
        self.client, self.run_id, self._stop = client, run_id, threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"sweep-lease-{run_id[:8]}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.client.set_tag(self.run_id, LEASE_TAG, Lease.mine().text())
            except Exception as exc:  # a store that is away for a moment: the next beat tries again
                log.warning("could not refresh the sweep's lease on run %s: %s", self.run_id, exc)

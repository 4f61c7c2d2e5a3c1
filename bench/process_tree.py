"""What the bench scripts share for memory: the peak of a process tree's memory, sampled from a thread.

Ray's processes (GCS, raylet with its object store, workers) are descendants of the driver that started
them, so a process and its descendants is the whole footprint of a run.
"""

from __future__ import annotations

import threading

import psutil


class TreePeak:
    """Samples a process and all its descendants every `interval` s; `peak` is the largest sum seen, `peak_parts`
    what it was made of.

    Args:
        pid: the tree's root; None: this process.
        measure: `rss` (pages resident, shared pages counted in every process that maps them) or `pss`
            (shared pages split between the processes mapping them: the tree's real share of memory,
            what counts when the object store's shared memory is mapped by every worker).
    """

    def __init__(self, pid: int | None = None, measure: str = "rss", interval: float = 0.2) -> None:
        self.root = psutil.Process(pid)
        self.measure = measure
        self.interval = interval
        self.peak = 0
        self.peak_parts: dict[str, int] = {}
        """The peak's memory by process name (Ray's workers are `ray::ClientWorker`, its object store is in the
        raylet)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _size(self, proc: psutil.Process) -> int:
        return proc.memory_full_info().pss if self.measure == "pss" else proc.memory_info().rss

    def label(self, proc: psutil.Process) -> str:
        """What the peak's parts are keyed by: the process name (a Ray worker's title names its running method,
        `ray::ClientWorker.fit`, so the method is cut off)."""
        return proc.name().split(".")[0]

    def sample(self) -> dict[str, int]:
        """The tree's memory now, summed by process name (processes that end while being read are skipped)."""
        parts: dict[str, int] = {}
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return parts
        for proc in procs:
            try:
                name = self.label(proc)
                parts[name] = parts.get(name, 0) + self._size(proc)
            except psutil.Error:
                pass
        return parts

    def _sample(self) -> None:
        while not self._stop.is_set():
            parts = self.sample()
            if sum(parts.values()) > self.peak:
                self.peak, self.peak_parts = sum(parts.values()), parts
            self._stop.wait(self.interval)

    def __enter__(self) -> TreePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

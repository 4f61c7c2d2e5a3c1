"""Start-up timeline: a JSON line per phase a run reaches, for bench/cli_overhead.py to break a run's wall time down.

When env `FEDBENCH_TIMELINE` names a file, `mark(phase)` appends {"phase", "t" (time.time()), "pid"} to it; the
bench reads the gaps between consecutive marks (interpreter and imports, task, tracking, Ray, dataset, scenario,
workers, first job, rounds). Every client job also marks its end (`job`, with its kind, wall and CPU seconds and the
page faults it took), so that a round's time splits into the jobs' compute and what lies between them. Unset, a mark
is one dictionary lookup: the calls stay in the code for good and this module imports nothing beyond os, json,
resource and time. Ray workers of a local Ray inherit the driver's environment, so their marks land in the same
file; appends of one short line are atomic, so processes do not interleave.
"""

from __future__ import annotations

import json
import os
import time

try:
    import resource
except ImportError:  # Windows has no getrusage
    resource = None  # type: ignore[assignment]

_marked_once: set[str] = set()


def mark(phase: str, **facts: float | str) -> None:
    """Append `phase` with the time now (and `facts`, such as a job's seconds) to the file named by
    FEDBENCH_TIMELINE; nothing when it is unset."""
    path = os.environ.get("FEDBENCH_TIMELINE")
    if path:
        with open(path, "a") as file:
            file.write(json.dumps({"phase": phase, "t": time.time(), "pid": os.getpid(), **facts}) + "\n")


def page_faults() -> int:
    """Minor page faults this process has taken so far: memory that malloc gave back and a job touched again shows
    here (fedbench.runtime.allocator). 0 where the platform does not count them (Windows)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource is not None else 0


def process_age() -> float:
    """Seconds since this process started (Linux's /proc; 0.0 elsewhere): a worker's first mark carries it, so that
    the time Ray took to start the process and import fedbench shows beside the phases that follow."""
    try:
        with open("/proc/uptime") as file:
            uptime = float(file.read().split()[0])
        with open("/proc/self/stat") as file:  # field 22, starttime in clock ticks since boot, after "pid (comm)"
            started = int(file.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0
    return uptime - started


def mark_once(phase: str) -> None:
    """`mark`, only the first time this process reaches `phase` (a worker's first job, not each of its jobs)."""
    if phase not in _marked_once and os.environ.get("FEDBENCH_TIMELINE"):
        _marked_once.add(phase)
        mark(phase)

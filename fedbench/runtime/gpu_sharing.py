"""Client workers sharing one GPU: whether their CUDA contexts run under CUDA MPS, and the warning when they do not.

Ray's GPU fractions only label a worker's share: the processes on one GPU each hold their own CUDA context, and
without MPS the GPU runs one context's kernels at a time (time slicing), so 8 workers' tiny kernels queue behind
each other. The MPS server funnels every client process's work into one context and runs their kernels side by
side. Measured on one H200 (bench/results/gpu.md; docs/cluster.md has the table): 8 workers x 0.125 GPU took 1.60 s
a round without MPS and 0.69 s with it, 16 workers x 0.0625 1.57 s and 0.48 s.

A CUDA context runs under MPS when, as it is created, an MPS control daemon listens on the `control` socket of the
pipe directory (env CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps): CUDA's client library connects there, and
the daemon hands it to the MPS server.
"""

from __future__ import annotations

import errno
import os
import socket
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
"""Where CUDA looks for the MPS control daemon when CUDA_MPS_PIPE_DIRECTORY is unset (NVIDIA's MPS guide)."""

START_MPS = (
    "export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-mps-log && "
    "nvidia-cuda-mps-control -d"
)
"""How to start MPS on a GPU machine before Ray (README, "GPUs"); `echo quit | nvidia-cuda-mps-control` stops it."""


class SharedGpuWarning(UserWarning):
    """Two or more client workers time-slice one GPU because its node runs no MPS daemon."""


def mps_pipe_directory(environ: Mapping[str, str] = os.environ) -> Path:
    """The pipe directory this process's CUDA contexts look for the MPS daemon in."""
    return Path(environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIRECTORY)


def mps_daemon_listening(environ: Mapping[str, str] = os.environ) -> bool:
    """True when an MPS control daemon accepts connections in this process's pipe directory, so a CUDA context
    created now runs under MPS. A socket file left by a daemon that died refuses the connection: False.

    The daemon's `control` socket is a SOCK_SEQPACKET one (checked against CUDA 13's daemon on an H200; a stream
    connection is refused with EPROTOTYPE); the connection sends nothing (the daemon logs "User did not send valid
    credentials" and goes on)."""
    control = str(mps_pipe_directory(environ) / "control")
    for kind in (socket.SOCK_SEQPACKET, socket.SOCK_STREAM):
        probe = socket.socket(socket.AF_UNIX, kind)
        probe.settimeout(1.0)
        try:
            probe.connect(control)
            return True
        except OSError as exc:
            if exc.errno != errno.EPROTOTYPE:  # anything but "a socket of another type": no daemon listens
                return False
        finally:
            probe.close()
    return False


def unshared_gpus(places: Iterable[Mapping[str, str]]) -> dict[tuple[str, str], set[str]]:
    """(node, GPU id) -> the workers (`pid` of each) training on that GPU without MPS, for the GPUs two or more of
    them share: the places where the GPU time-slices between processes."""
    sharing: dict[tuple[str, str], set[str]] = defaultdict(set)
    for place in places:
        if place.get("device") == "cuda" and place.get("mps") == "no":
            for gpu in filter(None, place.get("gpu_ids", "").split(",")):
                sharing[(place["node"], gpu)].add(place.get("pid", str(id(place))))
    return {where: workers for where, workers in sharing.items() if len(workers) >= 2}


class SharedGpuCheck:
    """Warns once (per process) when two or more client workers share a GPU without MPS.

    Fed the places of every run as it ends (a task's runs, or a sweep's trials, whose workers may share a GPU
    across trials): a worker is told apart by its node and process id, so a worker reused by the next run or trial
    counts once.
    """

    def __init__(self) -> None:
        self.places: dict[tuple[str, str], Mapping[str, str]] = {}
        self.warned = False

    def add(self, places: Iterable[Mapping[str, str]]) -> None:
        for place in places:
            self.places[(place.get("node", ""), place.get("pid", str(len(self.places))))] = place
        shared = unshared_gpus(self.places.values())
        if shared and not self.warned:
            self.warned = True
            warnings.warn(shared_gpu_message(shared), SharedGpuWarning, stacklevel=2)


def shared_gpu_message(shared: Mapping[tuple[str, str], set[str]]) -> str:
    (node, gpu), workers = max(shared.items(), key=lambda item: len(item[1]))
    where = f"GPU {gpu}" + ("" if node == "local" else f" of node {node[:12]}")
    more = f" (and {len(shared) - 1} more GPU{'s' * (len(shared) > 2)})" if len(shared) > 1 else ""
    return (
        f"{len(workers)} client workers share {where}{more} without CUDA MPS, so the GPU runs one worker's kernels "
        "at a time: on an H200, 8 workers x 0.125 GPU took 1.60 s a round this way and 0.69 s under MPS "
        f"(docs/cluster.md). Start MPS on the GPU's machine before Ray: `{START_MPS}` (README, \"GPUs\"; "
        "cluster.yaml starts it on GPU nodes)"
    )

"""Where a run's clients trained: each worker's Ray node, the GPU ids Ray gave it and the torch device it used.

Ray's GPU shares are only scheduling labels (Ray sets CUDA_VISIBLE_DEVICES and checks no device): a worker given
GPU 0 trains on CPU when torch sees no CUDA there (a simulated GPU, or a CPU-only torch), so a run records both what
Ray gave and what torch used.
Workers report once, when they load a run; the tags stay a handful of lines however many clients there are.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Sequence

WorkerPlace = dict[str, str]
"""`{"node": Ray node id, "gpu_ids": "0,1" or "", "device": "cpu" or "cuda"}`."""

PLACEMENT_TAG_PREFIXES = ("workers.", "clients.")
"""The run tags `placement_tags` writes (a sweep's trial sends them to the driver in its final report)."""


def worker_place(device: str) -> WorkerPlace:
    """This process's place: outside Ray, node `local` and no GPU ids."""
    ray = sys.modules.get("ray")  # a serial run in a process that never imported Ray does not import it here
    if ray is None or not ray.is_initialized():
        return {"node": "local", "gpu_ids": "", "device": device}
    gpu_ids = ",".join(str(gpu) for gpu in ray.get_gpu_ids())
    return {"node": ray.get_runtime_context().get_node_id(), "gpu_ids": gpu_ids, "device": device}


def placement_tags(places: Sequence[WorkerPlace], num_clients: int) -> dict[str, str]:
    """`workers.<i>.node|gpu_ids|device` for every worker, and the summary `clients.device`, e.g.
    `cpu: 20 clients on 8 workers (simulated GPUs 0,1)`; any client may run on any worker of the run, so a
    run whose workers differ says `20 clients on cuda: 6 workers (GPUs 0,1); cpu: 2 workers`."""
    tags = {f"workers.{i}.{key}": value for i, place in enumerate(places) for key, value in place.items()}
    groups = sorted(Counter((place["device"], place["gpu_ids"] != "") for place in places).items())
    parts = [f"{device}: {count} worker{'s' * (count > 1)}{_gpus(places, device, has_gpus)}"
             for (device, has_gpus), count in groups]
    if len(parts) == 1:
        tags["clients.device"] = parts[0].replace(": ", f": {num_clients} clients on ", 1)
    else:
        tags["clients.device"] = f"{num_clients} clients on " + "; ".join(parts)
    return tags


def _gpus(places: Sequence[WorkerPlace], device: str, has_gpus: bool) -> str:
    """` (simulated GPUs 0,1)`: the GPU ids Ray gave the workers training on `device` ("simulated" on CPU)."""
    if not has_gpus:
        return ""
    ids = sorted({gpu for place in places if place["device"] == device for gpu in place["gpu_ids"].split(",") if gpu})
    return f" ({'simulated ' if device == 'cpu' else ''}GPU{'s' * (len(ids) > 1)} {','.join(ids)})"

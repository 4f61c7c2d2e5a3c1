"""Where a run's clients trained: each worker's Ray node, the GPU ids Ray gave it, the torch device it used and, on a
GPU, whether its CUDA context runs under MPS (`fedbench.runtime.gpu_sharing`).

Ray's GPU shares are only scheduling labels (Ray sets CUDA_VISIBLE_DEVICES and checks no device): a worker given
GPU 0 trains on CPU when torch sees no CUDA there (a simulated GPU, or a CPU-only torch), so a run records both what
Ray gave and what torch used.
Workers report once, when they load a run; the tags stay a handful of lines however many clients there are.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Mapping, Sequence

from fedbench.core.callbacks import NUMERICS_TAG
from fedbench.runtime.gpu_sharing import mps_daemon_listening

WorkerPlace = dict[str, str]
"""`{"node": Ray node id, "gpu_ids": "0,1" or "", "device": "cpu" or "cuda", "pid": the worker's process id}`, on
`cuda` `"mps": "yes" or "no"`, and from a loaded worker `"numerics"` (`worker.numerics`: torch and the kernels)."""


def worker_place(device: str) -> WorkerPlace:
    """This process's place: outside Ray, node `local` and no GPU ids. Asked once the worker's CUDA context exists
    (after its warm-up), when MPS is what that context was created under."""
    ray = sys.modules.get("ray")  # a serial run in a process that never imported Ray does not import it here
    if ray is None or not ray.is_initialized():
        node, gpu_ids = "local", ""
    else:
        node, gpu_ids = ray.get_runtime_context().get_node_id(), ",".join(str(gpu) for gpu in ray.get_gpu_ids())
    place = {"node": node, "gpu_ids": gpu_ids, "device": device, "pid": str(os.getpid())}
    if device == "cuda":
        place["mps"] = "yes" if mps_daemon_listening() else "no"
    return place


def places_from_tags(tags: Mapping[str, str]) -> list[WorkerPlace]:
    """The workers' places back from a run's `workers.<i>.<key>` tags (`placement_tags`), in worker order."""
    places: dict[int, WorkerPlace] = {}
    for key, value in tags.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "workers" and parts[1].isdigit():
            places.setdefault(int(parts[1]), {})[parts[2]] = value
    return [places[i] for i in sorted(places)]


def placement_tags(places: Sequence[WorkerPlace], num_clients: int) -> dict[str, str]:
    """`workers.<i>.node|gpu_ids|device|pid` (and `mps` on a GPU) for every worker, and the summary `clients.device`,
    e.g. `cpu: 20 clients on 8 workers (simulated GPUs 0,1)` or `cuda: 20 clients on 8 workers (GPU 0, MPS)`; any
    client may run on any worker of the run, so a run whose workers differ says
    `20 clients on cuda: 6 workers (GPUs 0,1, no MPS); cpu: 2 workers`."""
    tags = {f"workers.{i}.{key}": value for i, place in enumerate(places) for key, value in place.items()}
    groups = sorted(Counter((place["device"], place["gpu_ids"] != "") for place in places).items())
    parts = [
        f"{device}: {count} worker{'s' * (count > 1)}{_gpus(places, device, has_gpus)}"
        for (device, has_gpus), count in groups
    ]
    if len(parts) == 1:
        tags["clients.device"] = parts[0].replace(": ", f": {num_clients} clients on ", 1)
    else:
        tags["clients.device"] = f"{num_clients} clients on " + "; ".join(parts)
    kinds = sorted({place["numerics"] for place in places if "numerics" in place})
    if kinds:  # one line, as a report compares it across runs: two kinds of worker give one run two numerics
        tags[NUMERICS_TAG] = " | ".join(kinds)
    return tags


def _gpus(places: Sequence[WorkerPlace], device: str, has_gpus: bool) -> str:
    """` (simulated GPUs 0,1)`: the GPU ids Ray gave the workers training on `device` ("simulated" on CPU), and on
    CUDA whether they run under MPS (`MPS`, `no MPS`, or `MPS on 3 of 8`)."""
    if not has_gpus:
        return ""
    on_device = [place for place in places if place["device"] == device]
    ids = sorted({gpu for place in on_device for gpu in place["gpu_ids"].split(",") if gpu})
    text = f"{'simulated ' if device == 'cpu' else ''}GPU{'s' * (len(ids) > 1)} {','.join(ids)}"
    if device == "cuda":
        under = sum(place.get("mps") == "yes" for place in on_device)
        text += ", " + (
            "MPS" if under == len(on_device) else "no MPS" if not under else f"MPS on {under} of {len(on_device)}"
        )
    return f" ({text})"

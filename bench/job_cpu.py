"""The CPU of the same fit jobs in fedbench's workers and in the hand-written script's actors, side by side.

bench/cli_overhead.py compares whole runs, whose jobs' CPU moves by several percent from one repeat to the next.
This isolates the jobs: two fedbench `ClientWorker` actors and two `Trainer` actors of bench/handwritten_fedavg.py
(separate processes, as in those runs, 0.5 CPU each so that all four fit on 2 cores) train the cli_overhead
workload's 20 clients (real MNIST, Dirichlet(0.5), LeNet-5, 2 local epochs of batch 64) from their initial model,
the fedbench pair and the hand-written pair taking turns by round, the clients' halves swapped each round. The jobs'
own marks (FEDBENCH_TIMELINE) give each side's CPU seconds and page faults. With `--fixed-malloc` the hand-written
actors also get fedbench's malloc thresholds (fedbench/runtime/allocator.py), which leaves only the two job codes
to differ: both sides' LeNet-5 is the same stack of torch's own layers (nn.Conv2d, nn.MaxPool2d, nn.Linear).

    FEDBENCH_DATA=/path/to/data python bench/job_cpu.py [--rounds 6] [--fixed-malloc]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent


def fix_malloc(actor) -> bool:
    """Run inside a hand-written actor (`__ray_call__`): fedbench's malloc thresholds there too."""
    from fedbench.runtime.allocator import keep_freed_memory

    return keep_freed_memory()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--fixed-malloc", action="store_true", help="fix the hand-written actors' malloc thresholds too"
    )
    args = parser.parse_args()
    timeline = Path(tempfile.mkdtemp(prefix="job_cpu-")) / "timeline.jsonl"
    os.environ["FEDBENCH_TIMELINE"] = str(timeline)  # read by the workers Ray starts from this process
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(BENCH))
    import handwritten_fedavg as hand
    import ray
    from cli_overhead import workload

    from fedbench.core.types import Payload
    from fedbench.runtime.jobs import FIT
    from fedbench.runtime.ray_pool import RemoteClientWorker, ensure_ray
    from fedbench.training import get_weights

    spec, dataset, scenario, parts = workload()
    settings = argparse.Namespace(
        epochs=spec.local_epochs, batch=spec.batch_size, lr=spec.optimizer.lr, momentum=spec.optimizer.momentum
    )
    ensure_ray()
    ours = [RemoteClientWorker.options(num_cpus=0.5).remote() for _ in range(2)]
    ray.get([w.load.remote(ray.put(dataset), ray.put(scenario), spec) for w in ours])
    images, labels = (
        ray.put(dataset.x.reshape(len(dataset.x), *dataset.x.shape[2:])),
        ray.put(np.asarray(dataset.y, np.int64)),
    )
    theirs = [hand.Trainer.options(num_cpus=0.5).remote(images, labels, ray.put(parts), settings) for _ in range(2)]
    ray.get([t.ready.remote() for t in theirs])
    if args.fixed_malloc:
        assert all(ray.get([t.__ray_call__.remote(fix_malloc) for t in theirs]))
    our_payload = ray.put(Payload(get_weights(make_initial(spec, scenario, dataset))))
    their_weights = ray.put({k: v.numpy().copy() for k, v in hand.lenet5().state_dict().items()})
    halves = [list(range(0, scenario.num_clients, 2)), list(range(1, scenario.num_clients, 2))]
    for round in range(args.rounds):
        for side in ("ours", "theirs") if round % 2 == 0 else ("theirs", "ours"):
            if side == "ours":
                ray.get(
                    [
                        w.jobs.remote(FIT, 2, h, [0] * len(h), our_payload, *[None] * len(h))
                        for w, h in zip(ours, halves, strict=True)
                    ]
                )
            else:
                ray.get([t.fit.remote(their_weights, c, 2) for t, h in zip(theirs, halves, strict=True) for c in h])
        halves.reverse()
    our_pids = set(ray.get([w.pid.remote() for w in ours]))
    ray.shutdown()
    jobs = [m for m in map(json.loads, timeline.read_text().splitlines()) if m["phase"] == "job" and m["kind"] == "fit"]
    sides = {
        "fedbench": [m for m in jobs if m["pid"] in our_pids],
        "hand-written": [m for m in jobs if m["pid"] not in our_pids],
    }
    cpu = {name: sum(m["cpu_s"] for m in js) for name, js in sides.items()}
    for name, js in sides.items():
        print(f"{name}: {len(js)} fit jobs, CPU {cpu[name]:.2f} s, page faults {sum(m['page_faults'] for m in js):,}")
    print(
        f"fedbench / hand-written CPU: {cpu['fedbench'] / cpu['hand-written']:.3f}"
        f" (hand-written malloc {'fixed' if args.fixed_malloc else 'as glibc leaves it'})"
    )


def make_initial(spec, scenario, dataset):
    """The run's initial model, as the driver makes it."""
    from fedbench.algorithms import make_algorithm

    return make_algorithm(spec, scenario.input_shape, dataset.num_classes).builder.initial(spec.seed)


if __name__ == "__main__":
    main()
